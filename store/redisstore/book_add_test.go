// Receipt records added at the same time (shared script calls on a single Redis): each its own id, receipt and slots; the cap counted exactly.

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/redisstore"
)

func TestBookConcurrentRecords(t *testing.T) {
	const callers, each, maxReceipts = 64, 5, 40
	for _, name := range []string{"single", "cluster"} {
		t.Run(name, func(t *testing.T) {
			var s *redisstore.Store
			if name == "cluster" {
				s = openCluster(t)
			} else {
				s = open(t)
			}
			b := redisstore.NewBook(s, book.Config{MaxReceipts: maxReceipts})
			ctx := context.Background()
			type added struct {
				id, rc string
				slots  bool
			}
			var mu sync.Mutex
			var all []added
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for i := range each {
						rc := fmt.Sprintf("rc-%d-%d", g, i)
						r := book.Record{Receipt: []byte(rc)}
						if i%2 == 0 {
							r.Slots, r.SlotsTTL = store.Slots{ID: "slot-" + rc, Keys: []string{"k:" + rc}}, time.Minute
						}
						id, err := b.AddRecord(ctx, r)
						if err != nil || id == "" {
							t.Errorf("AddRecord %s: %q, %v", rc, id, err)
							return
						}
						mu.Lock()
						all = append(all, added{id, rc, i%2 == 0})
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			seen := map[string]bool{}
			kept := 0
			for _, a := range all {
				if seen[a.id] {
					t.Fatalf("id %q handed out twice", a.id)
				}
				seen[a.id] = true
				sl, err := b.Slots(ctx, a.id)
				if a.slots && (err != nil || sl.ID != "slot-"+a.rc) || !a.slots && (err != nil || sl.ID != "") {
					t.Errorf("%s: slots %+v, %v", a.rc, sl, err)
				}
				rc, err := b.TakeReceipt(ctx, a.id, nil)
				switch {
				case err == nil && string(rc) == a.rc:
					kept++
				case errors.Is(err, book.ErrDropped):
				default:
					t.Errorf("%s: receipt %q, %v", a.rc, rc, err)
				}
			}
			if kept != maxReceipts || b.Dropped() != callers*each-maxReceipts {
				t.Fatalf("%d receipts kept (want %d), %d dropped (want %d)", kept, maxReceipts, b.Dropped(), callers*each-maxReceipts)
			}
		})
	}
}
