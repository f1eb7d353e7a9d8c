package internal

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const internalPrefix = "github.com/sluicehq/sluice/internal/"

// docEntries parses doc.go's list: each internal package (its path under
// internal/) and the importers it allows.
func docEntries(t *testing.T) map[string][]string {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	item := regexp.MustCompile(`^//   - internal/(\S+) (.*)$`)
	more := regexp.MustCompile(`^//     (.*)$`)
	texts := map[string]string{}
	var cur string
	for _, line := range strings.Split(string(src), "\n") {
		if m := item.FindStringSubmatch(line); m != nil {
			cur = m[1]
			if _, dup := texts[cur]; dup {
				t.Errorf("doc.go lists internal/%s twice", cur)
			}
			texts[cur] = m[2]
			continue
		}
		if m := more.FindStringSubmatch(line); m != nil && cur != "" {
			texts[cur] += " " + m[1]
			continue
		}
		cur = ""
	}
	out := map[string][]string{}
	for name, text := range texts {
		_, list, ok := strings.Cut(text, "Imported by: ")
		if !ok || !strings.HasSuffix(list, ".") {
			t.Errorf("doc.go: internal/%s does not end with \"Imported by: a, b, c.\": %q", name, text)
			continue
		}
		for imp := range strings.SplitSeq(strings.TrimSuffix(list, "."), ",") {
			out[name] = append(out[name], strings.TrimSpace(imp))
		}
	}
	return out
}

// allowed reports whether a file in dir (from the repository root) may
// import internal/name under the importers of the list.
func allowed(importers []string, name, dir string, test bool) bool {
	if dir == "internal/"+name || strings.HasPrefix(dir, "internal/"+name+"/") {
		return true
	}
	for _, imp := range importers {
		switch {
		case imp == "tests":
			if test {
				return true
			}
		case strings.HasSuffix(imp, "/..."):
			base := strings.TrimSuffix(imp, "/...")
			if dir == base || strings.HasPrefix(dir, base+"/") {
				return true
			}
		case imp == dir:
			return true
		}
	}
	return false
}

// Every import of an internal package, in every Go file of the repository
// (bench/ and tools/ included), is one doc.go allows; every internal
// package is listed there, and every listed one and importer exists.
func TestImports(t *testing.T) {
	t.Parallel()
	entries := docEntries(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string]bool{} // internal packages with Go files, by path under internal/
	dirs := map[string]bool{"tests": true}
	fset := token.NewFileSet()
	var files int
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			dirs[rel] = true
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		files++
		dir := filepath.ToSlash(filepath.Dir(rel))
		test := strings.HasSuffix(rel, "_test.go")
		if under, ok := strings.CutPrefix(dir, "internal/"); ok && !test {
			pkgs[under] = true
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Error(err)
			return nil
		}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			name, ok := strings.CutPrefix(p, internalPrefix)
			if !ok {
				continue
			}
			imps, listed := entries[name]
			if !listed {
				t.Errorf("%s imports internal/%s, which internal/doc.go does not list", rel, name)
			} else if !allowed(imps, name, dir, test) {
				t.Errorf("%s imports internal/%s, which internal/doc.go does not allow %s to (it allows: %s)", rel, name, dir, strings.Join(imps, ", "))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files under %s: not the repository?", files, root)
	}
	for name := range pkgs {
		if _, ok := entries[name]; !ok {
			t.Errorf("internal/%s is not listed in internal/doc.go (what it holds, and \"Imported by: ...\")", name)
		}
	}
	for name, imps := range entries {
		if !pkgs[name] {
			t.Errorf("internal/doc.go lists internal/%s, which has no Go files", name)
		}
		for _, imp := range imps {
			if !dirs[strings.TrimSuffix(imp, "/...")] {
				t.Errorf("internal/doc.go: internal/%s's importer %q is no directory of the repository", name, imp)
			}
		}
	}
}
