// sluice top: the heaviest keys of a running sluice (GET /v1/top), as tables.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"
)

type topCmd struct {
	URL       string        `required:"" help:"The service: http://HOST:PORT (or https://)."`
	Limit     []string      `help:"Limits to show (repeat, or comma-separated); default every limit of the policy." sep:","`
	By        string        `default:"refused" enum:"refused,admitted" help:"Rank keys by refused requests or by admitted cost."`
	Span      time.Duration `default:"1m" help:"Over the last span (1s to 15m)."`
	N         int           `default:"10" help:"Keys per limit (1 to 1000)."`
	Once      bool          `help:"Print once and exit (for scripts), instead of refreshing until interrupted."`
	Interval  time.Duration `default:"2s" help:"Refresh interval (at least 100ms)."`
	TokenFile string        `help:"File holding the service's bearer token." type:"path"`
}

// Validate checks the flags before anything is sent.
func (c topCmd) Validate() error {
	switch {
	case !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://"):
		return fmt.Errorf("--url %q must be http://HOST:PORT or https://HOST:PORT", c.URL)
	case c.Span <= 0 || c.Span > 15*time.Minute:
		return fmt.Errorf("--span %v must be within (0, 15m]", c.Span)
	case c.N < 1 || c.N > 1000:
		return fmt.Errorf("--n %d must be 1 to 1000", c.N)
	case c.Interval < 100*time.Millisecond:
		return fmt.Errorf("--interval %v must be at least 100ms", c.Interval)
	}
	return nil
}

// topAnswer is /v1/top's body.
type topAnswer struct {
	Limit  string `json:"limit"`
	Shadow bool   `json:"shadow"`
	By     string `json:"by"`
	Span   string `json:"span"`
	K      int    `json:"k"`
	Keys   []struct {
		Key   string `json:"key"`
		Count int64  `json:"count"`
		Error int64  `json:"error"`
	} `json:"keys"`
}

func (c topCmd) Run(e *env) error {
	token, err := clientToken("--token-file", c.TokenFile)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string, v any) error {
		req, err := http.NewRequest("GET", strings.TrimRight(c.URL, "/")+path, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(res.Body, 8<<20))
		if res.StatusCode != 200 {
			var p struct{ Error, Code string }
			json.Unmarshal(body, &p)
			if p.Error == "" {
				p.Error = strings.TrimSpace(string(body))
			}
			return fmt.Errorf("%s: %d %s", path, res.StatusCode, p.Error)
		}
		return json.Unmarshal(body, v)
	}
	limits := c.Limit
	if len(limits) == 0 {
		var pol struct {
			Limits []struct{ Name string } `json:"limits"`
		}
		if err := get("/v1/policy", &pol); err != nil {
			return err
		}
		for _, l := range pol.Limits {
			limits = append(limits, l.Name)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for {
		var b strings.Builder
		fmt.Fprintf(&b, "sluice top  %s  by %s over the last %v  %s\n", c.URL, c.By, c.Span, time.Now().Format("15:04:05"))
		for _, name := range limits {
			var a topAnswer
			q := url.Values{"limit": {name}, "by": {c.By}, "span": {c.Span.String()}, "n": {fmt.Sprint(c.N)}}
			if err := get("/v1/top?"+q.Encode(), &a); err != nil {
				return err
			}
			renderTop(&b, a)
		}
		if c.Once {
			_, err := io.WriteString(e.stdout, b.String())
			return err
		}
		io.WriteString(e.stdout, "\x1b[H\x1b[2J"+b.String()) // clear the screen, as top does
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.Interval):
		}
	}
}

// renderTop writes one limit's table: rank, key, count and its error bound.
func renderTop(w io.Writer, a topAnswer) {
	unit := "refused"
	switch {
	case a.By == "admitted":
		unit = "admitted cost"
	case a.Shadow:
		unit = "would refuse: shadow"
	}
	fmt.Fprintf(w, "\n%s (%s, k=%d)\n", a.Limit, unit, a.K)
	if len(a.Keys) == 0 {
		fmt.Fprintln(w, "  (none)")
		return
	}
	fmt.Fprintf(w, "  %3s  %10s  %8s  %s\n", "#", "count", "± error", "key")
	for i, k := range a.Keys {
		fmt.Fprintf(w, "  %3d  %10d  %8d  %s\n", i+1, k.Count, k.Error, k.Key)
	}
}
