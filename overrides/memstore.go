// MemStore: the Store of one process, kept in a state file when given a
// directory (sluice serve --state-dir).
package overrides

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// StateFile is the name of MemStore's file in its directory.
const StateFile = "overrides.json"

// stateFormat names the file's format on its first line.
const stateFormat = "sluice-overrides/1"

// MemOptions configures NewMemStore.
type MemOptions struct {
	// Dir, when set, is the directory of the state file (created when
	// missing): read by NewMemStore, rewritten after every change (to a
	// temporary file, synced, then renamed over StateFile), so the file
	// is always a whole state. Empty: nothing is kept past the process.
	Dir string
	// Max caps the live overrides held (ErrTooMany); 0 is DefaultMax.
	Max int
	// Now is the clock expiries are judged by; nil is time.Now.
	Now func() time.Time
	// LogSize is how many changes Changes can answer incrementally
	// (older sinces get Full answers); 0 is 65,536.
	LogSize int
}

// MemStore is a Store in process memory. Each change with a Dir costs a
// rewrite of the whole file (about 200 bytes an override), so it suits
// up to some ten thousand overrides changed now and then; larger sets
// belong in Redis.
type MemStore struct {
	mu      sync.Mutex
	opt     MemOptions
	recs    map[Key]*memRec
	version uint64
	log     []logEntry // the changes after logFrom, in order
	logFrom uint64
	exp     recHeap
	closed  bool
}

type memRec struct {
	o       Override
	version uint64
}

type logEntry struct {
	version uint64
	key     Key
}

// NewMemStore returns a MemStore, reading opt.Dir's state file when there
// is one. A state file that cannot be read whole (malformed, truncated,
// from another format) is an error naming the file and the line: the
// store never starts empty in its place.
func NewMemStore(opt MemOptions) (*MemStore, error) {
	if opt.Max <= 0 {
		opt.Max = DefaultMax
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.LogSize <= 0 {
		opt.LogSize = 1 << 16
	}
	s := &MemStore{opt: opt, recs: map[Key]*memRec{}}
	if opt.Dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(opt.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("overrides: state dir: %w", err)
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// stateHeader is the state file's first line.
type stateHeader struct {
	Format  string `json:"format"`
	Version uint64 `json:"version"`
	Count   int    `json:"count"`
}

func (s *MemStore) path() string { return filepath.Join(s.opt.Dir, StateFile) }

// load reads the state file (none: an empty store).
func (s *MemStore) load() error {
	b, err := os.ReadFile(s.path())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("overrides: state file: %w", err)
	}
	corrupt := func(line int, format string, args ...any) error {
		return fmt.Errorf("overrides: state file %s is corrupt (line %d: %s): refusing to start without its overrides; restore it, or move it away to start with none",
			s.path(), line, fmt.Sprintf(format, args...))
	}
	lines := bytes.Split(b, []byte{'\n'})
	if len(lines) == 0 || len(bytes.TrimSpace(lines[0])) == 0 {
		return corrupt(1, "no header")
	}
	var h stateHeader
	dec := json.NewDecoder(bytes.NewReader(lines[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil || h.Format != stateFormat {
		return corrupt(1, "not a %s header", stateFormat)
	}
	if len(lines) != h.Count+2 || len(lines[len(lines)-1]) != 0 {
		return corrupt(len(lines), "the header counts %d overrides, the file holds %d lines (truncated?)", h.Count, len(lines)-1)
	}
	now := s.opt.Now()
	for i, ln := range lines[1 : h.Count+1] {
		var o Override
		if err := json.Unmarshal(ln, &o); err != nil {
			return corrupt(i+2, "%v", err)
		}
		k := o.Key()
		if s.recs[k] != nil {
			return corrupt(i+2, "override of %q with match %s given twice", k.Name, k.Match)
		}
		if o.Expired(now) {
			continue
		}
		s.recs[k] = &memRec{o: o, version: h.Version}
		s.pushExpiry(k, &o, h.Version)
	}
	s.version, s.logFrom = h.Version, h.Version
	return nil
}

// save writes the state file: a temporary file synced, renamed over the
// old one, then the directory synced.
func (s *MemStore) save() error {
	if s.opt.Dir == "" {
		return nil
	}
	keys := make([]Key, 0, len(s.recs))
	for k := range s.recs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].Name < keys[j].Name || keys[i].Name == keys[j].Name && keys[i].Match < keys[j].Match
	})
	f, err := os.CreateTemp(s.opt.Dir, ".overrides-*.tmp")
	if err != nil {
		return fmt.Errorf("overrides: state file: %w", err)
	}
	defer os.Remove(f.Name()) // (a no-op after the rename)
	w := bufio.NewWriterSize(f, 1<<16)
	hdr, _ := json.Marshal(stateHeader{stateFormat, s.version, len(keys)})
	w.Write(append(hdr, '\n'))
	for _, k := range keys {
		b, err := json.Marshal(s.recs[k].o)
		if err != nil {
			f.Close()
			return fmt.Errorf("overrides: state file: %w", err)
		}
		w.Write(append(b, '\n'))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("overrides: state file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("overrides: state file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("overrides: state file: %w", err)
	}
	if err := os.Rename(f.Name(), s.path()); err != nil {
		return fmt.Errorf("overrides: state file: %w", err)
	}
	if d, err := os.Open(s.opt.Dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Put implements Store.
func (s *MemStore) Put(_ context.Context, o Override) (Override, error) {
	if err := o.checkFields(); err != nil {
		return Override{}, err
	}
	o.Source = SourceAPI
	o.Match = cloneMatch(o.Match)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Override{}, ErrClosed
	}
	s.sweep()
	k := o.Key()
	prev := s.recs[k]
	if prev == nil && len(s.recs) >= s.opt.Max {
		return Override{}, errorf(ErrTooMany, o.Name, "", "the store holds its maximum of %d overrides", s.opt.Max)
	}
	if prev != nil && !prev.o.CreatedAt.IsZero() {
		o.CreatedAt = prev.o.CreatedAt
	}
	undo := s.mark()
	s.version++
	s.recs[k] = &memRec{o: o, version: s.version}
	s.logChange(k)
	if err := s.save(); err != nil {
		undo()
		if prev != nil {
			s.recs[k] = prev
		} else {
			delete(s.recs, k)
		}
		return Override{}, err
	}
	s.pushExpiry(k, &o, s.version)
	return o, nil
}

// Delete implements Store.
func (s *MemStore) Delete(_ context.Context, name string, m map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.sweep()
	k := KeyOf(name, m)
	prev := s.recs[k]
	if prev == nil {
		return errorf(ErrNotFound, name, "match", "no override of limit %q with match %s", name, k.Match)
	}
	undo := s.mark()
	s.version++
	delete(s.recs, k)
	s.logChange(k)
	if err := s.save(); err != nil {
		undo()
		s.recs[k] = prev
		return err
	}
	return nil
}

// mark returns a function that restores the version and the log as they
// are now.
func (s *MemStore) mark() func() {
	v, n, from := s.version, len(s.log), s.logFrom
	return func() { s.version, s.log, s.logFrom = v, s.log[:n], from }
}

func (s *MemStore) logChange(k Key) {
	if len(s.log) >= s.opt.LogSize {
		drop := len(s.log) - s.opt.LogSize + 1
		s.logFrom = s.log[drop-1].version
		s.log = append(s.log[:0], s.log[drop:]...)
	}
	s.log = append(s.log, logEntry{s.version, k})
}

// Changes implements Store.
func (s *MemStore) Changes(_ context.Context, since uint64) (Changes, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Changes{}, ErrClosed
	}
	s.sweep()
	ch := Changes{Version: s.version}
	if since == 0 || since < s.logFrom || since > s.version {
		ch.Full = true
		for _, r := range s.recs {
			ch.Records = append(ch.Records, cloneOverride(r.o))
		}
		return ch, nil
	}
	i := sort.Search(len(s.log), func(i int) bool { return s.log[i].version > since })
	seen := map[Key]bool{}
	for _, e := range s.log[i:] {
		if seen[e.key] {
			continue
		}
		seen[e.key] = true
		if r := s.recs[e.key]; r != nil {
			ch.Records = append(ch.Records, cloneOverride(r.o))
		} else {
			ch.Deleted = append(ch.Deleted, e.key)
		}
	}
	return ch, nil
}

// Len returns the number of live overrides held.
func (s *MemStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	return len(s.recs)
}

// Close implements Store.
func (s *MemStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// sweep deletes the records expired by now (a change each; the state file
// is not rewritten for them: a load drops expired records).
func (s *MemStore) sweep() {
	ms := s.opt.Now().UnixMilli()
	for len(s.exp) > 0 && s.exp[0].at <= ms {
		e := heap.Pop(&s.exp).(recExpiry)
		if r := s.recs[e.key]; r != nil && r.version == e.version {
			s.version++
			delete(s.recs, e.key)
			s.logChange(e.key)
		}
	}
}

func (s *MemStore) pushExpiry(k Key, o *Override, version uint64) {
	if !o.ExpiresAt.IsZero() {
		heap.Push(&s.exp, recExpiry{o.ExpiresAt.UnixMilli(), k, version})
	}
}

type recExpiry struct {
	at      int64
	key     Key
	version uint64
}

type recHeap []recExpiry

func (h recHeap) Len() int           { return len(h) }
func (h recHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h recHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *recHeap) Push(x any)        { *h = append(*h, x.(recExpiry)) }
func (h *recHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func cloneMatch(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func cloneOverride(o Override) Override {
	o.Match = cloneMatch(o.Match)
	return o
}
