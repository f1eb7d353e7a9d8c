package redisstore

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/storetest"
)

// The store calls its code as a function library where Redis has one
// (FCALL), loads it again when it is gone (a flushed or restarted Redis),
// and falls back to scripts (EVALSHA) where Redis has no FUNCTION: both
// forms pass the conformance suite.
func TestFunctionsAndScripts(t *testing.T) {
	srv := redistest.New(t)
	open := func(t *testing.T, c sluice.Clock, scriptsOnly bool) *Store {
		s, err := Open("redis://"+srv.Addr, WithScriptClock(c), WithPrefix(strings.ReplaceAll(t.Name(), "/", "-")+":"))
		if err != nil {
			t.Fatal(err)
		}
		s.scripts.noFuncs.Store(scriptsOnly)
		t.Cleanup(func() { s.Close() })
		return s
	}
	t.Run("functions", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, c sluice.Clock) store.Store { return open(t, c, false) })
	})
	t.Run("scripts", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, c sluice.Clock) store.Store { return open(t, c, true) })
	})
	t.Run("reloaded after a flush", func(t *testing.T) {
		s := open(t, sluice.SystemClock{}, false)
		ctx := context.Background()
		sp, _ := store.NewBucketSpec(bucket.PerSecond(10))
		take := func() {
			if _, err := s.Take(ctx, []store.Item{{Key: "k", Spec: sp, Cost: 1}}); err != nil {
				t.Fatal(err)
			}
			if err := s.Adjust(ctx, []store.Adjustment{{Key: "k", Spec: sp, Delta: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		take()
		list := func() string {
			v, err := s.c.Do(ctx, s.c.B().FunctionList().Build()).ToAny()
			if err != nil {
				t.Fatal(err)
			}
			return strings.Join(strings.Fields(strings.ReplaceAll(strings.ReplaceAll(toString(v), "[", " "), "]", " ")), " ")
		}
		if !strings.Contains(list(), takeFn) {
			t.Fatalf("the library is not loaded: %s", list())
		}
		if err := s.c.Do(ctx, s.c.B().FunctionFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		take() // Function not found: loaded again, called again
		if !strings.Contains(list(), takeFn) || s.scripts.noFuncs.Load() {
			t.Fatalf("not reloaded (scripts only: %v): %s", s.scripts.noFuncs.Load(), list())
		}
	})
}

func toString(v any) string {
	switch x := v.(type) {
	case []any:
		var parts []string
		for _, e := range x {
			parts = append(parts, toString(e))
		}
		return "[" + strings.Join(parts, " ") + "]"
	case map[string]any:
		var parts []string
		for k, e := range x {
			parts = append(parts, k, toString(e))
		}
		return "[" + strings.Join(parts, " ") + "]"
	case string:
		return x
	}
	return ""
}
