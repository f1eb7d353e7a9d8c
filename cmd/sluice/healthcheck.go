// sluice healthcheck: one GET of a running service's /healthz (or /readyz), exit 0 or 1, for a container HEALTHCHECK without a shell.

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// healthcheckCmd asks a running sluice serve whether it is alive: GET
// <url>/healthz (with --ready, <url>/readyz). Exit status 0 when it answers
// 200 within --timeout, 1 otherwise (refused connection, timeout, any other
// status), with one line saying which; 2 for bad flags. It follows no
// redirect and sends no credentials: /healthz and /readyz are open even
// with --auth-token-file. The image's HEALTHCHECK runs it, so that a
// container built FROM scratch, with no shell and no curl, has one.
type healthcheckCmd struct {
	URL      string        `default:"http://127.0.0.1:8080" help:"Base URL of the service's HTTP API (serve's --http); /healthz or /readyz is appended to its path."`
	Ready    bool          `help:"Check /readyz (the service can decide: its store answers, or it runs degraded within its --on-store-error mode) instead of /healthz (the process serves HTTP)."`
	Timeout  time.Duration `default:"2s" help:"Bound on the whole check, connecting included (positive)."`
	Insecure bool          `help:"With an https URL, do not verify the service's certificate (a check of its own TLS listener on 127.0.0.1, whose certificate names another host)."`
}

// Validate checks the flags (a usage error, exit status 2): an http or
// https URL with a host, and a positive timeout.
func (c healthcheckCmd) Validate() error {
	if c.Timeout <= 0 {
		return fmt.Errorf("--timeout %v: must be positive", c.Timeout)
	}
	_, err := c.target()
	return err
}

// target is the URL checked: --url with /healthz or /readyz appended to its
// path.
func (c healthcheckCmd) target() (string, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return "", fmt.Errorf("--url %q: %w", c.URL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--url %q: want http://HOST:PORT or https://HOST:PORT", c.URL)
	}
	path := "/healthz"
	if c.Ready {
		path = "/readyz"
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u.String(), nil
}

func (c healthcheckCmd) Run(e *env) error {
	target, err := c.target()
	if err != nil {
		return usageError{err}
	}
	status, body, err := c.get(target)
	if err != nil {
		return fmt.Errorf("healthcheck: unhealthy: GET %s: %w", target, err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("healthcheck: unhealthy: GET %s: %d %s: %s", target, status, http.StatusText(status), body)
	}
	fmt.Fprintf(e.stdout, "healthy: GET %s: 200 %s\n", target, body)
	return nil
}

// get does the one request, bounded by --timeout, and returns the status
// and the first line of the body (at most 200 bytes).
func (c healthcheckCmd) get(target string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, "", err
	}
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	if c.Insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	client := &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("redirected: /healthz and /readyz never redirect, is --url sluice's?")
		},
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, "", fmt.Errorf("no answer within --timeout %v", c.Timeout)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // not "Get <the URL again>: ..."
		}
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return resp.StatusCode, line, nil
}
