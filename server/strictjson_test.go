// Tests of the strict JSON names: duplicate keys and field names in
// another case are 400 bad_json in every endpoint that reads JSON.
package server_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/server"
)

func TestDuplicateAndMiscasedFieldsRefused(t *testing.T) {
	ts := newServer(t, nil)
	cases := []struct{ path, body, want string }{
		{"/v1/check", `{"descriptors": {"tenant": "a"}, "COST": 3}`, `unknown field "COST" (field names are case-sensitive: did you mean "cost"?)`},
		{"/v1/check", `{"Descriptors": {"tenant": "a"}}`, `unknown field "Descriptors" (field names are case-sensitive: did you mean "descriptors"?)`},
		{"/v1/check", `{"descriptors": {"tenant": "a"}, "cost": 0, "cost": 3}`, `field "cost" is given twice`},
		{"/v1/check", `{"descriptors": {"tenant": "a", "tenant": "b"}, "cost": 3}`, `field "descriptors": key "tenant" is given twice`},
		{"/v1/check", `{"descriptors": {"tenant": "a"}, "costs": {"tenant_api": 3, "tenant_api": 0}}`, `field "costs": key "tenant_api" is given twice`},
		{"/v1/check", `{"descriptors": {"tenant": "a"}, "cost": 3, "request_id": "r1", "Request_ID": "r2"}`, `unknown field "Request_ID" (field names are case-sensitive: did you mean "request_id"?)`},
		// keys compared as the decoder reads them
		{"/v1/check", `{"descriptors": {"tenant": "a", "tenan\u0074": "b"}, "cost": 3}`, `field "descriptors": key "tenant" is given twice`},
		{"/v1/check", `{"descriptors": {"tenant": "a"}, "co\u0073t": 0, "cost": 3}`, `field "cost" is given twice`},
		{"/v1/check", "{\"descriptors\": {\"tenant\": \"a\", \"\xff\": \"1\", \"\xfe\": \"2\"}, \"cost\": 3}", "field \"descriptors\": key \"\ufffd\" is given twice"},
		// reserve is a check
		{"/v1/check", `{"descriptors": {"tenant": "a"}, "cost": 3, "max_wait_ms": 100, "RESERVE": true}`, `unknown field "RESERVE" (field names are case-sensitive: did you mean "reserve"?)`},
		{"/v1/check", `{"descriptors": {"tenant": "a"}, "cost": 3, "max_wait_ms": 100, "reserve": false, "reserve": true}`, `field "reserve" is given twice`},
		{"/v1/settle", `{"lease": "x", "actual_cost": 1, "actual_cost": 2}`, `field "actual_cost" is given twice`},
		{"/v1/settle", `{"lease": "x", "Actual_Cost": 1}`, `unknown field "Actual_Cost" (field names are case-sensitive: did you mean "actual_cost"?)`},
		{"/v1/settle", `{"lease": "x", "actual_costs": {"tenant_api": 1, "tenant_api": 2}}`, `field "actual_costs": key "tenant_api" is given twice`},
		{"/v1/release", `{"lease": "a", "lease": "b"}`, `field "lease" is given twice`},
		{"/v1/release", `{"lease": "a"}}`, `malformed JSON: more than one value`},
		{"/v1/release", `{"LEASE": "a"}`, `unknown field "LEASE" (field names are case-sensitive: did you mean "lease"?)`},
		{"/v1/pause", `{"descriptors": {"tenant": "a"}, "retry_after_ms": 1000, "RETRY_AFTER_MS": 5000}`, `unknown field "RETRY_AFTER_MS" (field names are case-sensitive: did you mean "retry_after_ms"?)`},
		{"/v1/pause", `{"descriptors": {"tenant": "a"}, "retry_after_ms": 1000, "limits": ["tenant_api"], "limits": ["global"]}`, `field "limits" is given twice`},
		{"/v1/pause", `{"descriptors": {"tenant": "a", "tenant": "b"}, "retry_after_ms": 1000}`, `field "descriptors": key "tenant" is given twice`},
	}
	for _, c := range cases {
		res, m := post(t, ts, c.path, c.body)
		if res.StatusCode != 400 || m["code"] != "bad_json" || m["error"] != c.want {
			t.Errorf("%s %s: %d %v, want 400 bad_json %q", c.path, c.body, res.StatusCode, m, c.want)
		}
	}
	// Nothing was charged or paused: tenant a still has its 3 tokens.
	res, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "a"}, "cost": 3}`)
	if res.StatusCode != 200 {
		t.Fatalf("after the refused bodies: %d %v", res.StatusCode, m)
	}
	// A key in the exact case, once, is still accepted, and descriptor
	// names (map keys) may differ only in case.
	if res, m := post(t, ts, "/v1/check", `{"descriptors": {"tenant": "b", "Tenant": "c"}, "cost": 1}`); res.StatusCode != 200 {
		t.Fatalf("descriptors differing in case: %d %v", res.StatusCode, m)
	}
}

// FuzzDecodeStrict: whatever the body, an accepted one names each field
// of the request exactly, once, and has no key twice in any object.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		`{"descriptors": {"tenant": "a"}, "cost": 3, "costs": {"x": 1}, "max_wait_ms": 5, "reserve": true, "retry": false, "request_id": "x"}`,
		`{"descriptors": {"tenant": "a", "tenant": "b"}}`,
		`{"descriptors": {}, "cost": 1, "COST": 2}`,
		`{"lease": "x", "actual_cost": 1, "actual_costs": {"a": 1}}`,
		`{"descriptors": {"a": "b"}, "retry_after_ms": 1, "limits": ["a", "a"]}`,
		`{"descriptors": {"ſ": "1", "s": "2"}}`,
		`[{"a": 1, "a": 2}]`,
		`{}}`,
		"{\"descriptors\": {\"\xff\": \"a\", \"\xfe\": \"b\"}}",
		`{"descriptors": {"a": "1", "\u0061": "2"}}`,
		`{"co\u0073t": 1, "cost": 2, "descriptors": {}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, v := range []any{&server.CheckRequest{}, &server.SettleRequest{}, &server.PauseRequest{}} {
			if err := server.DecodeStrict(b, v); err != nil {
				// A key refused as given twice is one: the decoded tree
				// has fewer members than the text.
				var tree any
				if strings.Contains(err.Error(), "given twice") && json.Unmarshal(b, &tree) == nil && tokenMembers(t, b) == treeMembers(tree) {
					t.Fatalf("%q refused (%v) with no key given twice", b, err)
				}
				continue
			}
			// Accepted: the members counted token by token are the
			// members of the decoded tree (no key twice), and the top
			// level's keys are the type's JSON names exactly.
			var tree any
			if err := json.Unmarshal(b, &tree); err != nil {
				t.Fatalf("%q accepted but not JSON: %v", b, err)
			}
			if tok, got := tokenMembers(t, b), treeMembers(tree); tok != got {
				t.Fatalf("%q accepted with a key given twice (%d members, %d distinct)", b, tok, got)
			}
			names := map[string]bool{}
			enc, _ := json.Marshal(v) // (these types have no omitempty: every field is encoded)
			var shown map[string]any
			json.Unmarshal(enc, &shown)
			for k := range shown {
				names[k] = true
			}
			top, _ := tree.(map[string]any) // (null is accepted: nothing set)
			for k := range top {
				if !names[k] {
					t.Fatalf("%q accepted with field %q, not one of %v", b, k, names)
				}
			}
		}
	})
}

// tokenMembers counts the members of every object in b, token by token.
func tokenMembers(t *testing.T, b []byte) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct{ obj, wantKey bool }
	var stack []frame
	n := 0
	ended := func() { // a value ended: in an object, a key comes next
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		if len(stack) > 0 && stack[len(stack)-1].wantKey {
			if _, ok := tok.(string); ok {
				n++
				stack[len(stack)-1].wantKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{obj: true, wantKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			ended()
		default:
			ended()
		}
	}
}

// treeMembers counts the members of every object in a decoded value.
func treeMembers(v any) int {
	switch x := v.(type) {
	case map[string]any:
		n := len(x)
		for _, e := range x {
			n += treeMembers(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range x {
			n += treeMembers(e)
		}
		return n
	}
	return 0
}
