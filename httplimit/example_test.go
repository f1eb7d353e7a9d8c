package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/httplimit"
)

// An http.Client that stays within a partner API's limits and honours its
// 429 answers.
func ExampleNewTransport() {
	var n atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("RateLimit", `"default";r=0;t=1`)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer api.Close()

	g, err := gate.New(gate.Config{
		Limit:    bucket.Limit{Capacity: 10, Rate: 10}, // the partner allows 10/s
		MaxQueue: 100,
		MaxWait:  5 * time.Second,
		Retry:    gate.Retry{MaxAttempts: 3, BaseDelay: 50 * time.Millisecond, MaxDelay: time.Second},
	})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: httplimit.NewTransport(nil, g)}
	resp, err := client.Get(api.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "after", n.Load(), "requests")
	// Output:
	// 200 ok after 2 requests
}
