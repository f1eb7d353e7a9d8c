// Reloading the configuration in force.

package main

import (
	"bytes"
	"encoding/hex"
	"os"
	"time"

	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/policy"
)

// reload reads the configuration again (why: "SIGHUP" or "file change",
// which reloads only when the content changed); a configuration that does
// not load leaves the one in force, and is counted and logged.
func (s *service) reload(why string) {
	if s.p == nil {
		s.reloadEnvoy(why)
		return
	}
	src, err := os.ReadFile(s.c.Config)
	if err != nil {
		// An unreadable file is reported once, not at every tick.
		if why == "file change" && err.Error() == s.lastReadErr {
			return
		}
		s.lastReadErr = err.Error()
		s.reloadErrors.Inc()
		s.noteReload(err)
		s.log.Error("policy reload failed; the old policy stays in force", "reason", why, "error", err,
			"policy_version", s.lim.Policy().Version)
		return
	}
	s.lastReadErr = ""
	if why == "file change" && bytes.Equal(src, s.last) {
		return
	}
	s.last = src
	old := s.lim.Policy()
	np, err := policy.Parse(src)
	var fromPolicy []overrides.Override
	if err == nil {
		fromPolicy, err = readPolicyOverrides(np)
	}
	if err == nil {
		err = s.lim.SetPolicy(np)
	}
	if err != nil {
		s.reloadErrors.Inc()
		s.noteReload(err)
		s.log.Error("policy reload rejected; the old policy stays in force", "reason", why, "error", err,
			"policy_version", s.lim.Policy().Version)
		return
	}
	s.reloadOverrides(np, fromPolicy)
	s.reloads.Inc()
	s.noteReload(nil)
	s.log.Info("policy reloaded", "reason", why, "policy_version", np.Version, "limits", len(np.Limits))
	s.auditReload(why, old, np)
}

// reloadEnvoy is reload in Envoy-config mode.
func (s *service) reloadEnvoy(why string) {
	if s.c.rl != nil && s.c.rl.xds {
		return // (the xDS client sets the configuration)
	}
	var d []byte
	load := s.loadEnvoyDir
	if s.c.rl != nil { // (its runtime directory, read as the reference reads it)
		d, load = s.c.rl.digest(), s.c.rl.load
	} else {
		d = envoyDigest(s.c.EnvoyConfig)
	}
	if why == "file change" && bytes.Equal(d, s.last) {
		return
	}
	s.last = d
	nc, err := load()
	if err != nil {
		if s.svc != nil {
			s.svc.NoteConfigLoad(err)
		}
		s.reloadErrors.Inc()
		s.log.Error("envoy config reload rejected; the old configuration stays in force", "reason", why, "error", err,
			"policy_version", s.envoy.Load().version)
		return
	}
	es := &envoyState{cfg: nc, version: digestVersion(d)}
	if s.svc != nil {
		s.svc.SetConfig(nc)
	}
	oldVersion := s.envoy.Load().version
	s.envoy.Store(es)
	s.auditEnvoyReload(why, oldVersion, es.version)
	s.reloads.Inc()
	s.log.Info("envoy config reloaded", "reason", why, "policy_version", es.version, "domains", len(nc.Domains))
}

// digestVersion is the policy_version of an Envoy configuration: the first
// 16 hex digits of its digest (as a policy's Version is of its file).
func digestVersion(d []byte) string { return hex.EncodeToString(d)[:16] }

// reloadInfo is the last reload's outcome, for /v1/stats (the live page).
type reloadInfo struct {
	At    time.Time `json:"at"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
}

// noteReload records a reload's outcome (err nil: it took effect).
func (s *service) noteReload(err error) {
	r := &reloadInfo{At: time.Now().UTC(), OK: err == nil}
	if err != nil {
		r.Error = err.Error()
	}
	s.lastReload.Store(r)
}
