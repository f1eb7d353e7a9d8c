// The drain under load: busy keep-alive clients lose no request on SIGTERM.
package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// On SIGTERM, 16 clients each sending checks back to back on one
// keep-alive connection all get an answer to every request they sent: no
// reset, no EOF; each one's last answer carries Connection: close (so it
// sends nothing more on that connection), and the process exits 0.
func TestServeDrainAnswersBusyKeepAliveClients(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, "limits:\n  - name: per_k\n    key: \"k:{k}\"\n    capacity: 1000000000\n    refill_per_second: 1000000000\n")
	p := serve(t, "--config", pol)
	const clients = 16
	type outcome struct {
		sent, answered int
		lastClose      bool
		err            error
	}
	out := make([]outcome, clients)
	var warm, wg sync.WaitGroup
	warm.Add(clients)
	for i := range clients {
		wg.Go(func() {
			tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
			o := &out[i]
			body := fmt.Sprintf(`{"descriptors": {"k": "c%d"}}`, i)
			for {
				o.sent++
				resp, err := c.Post(p.addr+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					o.err = err
					break
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					o.err = fmt.Errorf("answer %d: %v", resp.StatusCode, err)
					break
				}
				o.answered++
				if o.answered == 20 {
					warm.Done()
				}
				if resp.Close { // Connection: close: the drain has begun
					o.lastClose = true
					break
				}
			}
			if o.answered < 20 {
				warm.Done()
			}
		})
	}
	warm.Wait()
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	wg.Wait()
	took := waitExit(t, p, start)
	total := 0
	for i, o := range out {
		total += o.answered
		if o.err != nil || !o.lastClose || o.answered != o.sent {
			t.Errorf("client %d: sent %d, answered %d, last answer with Connection: close %v, error %v", i, o.sent, o.answered, o.lastClose, o.err)
		}
	}
	t.Logf("%d clients, %d checks answered; exited %v after SIGTERM", clients, total, took)
	if !p.logged(`"msg":"stopped"`) {
		t.Fatalf("no stopped record:\n%s", p.text())
	}
}
