package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDemoShowsVectors(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(nil, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{
		"request 4              allowed=false remaining=0 retry_after=500ms",
		"request 6              allowed=true",
		"cost 20                allowed=false remaining=12 retry_after=4s",
		"cost 101: sluice: cost 101 exceeds capacity 100",
		"fixed window admits 20, sliding window admits 10",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"nope"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown command "nope"`) {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if code := run([]string{"version"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "sluice dev") {
		t.Fatalf("version: %d %q", code, out.String())
	}
}
