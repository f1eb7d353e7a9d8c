package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct{ argv, want []string }{
		{[]string{"/sluice", "serve", "--config", "p.yaml"}, []string{"serve", "--config", "p.yaml"}},
		{[]string{"/bin/ratelimit"}, []string{"ratelimit"}},
		{[]string{"ratelimit", "--help"}, []string{"ratelimit", "--help"}},
		{[]string{"/usr/local/bin/sluice"}, []string{}},
		{[]string{"/bin/ratelimit-old"}, []string{}},
		{nil, nil},
	} {
		if got := commandLine(tc.argv); !slices.Equal(got, tc.want) {
			t.Errorf("commandLine(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}

// The real binary through a symbolic link named ratelimit (the image's
// /bin/ratelimit) is `sluice ratelimit`; under its own name it is not.
func TestInvokedAsRatelimit(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "ratelimit")
	if err := os.Symlink(binary, link); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(link, "--help").Output()
	if err != nil || !strings.HasPrefix(string(out), "Usage: sluice ratelimit") {
		t.Fatalf("ratelimit --help: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "--help").Output()
	if err != nil || !strings.HasPrefix(string(out), "Usage: sluice <command>") {
		t.Fatalf("sluice --help: %v\n%s", err, out)
	}
}
