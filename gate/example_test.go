package gate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
)

// searchTool stands for a tool an agent calls: it fails once with the
// provider's "slow down" answer, then succeeds.
func searchTool(calls *int) func(ctx context.Context, query string) (string, error) {
	return func(ctx context.Context, query string) (string, error) {
		*calls++
		if *calls == 1 {
			return "", gate.WithRetryAfter(errors.New("429 from provider"), 20*time.Millisecond)
		}
		return "results for " + query, nil
	}
}

// Wrap a tool call: at most 5 calls a second with a burst of 2, at most 2
// running at once, up to 10 callers waiting at most 1 s, and up to 3
// attempts honouring the provider's retry hint.
func ExampleGate_Do() {
	g, err := gate.New(gate.Config{
		Name:        "search_tool",
		Limit:       bucket.Limit{Capacity: 2, Rate: 5},
		MaxInFlight: 2,
		MaxQueue:    10,
		MaxWait:     time.Second,
		Retry:       gate.Retry{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	var calls int
	search := searchTool(&calls)
	var answer string
	err = g.Do(context.Background(), 1, func(ctx context.Context) error {
		var err error
		answer, err = search(ctx, "token buckets")
		return err
	})
	fmt.Println(answer, err, "after", calls, "calls")
	st := g.Stats()
	fmt.Println("admitted", st.Admitted, "of which retries", st.AdmittedRetries)
	// Output:
	// results for token buckets <nil> after 2 calls
	// admitted 2 of which retries 1
}

// Costs known only afterwards: reserve an estimate, settle the actual.
func ExampleGate_Reserve() {
	g, _ := gate.New(gate.Config{Limit: bucket.Limit{Capacity: 100_000, Rate: 1000}})
	t, err := g.Reserve(context.Background(), 4000) // the prompt's estimated LLM tokens
	if err != nil {
		panic(err)
	}
	// ... call the model; it reports 2500 tokens used ...
	t.Settle(2500)
	t.Release()
	fmt.Printf("%.0f tokens left\n", g.Stats().Tokens)
	// Output:
	// 97500 tokens left
}
