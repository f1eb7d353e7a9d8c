// The VCS revision given at build time (-X main.revision), for builds whose build info has none.

package main

import "runtime/debug"

// revision, when set at build time with -ldflags "-X main.revision=<sha>",
// is the VCS revision sluice version prints when the build info records
// none: Go stamps the revision only when it finds a .git directory, so a
// build in a git worktree or a submodule (where .git is a file), or with
// -buildvcs=false, has none. scripts/image.sh sets it (and main.version)
// there. A revision in the build info wins.
var revision string

// withRevision is bi with rev as its vcs.revision when bi has none (and rev
// is not empty); bi itself is not changed.
func withRevision(bi *debug.BuildInfo, rev string) *debug.BuildInfo {
	if rev == "" {
		return bi
	}
	if bi == nil {
		bi = &debug.BuildInfo{}
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			return bi
		}
	}
	c := *bi
	c.Settings = append(append([]debug.BuildSetting{}, bi.Settings...), debug.BuildSetting{Key: "vcs.revision", Value: rev})
	return &c
}
