//go:build probe

// This file is a measuring tool, not a test: bench/redis-instructions.sh
// builds it (go test -tags probe) and runs one variant against a
// redis-server under callgrind, to count the instructions Redis spends per
// call and per decision.

package redisstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
)

// PROBE_ADDR=host:port VARIANT=name N=count: run one variant N times.
func TestProbeVariant(t *testing.T) {
	addr := os.Getenv("PROBE_ADDR")
	if addr == "" {
		t.Fatal("PROBE_ADDR is not set: run bench/redis-instructions.sh")
	}
	n, _ := strconv.Atoi(os.Getenv("N"))
	s, err := Open("redis://"+addr, WithTimeout(60e9))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	c := s.Client()
	sp, _ := store.NewBucketSpec(bucket.Limit{Capacity: 1e9, Rate: 1e9})
	args := []string{"", "1", "1", "b"}
	args = append(args, s.paramsOf(sp)...)
	args = append(args, "1", "", "1", "1", "1")
	key := s.Key(store.TokenBucket, "k")
	var f func()
	switch v := os.Getenv("VARIANT"); {
	case v == "none":
		f = func() { c.Do(ctx, c.B().Ping().Build()) }
	case v == "envoy":
		// envoyproxy/ratelimit's Redis work per descriptor (fixed window):
		// INCRBY and EXPIRE, pipelined.
		f = func() {
			c.DoMulti(ctx, c.B().Incrby().Key(key+"e").Increment(1).Build(), c.B().Expire().Key(key+"e").Seconds(60).Build())
		}
	case v == "empty":
		sc := rueidis.NewLuaScript("return 1")
		f = func() { sc.Exec(ctx, c, []string{key}, args) }
	case strings.HasPrefix(v, "upto:"):
		stage := v[5:]
		var pre []string
		for _, l := range strings.Split(takeScript, "\n") {
			if strings.HasPrefix(l, stage) {
				break
			}
			pre = append(pre, l)
		}
		sc := rueidis.NewLuaScript(strings.Join(pre, "\n") + "\nreturn 1")
		f = func() { sc.Exec(ctx, c, []string{key}, args) }
	case v == "getset":
		sc := rueidis.NewLuaScript("local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], 'abcdefghabcdefghabcdefghabcdefghabcdefgh', 'KEEPTTL') return 1")
		f = func() { sc.Exec(ctx, c, []string{key}, args) }
	case v == "time":
		sc := rueidis.NewLuaScript("local t = redis.call('TIME') return 1")
		f = func() { sc.Exec(ctx, c, []string{key}, args) }
	case v == "parse":
		sc := rueidis.NewLuaScript("local x = 0 for i = 1, 8 do x = x + tonumber(string.sub(ARGV[5], 1, 8), 16) end return 1")
		f = func() { sc.Exec(ctx, c, []string{key}, args) }
	case v == "parsedec":
		sc := rueidis.NewLuaScript("local x = 0 for i = 1, 8 do x = x + tonumber(ARGV[10]) end return 1")
		f = func() { sc.Exec(ctx, c, []string{key}, args) }
	case strings.HasPrefix(v, "loop:"):
		// loop:<name>: 1000 runs of one piece of the double path, on a
		// bucket state of spec sp, in one script call.
		body := map[string]string{
			"fbucket": "local F = {k2 = 1, qn = 1, rn = 0, C = 1e9, num = 1, den = 1, M = 2^60}\nfor i = 1, 1000 do fbucket(F, true, 5e8, 100, 12345, 0, 100, 12345 + i * 1000, 1) end",
			"fV":      "for i = 1, 1000 do fV(1, 0, 1, 123456 + i, 0) end",
			"fwait":   "for i = 1, 1000 do fwait(1, 0, 1, 1, 5e8 + i, false, 1000, 0) end",
			"pack":    "for i = 1, 1000 do local s = struct.pack('<Bddddd', 66, 5e8, 100, 12345, 0, 1e12) end",
			"unpack":  "local s = struct.pack('<Bddddd', 66, 5e8, 100, 12345, 0, 1e12)\nfor i = 1, 1000 do local c, a, b, d, e, f = struct.unpack('<Bddddd', s) end",
			"format":  "for i = 1, 1000 do local s = string.format('%d', 1234567 + i) end",
			"nothing": "for i = 1, 1000 do end",
		}[v[5:]]
		sc := rueidis.NewLuaScript(fastLua + body + "\nreturn 1")
		f = func() {
			if err := sc.Exec(ctx, c, []string{key}, args).Error(); err != nil {
				t.Fatal(err)
			}
		}
	case v == "take1":
		items := []store.Item{{Key: "k", Spec: sp, Cost: 1}}
		f = func() { s.Take(ctx, items) }
	case v == "clock1" || v == "clock8":
		// take1 and batch8 on a script clock that moves 1 ms a call: the
		// same work at every call, whatever the machine's timing
		clock := sluice.NewManualClock(time.Unix(1_800_000_000, 0))
		cs, err := Open("redis://"+addr, WithTimeout(60e9), WithScriptClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		m := 1
		if v == "clock8" {
			m = 8
		}
		batch := make([]*call, m)
		for i := range batch {
			batch[i] = &call{items: []store.Item{{Key: fmt.Sprint("c", i), Spec: sp, Cost: 1}}, done: make(chan struct{}, 1)}
		}
		f = func() {
			clock.Advance(time.Millisecond)
			cs.run(ctx, batch)
			for _, b := range batch {
				select {
				case <-b.done:
				default:
				}
			}
		}
	case strings.HasPrefix(v, "batch"):
		m, _ := strconv.Atoi(v[5:])
		batch := make([]*call, m)
		for i := range batch {
			batch[i] = &call{items: []store.Item{{Key: fmt.Sprint("k", i), Spec: sp, Cost: 1}}, done: make(chan struct{}, 1)}
		}
		f = func() {
			s.run(ctx, batch)
			for _, b := range batch {
				select {
				case <-b.done:
				default:
				}
			}
		}
	default:
		t.Fatalf("unknown variant %q", v)
	}
	for range n {
		f()
	}
}
