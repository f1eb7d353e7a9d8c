// sluice serve's overrides: their flags, the Set and its store (memory with
// --state-dir, or Redis), the policy file's own overrides at start and on
// reload, and the sync loop.

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/redisstore"
)

// overrideFlags are serve's flags about /v1/overrides (embedded in serveCmd).
type overrideFlags struct {
	AdminTokenFile string `help:"File holding the bearer token every /v1/overrides request requires (instead of --auth-token-file's, which the other endpoints keep); read at start." type:"path"`
	MaxOverrides   int    `default:"1000000" help:"Most overrides set through /v1/overrides, at least 1; beyond it a new one answers 422 too_many_overrides (the policy file's do not count)."`
	StateDir       string `help:"Directory where --store memory keeps the overrides set through /v1/overrides (overrides.json, rewritten atomically on every change, read at start; a corrupt file stops the start). Without it they last as long as the process; on Redis they live in Redis." type:"path"`
}

// overrideSyncPeriod is how often, at the latest, an instance applies
// its overrides store's changes (one small call) and sweeps the expired
// ones. On Redis each change is also announced (Pub/Sub) and applied on
// every instance at once (a few ms); the poll brings the ones whose
// announcement was lost within a period and one call, and is an idle
// instance's only overrides call: one a second.
const overrideSyncPeriod = time.Second

// validateOverrides checks the overrides' flags (a usage error).
func (c serveCmd) validateOverrides() error {
	switch {
	case c.MaxOverrides < 1:
		return fmt.Errorf("--max-overrides %d: must be at least 1", c.MaxOverrides)
	case c.StateDir != "" && c.Store != "" && c.Store != "memory":
		return errors.New("--state-dir keeps the overrides of --store memory; on Redis they live in Redis: drop --state-dir")
	case c.EnvoyConfig != "" && (c.StateDir != "" || c.AdminTokenFile != ""):
		return errors.New("--state-dir and --admin-token-file are about /v1/overrides, which serves a policy: they need --config, not --envoy-config")
	}
	return nil
}

// overrideState is what serve holds of the overrides: the Set in force,
// its store, and the sync loop once started.
type overrideState struct {
	set   *overrides.Set
	store overrides.Store
	// fromPolicy are the policy file's own overrides, read with it
	// (loadConfig), put in the Set when it is made.
	fromPolicy  []overrides.Override
	adminTokens []server.Token // --admin-token-file's
	stop        context.CancelFunc
	done        sync.WaitGroup
}

// readPolicyOverrides reads the overrides the policy file p lists (its
// errors are the policy's: serve does not start, a reload is rejected,
// sluice check fails).
func readPolicyOverrides(p *policy.Policy) ([]overrides.Override, error) {
	return overrides.FromPolicy(p, time.Now())
}

// openOverrides makes the Set of policy p with its own overrides, and the
// store the API's live in: Redis's when the limit store is Redis, else in
// memory (kept in --state-dir when given). A state file that cannot be
// read is an error naming it: serve does not start.
func (s *service) openOverrides(shared sharedStore) error {
	if s.p == nil {
		return nil // (Envoy-config mode: no /v1/overrides)
	}
	ov := &s.ov
	if shared.redis != nil {
		ov.store = shared.redis.Overrides(redisstore.OverridesOptions{Max: s.c.MaxOverrides})
	} else {
		ms, err := overrides.NewMemStore(overrides.MemOptions{Dir: s.c.StateDir, Max: s.c.MaxOverrides})
		if err != nil {
			return fmt.Errorf("--state-dir: %w", err)
		}
		ov.store = ms
	}
	ov.set = overrides.NewSet(s.p)
	for _, err := range ov.set.SetPolicy(s.p, ov.fromPolicy) {
		s.log.Warn("override not in force", "error", err.Error())
	}
	// The overrides held at start (the state file, Redis) apply from the
	// first decision; Redis unreachable now is retried by the loop.
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.c.StoreTimeout+time.Second)
	defer cancel()
	problems, err := overrides.Sync(ctx, ov.set, ov.store)
	if err != nil {
		s.log.Warn("overrides not loaded from the store at start: retried by the sync loop", "error", err.Error())
	}
	for _, p := range problems {
		s.log.Warn("override held inactive: the policy in force refuses it", "error", p.Error())
	}
	ov.set.Sweep(time.Now())
	return nil
}

// overrideConfig sets the server's overrides fields.
func (s *service) overrideConfig(cfg *server.Config) {
	if s.ov.set == nil {
		return
	}
	cfg.Overrides, cfg.OverrideStore, cfg.AdminTokens = s.ov.set, s.ov.store, s.ov.adminTokens
	cfg.LoopbackListener = loopbackAddr(s.c.HTTP)
}

// startOverrideSync runs srv's sync loop until stopOverrides.
func (s *service) startOverrideSync(srv *server.Server) {
	if s.ov.set == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.ov.stop = cancel
	s.ov.done.Go(func() { srv.SyncOverrides(ctx, overrideSyncPeriod) })
}

// stopOverrides stops the sync loop (when it runs) and closes the
// overrides store.
func (s *service) stopOverrides() {
	if s.ov.stop != nil {
		s.ov.stop()
		s.ov.done.Wait()
	}
	if s.ov.store != nil {
		s.ov.store.Close()
	}
}

// reloadOverrides puts a new policy's own overrides in the Set, and logs
// the API overrides it refuses (held inactive until a policy accepts them
// again).
func (s *service) reloadOverrides(np *policy.Policy, fromPolicy []overrides.Override) {
	if s.ov.set == nil {
		return
	}
	for _, err := range s.ov.set.SetPolicy(np, fromPolicy) {
		s.log.Warn("override not in force under the new policy", "error", err.Error())
	}
}

// loopbackAddr reports whether a listen address (--http) is on loopback
// alone: an IP literal that is loopback, or a name every address of
// which is.
func loopbackAddr(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.IsLoopback()
	}
	addrs, err := net.LookupHost(host)
	if err != nil || len(addrs) == 0 {
		return false
	}
	for _, h := range addrs {
		if a, err := netip.ParseAddr(h); err != nil || !a.IsLoopback() {
			return false
		}
	}
	return true
}
