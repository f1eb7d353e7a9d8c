// The policy hot reload through Kubernetes' ConfigMap volume layout: the
// file is a symlink through ..data, and an update swaps ..data atomically.

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// configMapVolume is a directory laid out the way the kubelet's
// AtomicWriter lays out a ConfigMap volume: each version of the data in a
// timestamped directory ..<timestamp>, the symlink ..data to the current
// one, and each key a symlink KEY -> ..data/KEY.
type configMapVolume struct {
	t   *testing.T
	dir string
	ts  string // the timestamped directory in force (its base name)
	n   int
}

// newConfigMapVolume writes data (key -> content) as the volume's first version.
func newConfigMapVolume(t *testing.T, data map[string]string) *configMapVolume {
	v := &configMapVolume{t: t, dir: t.TempDir()}
	v.ts = v.writeVersion(data)
	if err := os.Symlink(v.ts, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range data {
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(v.dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// writeVersion writes data into a new timestamped directory and returns
// its base name.
func (v *configMapVolume) writeVersion(data map[string]string) string {
	v.n++
	ts := time.Now().UTC().Format("..2006_01_02_15_04_05.") + strings.Repeat("0", 8) + string(rune('0'+v.n%10))
	d := filepath.Join(v.dir, ts)
	if err := os.Mkdir(d, 0o755); err != nil {
		v.t.Fatal(err)
	}
	for k, s := range data {
		if err := os.WriteFile(filepath.Join(d, k), []byte(s), 0o644); err != nil {
			v.t.Fatal(err)
		}
	}
	return ts
}

// update is the kubelet's swap: the new version in a new timestamped
// directory, a symlink ..data_tmp to it renamed over ..data (atomic), then
// the old directory removed. The KEY symlinks are never touched.
func (v *configMapVolume) update(data map[string]string) {
	ts := v.writeVersion(data)
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(v.dir, v.ts)); err != nil {
		v.t.Fatal(err)
	}
	v.ts = ts
}

// A policy mounted from a ConfigMap (--config /etc/sluice/policy.yaml, a
// symlink through ..data) is reloaded when the kubelet swaps ..data: the
// new limits are enforced, /v1/policy's version changes, and the reload is
// counted in sluice_config_reloads_total; a second swap works as the first.
func TestServeReloadsConfigMapSymlinkSwap(t *testing.T) {
	vol := newConfigMapVolume(t, map[string]string{"policy.yaml": servePolicy})
	p := serve(t, "--config", filepath.Join(vol.dir, "policy.yaml"), "--reload", "100ms")
	version := func() string {
		t.Helper()
		code, body := call(t, p, "GET", "/v1/policy", "")
		var out struct {
			Version string `json:"version"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &out) != nil || out.Version == "" {
			t.Fatalf("/v1/policy: %d %s", code, body)
		}
		return out.Version
	}
	waitReloads := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for metrics(t, p)["sluice_config_reloads_total"] != want {
			if time.Now().After(deadline) {
				p.mu.Lock()
				logs := strings.Join(p.logs, "\n")
				p.mu.Unlock()
				t.Fatalf("sluice_config_reloads_total is %v, want %v; logs:\n%s",
					metrics(t, p)["sluice_config_reloads_total"], want, logs)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check := `{"descriptors": {"tenant": "acme"}}`
	for i, want := range []int{200, 200, 429} {
		if code, body := call(t, p, "POST", "/v1/check", check); code != want {
			t.Fatalf("request %d under the first version: %d %s", i, code, body)
		}
	}
	v1 := version()

	// A new limit refusing another descriptor at once, and the first
	// one's capacity raised.
	second := strings.Replace(servePolicy, "capacity: 2", "capacity: 5", 1) +
		"  - name: closed\n    key: \"user:{user}\"\n    capacity: 1\n    refill_per_second: 0.001\n"
	vol.update(map[string]string{"policy.yaml": second})
	waitReloads(1)
	v2 := version()
	if v2 == v1 {
		t.Fatalf("/v1/policy's version did not change on the swap: %s", v2)
	}
	beta := `{"descriptors": {"tenant": "beta"}}`
	for i, want := range []int{200, 200, 200, 200, 200, 429} {
		if code, body := call(t, p, "POST", "/v1/check", beta); code != want {
			t.Fatalf("the raised capacity (5), request %d: %d %s", i, code, body)
		}
	}
	user := `{"descriptors": {"user": "u1"}}`
	for i, want := range []int{200, 429} {
		if code, body := call(t, p, "POST", "/v1/check", user); code != want || (want == 429 && !strings.Contains(body, `"closed"`)) {
			t.Fatalf("the new limit, request %d: %d %s", i, code, body)
		}
	}
	if _, err := os.Stat(filepath.Join(vol.dir, "..data_tmp")); !os.IsNotExist(err) {
		t.Fatalf("..data_tmp left behind: %v", err)
	}

	// A second swap (the directory the first swap made is removed in turn).
	vol.update(map[string]string{"policy.yaml": servePolicy})
	waitReloads(2)
	if v3 := version(); v3 != v1 {
		t.Fatalf("back to the first policy, /v1/policy's version is %s, want %s", v3, v1)
	}
	// The limit "closed" is gone: no limit applies to a user alone.
	if code, body := call(t, p, "POST", "/v1/check", user); code != 422 || !strings.Contains(body, "no_limit_applies") {
		t.Fatalf("the removed limit still applies: %d %s", code, body)
	}
	if m := metrics(t, p)["sluice_config_reload_errors_total"]; m != 0 {
		t.Fatalf("sluice_config_reload_errors_total %v: a swap was seen half done", m)
	}
}
