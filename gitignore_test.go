package sluice_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every file the shell commands of README.md and of the guides (docs/*.md)
// write into the repository root (go build -o F, --out F, --plot F, > F) is
// ignored there by a root-level pattern "/F", so following the documents
// leaves nothing untracked; and no pattern for them reaches into
// subdirectories (examples/ keeps its committed copies).
func TestGitignoreCoversReadmeOutputs(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var text []string
	for _, f := range append([]string{"README.md"}, docs...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text = append(text, string(b))
	}
	gi, err := os.ReadFile(".gitignore")
	if err != nil {
		t.Fatal(err)
	}
	patterns := strings.Fields(string(gi))
	out := regexp.MustCompile(`(?m)(?:go build -o|--out|--plot|>)\s+([A-Za-z0-9_.-]+)(?:\s|$)`)
	var outputs []string
	inSh := false
	for _, line := range strings.Split(strings.Join(text, "\n"), "\n") {
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
			t.Errorf("the documents' commands no longer write %s: update this test", want)
		}
	}
	for _, f := range outputs {
		if !slices.Contains(patterns, "/"+f) {
			t.Errorf(".gitignore lacks /%s (written by a command of the documents)", f)
		}
		if slices.Contains(patterns, f) {
			t.Errorf(".gitignore has %s, which also ignores examples/%s: use /%s", f, f, f)
		}
	}
}
