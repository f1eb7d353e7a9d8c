// The command's part of the audit log: a policy reload as one record (the
// old and new policy_version, the limits added, removed and changed), the
// audit store (shared on Redis), the instance's name.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
)

// auditStore is where GET /v1/audit's records live: Redis's capped stream
// when the store is Redis (every instance's), else nil (the server's own,
// in memory).
func (s *service) auditStore(shared sharedStore) server.AuditStore {
	if shared.redis != nil {
		return shared.redis.Audit()
	}
	return nil
}

// instanceName names this instance in audit and usage records: the host
// name and the HTTP address it serves.
func instanceName(httpAddr string) string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return fmt.Sprintf("%s/%s/%d", h, httpAddr, os.Getpid())
}

// policyChange is a policy reload's change.
type policyChange struct {
	OldVersion string   `json:"old_policy_version"`
	NewVersion string   `json:"new_policy_version"`
	Added      []string `json:"limits_added"`
	Removed    []string `json:"limits_removed"`
	Changed    []string `json:"limits_changed"`
}

// auditReload records a policy reload that took effect (SIGHUP or a file
// change; actor "system").
func (s *service) auditReload(why string, old, np *policy.Policy) {
	if s.srv == nil {
		return
	}
	ch := policyChange{NewVersion: np.Version, Added: []string{}, Removed: []string{}, Changed: []string{}}
	prev := map[string]string{}
	if old != nil {
		ch.OldVersion = old.Version
		for _, l := range old.Limits {
			prev[l.Name] = limitDigest(l)
		}
	}
	seen := map[string]bool{}
	for _, l := range np.Limits {
		seen[l.Name] = true
		d, ok := prev[l.Name]
		switch {
		case !ok:
			ch.Added = append(ch.Added, l.Name)
		case d != limitDigest(l):
			ch.Changed = append(ch.Changed, l.Name)
		}
	}
	for n := range prev {
		if !seen[n] {
			ch.Removed = append(ch.Removed, n)
		}
	}
	slices.Sort(ch.Removed)
	s.srv.Audit(context.Background(), server.ActorSystem, "policy_reload", why, "", ch)
}

// limitDigest is what a limit enforces, for telling a changed limit (its
// line in the file left out).
func limitDigest(l *policy.Limit) string {
	c := *l
	c.Line = 0
	b, _ := json.Marshal(c)
	return string(b)
}

// auditEnvoyReload records a reload of --envoy-config that took effect.
func (s *service) auditEnvoyReload(why, oldVersion, newVersion string) {
	if s.srv == nil {
		return
	}
	s.srv.Audit(context.Background(), server.ActorSystem, "policy_reload", why, "",
		map[string]string{"old_policy_version": oldVersion, "new_policy_version": newVersion})
}
