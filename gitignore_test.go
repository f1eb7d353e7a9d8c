package sluice_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every file the README's shell commands write into the repository root
// (go build -o F, --out F, --plot F, > F) is ignored there by a root-level
// pattern "/F", so following the README leaves nothing untracked; and no
// pattern for them reaches into subdirectories (examples/ keeps its
// committed copies).
func TestGitignoreCoversReadmeOutputs(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	gi, err := os.ReadFile(".gitignore")
	if err != nil {
		t.Fatal(err)
	}
	patterns := strings.Fields(string(gi))
	out := regexp.MustCompile(`(?m)(?:go build -o|--out|--plot|>)\s+([A-Za-z0-9_.-]+)(?:\s|$)`)
	var outputs []string
	inSh := false
	for _, line := range strings.Split(string(readme), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inSh = true
		case strings.HasPrefix(line, "```"):
			inSh = false
		case inSh:
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			for _, m := range out.FindAllStringSubmatch(line, -1) {
				outputs = append(outputs, m[1])
			}
		}
	}
	for _, want := range []string{"sluice", "pulse.jsonl", "pulse-compare.png", "burst.png", "outcomes.jsonl"} {
		if !slices.Contains(outputs, want) {
			t.Errorf("the README's commands no longer write %s: update this test", want)
		}
	}
	for _, f := range outputs {
		if !slices.Contains(patterns, "/"+f) {
			t.Errorf(".gitignore lacks /%s (written by a README command)", f)
		}
		if slices.Contains(patterns, f) {
			t.Errorf(".gitignore has %s, which also ignores examples/%s: use /%s", f, f, f)
		}
	}
}
