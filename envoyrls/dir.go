// Reading a configuration directory: the files read, and the entries skipped because they are not regular files.

package envoyrls

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// LoadDir reads every *.yaml and *.yml file in dir, each one domain; the
// entries DirFiles skips (a FIFO, a socket, a device, a dangling link...)
// are left out, never opened. A malformed configuration returns Errors
// listing every problem of every file (and matching ErrInvalid); a dir
// that does not exist, is not a directory or has no such file returns an
// error saying so (the first matching fs.ErrNotExist).
func LoadDir(dir string) (*Config, error) {
	files, _, err := DirFiles(dir)
	if err != nil {
		return nil, err
	}
	return LoadFiles(files)
}

// Skipped is a directory entry a load left out, and why.
type Skipped struct {
	Path string
	Err  error
}

// DirFiles lists the files LoadDir reads in dir: its entries named *.yaml
// or *.yml (not its subdirectories') that are regular files or symbolic
// links to one, in name order. The other entries so named, but for
// directories, are returned in skipped with why (NotRegular), so that
// callers can report them: none is opened, so that a FIFO cannot block
// a load. Its errors are LoadDir's about dir.
func DirFiles(dir string) (files []string, skipped []Skipped, err error) {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, &dirError{dir + ": no such directory", err}
	case err != nil:
		return nil, nil, err
	case !fi.IsDir():
		return nil, nil, fmt.Errorf("%s: is a file, not a directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, de := range entries { // (os.ReadDir sorts by name)
		if ext := filepath.Ext(de.Name()); (ext != ".yaml" && ext != ".yml") || de.IsDir() {
			continue
		}
		p := filepath.Join(dir, de.Name())
		if err := NotRegular(p, de); err != nil {
			skipped = append(skipped, Skipped{p, err})
			continue
		}
		files = append(files, p)
	}
	if len(files) == 0 {
		if len(skipped) > 0 {
			return nil, skipped, fmt.Errorf("no *.yaml or *.yml file in %s (%d entries so named skipped: not regular files)", dir, len(skipped))
		}
		return nil, nil, fmt.Errorf("no *.yaml or *.yml file in %s", dir)
	}
	return files, skipped, nil
}

// NotRegular says why the directory entry d, at path p, is not read as a
// configuration file — a directory, a FIFO, a socket, a device, or a
// symbolic link that is dangling, loops, or leads to one of those — or
// returns nil for a regular file or a link to one (a link is followed by
// a stat, never by opening it).
func NotRegular(p string, d fs.DirEntry) error {
	switch t := d.Type(); {
	case t&fs.ModeSymlink != 0:
		fi, err := os.Stat(p)
		switch {
		case err != nil: // dangling, or a loop
			return err
		case fi.IsDir():
			return errors.New("a link to a directory (not followed)")
		case !fi.Mode().IsRegular():
			return fmt.Errorf("a link to a %v, not a regular file", fi.Mode().Type())
		}
		return nil
	case t.IsDir():
		return errors.New("a directory")
	case !t.IsRegular():
		return fmt.Errorf("a %v, not a regular file", t)
	}
	return nil
}
