package main

import (
	"debug/buildinfo"
	"os/exec"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionFormat(t *testing.T) {
	stamped := &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201080000-abcdef123456+dirty"}, Settings: []debug.BuildSetting{
		{Key: "-buildmode", Value: "exe"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "abcdef1234567890abcdef1234567890abcdef12"},
		{Key: "vcs.time", Value: "2026-12-01T08:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	clean := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789ab"},
		{Key: "vcs.time", Value: "2026-12-02T09:00:00Z"},
		{Key: "vcs.modified", Value: "false"},
	}}
	for _, tc := range []struct {
		override string
		bi       *debug.BuildInfo
		want     string
	}{
		{"", stamped, "v0.0.0-20261201080000-abcdef123456+dirty (revision abcdef123456, 2026-12-01T08:00:00Z, modified)"},
		{"v1.2.3", stamped, "v1.2.3 (revision abcdef123456, 2026-12-01T08:00:00Z, modified)"},
		{"", clean, "(devel) (revision 0123456789ab, 2026-12-02T09:00:00Z)"},
		{"", &debug.BuildInfo{}, "(devel) (no VCS revision in the build info: build in a git checkout with -buildvcs=true)"},
		{"", nil, "(devel)"},
		{"v1.2.3", nil, "v1.2.3"},
	} {
		if got := formatVersion(tc.override, tc.bi); got != tc.want {
			t.Errorf("formatVersion(%q, ...) = %q, want %q", tc.override, got, tc.want)
		}
	}
}

// -ldflags "-X main.version=..." wins over the build info.
func TestVersionOverride(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "v9.9.9"
	if got := versionString(); !strings.HasPrefix(got, "v9.9.9") {
		t.Fatalf("versionString() = %q", got)
	}
	if code, out, _ := runCmd(t, "", "--version"); code != 0 || !strings.HasPrefix(out, "sluice v9.9.9") {
		t.Fatalf("--version: %d %q", code, out)
	}
}

// The built binary reports its own build info: the module version and,
// when the build recorded it (a go build in a git checkout with -buildvcs
// not false), the revision.
func TestVersionOfBinary(t *testing.T) {
	bi, err := buildinfo.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	want := "sluice " + formatVersion("", bi) + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(binary, args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if string(out) != want || regexp.MustCompile(`\bdev\b`).Match(out) {
			t.Fatalf("%v: %q, want %q", args, out, want)
		}
		if !strings.Contains(string(out), bi.Main.Version) {
			t.Fatalf("%v: %q lacks the module version %q", args, out, bi.Main.Version)
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && !strings.Contains(string(out), "revision "+s.Value[:12]) {
				t.Fatalf("%v: %q lacks the revision %s", args, out, s.Value)
			}
		}
	}
	if bi.Main.Version == "(devel)" {
		t.Logf("the test binary has no VCS stamp (GOFLAGS=-buildvcs=false, or not a git checkout Go recognises: a worktree's .git is a file): %q", want)
	}
}
