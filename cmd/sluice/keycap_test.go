package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// --max-keys N admits N distinct keys whatever their hashes; the next new
// key gets 503 store_full with a Retry-After saying when idle keys will
// free room, and after it a new key is admitted.
func TestServeMaxKeysIsExact(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	// A key is full (idle) again 5 s after its check: slow enough that on
	// a busy machine none is idle before the 101st arrives.
	writePolicy(t, pol, "limits:\n  - name: t\n    key: \"tenant:{tenant}\"\n    capacity: 1\n    refill_per_second: 0.2\n")
	p := serve(t, "--config", pol, "--max-keys", "100")
	check := func(tenant string) (int, string, http.Header) {
		req, _ := http.NewRequest("POST", p.addr+"/v1/check", strings.NewReader(`{"descriptors": {"tenant": "`+tenant+`"}, "cost": 1}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String(), resp.Header
	}
	for i := range 100 {
		if code, body, _ := check(fmt.Sprint("t", i)); code != 200 {
			t.Fatalf("tenant %d of 100: %d %s", i, code, body)
		}
	}
	code, body, h := check("t100")
	if code != 503 || !strings.Contains(body, `"code":"store_full"`) {
		t.Fatalf("tenant 101: %d %s", code, body)
	}
	ra, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 5 {
		t.Fatalf("Retry-After %q: the first tenant's bucket (1 at 0.2/s) is full again within 5 s of its check", h.Get("Retry-After"))
	}
	time.Sleep(time.Duration(ra)*time.Second + 500*time.Millisecond)
	if code, body, _ := check("t100"); code != 200 {
		t.Fatalf("after Retry-After: %d %s", code, body)
	}
}
