// Tests of the README's Install instructions: its block run as written, in programs outside the repository.
package sluice_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// installMarker is the line right before the README's Install block.
const installMarker = "<!-- run by install_test.go -->"

// installClone is the block's first command, the only one not run: the
// test links ../sluice to the repository under test instead.
const installClone = "git clone https://github.com/sluicehq/sluice ../sluice"

// installCommands returns the commands of the README's Install block, a
// command continued by a trailing backslash joined into one line.
func installCommands(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(readme))
	var cmds []string
	state, cont := 0, false // 0: before the marker, 1: before the fence, 2: in the block
	for sc.Scan() {
		line := sc.Text()
		switch {
		case state == 0 && strings.TrimSpace(line) == installMarker:
			state = 1
		case state == 1:
			if strings.TrimSpace(line) != "```sh" {
				t.Fatalf("README.md: %q is not followed by a ```sh block but %q", installMarker, line)
			}
			state = 2
		case state == 2 && strings.TrimSpace(line) == "```":
			return cmds
		case state == 2:
			next := strings.HasSuffix(line, `\`)
			line = strings.TrimSpace(strings.TrimSuffix(line, `\`))
			if cont {
				cmds[len(cmds)-1] += " " + line
			} else if line != "" {
				cmds = append(cmds, line)
			}
			cont = next
		}
	}
	t.Fatalf("README.md: no ```sh block after %q", installMarker)
	return nil
}

// installProgram is a program using some of sluice's modules.
type installProgram struct {
	name    string
	modules []string // the module paths under the root ("" is the root) whose replacements it is given
	imports []string // packages under github.com/sluicehq/sluice
	uses    string   // main's body
}

var installPrograms = []installProgram{
	{"library", []string{""},
		[]string{"bucket", "gate", "httplimit", "limiter", "policy", "store/memstore"},
		`_, _ = gate.New(gate.Config{Limit: bucket.PerSecond(10)}); _ = httplimit.NewTransport; _ = limiter.New; _ = policy.Parse; _ = memstore.New`},
	{"redisstore", []string{"", "store/redisstore"},
		[]string{"store/redisstore"},
		`_ = redisstore.Open`},
	{"lease", []string{"", "store/redisstore", "store/lease"},
		[]string{"store/lease", "store/redisstore"},
		`_, _ = lease.New, redisstore.Open`},
	{"failover", []string{"", "store/redisstore", "store/lease", "store/failover"},
		[]string{"store/failover", "store/lease", "store/redisstore"},
		`_, _, _ = failover.New, lease.New, redisstore.Open`},
}

const sluiceModule = "github.com/sluicehq/sluice"

// source is the program's main.go.
func (p installProgram) source() string {
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	for _, imp := range p.imports {
		b.WriteString("\t\"" + sluiceModule + "/" + imp + "\"\n")
	}
	b.WriteString(")\n\nfunc main() { " + p.uses + " }\n")
	return b.String()
}

// The README's Install block, run as written in a program outside the
// repository (GOWORK=off, GOFLAGS=-mod=mod, the module proxy reachable),
// builds a program using every module; and a program using some of them
// builds with only the replacements the README says it needs (a module's
// requirements that only its tests use would need more: redisstore's
// module once required store/lease and store/failover).
func TestInstallFromAClone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs outside the repository with the module proxy; -short skips it")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cmds := installCommands(t)
	if len(cmds) < 3 || cmds[0] != installClone || cmds[len(cmds)-1] != "go mod tidy" {
		t.Fatalf("README.md's Install block: %q; want %q, go mod edit -replace=..., go mod tidy", cmds, installClone)
	}
	edit := strings.Fields(cmds[1])
	if len(edit) < 4 || edit[0] != "go" || edit[1] != "mod" || edit[2] != "edit" {
		t.Fatalf("README.md's Install block: %q is not go mod edit", cmds[1])
	}
	replaced := map[string]string{} // module path under the root -> its -replace flag
	for _, f := range edit[3:] {
		mod, _, ok := strings.Cut(strings.TrimPrefix(f, "-replace="), "=")
		if !strings.HasPrefix(f, "-replace=") || !ok || (mod != sluiceModule && !strings.HasPrefix(mod, sluiceModule+"/")) {
			t.Fatalf("README.md's Install block: %q is not a -replace of a sluice module", f)
		}
		replaced[strings.TrimPrefix(strings.TrimPrefix(mod, sluiceModule), "/")] = f
	}

	dir := t.TempDir()
	if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
		t.Fatalf("the programs' directory %s is inside the repository", dir)
	}
	if err := os.Symlink(root, filepath.Join(dir, "sluice")); err != nil { // the clone
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	run := func(t *testing.T, wd string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = wd, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	program := func(t *testing.T, p installProgram) string {
		t.Helper()
		wd := filepath.Join(dir, p.name)
		if err := os.Mkdir(wd, 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, wd, goTool, "mod", "init", "example.com/"+p.name)
		if err := os.WriteFile(filepath.Join(wd, "main.go"), []byte(p.source()), 0o644); err != nil {
			t.Fatal(err)
		}
		return wd
	}
	built := func(t *testing.T, wd string, modules []string) {
		t.Helper()
		run(t, wd, goTool, "build", "-o", os.DevNull, ".")
		gomod, err := os.ReadFile(filepath.Join(wd, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range modules {
			path := strings.TrimSuffix(sluiceModule+"/"+m, "/")
			if !bytes.Contains(gomod, []byte(path+" v0.0.0-00010101000000-000000000000")) {
				t.Errorf("go.mod does not require %s at the placeholder version:\n%s", path, gomod)
			}
		}
	}

	t.Run("the block as written", func(t *testing.T) {
		every := installProgram{name: "every-module", uses: "_, _, _, _, _, _ = bucket.PerSecond, redisstore.Open, lease.New, failover.New, envoyrls.LoadDir, sim.Run"}
		every.imports = []string{"bucket", "store/redisstore", "store/lease", "store/failover", "envoyrls", "sim"}
		for m := range replaced {
			every.modules = append(every.modules, m)
		}
		slices.Sort(every.modules)
		if !slices.Equal(every.modules, []string{"", "envoyrls", "sim", "store/failover", "store/lease", "store/redisstore"}) {
			t.Fatalf("the block replaces %q, want every module a program can import", every.modules)
		}
		wd := program(t, every)
		run(t, wd, "bash", "-euo", "pipefail", "-c", strings.Join(cmds[1:], "\n"))
		built(t, wd, every.modules)
	})
	for _, p := range installPrograms {
		t.Run(p.name+" with its replacements only", func(t *testing.T) {
			wd := program(t, p)
			args := []string{"mod", "edit"}
			for _, m := range p.modules {
				f, ok := replaced[m]
				if !ok {
					t.Fatalf("the README's block does not replace %q", m)
				}
				args = append(args, f)
			}
			run(t, wd, goTool, args...)
			run(t, wd, goTool, "mod", "tidy")
			built(t, wd, p.modules[len(p.modules)-1:])
		})
	}
}
