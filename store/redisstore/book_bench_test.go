// What a receipt record costs Redis: AddRecord's Redis CPU and commands per call, alone and from 64 callers.

package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/redisstore"
)

// redisUsage reads Redis's CPU seconds (user + sys) and its commands so
// far (INFO commandstats, INFO's own left out).
func redisUsage(b *testing.B, c rueidis.Client) (cpu float64, cmds int64) {
	b.Helper()
	for _, section := range []string{"cpu", "commandstats"} {
		txt, err := c.Do(context.Background(), c.B().Info().Section(section).Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.SplitSeq(txt, "\n") {
			line = strings.TrimSpace(line)
			name, v, ok := strings.Cut(line, ":")
			switch {
			case !ok:
			case name == "used_cpu_user" || name == "used_cpu_sys":
				f, _ := strconv.ParseFloat(v, 64)
				cpu += f
			case strings.HasPrefix(name, "cmdstat_") && name != "cmdstat_info":
				calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
				n, _ := strconv.ParseInt(calls, 10, 64)
				cmds += n
			}
		}
	}
	return cpu, cmds
}

// An HTTP admission's record: a receipt of about the compact form's size,
// no slots. Reports Redis's CPU (µs) and commands per AddRecord.
func BenchmarkAddRecord(b *testing.B) {
	rc := make([]byte, 48)
	for i := range rc {
		rc[i] = byte(i * 7)
	}
	for _, par := range []int{1, 64} {
		b.Run("callers="+strconv.Itoa(par), func(b *testing.B) {
			s := open(b)
			bk := redisstore.NewBook(s, book.Config{})
			ctx := context.Background()
			if _, err := bk.AddRecord(ctx, book.Record{Receipt: rc}); err != nil { // (the scripts loaded)
				b.Fatal(err)
			}
			cpu0, cmd0 := redisUsage(b, s.Client())
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			b.ResetTimer()
			for range par {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						if _, err := bk.AddRecord(ctx, book.Record{Receipt: rc}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			cpu1, cmd1 := redisUsage(b, s.Client())
			b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "redis-µs/op")
			b.ReportMetric(float64(cmd1-cmd0-1)/float64(b.N), "redis-cmds/op") // (less the first INFO's other section)
		})
	}
}
