package main

import (
	"debug/buildinfo"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// policyVersion is the policy_version sluice reports for src.
func policyVersion(t *testing.T, src string) string {
	t.Helper()
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p.Version
}

// The startup line carries the binary's version and, apart, the policy's
// hash; reload lines carry the new policy's.
func TestServeLogsVersions(t *testing.T) {
	bi, err := buildinfo.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, servePolicy)
	p := serve(t, "--config", pol, "--reload", "0")
	rec := logRecord(t, p, "sluice serving")
	if rec["version"] != formatVersion("", bi) || rec["policy_version"] != policyVersion(t, servePolicy) {
		t.Fatalf("startup record %v: want version %q, policy_version %q", rec, formatVersion("", bi), policyVersion(t, servePolicy))
	}
	next := strings.Replace(servePolicy, "capacity: 2", "capacity: 3", 1)
	writePolicy(t, pol, next)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "policy reloaded")
	logRecord(t, p, "policy reloaded", "policy_version", policyVersion(t, next))
}

// Envoy mode: GET /v1/policy answers the configuration in force (domains
// and descriptor trees, version = the startup line's policy_version, source
// = the directory) and follows reloads.
func TestServeEnvoyPolicyEndpoint(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "edge.yaml")
	writePolicy(t, cfg, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 1}\n")
	p := serve(t, "--envoy-config", dir, "--grpc", "127.0.0.1:0", "--reload", "0")
	startVersion, _ := logRecord(t, p, "sluice serving")["policy_version"].(string)
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(startVersion) {
		t.Fatalf("policy_version %q in Envoy mode", startVersion)
	}
	type summary struct {
		Version string `json:"version"`
		Source  string `json:"source"`
		Domains []struct {
			Domain      string `json:"domain"`
			Descriptors []struct {
				Key       string `json:"key"`
				RateLimit struct {
					Name            string `json:"name"`
					Unit            string `json:"unit"`
					RequestsPerUnit uint32 `json:"requests_per_unit"`
				} `json:"rate_limit"`
			} `json:"descriptors"`
		} `json:"domains"`
	}
	get := func() summary {
		t.Helper()
		code, body := call(t, p, "GET", "/v1/policy", "")
		var s summary
		if err := json.Unmarshal([]byte(body), &s); code != 200 || err != nil || len(s.Domains) != 1 || len(s.Domains[0].Descriptors) != 1 {
			t.Fatalf("/v1/policy: %d %v %s", code, err, body)
		}
		return s
	}
	s := get()
	d := s.Domains[0].Descriptors[0]
	if s.Version != startVersion || s.Source != dir || s.Domains[0].Domain != "edge" || d.Key != "remote_address" ||
		d.RateLimit.Name != "per_ip" || d.RateLimit.Unit != "minute" || d.RateLimit.RequestsPerUnit != 1 {
		t.Fatalf("/v1/policy: %+v", s)
	}
	if code, _ := call(t, p, "POST", "/v1/check", `{"descriptors": {}}`); code != 404 {
		t.Fatalf("HTTP /v1/check in Envoy mode: %d", code)
	}
	writePolicy(t, cfg, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: roomier, unit: hour, requests_per_unit: 5}\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "envoy config reloaded")
	s = get()
	d = s.Domains[0].Descriptors[0]
	if s.Version == startVersion || d.RateLimit.Name != "roomier" || d.RateLimit.Unit != "hour" || d.RateLimit.RequestsPerUnit != 5 {
		t.Fatalf("/v1/policy after the reload: %+v", s)
	}
	logRecord(t, p, "envoy config reloaded", "policy_version", s.Version)
}

// A rejected reload counts in sluice_config_reload_errors_total, a good one
// in sluice_config_reloads_total, for a policy and for Envoy's
// configuration. --reload 0 watches no file: only SIGHUP reloads.
func TestServeReloadMetrics(t *testing.T) {
	metric := func(p *proc, name string) string {
		t.Helper()
		_, body := call(t, p, "GET", "/metrics", "")
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no %s in /metrics", name)
		}
		return m[1]
	}
	pol := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, pol, servePolicy)
	p := serve(t, "--config", pol, "--reload", "0")
	writePolicy(t, pol, "limits: [{name: a}]\n")
	time.Sleep(300 * time.Millisecond)
	if p.logged("policy reload") {
		t.Fatal("reloaded on a file change under --reload 0")
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "policy reload rejected")
	if e, ok := metric(p, "sluice_config_reload_errors_total"), metric(p, "sluice_config_reloads_total"); e != "1" || ok != "0" {
		t.Fatalf("after a rejected reload: errors %s, reloads %s", e, ok)
	}
	os.Remove(pol)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "policy reload failed")
	writePolicy(t, pol, servePolicy)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "policy reloaded")
	if e, ok := metric(p, "sluice_config_reload_errors_total"), metric(p, "sluice_config_reloads_total"); e != "2" || ok != "1" {
		t.Fatalf("after a missing file and a good reload: errors %s, reloads %s", e, ok)
	}

	dir := t.TempDir()
	writePolicy(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	q := serve(t, "--envoy-config", dir, "--grpc", "127.0.0.1:0", "--reload", "0")
	writePolicy(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	q.cmd.Process.Signal(syscall.SIGHUP)
	q.waitLog(t, "envoy config reload rejected")
	if e := metric(q, "sluice_config_reload_errors_total"); e != "1" {
		t.Fatalf("Envoy mode, after a rejected reload: errors %s", e)
	}
}
