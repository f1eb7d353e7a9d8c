package memstore

// NoEviction makes a store keep every key: the reference that eviction is
// compared with.
func NoEviction() Option { return func(s *Store) { s.noEvict = true } }

// ShardOf is the shard a key lives in.
func (s *Store) ShardOf(key string) int { return s.shardOf(key) }
