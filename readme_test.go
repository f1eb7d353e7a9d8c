package sluice_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// readmeImports maps the package names the fragments of README.md and
// docs/*.md may use to their import paths. A fragment naming another
// package fails with "undefined": add the package here.
var readmeImports = map[string]string{
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"http":       "net/http",
	"netip":      "net/netip",
	"slog":       "log/slog",
	"time":       "time",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"sluice":     "github.com/sluicehq/sluice",
	"bucket":     "github.com/sluicehq/sluice/bucket",
	"window":     "github.com/sluicehq/sluice/window",
	"quota":      "github.com/sluicehq/sluice/quota",
	"gate":       "github.com/sluicehq/sluice/gate",
	"httplimit":  "github.com/sluicehq/sluice/httplimit",
	"limiter":    "github.com/sluicehq/sluice/limiter",
	"policy":     "github.com/sluicehq/sluice/policy",
	"store":      "github.com/sluicehq/sluice/store",
	"memstore":   "github.com/sluicehq/sluice/store/memstore",
	"redisstore": "github.com/sluicehq/sluice/store/redisstore",
}

// readmePrelude wraps one fragment: its imports (%s), the file and line of
// the fragment's first line (%s, %d) and the fragment (%s). The parameters and the helpers
// are the names fragments use without declaring them; the fragment sits in
// a block of its own, so it may declare those names again (g, err := ...).
const readmePrelude = `package readme

import (
%s)

func callTool(context.Context) (string, error) { return "", nil }
func isRateLimited(error) bool                 { return false }
func isTransient(error) bool                   { return false }
func handle(string) error                      { return nil }

func fragment(ctx context.Context, g *gate.Gate, p *policy.Policy, mux *http.ServeMux, items http.Handler, hint time.Duration) error {
	{
//line %s:%d:1
%s
	}
	return nil
}
`

// readmePreludeImports are the packages readmePrelude itself uses.
var readmePreludeImports = []string{"context", "gate", "http", "policy", "time"}

// notCompiled is the marker that exempts the ```go block right after it.
var notCompiled = regexp.MustCompile(`^<!-- not compiled(:[^>]*)? -->$`)

type readmeBlock struct {
	file string // the document, as the repository names it (README.md, docs/library.md)
	line int    // the document's line of the fragment's first line
	src  string
}

// readmeGoBlocks returns the ```go blocks of the document file holding
// readme, those after a "<!-- not compiled -->" line excepted.
func readmeGoBlocks(t *testing.T, file string, readme []byte) (blocks []readmeBlock, skipped int) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(readme))
	var prev string
	var cur *readmeBlock
	var indent string
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " \t")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &readmeBlock{file: file, line: -1} // not compiled unless a go block
			if info := strings.TrimSpace(strings.TrimPrefix(trimmed, "```")); info == "go" || strings.HasPrefix(info, "go ") {
				if notCompiled.MatchString(strings.TrimSpace(prev)) {
					skipped++
				} else {
					cur.line = n + 1
				}
			}
			indent = line[:len(line)-len(trimmed)]
		case cur != nil && strings.HasPrefix(trimmed, "```"):
			if cur.line > 0 {
				blocks = append(blocks, *cur)
			}
			cur = nil
		case cur != nil && cur.line > 0:
			cur.src += strings.TrimPrefix(line, indent) + "\n"
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s: a code block is not closed", file)
	}
	return blocks, skipped
}

// exportData builds the packages of readmeImports with "go list -export"
// and returns the export data file of each package they depend on (once
// per test binary: the tests of README.md and of docs/ share it).
func exportData(t *testing.T) map[string]string {
	t.Helper()
	exportOnce.Do(func() { exportFiles, exportErr = listExports() })
	if exportErr != nil {
		if errors.Is(exportErr, exec.ErrNotFound) {
			t.Skipf("no go command to build the documents' imports: %v", exportErr)
		}
		t.Fatal(exportErr)
	}
	return exportFiles
}

var (
	exportOnce  sync.Once
	exportFiles map[string]string
	exportErr   error
)

// listExports runs "go list -export" over readmeImports.
func listExports() (map[string]string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	args := []string{"list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}\t{{.Export}}{{end}}"}
	for _, p := range readmeImports {
		args = append(args, p)
	}
	cmd := exec.Command(goTool, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %v\n%s", err, stderr.Bytes())
	}
	files := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok {
			files[path] = file
		}
	}
	return files, nil
}

// TestReadmeGoBlocksCompile type-checks every ```go block of README.md, so
// that the examples users copy compile and keep compiling.
//
// Convention. Each block is a fragment: statements, compiled as the body of
// a function returning error (so a fragment may "return err") that provides
// ctx (context.Context), g (*gate.Gate), p (*policy.Policy), mux
// (*http.ServeMux), items (http.Handler) and hint (time.Duration), next to
// the helpers callTool(ctx) (string, error), isRateLimited(err) bool,
// isTransient(err) bool and handle(string) error. The fragment is a block of
// its own, so it may declare those names again. Each package the fragment
// names (readmeImports: the standard packages the documents use and this
// module's) is imported for it; a fragment must not give a variable the
// name of one of those packages. All of go/types' errors count, unused
// variables and imports included; they are reported at their document's
// file and line (README.md:123).
//
// A block that is not meant to compile (pseudo-code, or another language
// shown as Go) is exempted by the line "<!-- not compiled -->", optionally
// with a reason ("<!-- not compiled: pseudo-code -->"), right before its
// opening fence. The marker is an HTML comment, so it does not show in the
// rendered document.
func TestReadmeGoBlocksCompile(t *testing.T) {
	if n := checkGoBlocks(t, "README.md"); n == 0 {
		t.Fatal("no ```go blocks found in README.md")
	}
}

// TestDocsGoBlocksCompile type-checks the ```go blocks of every guide
// (docs/*.md) and of the other documents of the root (CHANGELOG.md,
// CONTRIBUTING.md, BENCHMARKS.md) by the convention of
// TestReadmeGoBlocksCompile.
func TestDocsGoBlocksCompile(t *testing.T) {
	guides, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(guides) < 8 {
		t.Fatalf("only %d guides under docs/: is the test running from the repository root?", len(guides))
	}
	n := 0
	for _, f := range append(guides, "CHANGELOG.md", "CONTRIBUTING.md", "BENCHMARKS.md") {
		if _, err := os.Stat(f); errors.Is(err, os.ErrNotExist) && !strings.HasPrefix(f, "docs") {
			continue // (the links test requires the root's documents)
		}
		n += checkGoBlocks(t, filepath.ToSlash(f))
	}
	if n == 0 {
		t.Fatal("no ```go blocks found in docs/*.md")
	}
}

// checkGoBlocks type-checks the ```go blocks of file, reporting each that
// does not compile at its file and line, and returns how many it checked.
func checkGoBlocks(t *testing.T, file string) int {
	t.Helper()
	doc, err := os.ReadFile(filepath.FromSlash(file))
	if err != nil {
		t.Fatal(err)
	}
	blocks, _ := readmeGoBlocks(t, file, doc)
	if len(blocks) == 0 {
		return 0
	}
	check := fragmentChecker(t)
	for _, b := range blocks {
		if errs := check(b); len(errs) > 0 {
			t.Errorf("%s:%d: the ```go block does not compile:\n\t%s", b.file, b.line-1, strings.Join(errs, "\n\t"))
		}
	}
	return len(blocks)
}

// The harness itself must catch the bug class it is for, and name the
// document's file and line.
func TestFragmentChecker(t *testing.T) {
	check := fragmentChecker(t)
	if errs := check(readmeBlock{file: "docs/x.md", line: 7, src: "x := 1\n"}); len(errs) != 1 || !strings.Contains(errs[0], "declared and not used: x") || !strings.HasPrefix(errs[0], "docs/x.md:7:") {
		t.Fatalf("an unused variable gave %q, want one \"docs/x.md:7: declared and not used\" error", errs)
	}
	if errs := check(readmeBlock{file: "README.md", line: 1, src: "_ = gate.Config{}\n_ = bucket.PerSecond(1)\n_ = quota.Month\n"}); len(errs) != 0 {
		t.Fatalf("a fragment naming gate, bucket and quota: %q", errs)
	}
}

// fragmentChecker returns a function that type-checks one fragment as the
// convention of TestReadmeGoBlocksCompile says and returns go/types' errors.
func fragmentChecker(t *testing.T) func(readmeBlock) []string {
	t.Helper()
	exports := exportData(t)
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(file)
	})
	return func(b readmeBlock) []string {
		src := func(names []string) string {
			var imports strings.Builder
			for _, name := range names {
				fmt.Fprintf(&imports, "\t%q\n", readmeImports[name])
			}
			return fmt.Sprintf(readmePrelude, imports.String(), b.file, b.line, b.src)
		}
		// Parse once to find the packages the fragment names.
		f, err := parser.ParseFile(fset, "fragment.go", src(readmePreludeImports), parser.SkipObjectResolution)
		if err != nil {
			return []string{err.Error()}
		}
		names := slices.Clone(readmePreludeImports)
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok {
					if _, known := readmeImports[id.Name]; known && !slices.Contains(names, id.Name) {
						names = append(names, id.Name)
					}
				}
			}
			return true
		})
		slices.Sort(names)
		f, err = parser.ParseFile(fset, "fragment.go", src(names), parser.SkipObjectResolution)
		if err != nil {
			return []string{err.Error()}
		}
		var errs []string
		conf := types.Config{Importer: imp, Error: func(err error) { errs = append(errs, err.Error()) }}
		_, _ = conf.Check("readme", fset, []*ast.File{f}, nil)
		return errs
	}
}

// The block scanner: line numbers, the marker, other languages, indented
// fences.
func TestReadmeGoBlocksScanner(t *testing.T) {
	md := strings.Join([]string{
		"# x",                                // 1
		"```go",                              // 2
		"a := 1",                             // 3
		"_ = a",                              // 4
		"```",                                // 5
		"```yaml",                            // 6
		"k: v",                               // 7
		"```",                                // 8
		"<!-- not compiled: pseudo-code -->", // 9
		"```go",                              // 10
		"take a token",                       // 11
		"```",                                // 12
		"- item",                             // 13
		"  ```go",                            // 14
		"  b := 2",                           // 15
		"  ```",                              // 16
	}, "\n") + "\n"
	blocks, skipped := readmeGoBlocks(t, "x.md", []byte(md))
	want := []readmeBlock{{file: "x.md", line: 3, src: "a := 1\n_ = a\n"}, {file: "x.md", line: 15, src: "b := 2\n"}}
	if !slices.Equal(blocks, want) || skipped != 1 {
		t.Fatalf("blocks %+v, skipped %d; want %+v and 1", blocks, skipped, want)
	}
}
