package sluice_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The documents users read must not send them outside the repository: the
// behaviour contract is docs/behaviour.md. TestDocsStayInRepository fails
// on a mention of a contract outside the repository (a path into a sibling
// "shared" directory, or the name of its SPEC file) in any Go, Markdown,
// shell or YAML file, and on a relative Markdown link whose target is not a
// file or directory of the repository.
func TestDocsStayInRepository(t *testing.T) {
	outside := regexp.MustCompile(`\.\./` + `shared|\bSPEC\b`)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var checked int
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".go", ".md", ".sh", ".yaml", ".yml":
		default:
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		checked++
		for i, line := range strings.Split(string(data), "\n") {
			if m := outside.FindString(line); m != "" && rel != "docs_test.go" {
				t.Errorf("%s:%d: %q points outside the repository (cite docs/behaviour.md): %s", rel, i+1, m, strings.TrimSpace(line))
			}
			if filepath.Ext(name) != ".md" {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				abs := filepath.Join(filepath.Dir(path), filepath.FromSlash(target))
				if r, err := filepath.Rel(root, abs); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
					t.Errorf("%s:%d: link %q leaves the repository", rel, i+1, m[1])
					continue
				}
				if _, err := os.Stat(abs); err != nil {
					t.Errorf("%s:%d: link %q: %v", rel, i+1, m[1], err)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the test running from the repository root?", checked)
	}
}
