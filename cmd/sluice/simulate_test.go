package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --generate's help and errors list only the kinds there are: no "".
func TestSimulateGenerateKinds(t *testing.T) {
	code, out, errOut := runCmd(t, "", "simulate", "--help")
	out = strings.Join(strings.Fields(out), " ") // help is wrapped
	if code != 0 || !strings.Contains(out, "--generate=KIND") || !strings.Contains(out, "KIND is pulse, steady or burst") || strings.Contains(out, `--generate=""`) {
		t.Errorf("help: %d %q %q", code, out, errOut)
	}
	code, out, errOut = runCmd(t, "", "simulate", "--generate", "wave")
	if code != 2 || out != "" || errOut != "sluice: simulate: --generate \"wave\": want pulse, steady or burst\n" {
		t.Errorf("wave: %d %q %q", code, out, errOut)
	}
}

// simulate's flag errors are usage errors (exit 2), found before anything
// is read or written.
func TestSimulateFlagErrorsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "needs --config and --trace (or --generate)"},
		{[]string{"--config", "p.yaml"}, "needs --config and --trace (or --generate)"},
		{[]string{"--config", "p.yaml", "--trace", "t.jsonl", "--compare", "token_bucket,leaky"}, `--compare: unknown algorithm "leaky" (want token_bucket, sliding_window or fixed_window)`},
		{[]string{"--config", "p.yaml", "--trace", "t.jsonl", "--compare", "token_bucket,"}, `--compare: unknown algorithm ""`},
		{[]string{"--config", "p.yaml", "--trace", "t.jsonl", "--plot", "p.jpg"}, `--plot "p.jpg": the file must end in .png or .svg`},
		{[]string{"--generate", "pulse", "--max-wait=-1s"}, "--max-wait -1s: must be 0 (no waiting) or more"},
		{[]string{"--config", "p.yaml", "--trace", "t.jsonl", "--start", "2026-03-28"}, `--start "2026-03-28": want an RFC 3339 time`},
		{[]string{"--config", "p.yaml", "--trace", "t.jsonl", "--start", "2300-01-01T00:00:00Z"}, `--start "2300-01-01T00:00:00Z": outside the times the simulator represents (1678-01-01 to 2162-01-01)`},
		{[]string{"--config", "p.yaml", "--trace", "t.jsonl", "--start", "0001-01-01T00:00:00Z"}, `--start "0001-01-01T00:00:00Z": outside the times`},
	} {
		code, out, errOut := runCmd(t, "", append([]string{"simulate"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, "sluice: simulate: "+tc.want) {
			t.Errorf("%v: %d %q %q", tc.args, code, out, errOut)
		}
	}
}

// --start places a quota's day on the calendar: a day of Europe/Berlin
// that ends 12 hours after 2026-03-28T12:00+01:00, and the next one, the
// 23-hour day of the change to summer time. t stays relative.
func TestSimulateStartPlacesQuotas(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte("limits:\n  - {name: daily, key: \"u:{u}\", algorithm: quota, limit: 2, period: day, timezone: Europe/Berlin}\n"), 0o644)
	trace := `{"t": 0, "descriptors": {"u": "a"}}
{"t": 1, "descriptors": {"u": "a"}}
{"t": 2, "descriptors": {"u": "a"}}
{"t": 43199.5, "descriptors": {"u": "a"}}
{"t": 43200, "descriptors": {"u": "a"}}
`
	type outcome struct {
		T            float64 `json:"t"`
		Allowed      bool    `json:"allowed"`
		RetryAfterMS int64   `json:"retry_after_ms"`
		Limits       []struct {
			ResetAfterMS int64 `json:"reset_after_ms"`
		} `json:"limits"`
	}
	for _, tc := range []struct {
		start string
		want  []outcome
	}{
		{"2026-03-28T12:00:00+01:00", []outcome{{T: 0, Allowed: true}, {T: 1, Allowed: true}, {T: 2, RetryAfterMS: 43198000},
			{T: 43199.5, RetryAfterMS: 500}, {T: 43200, Allowed: true}}},
		// default: the Unix epoch, a UTC midnight; Berlin's is at 23:00 UTC
		{"", []outcome{{T: 0, Allowed: true}, {T: 1, Allowed: true}, {T: 2, RetryAfterMS: 82798000}, {T: 43199.5, RetryAfterMS: 39600500}, {T: 43200, RetryAfterMS: 39600000}}},
	} {
		args := []string{"simulate", "--config", pol, "--trace", "-"}
		if tc.start != "" {
			args = append(args, "--start", tc.start)
		}
		code, out, errOut := runCmd(t, trace, args...)
		if code != 0 {
			t.Fatalf("%s: %d %s", tc.start, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(tc.want) {
			t.Fatalf("%s: %d outcomes: %s", tc.start, len(lines), out)
		}
		for i, line := range lines {
			var o outcome
			if err := json.Unmarshal([]byte(line), &o); err != nil {
				t.Fatal(err)
			}
			w := tc.want[i]
			if o.T != w.T || o.Allowed != w.Allowed || o.RetryAfterMS != w.RetryAfterMS {
				t.Errorf("%s: outcome %d: %s, want t=%v allowed=%v retry_after_ms=%d", tc.start, i, line, w.T, w.Allowed, w.RetryAfterMS)
			}
		}
		if tc.start != "" {
			var o outcome
			json.Unmarshal([]byte(lines[4]), &o)
			if o.Limits[0].ResetAfterMS != 23*3600*1000 {
				t.Errorf("the day of the change lasts 23 hours: %s", lines[4])
			}
		}
	}
}
