package sluice_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxLines is the most lines a non-test Go file may have.
const maxLines = 600

// Every non-test Go file of the repository (the workspace's modules, bench/
// and tools/) opens with a "// " line saying what it holds (before the
// package clause, or as the package doc's first line) and has at most
// maxLines lines.
func TestGoFilesOpenWithWhatTheyHold(t *testing.T) {
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
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		checked++
		first, _, _ := bytes.Cut(src, []byte("\n"))
		if !bytes.HasPrefix(first, []byte("// ")) || len(bytes.TrimSpace(first)) <= len("//") {
			t.Errorf("%s: the first line is %q, not a \"// \" comment saying what the file holds", rel, first)
		}
		if n := bytes.Count(src, []byte("\n")); n > maxLines {
			t.Errorf("%s: %d lines, over %d: split it by concern", rel, n, maxLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d Go files checked: not the repository root?", checked)
	}
}
