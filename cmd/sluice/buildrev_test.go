package main

import (
	"runtime/debug"
	"testing"
)

// -X main.revision fills in a build info without a revision (a git
// worktree's build) and never replaces one Go recorded.
func TestWithRevision(t *testing.T) {
	stamped := &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201080000-abcdef123456"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abcdef1234567890abcdef1234567890abcdef12"},
		{Key: "vcs.time", Value: "2026-12-01T08:00:00Z"},
	}}
	bare := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "-trimpath", Value: "true"}}}
	for _, tc := range []struct {
		override, rev string
		bi            *debug.BuildInfo
		want          string
	}{
		{"", "0123456789abcdef0123456789abcdef01234567", stamped, "v0.0.0-20261201080000-abcdef123456 (revision abcdef123456, 2026-12-01T08:00:00Z)"},
		{"v0.0.0-20261202090000-0123456789ab", "0123456789abcdef0123456789abcdef01234567", bare, "v0.0.0-20261202090000-0123456789ab (revision 0123456789ab)"},
		{"", "0123456789abcdef", nil, "(devel) (revision 0123456789ab)"},
		{"", "", bare, "(devel) (no VCS revision in the build info: build in a git checkout with -buildvcs=true)"},
	} {
		if got := formatVersion(tc.override, withRevision(tc.bi, tc.rev)); got != tc.want {
			t.Errorf("formatVersion(%q, withRevision(_, %q)) = %q, want %q", tc.override, tc.rev, got, tc.want)
		}
	}
	if len(bare.Settings) != 1 {
		t.Fatalf("withRevision changed its argument: %v", bare.Settings)
	}
}
