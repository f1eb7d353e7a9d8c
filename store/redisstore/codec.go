// The script's arguments (spec parameters, the clock) and its reply's decoding.

package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// kindCodecs is how the script is told of each kind, indexed by Kind (a
// row for each of store.Kinds()): its letter in keys, states and the
// script's arguments, and its spec's parameters (see argsOf). A kind that
// take.lua and adjust.lua do not decide themselves is decided by its entry
// in kinds.lua, KIND[letter].
var kindCodecs = [...]struct {
	letter byte
	// args are the spec's 7 parameter fields and an id naming them (a
	// double-path bucket's; "" for others): its tag is the letter then
	// the id.
	args func(s *Store, sp *store.Spec) (id string, fields []string)
	// perCall: the arguments depend on the time (a quota's hold the
	// periods around the caller's clock), so they are made at each call;
	// the others are cached per spec.
	perCall bool
	// mark is the spec marker of a spec of these parameter fields (see
	// markOf; nil: a kind with no state to convert).
	mark func(fields []string) string
}{
	store.TokenBucket:   {'b', bucketArgs, false, bucketMark},
	store.SlidingWindow: {'s', windowArgs, false, windowMark},
	store.FixedWindow:   {'f', windowArgs, false, windowMark},
	store.Concurrency:   {'c', slotArgs, false, nil},
	store.Quota:         {'q', (*Store).quotaArgs, true, otherMark},
}

// kindLetter is kind k's letter in keys, states and the script's arguments.
func kindLetter(k store.Kind) byte { return kindCodecs[k].letter }

func hex64(v int64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	u := uint64(v)
	for i := 15; i >= 0; i-- {
		b[i] = digits[u&15]
		u >>= 4
	}
	return string(b[:])
}

func parseHex(v rueidis.RedisMessage) (int64, error) {
	str, err := v.ToString()
	if err != nil {
		return 0, err
	}
	u, err := strconv.ParseUint(str, 16, 64)
	return int64(u), err
}

// FitsDoublePath reports whether the script may decide a token bucket of
// spec sp on plain doubles (its parameters are small enough that every
// intermediate can be an exact integer below 2^53; each decision still
// checks its own numbers and falls back to exact limbs when a state is out
// of that range, so both give the same decision). It needs whole units per
// nanosecond (bucket.Params.Ratio's Den below 2^26; Den is 1 for limits of
// the form N per second, minute, hour or day) and a capacity below 2^52
// units; a rate that is no simple fraction usually does not fit. False for
// other kinds.
func FitsDoublePath(sp *store.Spec) bool {
	if sp == nil || sp.Kind != store.TokenBucket {
		return false
	}
	num, den, _ := sp.Bucket.Ratio()
	return den < 1<<26 && sp.Bucket.CapacityUnits() < 1<<52 && num/den < 1<<52
}

// specArgs is how the take script is told of a spec: its kind tag, then
// 8 fields: its kind's 7 parameter fields and its block_for (16 hex digits
// of ns; "" for none: blockFor).
type specArgs struct {
	tag    string
	fields []string
}

// paramsOf returns the script's 7 parameter fields for sp (adjust's: a
// correction leaves a key's block as it is, so adjust needs no
// block_for).
func (s *Store) paramsOf(sp *store.Spec) []string { return s.argsOf(sp).fields[:7] }

// blockFor is sp's block_for as the take script reads it: 16 hex digits of
// ns, or "" when sp has none.
func blockFor(sp *store.Spec) string {
	if sp.BlockFor <= 0 {
		return ""
	}
	return hex64(int64(sp.BlockFor))
}

// argsOf returns the script's arguments for sp (cached, specs being
// immutable, unless its kind's are made per call).
func (s *Store) argsOf(sp *store.Spec) *specArgs {
	c := &kindCodecs[sp.Kind]
	if c.perCall {
		id, p := c.args(s, sp)
		return &specArgs{tag: string(c.letter) + id, fields: append(p, blockFor(sp))}
	}
	if a, ok := s.params.Load(sp); ok {
		return a.(*specArgs)
	}
	id, p := c.args(s, sp)
	a := &specArgs{tag: string(c.letter) + id, fields: append(p, blockFor(sp))}
	s.params.Store(sp, a)
	return a
}

// bucketArgs are a token bucket's: unit, capacity (units), rate num/den
// (units per ns) and MaxElapsed, the limb path's; a bucket whose numbers
// fit doubles exactly (FitsDoublePath) also gets qn and rn (num = qn*den +
// rn), which select the script's double path, and a tag naming its
// parameters (the script parses them once per tag).
func bucketArgs(_ *Store, sp *store.Spec) (string, []string) {
	b := &sp.Bucket
	num, den, _ := b.Ratio()
	qn, rn := "", ""
	if FitsDoublePath(sp) {
		qn, rn = strconv.FormatUint(num/den, 10), strconv.FormatUint(num%den, 10)
	}
	p := []string{hex64(b.Unit()), hex64(b.CapacityUnits()), hex64(int64(num)), hex64(int64(den)), hex64(b.MaxElapsed()), qn, rn}
	if qn == "" {
		return "", p
	}
	sum := sha256.Sum256([]byte(strings.Join(p, ",")))
	return hex.EncodeToString(sum[:8]), p
}

// windowArgs are a window's: its limit and length (ns).
func windowArgs(_ *Store, sp *store.Spec) (string, []string) {
	return "", []string{hex64(sp.Window.Limit), hex64(int64(sp.Window.Window)), "", "", "", "", ""}
}

// slotArgs are a concurrency limit's: max_in_flight and lease_ttl (us),
// decimal.
func slotArgs(_ *Store, sp *store.Spec) (string, []string) {
	return "", []string{strconv.FormatInt(sp.MaxInFlight, 10), strconv.FormatInt(int64(sp.SlotTTL/time.Microsecond), 10), "", "", "", "", ""}
}

// quotaArgs are a quota's 7 parameter fields: its limit, four period
// starts around this host's time (the previous period's, the current's,
// the next's and the one after), and its marker's field (quotaMark), from
// which the script takes the period
// holding the store's clock. The script refuses the call (before deciding
// anything) when the store's clock is outside them: a clock a whole period
// away from this host's.
func (s *Store) quotaArgs(sp *store.Spec) (string, []string) {
	now := time.Now().UnixNano()
	if s.cfg.clock != nil {
		now = s.cfg.clock.Now().UnixNano()
	}
	q := sp.Quota
	b1, b2 := q.Bounds(now)
	b0, _ := q.Bounds(b1 - 1)
	_, b3 := q.Bounds(b2)
	return "", []string{hex64(q.Limit), hex64(b0), hex64(b1), hex64(b2), hex64(b3), quotaMark(sp), ""}
}

func (s *Store) now() string {
	if s.cfg.clock == nil {
		return ""
	}
	return hex64(s.cfg.clock.Now().UnixNano())
}

func (s *Store) expire() string {
	if s.cfg.clock == nil {
		return "1"
	}
	return "0"
}

// small holds the decimal strings of 0..1023 (spec indexes, common costs
// and counts), so that building a batch's arguments allocates less.
var small = func() (s [1024]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func itoa(i int64) string {
	if i >= 0 && i < int64(len(small)) {
		return small[i]
	}
	return strconv.FormatInt(i, 10)
}

// value reads a reply value: an integer, or hex digits for 2^53 and more.
func value(m rueidis.RedisMessage) (int64, error) {
	if m.IsInt64() {
		return m.AsInt64()
	}
	return parseHex(m)
}

// decode writes a take reply's decisions into the calls' items, and
// returns the script's run time when it sent one (it booked, on Redis TIME).
func (s *Store) decode(r rueidis.RedisResult, batch []*call) (took time.Duration, err error) {
	arr, err := r.ToArray()
	if err != nil {
		return 0, err
	}
	if len(arr) < 2 {
		return 0, fmt.Errorf("script returned %d values", len(arr))
	}
	fast, err := arr[0].AsInt64()
	if err != nil {
		return 0, err
	}
	now, err := parseHex(arr[1])
	if err != nil {
		return 0, err
	}
	s.fast.Add(uint64(fast))
	arr = arr[2:]
	booked := false
	for _, c := range batch {
		if len(arr) < 1 {
			return 0, fmt.Errorf("script returned too few values")
		}
		all, err := arr[0].AsInt64()
		if err != nil {
			return 0, err
		}
		arr = arr[1:]
		if all == 3 { // at maxmemory, it would create a key: refused undecided
			c.ok, c.err = false, s.full("take")
			continue
		}
		c.ok = all >= 1
		per := 4
		switch all {
		case 1:
			per = 2 // admitted: remaining and reset
		case 2:
			per, booked = 3, true // admitted, booked: remaining, reset and wait
		}
		if len(arr) < per*len(c.items) {
			return 0, fmt.Errorf("script returned too few values")
		}
		for i := range c.items {
			f := arr[per*i:]
			var v [4]int64 // allowed, remaining, retry, reset
			var wait int64
			if c.ok {
				v[0] = 1
				if v[1], err = value(f[0]); err == nil {
					v[3], err = value(f[1])
				}
				if err == nil && per == 3 {
					wait, err = value(f[2])
				}
			} else {
				for k := range v {
					if v[k], err = value(f[k]); err != nil {
						break
					}
				}
			}
			if err != nil {
				return 0, err
			}
			it := &c.items[i]
			it.Decision = sluice.Decision{Allowed: v[0] == 1, Remaining: v[1], RetryAfter: time.Duration(v[2]), ResetAfter: time.Duration(v[3])}
			it.Wait = time.Duration(wait)
			it.RefundBefore = 0
			if c.ok && it.Cost > 0 {
				it.RefundBefore = store.RefundBefore(it.Spec, now, time.Duration(v[3]))
			}
		}
		s.decided.Add(uint64(len(c.items)))
		arr = arr[per*len(c.items):]
	}
	if len(arr) == 1 && booked {
		// The script's run time: its waits count from its start
		// (countFromAnswer takes it off).
		v, err := value(arr[0])
		if err != nil {
			return 0, err
		}
		took, arr = time.Duration(max(v, 0)), arr[1:]
	}
	if len(arr) != 0 {
		return 0, fmt.Errorf("script returned %d values too many", len(arr))
	}
	return took, nil
}
