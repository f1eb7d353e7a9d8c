package memstore

import (
	"fmt"
	"slices"
)

// NoEviction makes a store keep every key: the reference that eviction is
// compared with.
func NoEviction() Option { return func(s *Store) { s.noEvict = true } }

// ShardOf is the shard a key lives in.
func (s *Store) ShardOf(key string) int { return s.shardOf(key) }

// HeldKeys counts the keys the shards hold; with no request in flight it
// must equal Stats().Keys.
func (s *Store) HeldKeys() int64 {
	n := int64(0)
	for i := range s.shards {
		shd := &s.shards[i]
		shd.mu.Lock()
		n += int64(shd.m.n + len(shd.slotSets))
		shd.mu.Unlock()
	}
	return n
}

// Scans is how many times a shard was scanned for idle keys.
func (s *Store) Scans() uint64 { return s.scans.Load() }

// CheckIdleBounds reports a shard whose bound of its keys' idle times is
// above a key's idle time (or whose wake time is not the bound or the
// rescan time), which would make eviction miss idle keys and RetryAfter
// too late.
func (s *Store) CheckIdleBounds() error {
	for i := range s.shards {
		shd := &s.shards[i]
		shd.mu.Lock()
		err := func() error {
			if w := shd.wake.Load(); w != max(shd.low, shd.calm) {
				return fmt.Errorf("shard %d: wake %d, low %d, calm %d", i, w, shd.low, shd.calm)
			}
			for j := uint32(0); j < shd.m.next; j++ {
				if e := shd.m.at(j); e.key != "" && e.idle < shd.low {
					return fmt.Errorf("shard %d: key %q idle at %d, bound %d", i, e.key, e.idle, shd.low)
				}
			}
			for k, sl := range shd.slotSets {
				if len(sl.exp) > 0 && slices.Max(sl.exp) < shd.low {
					return fmt.Errorf("shard %d: lease set %q idle at %d, bound %d", i, k, slices.Max(sl.exp), shd.low)
				}
			}
			return nil
		}()
		shd.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// OnLRU makes the store call fn (holding no lock) for each key evicted
// with state to make room for a new key, with the time of the eviction (ns
// since the store's creation).
func OnLRU(fn func(key string, d int64)) Option { return func(s *Store) { s.onLRU = fn } }

// OnPass makes the store call fn (holding the key's shard locked) for each
// key whose use mark the CLOCK hand cleared as it passed it.
func OnPass(fn func(key string)) Option { return func(s *Store) { s.onPass = fn } }

// ShareSeed gives empty store dst src's hash seed: the two then place and
// sweep keys alike (TestTakeHeldMatchesTakeBorrowed).
func ShareSeed(dst, src *Store) {
	dst.seed = src.seed
	for i := range dst.shards {
		dst.shards[i].m.seed = src.seed
	}
}
