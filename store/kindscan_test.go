// The kind table is the one place kinds differ: a scan of the workspace's
// code for tests of a kind outside it.

package store_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// kindTestsAllowed are the files that may test for a kind (slash paths
// from the repository's root, path.Match patterns): the kind table and
// the policy's and the Redis codec's rows of it.
var kindTestsAllowed = []string{"store/kind*.go", "policy/kinds.go", "store/redisstore/codec.go"}

// kindPackages are the import paths whose names spell the kind constants.
var kindPackages = []string{"github.com/sluicehq/sluice/store", "github.com/sluicehq/sluice/policy"}

// No code of the workspace outside kindTestsAllowed switches on a kind or
// compares one with a kind constant (x.Kind == store.Quota, case
// policy.TokenBucket:): what differs between kinds is read through the
// kind table's methods (Kind.HoldsSlots, Limit.Shape, Limit.LogAttrs, ...),
// so that a new kind is added in the table's files only.
func TestKindTestsOnlyInTheTable(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	consts := kindConstants(t, filepath.Join(root, "store", "kind.go"))
	modules := workspaceModules(t, root)
	files, allowedHits := 0, 0
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && !modules[rel] {
				return filepath.SkipDir // a module outside the workspace (bench, tools)
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		hits := kindTests(t, rel, src, consts)
		if slices.ContainsFunc(kindTestsAllowed, func(pat string) bool { ok, _ := path.Match(pat, rel); return ok }) {
			allowedHits += len(hits)
			return nil
		}
		for _, h := range hits {
			t.Errorf("%s: %s outside the kind table: add a method to the table (store/kind*.go) and call it", h.pos, h.what)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 || allowedHits == 0 {
		t.Fatalf("scanned %d files, %d kind tests in the table's files: the scan sees nothing", files, allowedHits)
	}
}

// The scan finds both forms, qualified or not, and not comparisons of
// other Kinds (yaml.Node's, reflect's).
func TestKindTestsScan(t *testing.T) {
	t.Parallel()
	src := `package policy

import (
	st "github.com/sluicehq/sluice/store"
	"go.yaml.in/yaml/v3"
)

func f(l *Limit, n *yaml.Node, a, b *Limit) {
	if l.Kind == st.Quota || n.Kind == yaml.ScalarNode || a.Kind == b.Kind {
	}
	if Concurrency != l.Kind {
	}
	switch l.Kind {
	case TokenBucket:
	}
	switch n.Kind {
	case yaml.MappingNode:
	}
}
`
	hits := kindTests(t, "policy/x.go", []byte(src), map[string]bool{"Quota": true, "Concurrency": true, "TokenBucket": true})
	var got []string
	for _, h := range hits {
		got = append(got, h.pos.String()+" "+h.what)
	}
	want := []string{"policy/x.go:9:5 a comparison with a kind", "policy/x.go:11:5 a comparison with a kind", "policy/x.go:13:2 a switch on a kind"}
	if !slices.Equal(got, want) {
		t.Errorf("found %q, want %q", got, want)
	}
}

// kindConstants are the names of the Kind constants declared in file (the
// const block whose first constant has type Kind), exported ones only.
func kindConstants(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST || len(g.Specs) == 0 {
			continue
		}
		if typ, ok := g.Specs[0].(*ast.ValueSpec).Type.(*ast.Ident); !ok || typ.Name != "Kind" {
			continue
		}
		for _, s := range g.Specs {
			for _, n := range s.(*ast.ValueSpec).Names {
				if n.IsExported() {
					names[n.Name] = true
				}
			}
		}
	}
	if len(names) < 5 {
		t.Fatalf("%s: found the kind constants %v", file, names)
	}
	return names
}

// workspaceModules are the directories go.work uses (slash paths from
// root, "." for the root module).
func workspaceModules(t *testing.T, root string) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mods := map[string]bool{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case fields[0] == "use" && len(fields) > 1 && fields[1] == "(":
			in = true
		case fields[0] == "use" && len(fields) > 1:
			mods[path.Clean(fields[1])] = true
		case in && fields[0] == ")":
			in = false
		case in:
			mods[path.Clean(fields[0])] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !mods["."] || len(mods) < 2 {
		t.Fatalf("go.work uses %v", mods)
	}
	return mods
}

type kindTest struct {
	pos  token.Position
	what string
}

// kindTests are the comparisons with a kind constant (== or !=) and the
// switches with a kind constant among their cases in src, a file at rel.
// A constant is the package-qualified name of one of consts (store's or
// policy's, under the name the file imports it by), or the bare name in
// package store or policy.
func kindTests(t *testing.T, rel string, src []byte, consts map[string]bool) []kindTest {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string]bool{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if !slices.Contains(kindPackages, p) {
			continue
		}
		name := path.Base(p)
		if im.Name != nil {
			name = im.Name.Name
		}
		pkgs[name] = true
	}
	bare := f.Name.Name == "store" || f.Name.Name == "policy"
	var isKind func(e ast.Expr) bool
	isKind = func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.ParenExpr:
			return isKind(e.X)
		case *ast.Ident:
			return bare && consts[e.Name]
		case *ast.SelectorExpr:
			x, ok := e.X.(*ast.Ident)
			return ok && pkgs[x.Name] && consts[e.Sel.Name]
		}
		return false
	}
	var hits []kindTest
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (isKind(n.X) || isKind(n.Y)) {
				hits = append(hits, kindTest{fset.Position(n.Pos()), "a comparison with a kind"})
			}
		case *ast.SwitchStmt:
			for _, c := range n.Body.List {
				if slices.ContainsFunc(c.(*ast.CaseClause).List, isKind) {
					hits = append(hits, kindTest{fset.Position(n.Pos()), "a switch on a kind"})
					break
				}
			}
		}
		return true
	})
	return hits
}
