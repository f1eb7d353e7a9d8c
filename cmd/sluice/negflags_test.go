// Tests that negative numbers and durations reach each flag's own range
// check whether written "--flag -1s" or "--flag=-1s".
package main

import (
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// parseErr runs the command line args (in this process; the args given
// here never get as far as serving) and returns what it wrote on stderr,
// without the "sluice: " prefix and the usage text.
func parseErr(t *testing.T, args []string) string {
	t.Helper()
	var stdout, stderr strings.Builder
	run(args, strings.NewReader(""), &stdout, &stderr)
	msg, _, _ := strings.Cut(stderr.String(), "\n")
	return strings.TrimPrefix(msg, "sluice: ")
}

// Every numeric and duration flag of every command, given a negative
// value after a space, gets the same answer as with "=": never kong's
// "short flag" message.
func TestNegativeFlagValuesInEitherForm(t *testing.T) {
	var c cli
	parser, err := newParser(&c, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	durType := reflect.TypeOf(time.Duration(0))
	n := 0
	for _, cmd := range parser.Model.Children {
		var before []string // what the command needs to get as far as its flags' checks
		switch cmd.Name {
		case "serve":
			before = []string{"--config", "p.yaml"}
		case "check":
			before = []string{"p.yaml"}
		case "simulate":
			before = []string{"--config", "p.yaml", "--trace", "t.jsonl"}
		case "top":
			before = []string{"--url", "http://127.0.0.1:1"}
		}
		for _, f := range cmd.Flags {
			var v string
			switch k := f.Target.Kind(); {
			case f.Target.Type() == durType:
				v = "-1s"
			case k >= reflect.Int && k <= reflect.Int64:
				v = "-5"
			case k >= reflect.Uint && k <= reflect.Uint64, k == reflect.Float32, k == reflect.Float64:
				v = "-0.5"
			default:
				continue
			}
			n++
			args := append([]string{cmd.Name}, before...)
			spaced := parseErr(t, append(args, "--"+f.Name, v))
			joined := parseErr(t, append(args, "--"+f.Name+"="+v))
			if spaced != joined || strings.Contains(spaced, "short flag") {
				t.Errorf("%s --%s %s: %q\n  with =: %q", cmd.Name, f.Name, v, spaced, joined)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d numeric flags found", n)
	}
}

// serve's range messages, for negative values written after a space.
func TestServeNegativeFlagsReachTheRangeMessage(t *testing.T) {
	for arg, want := range map[string]string{
		"--max-wait -1s":       "serve: --max-wait -1s: must be 0 (no waiting) or more",
		"--max-keys -5":        "serve: --max-keys -5: must be at least 1",
		"--top-keys -1":        "serve: --top-keys -1: must be 0 (off) to 10000",
		"--max-waiting -1":     "serve: --max-waiting -1: must be at least 1",
		"--max-body -1":        "serve: --max-body -1: must be at least 1",
		"--idempotency -1s":    "serve: --idempotency -1s: must be positive",
		"--lease-window -1m":   "serve: --lease-window -1m0s: must be positive",
		"--max-receipts -1":    "serve: --max-receipts -1: must be at least 1",
		"--reload -1s":         "serve: --reload -1s: must be 0 (no file watching) or more",
		"--store-pool-size -1": "serve: --store-pool-size -1: must be 0 (rueidis' default) or more",
		"--store-timeout -.5s": "serve: --store-timeout -500ms: must be positive",
		"--lease-ttl -1s":      "serve: --lease-ttl -1s: must be positive",
		"--instances -1":       "serve: --instances -1: must be at least 1",
	} {
		flag, v, _ := strings.Cut(arg, " ")
		for _, args := range [][]string{{flag, v}, {flag + "=" + v}} {
			if got := parseErr(t, append([]string{"serve", "--config", "p.yaml"}, args...)); got != want {
				t.Errorf("%v: %q, want %q", args, got, want)
			}
		}
	}
	// simulate's generator checks its numbers when it runs: reached too.
	for args, want := range map[string]string{
		"--generate pulse --n -5":          "pulse needs --n between 1 and 10000000",
		"--generate steady --rate -0.5":    "steady needs --rate > 0 and --duration > 0 (at most 10000000 requests)",
		"--generate steady --duration -1s": "steady needs --rate > 0 and --duration > 0 (at most 10000000 requests)",
	} {
		if got := parseErr(t, append([]string{"simulate"}, strings.Fields(args)...)); got != want {
			t.Errorf("simulate %s: %q, want %q", args, got, want)
		}
	}
	// Only a value flag's negative value is joined; nothing after "--".
	var c cli
	parser, err := newParser(&c, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	in := []string{"serve", "--max-wait", "5s", "--shadow", "-1", "--max-keys", "-x", "--max-body", "-1", "--", "--max-wait", "-1s"}
	want := []string{"serve", "--max-wait", "5s", "--shadow", "-1", "--max-keys", "-x", "--max-body=-1", "--", "--max-wait", "-1s"}
	if got := joinNegativeValues(parser.Model, in); !slices.Equal(got, want) {
		t.Fatalf("%q\nwant %q", got, want)
	}
}
