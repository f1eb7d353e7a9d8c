package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/lease"
	"github.com/sluicehq/sluice/store/redisstore"
)

// Shared limits on Redis: sluice's redisstore (rueidis, auto-pipelined,
// one exact script per decision) and its token leasing, against
// go-redis/redis_rate v10 (go-redis, one script per decision over a
// connection pool), on one redis-server of the benchmark's own, at 1, 16,
// 64 and 256 concurrent callers. Limits never run out, so every decision
// admits; keys are spread over 1,000 (hot: one key).

var (
	redisOnce sync.Once
	redisSrv  *redistest.Server
	redisErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if redisSrv != nil {
		redisSrv.Stop()
	}
	os.Exit(code)
}

func redisAddr(b *testing.B) string {
	redisOnce.Do(func() { redisSrv, redisErr = redistest.Start() })
	if redisErr != nil {
		b.Fatal(redisErr)
	}
	return redisSrv.Addr
}

// runCallers runs b.N decisions from n goroutines and reports
// decisions/s and the p99 latency.
func runCallers(b *testing.B, n int, decide func(i int) error) {
	var next atomic.Int64
	lat := make([][]time.Duration, n)
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := decide(int(i)); err != nil {
					failed.Store(err)
					return
				}
				lat[g] = append(lat[g], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
}

// redisCost runs run and reports what Redis spent per decision: in
// scripts (INFO commandstats, EVAL and EVALSHA) and in all (INFO cpu,
// user + system), so the server's share is measured in the same run.
func redisCost(b *testing.B, addr string, run func()) {
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0 := redisInfo(b, rdb, "cpu", "used_cpu_user:", "used_cpu_sys:")
	run()
	cpu1 := redisInfo(b, rdb, "cpu", "used_cpu_user:", "used_cpu_sys:")
	scripts := 0.0
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					x, _ := strconv.ParseFloat(v, 64)
					scripts += x
				}
			}
		}
	}
	b.ReportMetric(scripts/float64(b.N), "redis-script-µs/op")
	b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "redis-cpu-µs/op")
}

// redisInfo sums the named fields of an INFO section.
func redisInfo(b *testing.B, rdb *goredis.Client, section string, fields ...string) float64 {
	info, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		b.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(info, "\n") {
		for _, f := range fields {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				sum += x
			}
		}
	}
	return sum
}

var benchKeys = func() []string {
	k := make([]string, 1000)
	for i := range k {
		k[i] = fmt.Sprint("bench:", i)
	}
	return k
}()

func BenchmarkRedis(b *testing.B) {
	addr := redisAddr(b)
	sp, err := store.NewBucketSpec(bucket.Limit{Capacity: 1_000_000, Rate: 1e6})
	if err != nil {
		b.Fatal(err)
	}
	for _, callers := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("callers=%d/impl=sluice", callers), func(b *testing.B) {
			s, err := redisstore.Open("redis://"+addr, redisstore.WithPrefix("bs:"), redisstore.WithTimeout(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			redisCost(b, addr, func() {
				runCallers(b, callers, func(i int) error {
					items := []store.Item{{Key: benchKeys[i%len(benchKeys)], Spec: sp, Cost: 1}}
					r, err := s.Take(context.Background(), items)
					if err == nil && !r.Allowed {
						err = fmt.Errorf("refused")
					}
					return err
				})
			})
		})
		b.Run(fmt.Sprintf("callers=%d/impl=redis_rate", callers), func(b *testing.B) {
			rdb := goredis.NewClient(&goredis.Options{Addr: addr})
			defer rdb.Close()
			lim := redis_rate.NewLimiter(rdb)
			limit := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
			redisCost(b, addr, func() {
				runCallers(b, callers, func(i int) error {
					r, err := lim.Allow(context.Background(), benchKeys[i%len(benchKeys)], limit)
					if err == nil && r.Allowed == 0 {
						err = fmt.Errorf("refused")
					}
					return err
				})
			})
		})
	}
}

// One hot key: leasing against a round trip per decision. Reports Redis
// round trips per decision.
func BenchmarkRedisHotKey(b *testing.B) {
	addr := redisAddr(b)
	// Hot, not exhausted: the limit stays above what the load takes.
	sp, err := store.NewBucketSpec(bucket.Limit{Capacity: 1_000_000, Rate: 1e7})
	if err != nil {
		b.Fatal(err)
	}
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d/impl=sluice", callers), func(b *testing.B) {
			s, err := redisstore.Open("redis://"+addr, redisstore.WithPrefix("bh:"), redisstore.WithTimeout(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			runCallers(b, callers, func(i int) error {
				_, err := s.Take(context.Background(), []store.Item{{Key: "hot", Spec: sp, Cost: 1}})
				return err
			})
			b.ReportMetric(1, "trips/decision")
		})
		b.Run(fmt.Sprintf("callers=%d/impl=sluice-lease", callers), func(b *testing.B) {
			rs, err := redisstore.Open("redis://"+addr, redisstore.WithPrefix("bl:"), redisstore.WithTimeout(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			s := lease.New(rs)
			defer s.Close()
			runCallers(b, callers, func(i int) error {
				_, err := s.Take(context.Background(), []store.Item{{Key: "hot", Spec: sp, Cost: 1}})
				return err
			})
			st := s.Stats()
			b.ReportMetric(float64(st.RoundTrips)/float64(st.Decisions), "trips/decision")
			b.ReportMetric(float64(st.Leased), "stranded-tokens")
		})
		b.Run(fmt.Sprintf("callers=%d/impl=redis_rate", callers), func(b *testing.B) {
			rdb := goredis.NewClient(&goredis.Options{Addr: addr})
			defer rdb.Close()
			lim := redis_rate.NewLimiter(rdb)
			limit := redis_rate.Limit{Rate: 10_000_000, Burst: 1_000_000, Period: time.Second}
			runCallers(b, callers, func(i int) error {
				_, err := lim.Allow(context.Background(), "hot", limit)
				return err
			})
			b.ReportMetric(1, "trips/decision")
		})
	}
}

// The client choice: the same trivial script (EVALSHA) from 64 callers
// through rueidis (auto-pipelining: many commands per write) and go-redis
// (a pooled connection per command in flight).
func BenchmarkRedisClient(b *testing.B) {
	addr := redisAddr(b)
	const src = "return 1"
	b.Run("callers=64/impl=rueidis", func(b *testing.B) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		s := rueidis.NewLuaScript(src)
		runCallers(b, 64, func(int) error { return s.Exec(context.Background(), c, nil, nil).Error() })
	})
	b.Run("callers=64/impl=go-redis", func(b *testing.B) {
		rdb := goredis.NewClient(&goredis.Options{Addr: addr})
		defer rdb.Close()
		s := goredis.NewScript(src)
		runCallers(b, 64, func(int) error { return s.Run(context.Background(), rdb, nil).Err() })
	})
}
