// Tests of the error table: its constants, the sites that answer its codes
// (no code written as a literal), docs/service.md's error table and both
// clients' error maps, each against the Go table.

package answer_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/answer"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// grpcNames are the gRPC codes the table uses, as docs/service.md names
// them.
var grpcNames = map[uint32]string{
	0:                            "—",
	answer.GRPCInvalidArgument:   "`INVALID_ARGUMENT`",
	answer.GRPCResourceExhausted: "`RESOURCE_EXHAUSTED`",
	answer.GRPCInternal:          "`INTERNAL`",
	answer.GRPCUnavailable:       "`UNAVAILABLE`",
}

func codes() map[answer.Code]answer.Entry {
	m := map[answer.Code]answer.Entry{}
	for _, e := range answer.Table() {
		m[e.Code] = e
	}
	return m
}

func TestTable(t *testing.T) {
	t.Parallel()
	tab := answer.Table()
	// Every constant of type Code (codes.go) has one row, and every row a
	// constant.
	f, err := parser.ParseFile(token.NewFileSet(), "codes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[answer.Code]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for _, v := range vs.Values {
				c, _ := strconv.Unquote(v.(*ast.BasicLit).Value)
				consts[answer.Code(c)] = true
			}
		}
	}
	seen := map[answer.Code]bool{}
	for i, e := range tab {
		if !consts[e.Code] {
			t.Errorf("row %q has no constant", e.Code)
		}
		if seen[e.Code] {
			t.Errorf("row %q given twice", e.Code)
		}
		seen[e.Code] = true
		if i > 0 && (tab[i-1].Status > e.Status || tab[i-1].Status == e.Status && tab[i-1].Code > e.Code) {
			t.Errorf("row %q out of order: the table is ordered by status, then code", e.Code)
		}
		if e.Status < 400 || e.Status > 599 {
			t.Errorf("%q: status %d is not an error", e.Code, e.Status)
		}
		if _, ok := grpcNames[e.GRPC]; !ok {
			t.Errorf("%q: gRPC code %d has no name here", e.Code, e.GRPC)
		}
		if e.Meaning == "" || strings.ContainsAny(e.Meaning, "|\n") {
			t.Errorf("%q: meaning %q must be one line of a Markdown table cell", e.Code, e.Meaning)
		}
		if got, ok := answer.Lookup(e.Code); !ok || got != e || e.Code.Status() != e.Status || e.Code.GRPC() != e.GRPC {
			t.Errorf("%q: Lookup %v %v, Status %d, GRPC %d", e.Code, got, ok, e.Code.Status(), e.Code.GRPC())
		}
		if p := answer.Errorf(e.Code, "x %d", 1); p.Status != e.Status || p.GRPC != e.GRPC || p.Code != e.Code || p.Msg != "x 1" {
			t.Errorf("Errorf(%q): %+v", e.Code, p)
		}
	}
	for c := range consts {
		if !seen[c] {
			t.Errorf("constant %q has no row", c)
		}
	}
	if _, ok := answer.Lookup("no_such_code"); ok {
		t.Error("Lookup of an unknown code")
	}
}

// goFiles calls fn with every non-test Go file of the repository's modules
// (not bench/ and tools/, outside the workspace, nor the clients).
func goFiles(t *testing.T, fn func(path string, f *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || path == filepath.Join(root, "bench") ||
				path == filepath.Join(root, "tools") || name == "clients" || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fn(filepath.ToSlash(rel), f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoLiteralCodes: every site answers a code by its constant, never a
// string literal (which would compile, as an untyped constant), and takes
// its gRPC code from the table; and every code is answered somewhere.
func TestNoLiteralCodes(t *testing.T) {
	t.Parallel()
	known := codes()
	used := map[string]bool{}
	// Files whose gRPC codes are a protocol's with a peer, never an
	// answer to a caller: the xDS client's NACK to its management server.
	peerProtocol := map[string]bool{"envoyrls/xds/xds.go": true}
	names := map[string]answer.Code{} // constant name -> code
	files := 0
	goFiles(t, func(path string, f *ast.File) {
		files++
		inAnswer := strings.HasPrefix(path, "internal/answer/")
		isCodeField := func(e ast.Expr) bool {
			sel, ok := e.(*ast.SelectorExpr)
			return ok && sel.Sel.Name == "Code"
		}
		var stack []ast.Node
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			var parent ast.Node
			if len(stack) > 0 {
				parent = stack[len(stack)-1]
			}
			stack = append(stack, n)
			switch n := n.(type) {
			case *ast.ValueSpec:
				if id, ok := n.Type.(*ast.Ident); ok && id.Name == "Code" && path == "internal/answer/codes.go" {
					for i, v := range n.Values {
						c, _ := strconv.Unquote(v.(*ast.BasicLit).Value)
						names[n.Names[i].Name] = answer.Code(c)
					}
					stack = stack[:len(stack)-1]
					return false // (the definitions; no f(nil) follows)
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "answer" {
					used[n.Sel.Name] = true
				}
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "codes" && n.Sel.Name != "Code" && !peerProtocol[path] {
					t.Errorf("%s: codes.%s: a gRPC code comes from internal/answer's table (grpcError(answer.Errorf(...)))", path, n.Sel.Name)
				}
			case *ast.Ident:
				if inAnswer && path != "internal/answer/codes.go" {
					used[n.Name] = true
				}
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					break
				}
				s, err := strconv.Unquote(n.Value)
				if _, ok := known[answer.Code(s)]; err != nil || !ok {
					break
				}
				literal := inAnswer // (the package itself names codes by their constants only)
				switch p := parent.(type) {
				case *ast.CallExpr: // fail(w, "x", ...), answer.Errorf("x", ...), Code("x")
					fn := p.Fun
					if sel, ok := fn.(*ast.SelectorExpr); ok {
						if x, ok := sel.X.(*ast.Ident); ok && x.Name == "answer" {
							literal = true
						}
						fn = sel.Sel
					}
					if id, ok := fn.(*ast.Ident); ok && (id.Name == "fail" || id.Name == "Code") {
						literal = true
					}
				case *ast.KeyValueExpr: // Problem{Code: "x"}, {"code": "x"}
					if id, ok := p.Key.(*ast.Ident); ok && id.Name == "Code" {
						literal = true
					}
					if k, ok := p.Key.(*ast.BasicLit); ok && strings.EqualFold(strings.Trim(k.Value, "\"`"), "code") {
						literal = true
					}
				case *ast.AssignStmt: // rd.Code = "x"
					for i, r := range p.Rhs {
						if r == n && i < len(p.Lhs) && isCodeField(p.Lhs[i]) {
							literal = true
						}
					}
				case *ast.BinaryExpr: // p.Code != "x"
					literal = literal || isCodeField(p.X) || isCodeField(p.Y)
				}
				if literal {
					t.Errorf("%s: the code %s written as a literal: use its constant (internal/answer)", path, n.Value)
				}
			}
			return true
		})
	})
	if files < 50 {
		t.Fatalf("only %d Go files found under %s", files, root)
	}
	if len(names) != len(known) {
		t.Fatalf("%d constants found in codes.go, %d rows", len(names), len(known))
	}
	for name, c := range names {
		if !used[name] {
			t.Errorf("%s (%q) is answered nowhere: drop its row, or answer it", name, c)
		}
	}
}

// markdown renders the table as docs/service.md's `## Errors` shows it.
func markdown() string {
	var b strings.Builder
	b.WriteString("| Code | HTTP status | gRPC code | Meaning |\n|---|---|---|---|\n")
	for _, e := range answer.Table() {
		fmt.Fprintf(&b, "| `%s` | %d | %s | %s |\n", e.Code, e.Status, grpcNames[e.GRPC], e.Meaning)
	}
	return b.String()
}

// cells splits a Markdown table row.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	out := strings.Split(row, "|")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// TestDocsErrorTable: docs/service.md has one table under `## Errors`, and
// it is the Go table row for row: code, HTTP status, gRPC code, meaning.
func TestDocsErrorTable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(root, "docs", "service.md"))
	if err != nil {
		t.Fatal(err)
	}
	var section []string
	in := false
	for _, l := range strings.Split(string(raw), "\n") {
		switch {
		case strings.TrimSpace(l) == "## Errors":
			if in || section != nil {
				t.Fatal("docs/service.md: two `## Errors` sections")
			}
			in, section = true, []string{}
		case in && (strings.HasPrefix(l, "## ") || strings.HasPrefix(l, "# ")):
			in = false
		case in:
			section = append(section, l)
		}
	}
	if section == nil {
		t.Fatal("docs/service.md has no `## Errors` section")
	}
	var rows []string
	tables := 0
	for i, l := range section {
		if strings.HasPrefix(strings.TrimSpace(l), "|") {
			if i == 0 || !strings.HasPrefix(strings.TrimSpace(section[i-1]), "|") {
				tables++
			}
			rows = append(rows, l)
		}
	}
	if tables != 1 || len(rows) < 2 {
		t.Fatalf("docs/service.md `## Errors`: %d tables, want one; the table is:\n%s", tables, markdown())
	}
	if h := strings.ToLower(strings.Join(cells(rows[0]), "|")); h != "code|http status|grpc code|meaning" {
		t.Errorf("docs/service.md errors table header %q: want Code | HTTP status | gRPC code | Meaning", rows[0])
	}
	tab := answer.Table()
	var docCodes []answer.Code
	for _, r := range rows[2:] {
		c := cells(r)
		if len(c) != 4 || !strings.HasPrefix(c[0], "`") || !strings.HasSuffix(c[0], "`") {
			t.Errorf("docs/service.md errors table: row %q is not | `code` | status | gRPC code | meaning |", r)
			continue
		}
		code := answer.Code(strings.Trim(c[0], "`"))
		docCodes = append(docCodes, code)
		e, ok := answer.Lookup(code)
		if !ok {
			t.Errorf("docs/service.md: `%s` is no code of internal/answer's table", code)
			continue
		}
		if c[1] != strconv.Itoa(e.Status) {
			t.Errorf("docs/service.md: `%s`: HTTP status %q, the table says %d", code, c[1], e.Status)
		}
		if c[2] != grpcNames[e.GRPC] {
			t.Errorf("docs/service.md: `%s`: gRPC code %q, the table says %s", code, c[2], grpcNames[e.GRPC])
		}
		if c[3] != e.Meaning {
			t.Errorf("docs/service.md: `%s`: meaning\n\t%s\nthe table (internal/answer/codes.go) says\n\t%s", code, c[3], e.Meaning)
		}
	}
	var want []answer.Code
	for _, e := range tab {
		want = append(want, e.Code)
	}
	if !slices.Equal(docCodes, want) {
		t.Errorf("docs/service.md's errors table names %v; internal/answer's, in its order, %v", docCodes, want)
	}
	if t.Failed() {
		t.Logf("the table, as docs/service.md must show it:\n%s", markdown())
	}
}

// notToClients are the codes no client can meet, each with why.
var notToClients = map[answer.Code]string{
	answer.NoRequestDescriptors: "forward-auth's (/v1/auth), which the clients do not call",
	answer.TopOff:               "GET /v1/top's, which the clients do not call",
	answer.MethodNotAllowed:     "the clients send POST to POST endpoints only",
	answer.StoreRefusing:        "a /readyz body's, a probe's",
	answer.StoreUnreachable:     "a /readyz body's, a probe's",
}

// clientStatus is the status a client meets a code with, where it is not
// the table's.
var clientStatus = map[answer.Code]int{
	answer.NoPolicy: 404, // (/readyz's 503 is a probe's; /v1/ paths of an Envoy-config service answer 404)
}

// ownClass are the codes with an error class of their own in the clients
// (their subclass of the one the status gives), or another than their
// status gives.
var ownClass = map[answer.Code]string{
	answer.CostExceedsCapacity: "CostExceedsCapacity",
	answer.NoLimitApplies:      "NoLimitApplies",
	// A deny override's 403 is a refusal, not a bad request: check returns
	// the refused decision (denied true), reserve and acquire raise
	// RateLimited with denied set, as for a wait beyond max_wait.
	answer.Denied: "RateLimited",
}

// clientMap reads a client's error map: the lines between the one matching
// start and the next "}" line, each `code: Class,` (the code quoted or
// not), comments after # or //.
func clientMap(t *testing.T, path string, start *regexp.Regexp) map[answer.Code]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entry := regexp.MustCompile(`^"?([a-z_]+)"?\s*:\s*([A-Za-z]+),?$`)
	m := map[answer.Code]string{}
	in, done := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if !in {
			in = start.MatchString(l)
			continue
		}
		if strings.HasPrefix(l, "}") {
			done = true
			break
		}
		if i := strings.Index(l, "#"); i >= 0 {
			l = l[:i]
		}
		if i := strings.Index(l, "//"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		g := entry.FindStringSubmatch(l)
		if g == nil {
			t.Errorf("%s: error map line %q is not `code: Class,`", path, l)
			continue
		}
		if _, dup := m[answer.Code(g[1])]; dup {
			t.Errorf("%s: %s given twice", path, g[1])
		}
		m[answer.Code(g[1])] = strings.TrimSuffix(g[2], "Error") // (TypeScript's names end in Error)
	}
	if !done {
		t.Fatalf("%s: no error map (a line matching %v, then entries up to a line \"}\")", path, start)
	}
	return m
}

// TestClientErrorMaps: both clients' error maps name exactly the codes
// that can reach a client, each with the same error, the one its status
// gives (the maps name the codes; they do not change which error a status
// raises).
func TestClientErrorMaps(t *testing.T) {
	t.Parallel()
	maps := map[string]map[answer.Code]string{
		"python":     clientMap(t, "clients/python/sluice_client/_client.py", regexp.MustCompile(`^_ERRORS\b.*= \{$`)),
		"typescript": clientMap(t, "clients/typescript/src/index.ts", regexp.MustCompile(`^(export )?const ERRORS\b.*= \{$`)),
	}
	known := codes()
	for c := range notToClients {
		if _, ok := known[c]; !ok {
			t.Errorf("notToClients: %q is no code", c)
		}
	}
	for client, m := range maps {
		for c := range m {
			if _, ok := known[c]; !ok {
				t.Errorf("%s client: %q is no code of internal/answer's table", client, c)
			} else if why, ok := notToClients[c]; ok {
				t.Errorf("%s client: %q cannot reach a client (%s)", client, c, why)
			}
		}
	}
	for _, e := range answer.Table() {
		if _, ok := notToClients[e.Code]; ok {
			continue
		}
		status := e.Status
		if s, ok := clientStatus[e.Code]; ok {
			status = s
		}
		want := ownClass[e.Code]
		switch {
		case want != "":
		case status == 401:
			want = "Unauthorized"
		case status == 429:
			want = "RateLimited"
		case status == 503:
			want = "ServiceUnavailable"
		case status >= 400 && status < 500:
			want = "BadRequest"
		default:
			want = "Sluice"
		}
		for client, m := range maps {
			got, ok := m[e.Code]
			switch {
			case !ok:
				t.Errorf("%s client: no error for %q (%d), which reaches clients (or list it in notToClients, saying why not)", client, e.Code, status)
			case got != want:
				t.Errorf("%s client: %q raises %s, want %s (its status %d)", client, e.Code, got, want, status)
			}
		}
	}
}
