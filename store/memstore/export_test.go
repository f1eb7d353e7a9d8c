package memstore

// NoEviction makes a store keep every key: the reference that eviction is
// compared with.
func NoEviction() Option { return func(s *Store) { s.noEvict = true } }
