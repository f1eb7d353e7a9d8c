package envoyrls_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/store/memstore"
)

// Summary reports every domain, sorted, with its whole tree in Envoy's own
// field names; Service.Config follows SetConfig.
func TestSummary(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte(`domain: zeta
descriptors: []
`), 0o644)
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {name: per_ip, unit: Minute, requests_per_unit: 5}
  - key: path
    value: "/api*"
    shadow_mode: true
    descriptors:
      - key: user
        rate_limit: {unlimited: true}
`), 0o644)
	cfg, err := envoyrls.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(cfg.Summary())
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"domain":"edge","descriptors":[` +
		`{"key":"remote_address","rate_limit":{"name":"per_ip","unit":"minute","requests_per_unit":5}},` +
		`{"key":"path","value":"/api*","shadow_mode":true,"descriptors":[{"key":"user","rate_limit":{"unlimited":true}}]}]},` +
		`{"domain":"zeta","descriptors":[]}]`
	if string(b) != want {
		t.Fatalf("summary\n got %s\nwant %s", b, want)
	}
	svc := envoyrls.NewService(cfg, memstore.New())
	if svc.Config() != cfg {
		t.Fatal("Config is not the configuration given")
	}
	other := &envoyrls.Config{Domains: map[string]*envoyrls.Node{}}
	svc.SetConfig(other)
	if svc.Config() != other {
		t.Fatal("Config does not follow SetConfig")
	}
}
