package envoyrls_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/envoyrls"
)

// writeDir writes files (name -> content) into a new directory.
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Every problem of every file, one a line, each at its own node's line and
// column; the whole matches ErrInvalid.
func TestLoadDirReportsEveryProblem(t *testing.T) {
	dir := writeDir(t, map[string]string{
		"a.yaml": `domain: d
descriptors:
  - key: k1
    rate_limit:
      unit: fortnight
      requests_per_unit: -1
  - key: k2
    rate_limt:
      unit: second
  - key: k3
    rate_limit: {unit: second, requests_per_unit: -3}
  - key: k4
    replaces: []
  - key: k5
    rate_limit: {unit: minute, requests_per_unit: lots}
  - key: k6
    key: k7
    rate_limit: {unit: secnd, requests_per_unit: 5000000000, burst: 1}
  - value: v
    rate_limit: {}
`,
		"b.yml":  "domain: e\nfoo: [\n",
		"c.yaml": "domian: x\ndescriptors: []\n",
		"d.yaml": "domain: d\ndescriptors: []\n",
		"e.txt":  "not read",
	})
	_, err := envoyrls.LoadDir(dir)
	a, b, c, d := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml"), filepath.Join(dir, "c.yaml"), filepath.Join(dir, "d.yaml")
	want := strings.Join([]string{
		"envoy config: 17 problems:",
		a + `: line 5, column 13: unit "fortnight" is not second, minute, hour, day, week, month or year`,
		a + `: line 6, column 26: requests_per_unit -1: it must be at least 0 (0 refuses every request)`,
		a + `: line 8, column 5: unknown field "rate_limt" in a descriptor (did you mean rate_limit?)`,
		a + `: line 11, column 51: requests_per_unit -3: it must be at least 0 (0 refuses every request)`,
		a + `: line 13, column 5: "replaces" belongs in the descriptor's rate_limit`,
		a + `: line 15, column 51: requests_per_unit "lots" is not a whole number: it must be at least 0`,
		a + `: line 17, column 5: field "key" is given twice`,
		a + `: line 18, column 24: unit "secnd" is not second, minute, hour, day, week, month or year (did you mean second?)`,
		a + `: line 18, column 50: requests_per_unit 5000000000: it must be at most 4294967295`,
		a + `: line 18, column 62: unknown field "burst" in rate_limit`,
		a + `: line 19, column 5: a descriptor needs a key`,
		a + `: line 20, column 17: rate_limit needs a unit (second, minute, hour, day, week, month or year)`,
		a + `: line 20, column 17: rate_limit needs requests_per_unit (a whole number, at least 0)`,
		b + `: line 2: YAML: did not find expected node content`,
		c + `: line 1, column 1: unknown field "domian" (did you mean domain?)`,
		c + `: line 1, column 1: missing domain`,
		d + `: line 1, column 9: domain "d" is defined twice (first in ` + a + ")",
	}, "\n  ")
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
	if !errors.Is(err, envoyrls.ErrInvalid) {
		t.Error("does not match ErrInvalid")
	}
	var es envoyrls.Errors
	if !errors.As(err, &es) || len(es) != 17 || es[0].File != a || es[0].Line != 5 || es[0].Column != 13 {
		t.Errorf("as Errors: %#v", es)
	}
}

// One problem is the problem alone; Parse's errors have no file.
func TestParseOneProblem(t *testing.T) {
	_, _, err := envoyrls.Parse([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -2\n"))
	if err == nil || err.Error() != "line 6, column 26: requests_per_unit -2: it must be at least 0 (0 refuses every request)" || !errors.Is(err, envoyrls.ErrInvalid) {
		t.Fatalf("%v", err)
	}
	if _, _, err := envoyrls.Parse([]byte("domain: d\nfoo: [\n")); err == nil || err.Error() != "line 2: YAML: did not find expected node content" {
		t.Fatalf("YAML: %v", err)
	}
	if _, _, err := envoyrls.Parse(nil); err == nil || err.Error() != "line 1, column 1: empty file: it needs a domain and descriptors" {
		t.Fatalf("empty: %v", err)
	}
}

// What is wrong with the directory itself is said as such.
func TestLoadDirNotADirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nonexist")
	if _, err := envoyrls.LoadDir(missing); err == nil || err.Error() != missing+": no such directory" || !errors.Is(err, fs.ErrNotExist) || errors.Is(err, envoyrls.ErrInvalid) {
		t.Errorf("missing: %v", err)
	}
	dir := writeDir(t, map[string]string{"a.yaml": "domain: d\n", "notes.txt": ""})
	file := filepath.Join(dir, "a.yaml")
	if _, err := envoyrls.LoadDir(file); err == nil || err.Error() != file+": is a file, not a directory" {
		t.Errorf("file: %v", err)
	}
	empty := writeDir(t, map[string]string{"notes.txt": ""})
	if err := os.Mkdir(filepath.Join(empty, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := envoyrls.LoadDir(empty); err == nil || err.Error() != "no *.yaml or *.yml file in "+empty {
		t.Errorf("empty: %v", err)
	}
	if cfg, err := envoyrls.LoadDir(dir); err != nil || len(cfg.Domains) != 1 {
		t.Errorf("a good directory: %v", err)
	}
}
