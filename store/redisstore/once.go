// Claims on Redis (store.Once): an alert fired once across instances.

package redisstore

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// Claim implements store.Once: SET <prefix>once:<key> NX PX ttl, true
// when this call set it. Bounded by the store's timeout.
func (s *Store) Claim(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	ms := max(ttl.Milliseconds(), 1)
	err := s.c.Do(ctx, s.c.B().Set().Key(s.cfg.prefix+"once:"+key).Value("1").Nx().Px(time.Duration(ms)*time.Millisecond).Build()).Error()
	switch {
	case rueidis.IsRedisNil(err):
		return false, nil
	case err != nil:
		return false, s.fail("once", err)
	}
	return true, nil
}
