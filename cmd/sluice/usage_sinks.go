// Where --usage-export writes: a file of JSON lines rotated by size, or a
// URL its rows are POSTed to in batches (retried, a bounded buffer, drops
// counted).

package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// fileSink appends rows to a file; past max bytes the file is rotated
// (path.1 the newest old file, up to path.3; the oldest dropped).
type fileSink struct {
	path string
	max  int64
	f    *os.File
	size int64
}

const usageFilesKept = 3

func newFileSink(path string, max int64) (*fileSink, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &fileSink{path: path, max: max, f: f, size: st.Size()}, nil
}

func (s *fileSink) write(rows []UsageRow) error {
	b := rowsJSON(rows)
	if s.size > 0 && s.size+int64(len(b)) > s.max {
		if err := s.rotate(); err != nil {
			return err
		}
	}
	n, err := s.f.Write(b)
	s.size += int64(n)
	return err
}

func (s *fileSink) rotate() error {
	if err := s.f.Close(); err != nil {
		return err
	}
	for i := usageFilesKept - 1; i >= 1; i-- {
		os.Rename(fmt.Sprintf("%s.%d", s.path, i), fmt.Sprintf("%s.%d", s.path, i+1))
	}
	if err := os.Rename(s.path, s.path+".1"); err != nil {
		return err
	}
	f, err := os.OpenFile(s.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.f, s.size = f, 0
	return nil
}

func (s *fileSink) close(context.Context) error { return s.f.Close() }

// postSink POSTs rows to a URL (Content-Type application/x-ndjson, at
// most postBatch rows a request) from a queue of at most max rows: a row
// that finds the queue full is dropped (sluice_usage_dropped_total); a
// batch the URL refuses (not 2xx) or does not answer is retried with
// backoff (1 s doubling to 30 s) until it is taken, counted in
// sluice_usage_post_errors_total each time.
type postSink struct {
	url     string
	max     int
	client  *http.Client
	log     *slog.Logger
	mu      sync.Mutex
	queue   []UsageRow
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	dropped prometheus.Counter
	failed  prometheus.Counter
}

const postBatch = 1000

func newPostSink(url string, max int, log *slog.Logger) *postSink {
	s := &postSink{url: url, max: max, client: &http.Client{Timeout: 10 * time.Second}, log: log,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_usage_dropped_total",
			Help: "Usage rows dropped because --usage-buffer rows were waiting for the --usage-export URL."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_usage_post_errors_total",
			Help: "POSTs of usage rows to the --usage-export URL that failed (retried)."})}
	go s.run()
	return s
}

func (s *postSink) write(rows []UsageRow) error {
	s.mu.Lock()
	room := s.max - len(s.queue)
	if room < len(rows) {
		s.dropped.Add(float64(len(rows) - max(room, 0)))
		rows = rows[:max(room, 0)]
	}
	s.queue = append(s.queue, rows...)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// run sends the queue batch after batch.
func (s *postSink) run() {
	defer close(s.done)
	backoff := time.Second
	for {
		s.mu.Lock()
		n := min(len(s.queue), postBatch)
		batch := append([]UsageRow(nil), s.queue[:n]...)
		s.mu.Unlock()
		if n == 0 {
			select {
			case <-s.wake:
				continue
			case <-s.stop:
				return
			}
		}
		if err := s.post(context.Background(), batch); err != nil {
			s.failed.Inc()
			s.log.Warn("usage export: POST failed, retrying", "url", s.url, "error", err.Error(), "rows", n, "retry_in_ms", backoff.Milliseconds())
			select {
			case <-time.After(backoff):
			case <-s.stop:
				return
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = time.Second
		s.mu.Lock()
		s.queue = s.queue[n:]
		s.mu.Unlock()
	}
}

func (s *postSink) post(ctx context.Context, rows []UsageRow) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(rowsJSON(rows)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	res, err := s.client.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", s.url, res.Status)
	}
	return nil
}

// close stops the sender and POSTs what is queued once more, within ctx.
func (s *postSink) close(ctx context.Context) error {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	for len(q) > 0 {
		n := min(len(q), postBatch)
		if err := s.post(ctx, q[:n]); err != nil {
			s.dropped.Add(float64(len(q)))
			return fmt.Errorf("%d rows not sent: %w", len(q), err)
		}
		q = q[n:]
	}
	return nil
}
