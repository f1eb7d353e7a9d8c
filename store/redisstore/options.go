// Options: the URL Open parses and the Option values of Open and New.

package redisstore

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// DefaultTimeout bounds every call to Redis unless WithTimeout says
// otherwise.
const DefaultTimeout = 250 * time.Millisecond

// DefaultPrefix starts every key the store writes.
const DefaultPrefix = "sluice:"

// Option configures New and Open.
type Option func(*config)

type config struct {
	prefix  string
	timeout time.Duration
	clock   sluice.Clock
	pool    int
}

// WithPrefix sets the prefix of every Redis key (default "sluice:"); it
// must not contain '{' or '}' (they would change the hash slot).
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithTimeout bounds every call (default DefaultTimeout); a caller's
// earlier deadline wins.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithPoolSize sets the connections per Redis node for blocking calls
// (rueidis' BlockingPoolSize); decisions are pipelined on one connection
// per node whatever the pool.
func WithPoolSize(n int) Option { return func(c *config) { c.pool = n } }

// WithScriptClock makes the script use c's time instead of Redis TIME, and
// disables key expiry (Redis would expire keys on its own clock). It is
// for tests and simulations that must step time; never for production,
// where instances must share Redis' clock.
func WithScriptClock(c sluice.Clock) Option { return func(cf *config) { cf.clock = c } }

// ParseURL turns a store URL into rueidis options (see Open).
func ParseURL(rawURL string) (rueidis.ClientOption, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: invalid URL %q: %w", Redact(rawURL), err)
	}
	cluster := false
	switch u.Scheme {
	case "redis", "rediss":
	case "redis+cluster", "rediss+cluster":
		cluster = true
		u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
		hosts := strings.Split(u.Host, ",")
		u.Host = hosts[0]
		q := u.Query()
		for _, h := range hosts[1:] {
			if h != "" {
				q.Add("addr", h)
			}
		}
		u.RawQuery = q.Encode()
	default:
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL scheme %q: want redis, rediss, redis+cluster or rediss+cluster", u.Scheme)
	}
	if u.Host == "" {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL %q has no host", Redact(rawURL))
	}
	opt, err := rueidis.ParseURL(u.String())
	if err != nil {
		return opt, fmt.Errorf("redisstore: %w", err)
	}
	switch {
	case opt.SelectDB < 0:
		return opt, fmt.Errorf("redisstore: URL %q: database number %d: must be 0 or more", Redact(rawURL), opt.SelectDB)
	case cluster && opt.SelectDB != 0:
		return opt, fmt.Errorf("redisstore: URL %q: database number %d: a Redis Cluster has only database 0", Redact(rawURL), opt.SelectDB)
	}
	opt.ForceSingleClient = !cluster
	opt.DisableCache = true // no client-side caching: every decision reads Redis
	opt.DisableAutoPipelining = true
	if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = time.Second
	}
	if opt.ConnWriteTimeout == 0 {
		opt.ConnWriteTimeout = 2 * time.Second
	}
	return opt, nil
}

// Redact returns rawURL with its password hidden, for logs.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

func newConfig(opts []Option) config {
	cfg := config{prefix: DefaultPrefix, timeout: DefaultTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

func (cfg config) check() error {
	if strings.ContainsAny(cfg.prefix, "{}") {
		return fmt.Errorf("redisstore: prefix %q must not contain '{' or '}'", cfg.prefix)
	}
	if cfg.timeout <= 0 {
		return fmt.Errorf("redisstore: timeout %v must be positive", cfg.timeout)
	}
	if cfg.pool < 0 {
		return fmt.Errorf("redisstore: pool size %d must not be negative", cfg.pool)
	}
	return nil
}
