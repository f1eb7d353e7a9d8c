package overrides_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/overrides/overridetest"
)

func TestMemStoreConformance(t *testing.T) {
	overridetest.Run(t, overridetest.Harness{
		New: func(t *testing.T, max int) overrides.Store {
			s, err := overrides.NewMemStore(overrides.MemOptions{Max: max})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

func TestMemStoreStateDirConformance(t *testing.T) {
	dirs := map[overrides.Store]string{}
	open := func(t *testing.T, dir string, max int) overrides.Store {
		s, err := overrides.NewMemStore(overrides.MemOptions{Dir: dir, Max: max})
		if err != nil {
			t.Fatal(err)
		}
		dirs[s] = dir
		return s
	}
	overridetest.Run(t, overridetest.Harness{
		New: func(t *testing.T, max int) overrides.Store { return open(t, t.TempDir(), max) },
		Reopen: func(t *testing.T, s overrides.Store) overrides.Store {
			s.Close()
			return open(t, dirs[s], 100)
		},
	})
}

func TestStateFileIsWholeAndAlone(t *testing.T) {
	dir := t.TempDir()
	s, err := overrides.NewMemStore(overrides.MemOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"a", "b", "c"} {
		if _, err := s.Put(context.Background(), overridetest.Record("l", tenant, 1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != overrides.StateFile {
		t.Fatalf("the state dir holds %v, want only %s (no temporary file left)", entries, overrides.StateFile)
	}
	b, _ := os.ReadFile(filepath.Join(dir, overrides.StateFile))
	if n := strings.Count(string(b), "\n"); n != 4 {
		t.Fatalf("the state file has %d lines, want a header and 3 records:\n%s", n, b)
	}
}

func TestCorruptStateFileStopsTheStart(t *testing.T) {
	good := func(t *testing.T) (string, []byte) {
		dir := t.TempDir()
		s, _ := overrides.NewMemStore(overrides.MemOptions{Dir: dir})
		for _, tenant := range []string{"a", "b"} {
			if _, err := s.Put(context.Background(), overridetest.Record("l", tenant, 1, 0)); err != nil {
				t.Fatal(err)
			}
		}
		b, _ := os.ReadFile(filepath.Join(dir, overrides.StateFile))
		return dir, b
	}
	for name, corrupt := range map[string]func([]byte) []byte{
		"truncated":    func(b []byte) []byte { return b[:len(b)-20] },
		"no last line": func(b []byte) []byte { return b[:strings.LastIndex(string(b[:len(b)-1]), "\n")+1] },
		"empty":        func([]byte) []byte { return nil },
		"garbage":      func([]byte) []byte { return []byte("not json\n") },
		"bad record":   func(b []byte) []byte { return []byte(strings.Replace(string(b), `"capacity":1`, `"capacity":0`, 1)) },
		"unknown field": func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"capacity":1`, `"capacity":1,"extra":1`, 1))
		},
		"duplicate": func(b []byte) []byte {
			lines := strings.Split(string(b), "\n")
			lines[2] = lines[1]
			return []byte(strings.Join(lines, "\n"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, b := good(t)
			path := filepath.Join(dir, overrides.StateFile)
			if err := os.WriteFile(path, corrupt(b), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := overrides.NewMemStore(overrides.MemOptions{Dir: dir})
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "corrupt") {
				t.Fatalf("NewMemStore over a corrupt file: %v, want an error naming the file as corrupt", err)
			}
		})
	}
}

func TestMemStoreWriteFailureChangesNothing(t *testing.T) {
	if os.Getuid() == 0 {
		t.Skip("root writes into read-only directories")
	}
	dir := t.TempDir()
	s, err := overrides.NewMemStore(overrides.MemOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, overridetest.Record("l", "a", 1, 0)); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o500)
	defer os.Chmod(dir, 0o700)
	if _, err := s.Put(ctx, overridetest.Record("l", "b", 1, 0)); err == nil {
		t.Fatal("a Put whose file write fails succeeded")
	}
	if err := s.Delete(ctx, "l", map[string]string{"tenant": "a"}); err == nil || errors.Is(err, overrides.ErrNotFound) {
		t.Fatalf("a Delete whose file write fails: %v", err)
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("after failed writes the store holds %d overrides, want 1", n)
	}
}
