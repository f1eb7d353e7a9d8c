// Package testbin finds the programs other than Go that sluice's tests run
// (redis-server, redis-cli, nginx, Chromium, Caddy, Traefik, python3,
// node, podman), under one rule written here:
//
//   - a program is the file its environment variable names when it has one
//     and that variable is set (SLUICE_CADDY, SLUICE_TRAEFIK,
//     SLUICE_OTELCOL), else the first of its names found on PATH (nothing
//     else is searched);
//   - in -short mode (the fast loop) a test that needs one is skipped,
//     whether the program is there or not, saying how to run it: the fast
//     loop runs the same tests on every machine, Go's alone;
//   - without -short a test that needs a missing program fails, saying what
//     to install: nothing is skipped silently.
//
// Tests never install anything: the test command, scripts/test.sh, installs
// every program (and puts Caddy's and Traefik's builds in their variables).
package testbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Program is a program some tests need.
type Program struct {
	Names   []string // tried in order on PATH; the first names it in messages
	Env     string   // a variable holding the program's path, tried first ("" for none)
	Install string   // how to get it, as the messages say it
}

// The programs the tests run.
var (
	RedisServer = Program{Names: []string{"redis-server"}, Install: "apt-get install redis-server"}
	RedisCLI    = Program{Names: []string{"redis-cli"}, Install: "apt-get install redis-tools"}
	Nginx       = Program{Names: []string{"nginx"}, Install: "apt-get install nginx (and /usr/sbin on PATH)"}
	Chromium    = Program{Names: []string{"chromium", "chromium-browser", "google-chrome"}, Install: "apt-get install chromium"}
	Caddy       = Program{Names: []string{"caddy"}, Env: "SLUICE_CADDY", Install: "set SLUICE_CADDY=$(tools/caddy/build.sh)"}
	Traefik     = Program{Names: []string{"traefik"}, Env: "SLUICE_TRAEFIK", Install: "set SLUICE_TRAEFIK=$(tools/traefik/build.sh)"}
	Otelcol     = Program{Names: []string{"otelcol-sluice"}, Env: "SLUICE_OTELCOL", Install: "set SLUICE_OTELCOL=$(tools/otelcol/build.sh)"}
	Python3     = Program{Names: []string{"python3"}, Install: "apt-get install python3"}
	Node        = Program{Names: []string{"node"}, Install: "apt-get install nodejs"}
	Podman      = Program{Names: []string{"podman"}, Install: "apt-get install --no-install-recommends podman runc"}
)

// Name is the program's first name.
func (p Program) Name() string { return p.Names[0] }

// Look returns the program's path: $Env when that is set (the file must
// exist), else the first of Names on PATH.
func (p Program) Look() (string, error) {
	if p.Env != "" {
		if v := os.Getenv(p.Env); v != "" {
			if _, err := os.Stat(v); err != nil {
				return "", fmt.Errorf("%s=%s: %w", p.Env, v, err)
			}
			return v, nil
		}
	}
	for _, n := range p.Names {
		if path, err := exec.LookPath(n); err == nil {
			return path, nil
		}
	}
	where := "not on PATH"
	if p.Env != "" {
		where += ", $" + p.Env + " unset"
	}
	return "", errors.New(where)
}

// Need returns the program's path for t, or ends t: skipped in -short
// mode, failed when the program is missing.
func Need(t testing.TB, p Program) string {
	t.Helper()
	path, err := p.Look()
	if err == nil && testing.Short() {
		t.Skipf("needs %s: skipped under -short (run without -short, or ./scripts/test.sh)", p.Name())
	}
	if err != nil {
		Missing(t, p.Name()+" ("+err.Error()+")", p.Install)
	}
	return path
}

// Missing ends t for something it needs and lacks (what), saying how to get
// it (how, an imperative: "apt-get install nginx"): skipped in -short mode,
// failed otherwise. For a program use Need.
func Missing(t testing.TB, what, how string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: run ./scripts/test.sh, or %s and run without -short", what, how)
	}
	t.Fatalf("needs %s: %s, or run ./scripts/test.sh, which installs everything (go test -short skips the tests that need it)", what, how)
}
