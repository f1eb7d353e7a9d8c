package main

import (
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
	} {
		code, out, errOut := runCmd(t, "", append([]string{"simulate"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, "sluice: simulate: "+tc.want) {
			t.Errorf("%v: %d %q %q", tc.args, code, out, errOut)
		}
	}
}
