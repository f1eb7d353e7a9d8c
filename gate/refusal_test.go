// A shared gate on a store wrapped in the refusal cache (store/refusal): the
// caller wraps, the gate sees a store.Store.

package gate_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/refusal"
)

// takeCounter counts the Take calls that reach the shared store.
type takeCounter struct {
	store.Store
	n atomic.Int64
}

func (c *takeCounter) Take(ctx context.Context, items []store.Item) (store.Result, error) {
	c.n.Add(1)
	return c.Store.Take(ctx, items)
}

// Calls a shared gate refuses for its budget are refused again from the
// cache, without a store call, until the budget refills; a ticket settled
// below its estimate returns tokens through the cache, and the next call
// asks the store (and is admitted).
func TestSharedGateOnRefusalCache(t *testing.T) {
	inner := &takeCounter{Store: memstore.New()}
	rc := refusal.New(inner, 100)
	defer rc.Close()
	g, err := gate.New(gate.Config{Name: "llm", Limit: bucket.Limit{Capacity: 10, Rate: 0.001}, Store: rc})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tk, err := g.Reserve(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := g.Reserve(ctx, 4); !errors.Is(err, sluice.ErrQueueFull) && !errors.Is(err, sluice.ErrWaitTooLong) {
			t.Fatalf("call %d on an empty budget: %v", i, err)
		}
	}
	if calls, hits := inner.n.Load(), rc.Stats().Hits; calls != 2 || hits != 4 {
		t.Fatalf("rule: a refused call's repeats cost no store call: %d store calls, %d hits (want 2, 4)", calls, hits)
	}
	if err := tk.Settle(2); err != nil { // 8 tokens back
		t.Fatal(err)
	}
	tk.Release()
	tk2, err := g.Reserve(ctx, 4)
	if err != nil {
		t.Fatalf("rule: after tokens came back through the cache the store decides: %v", err)
	}
	tk2.Release()
	if inner.n.Load() != 3 {
		t.Fatalf("store calls %d, want 3", inner.n.Load())
	}
}
