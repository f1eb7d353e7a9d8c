// keptIDs: the request ids a failover Book claimed in process, remembered
// for their idempotency window so that later calls find them there.
package failover

import (
	"sync"
	"time"
)

// keptIDs is a set of request ids, each kept for window after it was
// added, at most max of them (the oldest go first, as book.Memory's
// answers do). The zero value with window and max set is ready.
type keptIDs struct {
	window time.Duration
	max    int
	mu     sync.Mutex
	at     map[string]time.Time
	order  []keptID // insertion order, oldest first
}

type keptID struct {
	id string
	at time.Time
}

// add keeps id from now.
func (k *keptIDs) add(id string) {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.at == nil {
		k.at = map[string]time.Time{}
	}
	k.at[id] = now
	k.order = append(k.order, keptID{id, now})
	k.expireLocked(now)
}

// has reports whether id is kept (added within the window, not forgotten).
func (k *keptIDs) has(id string) bool {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.at) == 0 {
		return false
	}
	k.expireLocked(now)
	_, ok := k.at[id]
	return ok
}

// forget drops id.
func (k *keptIDs) forget(id string) {
	k.mu.Lock()
	delete(k.at, id)
	k.mu.Unlock()
}

// expireLocked drops the ids past the window, and the oldest beyond max
// (an entry of order whose id was added again later, or forgotten, is
// skipped).
func (k *keptIDs) expireLocked(now time.Time) {
	for len(k.order) > 0 {
		e := k.order[0]
		at, ok := k.at[e.id]
		switch {
		case !ok || !at.Equal(e.at):
		case now.Sub(e.at) < k.window && len(k.at) <= k.max:
			return
		default:
			delete(k.at, e.id)
		}
		k.order = k.order[1:]
	}
	if len(k.at) == 0 {
		k.order = nil // (let the backing array go)
	}
}
