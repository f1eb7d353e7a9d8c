package sluice_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
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

// The documents whose relative links and anchors TestDocsLinksResolve
// checks: the root's and every guide.
func linkedDocs(t *testing.T) []string {
	t.Helper()
	guides, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(guides) < 8 {
		t.Fatalf("only %d guides under docs/: is the test running from the repository root?", len(guides))
	}
	return append([]string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "BENCHMARKS.md"}, guides...)
}

// mdLink is an inline Markdown link or image: [text](target) or
// [text](target "title").
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestDocsLinksResolve: every relative link of README.md, CONTRIBUTING.md,
// CHANGELOG.md, BENCHMARKS.md and docs/*.md names a file of the repository,
// and a "#anchor" (in the same document or in another Markdown file) a
// heading of that document, by GitHub's rules for heading anchors. Links
// inside code blocks and spans are not links and are not checked.
func TestDocsLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{} // a Markdown file -> its anchors
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		a := map[string]bool{}
		for _, h := range mdHeadings(string(data)) {
			a[h.anchor] = true
		}
		anchors[file] = a
		return a, nil
	}
	links := 0
	for _, doc := range linkedDocs(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, l := range mdLinks(string(data)) {
			target := l.target
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, anchor, hasAnchor := strings.Cut(target, "#")
			file := doc
			if path != "" {
				file = filepath.Join(filepath.Dir(doc), filepath.FromSlash(path))
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: link %q: no such file %s", doc, l.line, target, filepath.ToSlash(file))
					continue
				}
			}
			if !hasAnchor {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", doc, l.line, target)
				continue
			}
			a, err := anchorsOf(file)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", doc, l.line, target, err)
				continue
			}
			if !a[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", doc, l.line, target, filepath.ToSlash(file), anchor)
			}
		}
	}
	if links < 100 {
		t.Fatalf("only %d relative links found: is the scanner broken?", links)
	}
}

// mdLinkAt is a link found in a document: its target and line.
type mdLinkAt struct {
	target string
	line   int
}

// mdLinks returns the inline links of a Markdown document outside fenced
// code blocks and code spans.
func mdLinks(doc string) []mdLinkAt {
	var out []mdLinkAt
	fenced := false
	for i, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(stripCodeSpans(line), -1) {
			out = append(out, mdLinkAt{m[1], i + 1})
		}
	}
	return out
}

// codeSpan is a one-line code span.
var codeSpan = regexp.MustCompile("`[^`]*`")

func stripCodeSpans(line string) string { return codeSpan.ReplaceAllString(line, "``") }

// mdHeading is an ATX heading of a document: its level, text and anchor.
type mdHeading struct {
	level  int
	text   string
	anchor string
}

// mdHeadings returns a document's ATX headings outside fenced code blocks,
// each with the anchor GitHub gives it: the text with links reduced to
// their text, lower-cased, every character but letters, digits, spaces,
// "-" and "_" dropped, spaces made "-"; a repeated anchor gets "-1", "-2",
// ... in order.
func mdHeadings(doc string) []mdHeading {
	var out []mdHeading
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if level > 6 || len(line) == level || line[level] != ' ' {
			continue
		}
		text := strings.TrimSpace(strings.TrimRight(strings.TrimSpace(line[level:]), "#"))
		a := githubAnchor(text)
		if n, dup := seen[a]; dup {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n+1)
		} else {
			seen[a] = 0
		}
		out = append(out, mdHeading{level, text, a})
	}
	return out
}

// headingLink reduces [text](target) to text in a heading.
var headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// githubAnchor is the anchor GitHub derives from a heading's text.
func githubAnchor(text string) string {
	text = headingLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// GitHub's anchors, on headings of these documents.
func TestGithubAnchor(t *testing.T) {
	for text, want := range map[string]string{
		"`httplimit`: an `http.Client` that paces itself":               "httplimit-an-httpclient-that-paces-itself",
		"Client certificates on `--auth-listen` (every proxy)":          "client-certificates-on---auth-listen-every-proxy",
		"3. In-flight limit, waiting, and retry hints (outgoing calls)": "3-in-flight-limit-waiting-and-retry-hints-outgoing-calls",
		"Redis fields: `hash_tag` and `on_store_error`":                 "redis-fields-hash_tag-and-on_store_error",
		"`GET|POST /v1/auth`":          "getpost-v1auth",
		"One budget — every worker's":  "one-budget--every-workers",
		"A [linked](other.md) heading": "a-linked-heading",
	} {
		if got := githubAnchor(text); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", text, got, want)
		}
	}
	hs := mdHeadings("# T\n## A\n```sh\n# not a heading\n```\n## A\n### A\n#nope\n")
	var got []string
	for _, h := range hs {
		got = append(got, fmt.Sprint(h.level, h.anchor))
	}
	if want := []string{"1t", "2a", "2a-1", "3a-2"}; !slices.Equal(got, want) {
		t.Errorf("mdHeadings: %q, want %q", got, want)
	}
}

// MaxReadmeLines bounds README.md: a map to the guides, not a manual.
const MaxReadmeLines = 400

func TestReadmeIsShort(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > MaxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail into a guide under docs/", n, MaxReadmeLines)
	}
}

// TocMinLines is the length from which a guide needs a table of contents.
const TocMinLines = 200

// TestDocsHaveContents: every guide of more than TocMinLines lines has a
// table of contents: a "## Contents" heading, before every other "## "
// heading, whose section links to each of the guide's "## " headings.
func TestDocsHaveContents(t *testing.T) {
	guides, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	long := 0
	for _, g := range guides {
		data, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(data)
		if strings.Count(doc, "\n") <= TocMinLines {
			continue
		}
		long++
		if err := checkContents(doc); err != nil {
			t.Errorf("%s (%d lines): %v", filepath.ToSlash(g), strings.Count(doc, "\n"), err)
		}
	}
	if long == 0 {
		t.Fatal("no guide over the threshold: is the test running from the repository root?")
	}
}

// checkContents returns what doc's table of contents lacks.
func checkContents(doc string) error {
	var h2 []mdHeading
	toc := -1
	for _, h := range mdHeadings(doc) {
		if h.level != 2 {
			continue
		}
		if h.text == "Contents" {
			if len(h2) > 0 {
				return fmt.Errorf("## Contents comes after ## %s: put it first", h2[0].text)
			}
			toc = 0
			continue
		}
		h2 = append(h2, h)
	}
	if toc < 0 {
		return errors.New(`no "## Contents" heading (a list of links to every "## " heading)`)
	}
	// The section under "## Contents": up to the next "## " heading.
	_, section, _ := strings.Cut(doc, "\n## Contents\n")
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	linked := map[string]bool{}
	for _, l := range mdLinks(section) {
		if a, ok := strings.CutPrefix(l.target, "#"); ok {
			linked[a] = true
		}
	}
	var missing []string
	for _, h := range h2 {
		if !linked[h.anchor] {
			missing = append(missing, "#"+h.anchor)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the contents do not link to %s", strings.Join(missing, ", "))
	}
	return nil
}

// The contents check catches a missing table and a missing entry.
func TestCheckContents(t *testing.T) {
	good := "# T\n\nIntro.\n\n## Contents\n\n- [A](#a)\n- [B c](#b-c)\n\n## A\n\n## B c\n"
	if err := checkContents(good); err != nil {
		t.Errorf("a complete table: %v", err)
	}
	if err := checkContents("# T\n\n## A\n\n## B\n"); err == nil {
		t.Error("no table of contents: no error")
	}
	if err := checkContents(strings.Replace(good, "- [B c](#b-c)\n", "", 1)); err == nil || !strings.Contains(err.Error(), "#b-c") {
		t.Errorf("a missing entry: %v", err)
	}
}
