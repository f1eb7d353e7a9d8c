package bucket_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
)

// CompileSmall keeps every Envoy unit with any requests_per_unit up to 1e9
// (capacity = requests_per_unit, refilled per unit), and every rate up to
// 1e9/s written as N per second, within plain doubles: capacity below 2^52
// units, a clock tick below 2^26 ns, whole units per tick.
func TestCompileSmallFitsDoubles(t *testing.T) {
	t.Parallel()
	units := []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}
	rpus := []int64{1, 3, 7, 100, 999, 1000, 12345, 99_999, 1_000_003, 16_777_213, 123_456_789, 999_999_937, 1_000_000_000}
	for _, u := range units {
		for _, n := range rpus {
			l := bucket.Limit{Capacity: n, Rate: float64(n) / u.Seconds()}
			p, err := bucket.CompileSmall(l)
			if err != nil {
				t.Fatal(err)
			}
			num, den, exact := p.Ratio()
			if !exact || p.CapacityUnits() >= 1<<52 || den >= 1<<26 || num/den >= 1<<52 {
				t.Errorf("%d per %v: capacity %d units, %d/%d units per ns (exact %v): not within doubles", n, u, p.CapacityUnits(), num, den, exact)
			}
			// The same rate and capacity as Compile: 1 token = Unit units,
			// Num/Den units per ns = n tokens per u.
			c, _ := bucket.Compile(l)
			cn, cd, _ := c.Ratio()
			if lhs, rhs := float64(num)/float64(den)/float64(p.Unit()), float64(cn)/float64(cd)/float64(c.Unit()); lhs/rhs > 1+1e-12 || rhs/lhs > 1+1e-12 {
				t.Errorf("%d per %v: CompileSmall's rate %g tokens/ns, Compile's %g", n, u, lhs, rhs)
			}
		}
	}
}
