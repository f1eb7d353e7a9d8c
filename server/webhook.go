// The alerts' webhook: each event POSTed as JSON, signed with HMAC-SHA256,
// retried with doubling backoff, never holding a decision.

package server

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTPDoer sends an HTTP request (*http.Client does).
type HTTPDoer interface {
	Do(*http.Request) (*http.Response, error)
}

// SignatureHeader carries a webhook body's signature: "sha256=" and the
// hex HMAC-SHA256 of the body under the webhook's secret.
const SignatureHeader = "X-Sluice-Signature"

// Sign is the value of SignatureHeader for body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

type webhook struct {
	cfg      AlertConfig
	log      *slog.Logger
	slots    chan struct{} // deliveries under way
	drops    prometheus.Counter
	failures prometheus.Counter
	retries  prometheus.Counter
}

func newWebhook(cfg AlertConfig, log *slog.Logger, drops prometheus.Counter) *webhook {
	if cfg.RetryFirst <= 0 {
		cfg.RetryFirst = time.Second
	}
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = 10 * time.Minute
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	return &webhook{cfg: cfg, log: log, slots: make(chan struct{}, cfg.Queue), drops: drops,
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_webhook_failures_total",
			Help: "Alert events the --webhook never accepted (every attempt for 10 minutes failed)."}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_webhook_retries_total",
			Help: "Webhook attempts after a failed one."}),
	}
}

// send delivers ev in the background (dropped and counted when Queue
// deliveries are under way).
func (h *webhook) send(ev Alert) {
	select {
	case h.slots <- struct{}{}:
	default:
		h.drops.Inc()
		return
	}
	body, _ := json.Marshal(ev)
	go func() {
		defer func() { <-h.slots }()
		h.deliver(body)
	}()
}

// deliver POSTs body until it is accepted (2xx) or RetryFor has passed
// since the first attempt, waiting RetryFirst after the first failure and
// twice as long after each further one.
func (h *webhook) deliver(body []byte) {
	deadline := time.Now().Add(h.cfg.RetryFor)
	wait := h.cfg.RetryFirst
	for attempt := 1; ; attempt++ {
		err := h.post(body)
		if err == nil {
			return
		}
		if !time.Now().Add(wait).Before(deadline) {
			h.failures.Inc()
			h.log.Warn("sluice alert: webhook failed", slog.String("error", err.Error()), slog.Int("attempts", attempt))
			return
		}
		time.Sleep(wait)
		wait *= 2
		h.retries.Inc()
	}
}

type statusError struct{ status string }

func (e statusError) Error() string { return "webhook answered " + e.status }

func (h *webhook) post(body []byte) error {
	req, err := http.NewRequest(http.MethodPost, h.cfg.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sluice")
	if len(h.cfg.WebhookSecret) > 0 {
		req.Header.Set(SignatureHeader, Sign(h.cfg.WebhookSecret, body))
	}
	res, err := h.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return statusError{res.Status}
	}
	return nil
}
