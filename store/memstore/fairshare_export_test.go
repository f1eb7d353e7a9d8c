// Test access to the tenant sets (fairshare.go).

package memstore

// FairSets is the tenant sets s holds.
func FairSets(s *Store) int {
	n := 0
	for i := range s.shards {
		shd := &s.shards[i]
		shd.mu.Lock()
		n += len(shd.fair.byKey)
		shd.mu.Unlock()
	}
	return n
}

// FairHolders is the holders of every tenant set s holds.
func FairHolders(s *Store) int {
	n := 0
	for i := range s.shards {
		shd := &s.shards[i]
		shd.mu.Lock()
		for _, fs := range shd.fair.byKey {
			n += len(fs.holders)
		}
		shd.mu.Unlock()
	}
	return n
}
