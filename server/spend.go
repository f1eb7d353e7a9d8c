// Usage in the service: /v1/check's usage_estimate and /v1/settle's usage
// turned into the costs of the limits that count tokens or spend, and the
// spend of each usd limit counted for /v1/stats.

package server

import (
	"errors"
	"fmt"
	"hash"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
)

// UsageEstimate is /v1/check's "usage_estimate": a model call before it
// is made. Its spend (input tokens at the input price, max output tokens
// at the output price) is reserved on every limit with unit usd that
// applies, all or nothing with the other limits; a token limit reserves
// its tokens.
type UsageEstimate struct {
	Model           string `json:"model"`
	InputTokens     int64  `json:"input_tokens"`
	MaxOutputTokens int64  `json:"max_output_tokens"`
}

// UsageReport is /v1/settle's "usage": what the call used, as the
// provider reports it (cached_input_tokens are the part of input_tokens
// read from the prompt cache, at the cached_input price). It settles
// every limit of the receipt that counts usage, exactly: the difference
// refunded, or charged into debt.
type UsageReport struct {
	Model             string `json:"model"`
	InputTokens       int64  `json:"input_tokens"`
	OutputTokens      int64  `json:"output_tokens"`
	CachedInputTokens int64  `json:"cached_input_tokens"`
}

func (e *UsageEstimate) usage() policy.Usage {
	return policy.Usage{Model: e.Model, InputTokens: e.InputTokens, OutputTokens: e.MaxOutputTokens}
}

func (u *UsageReport) usage() policy.Usage {
	return policy.Usage{Model: u.Model, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedInputTokens: u.CachedInputTokens}
}

// MaxModelName bounds a usage's model name (bytes).
const MaxModelName = 256

func validModel(m string) error {
	if m == "" || len(m) > MaxModelName {
		return fmt.Errorf("model %.40q is %d bytes: 1 to %d", m, len(m), MaxModelName)
	}
	return nil
}

// validate checks an estimate's fields (none: nil).
func (e *UsageEstimate) validate() error {
	if e == nil {
		return nil
	}
	if err := validModel(e.Model); err != nil {
		return fmt.Errorf("usage_estimate: %v", err)
	}
	if err := e.usage().Validate(); err != nil {
		return fmt.Errorf("usage_estimate: %v", err)
	}
	return nil
}

// validate checks a usage's fields (none: nil).
func (u *UsageReport) validate() error {
	if u == nil {
		return nil
	}
	if err := validModel(u.Model); err != nil {
		return fmt.Errorf("usage: %v", err)
	}
	if err := u.usage().Validate(); err != nil {
		return fmt.Errorf("usage: %v", err)
	}
	return nil
}

// fingerprint adds an estimate to a check's fingerprint (none: nothing).
func (e *UsageEstimate) fingerprint(h hash.Hash) {
	if e != nil {
		fmt.Fprintf(h, "u%d:%s%d:%d", len(e.Model), e.Model, e.InputTokens, e.MaxOutputTokens)
	}
}

// usageCosts completes lr.Costs with the costs of the limits that count
// usage (limiter.UsageCosts); false when it answered an error.
func (s *Server) usageCosts(w http.ResponseWriter, req *CheckRequest, lr *limiter.Request) bool {
	var est *policy.Usage
	if req.UsageEstimate != nil {
		u := req.UsageEstimate.usage()
		est = &u
	}
	costs, err := s.cfg.Limiter.UsageCosts(req.Descriptors, est, lr.Costs)
	if err != nil {
		usageProblem(err).Write(w)
		return false
	}
	lr.Costs = costs
	return true
}

// usageActuals completes req.ActualCosts with what req.Usage counts on
// the receipt's limits that count usage (limiter.UsageActuals).
func (s *Server) usageActuals(rec limiter.Receipt, req *SettleRequest) (CostMap, error) {
	if req.Usage == nil {
		return req.ActualCosts, nil
	}
	act, err := s.cfg.Limiter.UsageActuals(rec, req.Usage.usage(), req.ActualCosts)
	return CostMap(act), err
}

// usageRefused answers err when it is a usage's (a *limiter.UsageError):
// 422 unknown_model, or 400 bad_request; false for any other error.
func usageRefused(w http.ResponseWriter, err error) bool {
	var ue *limiter.UsageError
	if !errors.As(err, &ue) {
		return false
	}
	usageProblem(err).Write(w)
	return true
}

func usageProblem(err error) answer.Problem {
	var ue *limiter.UsageError
	if !errors.As(err, &ue) {
		return answer.Classify(err)
	}
	code := answer.BadRequest
	if errors.Is(err, policy.ErrUnknownModel) {
		code = answer.UnknownModel
	}
	p := answer.Errorf(code, "%v; nothing was charged or settled", err)
	p.Limit = ue.Limit
	return p
}

// spendCounter is the spend of each usd limit counted by this instance
// (micro-dollars admitted by checks, corrected by settles) since it
// started: /v1/stats' "spent_usd".
type spendCounter struct {
	by sync.Map // limit name -> *atomic.Int64
}

func (c *spendCounter) add(limit string, n int64) {
	if n == 0 {
		return
	}
	v, ok := c.by.Load(limit)
	if !ok {
		v, _ = c.by.LoadOrStore(limit, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(n)
}

func (c *spendCounter) get(limit string) int64 {
	if v, ok := c.by.Load(limit); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// spentCheck counts an admitted check's reserved spend on its usd limits.
func (s *Server) spentCheck(lr *limiter.Request, res *limiter.Result) {
	if !res.Allowed || lr.Peek || len(lr.Costs) == 0 {
		return
	}
	p := s.cfg.Limiter.Policy()
	for i := range res.Limits {
		st := &res.Limits[i]
		if l := p.Limit(st.Name); l != nil && l.Unit == policy.UnitUSD && !st.ShadowRefused {
			s.spend.add(st.Name, st.TokenCost)
		}
	}
}

// spentSettle counts a settle's correction of its usd limits' spend.
func (s *Server) spentSettle(rec limiter.Receipt, actual int64, actuals map[string]int64) {
	p := s.cfg.Limiter.Policy()
	for _, name := range rec.Limits() {
		l := p.Limit(name)
		if l == nil || l.Unit != policy.UnitUSD {
			continue
		}
		v, ok := actuals[name]
		if !ok {
			if actual == limiter.KeepCost {
				continue
			}
			v = actual
		}
		taken, _ := rec.Cost(name)
		s.spend.add(name, v-taken)
	}
}
