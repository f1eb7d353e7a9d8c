// sluice overrides: set, show, list, delete and resolve a running service's overrides (/v1/overrides).

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kong"

	"github.com/sluicehq/sluice/overrides"
)

// overridesCmd is `sluice overrides`: its flags say where the service is
// (and may follow the subcommand); the subcommands' own flags have no
// environment variables, an override's fields coming from the command line
// only.
type overridesCmd struct {
	URL       string        `required:"" help:"The service: http://HOST:PORT (or https://)."`
	TokenFile string        `help:"File holding the bearer token /v1/overrides wants: the service's --admin-token-file, else its --auth-token-file." type:"path"`
	Timeout   time.Duration `default:"10s" help:"Bound on each call to the service."`

	Set     ovSetCmd     `cmd:"" help:"Create or replace the override of limit NAME for the requests matching KEY=VALUE... (PUT /v1/overrides); only the flags given are sent."`
	Get     ovGetCmd     `cmd:"" help:"Show the override of limit NAME whose match is exactly KEY=VALUE... (none: the empty match)."`
	List    ovListCmd    `cmd:"" help:"List limit NAME's overrides whose match has each KEY=VALUE given, a page at a time."`
	Delete  ovDeleteCmd  `cmd:"" help:"Delete the override of limit NAME whose match is exactly KEY=VALUE... (DELETE /v1/overrides)."`
	Resolve ovResolveCmd `cmd:"" help:"Say which override of limit NAME (or the policy) applies to a request with the descriptors KEY=VALUE..."`
}

// Validate checks the service's flags before anything is sent.
func (c overridesCmd) Validate() error {
	switch {
	case !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://"):
		return fmt.Errorf("--url %q must be http://HOST:PORT or https://HOST:PORT", c.URL)
	case c.Timeout <= 0:
		return fmt.Errorf("--timeout %v must be positive", c.Timeout)
	}
	return nil
}

// AfterApply gives the subcommands' Run these flags.
func (c *overridesCmd) AfterApply(ctx *kong.Context) error {
	ctx.Bind(c)
	return nil
}

// client is the ovClient of c's flags (reading --token-file).
func (c *overridesCmd) client() (*ovClient, error) {
	cl := &ovClient{base: strings.TrimRight(c.URL, "/"), http: &http.Client{Timeout: c.Timeout}}
	var err error
	if cl.token, err = clientToken("--token-file", c.TokenFile); err != nil {
		return nil, err
	}
	return cl, nil
}

// ovTarget is a subcommand's arguments: the limit and KEY=VALUE pairs.
type ovTarget struct {
	Name  string   `arg:"" help:"The policy limit."`
	Pairs []string `arg:"" optional:"" name:"key=value" help:"Descriptor names and values (a value may end in * for a prefix, or be *)."`
}

// pairs parses t.Pairs: every one KEY=VALUE with a non-empty KEY (the
// value is what follows the first "="), no KEY twice.
func (t ovTarget) pairs() (map[string]string, error) {
	m := make(map[string]string, len(t.Pairs))
	for _, p := range t.Pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE", p)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("%s given twice", k)
		}
		m[k] = v
	}
	return m, nil
}

// start is the beginning of a subcommand's Run: t's pairs (a bad one is a
// usage error) and the client of the service.
func (t ovTarget) start(oc *overridesCmd) (map[string]string, *ovClient, error) {
	m, err := t.pairs()
	if err != nil {
		return nil, nil, usageError{err}
	}
	cl, err := oc.client()
	return m, cl, err
}

// ovWire is an override's JSON: a PUT body (only the fields set) or an
// answer's record (with the service's times and counters).
type ovWire struct {
	Name            string            `json:"name"`
	Match           map[string]string `json:"match"`
	Capacity        *int64            `json:"capacity,omitempty"`
	RefillPerSecond *float64          `json:"refill_per_second,omitempty"`
	Refill          *string           `json:"refill,omitempty"`
	Limit           *int64            `json:"limit,omitempty"`
	Window          *string           `json:"window,omitempty"`
	MaxInFlight     *int64            `json:"max_in_flight,omitempty"`
	Unlimited       bool              `json:"unlimited,omitempty"`
	Deny            bool              `json:"deny,omitempty"`
	Shadow          bool              `json:"shadow,omitempty"`
	BlockFor        *string           `json:"block_for,omitempty"`
	TTL             *int64            `json:"ttl_s,omitempty"`
	Note            *string           `json:"note,omitempty"`
	Source          string            `json:"source,omitempty"`
	CreatedAt       *string           `json:"created_at,omitempty"`
	UpdatedAt       *string           `json:"updated_at,omitempty"`
	ExpiresAt       *string           `json:"expires_at,omitempty"`
	MatchedTotal    *uint64           `json:"matched_total,omitempty"`
	LastMatchedAt   *string           `json:"last_matched_at,omitempty"`
}

// terms is what o does, as its fields are named: "capacity=500
// refill_per_second=50", "deny", "unlimited shadow", ...
func (o *ovWire) terms() string {
	var t []string
	add := func(k string, v any) { t = append(t, fmt.Sprintf("%s=%v", k, v)) }
	if o.Capacity != nil {
		add("capacity", *o.Capacity)
	}
	if o.RefillPerSecond != nil {
		add("refill_per_second", *o.RefillPerSecond)
	}
	if o.Refill != nil {
		add("refill", *o.Refill)
	}
	if o.Limit != nil {
		add("limit", *o.Limit)
	}
	if o.Window != nil {
		add("window", *o.Window)
	}
	if o.MaxInFlight != nil {
		add("max_in_flight", *o.MaxInFlight)
	}
	for _, b := range []struct {
		on   bool
		name string
	}{{o.Unlimited, "unlimited"}, {o.Deny, "deny"}, {o.Shadow, "shadow"}} {
		if b.on {
			t = append(t, b.name)
		}
	}
	if o.BlockFor != nil {
		add("block_for", *o.BlockFor)
	}
	if len(t) == 0 {
		return "(the policy's)"
	}
	return strings.Join(t, " ")
}

func orNever(s *string) string {
	if s == nil {
		return "never"
	}
	return *s
}

// render writes o in full: the limit, its match and terms, then its record.
func (o *ovWire) render(w io.Writer) {
	fmt.Fprintf(w, "%s %s  %s\n", o.Name, overrides.CanonicalMatch(o.Match), o.terms())
	fmt.Fprintf(w, "  source %s", o.Source)
	if o.Note != nil && *o.Note != "" {
		fmt.Fprintf(w, ", note %q", *o.Note)
	}
	fmt.Fprintf(w, "\n  created %s, updated %s, expires %s", orNever(o.CreatedAt), orNever(o.UpdatedAt), orNever(o.ExpiresAt))
	if o.TTL != nil {
		fmt.Fprintf(w, " (ttl_s %d)", *o.TTL)
	}
	fmt.Fprintln(w)
	if o.MatchedTotal != nil {
		fmt.Fprintf(w, "  matched %d, last %s\n", *o.MatchedTotal, orNever(o.LastMatchedAt))
	}
}

// ovClient calls one service's /v1/overrides.
type ovClient struct {
	base, token string
	http        *http.Client
}

// apiError is an error answer of the service: its message, code and
// status.
type apiError struct {
	Status    int
	Code, Msg string
}

func (e *apiError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("%s (HTTP %d)", e.Msg, e.Status)
	}
	return fmt.Sprintf("%s (code %s, HTTP %d)", e.Msg, e.Code, e.Status)
}

// do sends method path?q with body as JSON (nil: none) and returns the
// answer's body when the status is 200, else an *apiError.
func (c *ovClient) do(method, path string, q url.Values, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if res.StatusCode == http.StatusOK {
		return b, nil
	}
	var p struct{ Error, Code string }
	json.Unmarshal(b, &p)
	if p.Error == "" {
		if p.Error = strings.TrimSpace(string(b)); p.Error == "" {
			p.Error = http.StatusText(res.StatusCode)
		}
	}
	return nil, &apiError{Status: res.StatusCode, Code: p.Code, Msg: p.Error}
}

// ovPage is GET /v1/overrides's answer.
type ovPage struct {
	Overrides  []ovWire `json:"overrides"`
	NextCursor string   `json:"next_cursor"`
}

// list fetches one page of limit name's overrides whose match has each
// entry of filter.
func (c *ovClient) list(name string, filter map[string]string, cursor string, n int) (ovPage, []byte, error) {
	q := url.Values{"limit": {name}}
	for k, v := range filter {
		q.Set("match."+k, v)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if n > 0 {
		q.Set("n", fmt.Sprint(n))
	}
	var p ovPage
	b, err := c.do("GET", "/v1/overrides", q, nil)
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	return p, b, err
}

// printJSON writes an answer's body as one line.
func printJSON(w io.Writer, b []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

type ovSetCmd struct {
	ovTarget
	Capacity        *int64   `help:"token_bucket: the capacity, in tokens." env:"-"`
	RefillPerSecond *float64 `help:"token_bucket: the refill, tokens per second." env:"-"`
	Refill          *string  `help:"token_bucket: the refill as a rate, like 100/m (instead of --refill-per-second)." placeholder:"RATE" env:"-"`
	Limit           *int64   `help:"sliding_window, fixed_window, quota: the count." env:"-"`
	Window          *string  `help:"sliding_window, fixed_window: the window, like 1m." placeholder:"DURATION" env:"-"`
	MaxInFlight     *int64   `help:"concurrency: the requests in flight at once." env:"-"`
	TTL             *string  `name:"ttl" help:"Lifetime from now, in whole seconds, like 24h or 7d (sent as ttl_s); the policy applies again after it." placeholder:"DURATION" env:"-"`
	Note            *string  `help:"Free text for people." env:"-"`
	Deny            bool     `help:"Refuse every request it applies to (403 denied)." env:"-"`
	Unlimited       bool     `help:"Admit every request it applies to, without a store write." env:"-"`
	Shadow          bool     `help:"Count as if enforced, never refuse." env:"-"`
	BlockFor        *string  `help:"Once a key is refused, keep it refused this long from the refusal, like 10m." placeholder:"DURATION" env:"-"`
	JSON            bool     `name:"json" help:"Print the override stored as JSON." env:"-"`
}

// body is the PUT body of c, or a usage error.
func (c ovSetCmd) body() (*ovWire, error) {
	m, err := c.pairs()
	if err != nil {
		return nil, err
	}
	w := &ovWire{Name: c.Name, Match: m, Capacity: c.Capacity, RefillPerSecond: c.RefillPerSecond, Refill: c.Refill,
		Limit: c.Limit, Window: c.Window, MaxInFlight: c.MaxInFlight, Unlimited: c.Unlimited, Deny: c.Deny,
		Shadow: c.Shadow, BlockFor: c.BlockFor, Note: c.Note}
	if c.TTL != nil {
		d, err := overrides.ParseDuration(*c.TTL)
		switch {
		case err != nil:
			return nil, fmt.Errorf("--ttl: %w", err)
		case d < time.Second || d%time.Second != 0:
			return nil, fmt.Errorf("--ttl %s: must be a whole number of seconds, at least 1s", *c.TTL)
		}
		s := int64(d / time.Second)
		w.TTL = &s
	}
	return w, nil
}

func (c ovSetCmd) Validate() error { _, err := c.body(); return err }

func (c ovSetCmd) Run(e *env, oc *overridesCmd) error {
	w, err := c.body()
	if err != nil {
		return usageError{err}
	}
	cl, err := oc.client()
	if err != nil {
		return err
	}
	b, err := cl.do("PUT", "/v1/overrides", nil, w)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(e.stdout, b)
	}
	var o ovWire
	if err := json.Unmarshal(b, &o); err != nil {
		return fmt.Errorf("PUT /v1/overrides: %w", err)
	}
	o.render(e.stdout)
	return nil
}

type ovGetCmd struct {
	ovTarget
	JSON bool `name:"json" help:"Print the override as JSON." env:"-"`
}

func (c ovGetCmd) Validate() error { _, err := c.pairs(); return err }

func (c ovGetCmd) Run(e *env, oc *overridesCmd) error {
	m, cl, err := c.start(oc)
	if err != nil {
		return err
	}
	want := overrides.CanonicalMatch(m)
	cursor := ""
	for {
		p, _, err := cl.list(c.Name, m, cursor, overrides.MaxPage)
		if err != nil {
			return err
		}
		for i := range p.Overrides {
			o := &p.Overrides[i]
			if overrides.CanonicalMatch(o.Match) != want {
				continue
			}
			if c.JSON {
				b, err := jsonLine(o)
				if err == nil {
					_, err = e.stdout.Write(b)
				}
				return err
			}
			o.render(e.stdout)
			return nil
		}
		if cursor = p.NextCursor; cursor == "" {
			return fmt.Errorf("limit %s has no override with the match %s", c.Name, want)
		}
	}
}

type ovListCmd struct {
	ovTarget
	N      *int   `help:"Overrides per page (1 to 1000; default the service's)." env:"-"`
	Cursor string `help:"The page after the one that gave this cursor." env:"-"`
	JSON   bool   `name:"json" help:"Print the service's answer as JSON (overrides, next_cursor)." env:"-"`
}

func (c ovListCmd) Validate() error {
	if c.N != nil && (*c.N < 1 || *c.N > overrides.MaxPage) {
		return fmt.Errorf("--n %d must be 1 to %d", *c.N, overrides.MaxPage)
	}
	_, err := c.pairs()
	return err
}

func (c ovListCmd) Run(e *env, oc *overridesCmd) error {
	m, cl, err := c.start(oc)
	if err != nil {
		return err
	}
	n := 0 // (the service's default)
	if c.N != nil {
		n = *c.N
	}
	p, raw, err := cl.list(c.Name, m, c.Cursor, n)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(e.stdout, raw)
	}
	renderOverrides(e.stdout, c.Name, p)
	return nil
}

// renderOverrides writes a page of limit name's overrides as a table, and
// how to ask for the next page.
func renderOverrides(w io.Writer, name string, p ovPage) {
	if len(p.Overrides) == 0 {
		fmt.Fprintf(w, "%s: no overrides\n", name)
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MATCH\tTERMS\tSOURCE\tEXPIRES\tMATCHED\tLAST MATCHED\tNOTE")
		for i := range p.Overrides {
			o := &p.Overrides[i]
			var matched uint64
			if o.MatchedTotal != nil {
				matched = *o.MatchedTotal
			}
			note := ""
			if o.Note != nil {
				note = *o.Note
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", overrides.CanonicalMatch(o.Match), o.terms(), o.Source,
				orNever(o.ExpiresAt), matched, orNever(o.LastMatchedAt), note)
		}
		tw.Flush()
	}
	if p.NextCursor != "" {
		fmt.Fprintf(w, "more: --cursor %s\n", p.NextCursor)
	}
}

type ovDeleteCmd struct {
	ovTarget
}

func (c ovDeleteCmd) Validate() error { _, err := c.pairs(); return err }

func (c ovDeleteCmd) Run(e *env, oc *overridesCmd) error {
	m, cl, err := c.start(oc)
	if err != nil {
		return err
	}
	if _, err := cl.do("DELETE", "/v1/overrides", nil, ovWire{Name: c.Name, Match: m}); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deleted %s %s\n", c.Name, overrides.CanonicalMatch(m))
	return nil
}

type ovResolveCmd struct {
	ovTarget
	JSON bool `name:"json" help:"Print the service's answer as JSON." env:"-"`
}

func (c ovResolveCmd) Validate() error {
	m, err := c.pairs()
	if err == nil && len(m) == 0 {
		err = errors.New("resolve needs the request's descriptors (KEY=VALUE, one or more)")
	}
	return err
}

func (c ovResolveCmd) Run(e *env, oc *overridesCmd) error {
	m, cl, err := c.start(oc)
	if err != nil {
		return err
	}
	q := url.Values{"limit": {c.Name}}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Set("descriptors."+k, m[k])
	}
	b, err := cl.do("GET", "/v1/overrides/resolve", q, nil)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(e.stdout, b)
	}
	var a resolveAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("GET /v1/overrides/resolve: %w", err)
	}
	a.render(e.stdout, c.Name, m)
	return nil
}

// resolveAnswer is GET /v1/overrides/resolve's answer.
type resolveAnswer struct {
	Source    string  `json:"source"` // override, policy_limit or none
	Override  *ovWire `json:"override"`
	Effective struct {
		Key             string   `json:"key"`
		Algorithm       string   `json:"algorithm"`
		Capacity        int64    `json:"capacity"`
		RefillPerSecond *float64 `json:"refill_per_second"`
		Window          string   `json:"window"`
		Shadow          bool     `json:"shadow"`
		Unlimited       bool     `json:"unlimited"`
		Deny            bool     `json:"deny"`
		BlockFor        string   `json:"block_for"`
	} `json:"effective"`
}

// render writes what applies to a request of limit name with descriptors
// d, and the limit in force.
func (a *resolveAnswer) render(w io.Writer, name string, d map[string]string) {
	req := name + " " + overrides.CanonicalMatch(d)
	switch a.Source {
	case "none":
		fmt.Fprintf(w, "%s: the limit does not apply to these descriptors (its key is %s)\n", req, a.Effective.Key)
		return
	case "override":
		if a.Override != nil {
			fmt.Fprintf(w, "%s: the override %s applies\n", req, overrides.CanonicalMatch(a.Override.Match))
			break
		}
		fallthrough
	default:
		fmt.Fprintf(w, "%s: no override matches: the policy's limit applies\n", req)
	}
	f := a.Effective
	t := []string{f.Algorithm, fmt.Sprintf("capacity=%d", f.Capacity)}
	if f.RefillPerSecond != nil {
		t = append(t, fmt.Sprintf("refill_per_second=%v", *f.RefillPerSecond))
	}
	if f.Window != "" {
		t = append(t, "window="+f.Window)
	}
	for _, b := range []struct {
		on   bool
		name string
	}{{f.Unlimited, "unlimited"}, {f.Deny, "deny"}, {f.Shadow, "shadow"}} {
		if b.on {
			t = append(t, b.name)
		}
	}
	if f.BlockFor != "" {
		t = append(t, "block_for="+f.BlockFor)
	}
	fmt.Fprintf(w, "  in force: %s\n", strings.Join(t, " "))
	if a.Source == "override" && a.Override != nil {
		a.Override.render(w)
	}
}
