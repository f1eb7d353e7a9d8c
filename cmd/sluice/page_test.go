package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testbin"
)

// chromium finds headless Chromium (scripts/test.sh installs Debian's).
func chromium(t *testing.T) string {
	t.Helper()
	return testbin.Need(t, testbin.Chromium)
}

// headless loads url in headless Chromium, lets the page run for budget of
// virtual time, and returns the DOM (or, with png set, writes a screenshot
// there instead).
func headless(t *testing.T, url string, budget time.Duration, png string) string {
	t.Helper()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), fmt.Sprintf("--virtual-time-budget=%d", budget.Milliseconds())}
	if png != "" {
		args = append(args, "--window-size=1360,820", "--screenshot="+png)
	} else {
		args = append(args, "--dump-dom")
	}
	cmd := exec.Command(chromium(t), append(args, url)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return string(out)
}

// The live page in a real browser, behind --auth-token-file (the token
// given once in the URL's fragment, kept in the tab's session): it lists
// the limits (the shadow one marked), shows the refused key among the top
// refused, and its numbers move as traffic goes on.
func TestLivePage(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: per_tenant\n    key: \"tenant:{tenant}\"\n    capacity: 5\n    refill_per_second: 5\n  - name: trial\n    key: \"tenant:{tenant}\"\n    capacity: 2\n    refill_per_second: 1\n    shadow: true\n")
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("s3cret\n"), 0o600)
	p := serve(t, "--config", pol, "--auth-token-file", tok)
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer func() { stop.Store(true); wg.Wait() }() // (before the server stops)
	wg.Go(func() {                                 // traffic: a noisy tenant refused, a calm one admitted
		for !stop.Load() {
			for _, tenant := range []string{"noisy", "noisy", "noisy", "calm"} {
				req, _ := http.NewRequest("POST", p.addr+"/v1/check", strings.NewReader(fmt.Sprintf(`{"descriptors":{"tenant":%q}}`, tenant)))
				req.Header.Set("Authorization", "Bearer s3cret")
				if res, err := http.DefaultClient.Do(req); err == nil {
					res.Body.Close()
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	time.Sleep(500 * time.Millisecond)
	if code, body := call(t, p, "GET", "/", ""); code != 200 || !strings.Contains(body, "<title>sluice</title>") || strings.Contains(body, "src=\"http") {
		t.Fatalf("GET /: %d, the page with no external resources", code)
	}
	dom := headless(t, p.addr+"/#token=s3cret", 3*time.Second, "")
	admitted := func(dom string) int {
		m := regexp.MustCompile(`data-limit="per_tenant".*?class="admitted">([0-9,]+)<`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("rule: the page lists the limits with their admitted count:\n%s", dom)
		}
		n, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
		return n
	}
	first := admitted(dom)
	for _, want := range []string{`data-limit="trial"`, `class="pill shadow"`, `class="key">tenant:noisy<`, `id="store">memory<`} {
		if !strings.Contains(dom, want) {
			t.Fatalf("rule: the page shows %s:\n%s", want, dom)
		}
	}
	time.Sleep(1500 * time.Millisecond)
	if second := admitted(headless(t, p.addr+"/#token=s3cret", 3*time.Second, "")); second <= first {
		t.Fatalf("rule: the numbers move: admitted %d, then %d", first, second)
	}
	// Without the token the page asks for it, and shows no data.
	if dom := headless(t, p.addr+"/", 2*time.Second, ""); !strings.Contains(dom, `id="login" style="display: block;"`) || strings.Contains(dom, `data-limit=`) {
		t.Fatalf("rule: without a token the page asks for one:\n%s", dom)
	}
	if png := os.Getenv("SLUICE_PAGE_SCREENSHOT"); png != "" {
		headless(t, p.addr+"/#token=s3cret", 3*time.Second, png)
	}
}
