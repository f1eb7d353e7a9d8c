// LoadDir and DirFiles with entries that are not regular files: a FIFO, a socket, links dangling, looping or to a directory.

package envoyrls_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/envoyrls"
)

// Entries named *.yaml or *.yml that are not regular files (nor links to
// one) are skipped with why, never opened: a FIFO does not block the load
// (bounded here by 10 s); a link to a regular file is read.
func TestDirFilesSkipsNotRegular(t *testing.T) {
	dir := writeDir(t, map[string]string{"a.yaml": "domain: a\n", "real.txt": "domain: l\n"})
	fifo, sock := filepath.Join(dir, "pipe.yaml"), filepath.Join(dir, "sock.yml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	links := map[string]string{"gone.yaml": "nothing", "loop.yaml": "loop.yaml", "dir.yaml": ".", "link.yaml": "real.txt"}
	for name, to := range links {
		if err := os.Symlink(to, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil { // (a directory: not a file, not reported)
		t.Fatal(err)
	}

	type result struct {
		cfg *envoyrls.Config
		err error
	}
	done := make(chan result, 1)
	go func() {
		cfg, err := envoyrls.LoadDir(dir)
		done <- result{cfg, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || len(r.cfg.Domains) != 2 || r.cfg.Domains["a"] == nil || r.cfg.Domains["l"] == nil {
			t.Fatalf("LoadDir: %v %v; want domains a and l (the link)", r.cfg, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LoadDir blocked (on the FIFO?)")
	}

	files, skipped, err := envoyrls.DirFiles(dir)
	if err != nil || strings.Join(files, " ") != filepath.Join(dir, "a.yaml")+" "+filepath.Join(dir, "link.yaml") {
		t.Fatalf("DirFiles: %v %v", files, err)
	}
	why := map[string]string{}
	for _, sk := range skipped {
		why[filepath.Base(sk.Path)] = sk.Err.Error()
	}
	if len(why) != 5 || !strings.Contains(why["pipe.yaml"], "not a regular file") || !strings.Contains(why["sock.yml"], "not a regular file") ||
		!strings.Contains(why["dir.yaml"], "directory") || !strings.Contains(why["loop.yaml"], "levels of symbolic links") || why["gone.yaml"] == "" {
		t.Fatalf("skipped: %v; want the FIFO, the socket and the three links", why)
	}
}

// A directory whose only *.yaml entry is a FIFO has no file: the error
// says so, and that an entry was skipped.
func TestDirFilesOnlyFifo(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, skipped, err := envoyrls.DirFiles(dir)
	if err == nil || !strings.Contains(err.Error(), "no *.yaml or *.yml file") || !strings.Contains(err.Error(), "skipped") || len(skipped) != 1 {
		t.Fatalf("%v, %v", err, skipped)
	}
	if _, err := envoyrls.LoadDir(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no such directory: %v", err)
	}
}
