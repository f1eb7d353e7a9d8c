package policy_test

// new_key_gate: a valid gate parses; each mistake is one clear error at the
// field, and changes nothing else.

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

const gateLimits = `limits:
  - name: tenant
    key: "tenant:{tenant}"
    capacity: 100
    refill_per_second: 10
  - name: ip
    key: "ip:{client_ip}"
    capacity: 100
    refill_per_second: 10
  - name: export
    key: "export:{tenant}"
    when: {route: /export}
    capacity: 5
    refill_per_second: 1
  - name: dry
    key: "dry:{tenant}"
    capacity: 5
    refill_per_second: 1
    shadow: true
`

func TestNewKeyGate(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse([]byte(gateLimits + `  - name: user_daily
    key: "user:{tenant}:{user}"
    algorithm: sliding_window
    limit: 10000
    window: 24h
    new_key_gate: tenant
  - name: user_export
    key: "user:{user}"
    when: {route: /export, tenant: acme}
    capacity: 5
    refill_per_second: 1
    new_key_gate: export
`))
	if err != nil {
		t.Fatal(err)
	}
	if g := p.Limit("user_daily").NewKeyGate; g != "tenant" {
		t.Fatalf("new_key_gate %q", g)
	}
	if g := p.Limit("tenant").NewKeyGate; g != "" {
		t.Fatalf("no gate: %q", g)
	}
	for _, tc := range []struct{ name, limit, want string }{
		{"unknown", "    key: \"user:{tenant}:{user}\"\n    new_key_gate: tennant\n",
			`line 22, column 19: limit "u": field "new_key_gate": no limit named "tennant" in this policy (did you mean tenant?)`},
		{"itself", "    key: \"user:{tenant}:{user}\"\n    new_key_gate: u\n",
			`field "new_key_gate": a limit cannot be its own new_key_gate`},
		{"shadow", "    key: \"user:{tenant}:{user}\"\n    new_key_gate: dry\n",
			`field "new_key_gate": limit "dry" (line 15) is a shadow limit: it never refuses, so it cannot hold back new keys`},
		{"descriptor missing", "    key: \"user:{user}\"\n    new_key_gate: ip\n",
			`field "new_key_gate": limit "ip" (line 6) needs descriptor "client_ip" (key "ip:{client_ip}"), which this limit's key "user:{user}" does not: a request without it would create this limit's keys ungated`},
		{"when missing", "    key: \"user:{tenant}:{user}\"\n    new_key_gate: export\n",
			`field "new_key_gate": limit "export" (line 10) applies only when route is "/export", which this limit does not require`},
		{"not a name", "    key: \"user:{tenant}:{user}\"\n    new_key_gate: [tenant]\n",
			`field "new_key_gate": must name another limit of this policy`},
		{"empty", "    key: \"user:{tenant}:{user}\"\n    new_key_gate: \"\"\n",
			`field "new_key_gate": must name another limit of this policy`},
	} {
		src := gateLimits + "  - name: u\n" + tc.limit + "    capacity: 5\n    refill_per_second: 1\n"
		_, err := policy.Parse([]byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "new_key_gate") != strings.Count(tc.want, "new_key_gate") {
			t.Errorf("%s: got %v\nwant %s", tc.name, err, tc.want)
		}
	}
	cycle := `limits:
  - name: a
    key: "a:{tenant}"
    capacity: 5
    refill_per_second: 1
    new_key_gate: b
  - name: b
    key: "b:{tenant}"
    capacity: 5
    refill_per_second: 1
    new_key_gate: a
`
	_, err = policy.Parse([]byte(cycle))
	if err == nil || err.Error() != `policy: line 6, column 19: limit "a": field "new_key_gate": new_key_gate limits form a cycle: a → b → a` {
		t.Errorf("cycle: %v", err)
	}
}
