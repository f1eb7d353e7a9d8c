// Fair shares' rule (kind_fairshare.go): contention, the increment's
// rounding, the allowance, expiry, max_tenants, and decisions.

package store_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/window"
)

func shareSpec(t *testing.T, l bucket.Limit) *store.Spec {
	t.Helper()
	sp, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: l,
		FairShare: store.FairShare{ActiveWindow: 10 * time.Second, MaxTenants: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if sp.FairShare == nil || sp.FairShare.ActiveWindow != 10*time.Second || sp.FairShare.MaxTenants != 3 {
		t.Fatalf("spec's FairShare %+v", sp.FairShare)
	}
	return sp
}

// taken is the state of a new bucket of sp after taking n at now.
func taken(t *testing.T, sp *store.Spec, n int64, now store.Now) store.State {
	t.Helper()
	st, dec := sp.Step(store.State{}, false, now, n)
	if !dec.Allowed {
		t.Fatalf("take %d refused", n)
	}
	return st
}

func TestFairShareSpec(t *testing.T) {
	if _, err := store.NewSpec(store.Limit{Kind: store.SlidingWindow, Window: window.Limit{Limit: 5, Window: time.Second},
		FairShare: store.FairShare{ActiveWindow: time.Second, MaxTenants: 10}}); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("fair share on a window: %v", err)
	}
	for _, fs := range []store.FairShare{{ActiveWindow: 0, MaxTenants: 5}, {ActiveWindow: -1, MaxTenants: 5}, {ActiveWindow: time.Second}, {ActiveWindow: time.Second, MaxTenants: store.MaxShareTenants + 1}} {
		if _, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.PerSecond(10), FairShare: fs}); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: %v", fs, err)
		}
	}
	sp, err := store.NewSpec(store.Limit{Kind: store.TokenBucket, Bucket: bucket.PerSecond(10)})
	if err != nil || sp.FairShare != nil || sp.FairShare.Tag() != "" {
		t.Fatalf("no fair share: %v %+v", err, sp.FairShare)
	}
	a := shareSpec(t, bucket.PerSecond(10))
	if a.StateTag() != sp.StateTag() {
		t.Errorf("fair share changed the state tag: %q %q", a.StateTag(), sp.StateTag())
	}
	b := *a.FairShare
	b.MaxTenants++
	if a.FairShare.Tag() == b.Tag() || a.FairShare.Tag() == "" {
		t.Errorf("tags %q %q", a.FairShare.Tag(), b.Tag())
	}
	if !store.TokenBucket.Shares() || store.Quota.Shares() || store.Concurrency.Shares() {
		t.Error("Shares")
	}
	if a.Leasable() || !sp.Leasable() {
		t.Error("a fair-share spec must not be leased (its tenant set is the shared store's)")
	}
}

// Contended: fewer than floor(capacity/2) held, in the class's view.
func TestFairShareContended(t *testing.T) {
	now := store.Now{Mono: 1e9, Wall: 1e9}
	for _, c := range []struct {
		capacity, take int64
		ppm            uint32
		want           bool
	}{
		{10, 0, 0, false}, {10, 5, 0, false}, {10, 6, 0, true}, {10, 10, 0, true},
		{11, 6, 0, false}, {11, 7, 0, true}, // odd: floor(11/2) = 5 held is not contended
		{10, 3, 500_000, false}, {10, 4, 500_000, true}, // the view holds 5: 2 held of it is not, 1 is
	} {
		sp := shareSpec(t, bucket.Limit{Capacity: c.capacity, Rate: 10})
		st, exists := store.State{}, false
		if c.take > 0 {
			st, exists = taken(t, sp, c.take, now), true
		}
		if got := sp.Contended(st, exists, now, c.ppm); got != c.want {
			t.Errorf("capacity %d, %d taken, reserve %d: contended %v, want %v", c.capacity, c.take, c.ppm, got, c.want)
		}
	}
	// It refills: 0.1 s later one token is back (held 5 of 10).
	sp := shareSpec(t, bucket.PerSecond(10))
	st := taken(t, sp, 6, now)
	if sp.Contended(st, true, store.Now{Mono: now.Mono + 1e8}, 0) || !sp.Contended(st, true, store.Now{Mono: now.Mono + 1e8 - 1}, 0) {
		t.Error("contention does not end when half the capacity is back")
	}
}

// The increment is the cost's refill time at the holder's part of the
// rate, rounded up to the ns; the half of τ rounds down.
func TestFairShareInc(t *testing.T) {
	for _, c := range []struct {
		l         bucket.Limit
		cost      int64
		sumW      uint64
		w         uint32
		want, tau int64
	}{
		{bucket.PerSecond(10), 1, 1, 1, 1e8, 5e8},
		{bucket.PerSecond(10), 1, 3, 1, 3e8, 5e8},
		{bucket.PerSecond(10), 1, 3, 2, 1.5e8, 5e8},
		{bucket.PerSecond(10), 3, 4, 3, 4e8, 5e8},
		{bucket.PerSecond(10), 1, 3, 0, 3e8, 5e8}, // weight 0 counts 1
		{bucket.PerSecond(10), 2, 1, 3, 2e8, 5e8}, // a sum below w counts w
		{bucket.Limit{Capacity: 3, Rate: 3}, 1, 1, 1, 333_333_334, 500_000_000},
		{bucket.Limit{Capacity: 3, Rate: 3}, 1, 2, 1, 666_666_667, 500_000_000},
		{bucket.Limit{Capacity: 7, Rate: 3}, 2, 3, 2, 1_000_000_000, 1_166_666_666},
		{bucket.Limit{Capacity: 30000, Rate: 500}, 100, 4, 3, 266_666_667, 30_000_000_000},
		{bucket.PerMinute(100), 1, 2, 1, 1_200_000_000, 30_000_000_000},
		{bucket.PerSecond(10), 1, math.MaxUint64, 1, store.MaxShareInc, 5e8}, // saturates
	} {
		sp := shareSpec(t, c.l)
		if got := sp.ShareInc(c.cost, c.sumW, c.w); got != c.want {
			t.Errorf("%v cost %d sum %d w %d: inc %d, want %d", c.l, c.cost, c.sumW, c.w, got, c.want)
		}
		if got := sp.HalfTau(0); got != c.tau {
			t.Errorf("%v: τ/2 %d, want %d", c.l, got, c.tau)
		}
	}
	sp := shareSpec(t, bucket.PerSecond(10))
	if got := sp.HalfTau(200_000); got != 4e8 {
		t.Errorf("τ/2 of a view of 8: %d", got)
	}
	if sp.ShareInc(0, 5, 1) != 0 {
		t.Error("a peek's increment")
	}
}

func TestFairShareHolders(t *testing.T) {
	fs := &store.FairShare{ActiveWindow: 10 * time.Second, MaxTenants: 2}
	if fs.Expired(5e9, 14e9) || !fs.Expired(5e9, 15e9) || !fs.Expired(0, 15e9) {
		t.Error("expiry is last_seen <= now - active_window")
	}
	for _, c := range []struct {
		h       string
		present bool
		n       int
		want    string
	}{
		{"a", false, 0, "a"}, {"a", false, 1, "a"}, {"a", false, 2, ""}, {"a", true, 2, "a"}, {"a", true, 3, "a"},
		{"", false, 2, ""}, {"", false, 5, ""},
	} {
		if got := fs.Holder(c.h, c.present, c.n); got != c.want {
			t.Errorf("Holder(%q, %v, %d) = %q, want %q", c.h, c.present, c.n, got, c.want)
		}
	}
	if store.HolderWeight(5, true) != 1 || store.HolderWeight(5, false) != 5 || store.HolderWeight(0, false) != 1 {
		t.Error("HolderWeight")
	}
	if fs.SetTTL(time.Second) != 10*time.Second || fs.SetTTL(time.Minute) != time.Minute {
		t.Error("SetTTL")
	}
}

// A worked trace: capacity 10 at 10/s, 6 taken (4 held: contended); two
// holders of weight 1: each 1-token take moves the holder's vtat 0.2 s,
// within τ/2 = 0.5 s ahead of now.
func TestFairShareDecide(t *testing.T) {
	sp := shareSpec(t, bucket.PerSecond(10))
	now := store.Now{Mono: 1e9, Wall: 1e9}
	st := taken(t, sp, 6, now)
	vt := int64(0)
	for i, want := range []int64{1.2e9, 1.4e9} {
		o := sp.DecideShare(st, true, now, 1, 0, 0, vt, 1, 2)
		if !o.Contended || !o.Decision.Allowed || o.ShareRefused || o.VTAT != want || o.Wait != 0 {
			t.Fatalf("take %d: %+v", i, o)
		}
		st, vt = o.State, o.VTAT
	}
	o := sp.DecideShare(st, true, now, 1, 0, 0, vt, 1, 2)
	if o.Decision.Allowed || !o.ShareRefused || o.State != st || o.VTAT != vt {
		t.Fatalf("third take: %+v", o)
	}
	if o.Decision.RetryAfter != 1e8 || o.Decision.Remaining != 2 {
		t.Errorf("share refusal %+v: want retry 0.1 s, remaining 2", o.Decision)
	}
	// Booking: within max_wait the share books it, waiting until its
	// virtual time is within the allowance.
	b := sp.DecideShare(st, true, now, 1, 150*time.Millisecond, 0, vt, 1, 2)
	if !b.Decision.Allowed || b.VTAT != 1.6e9 || b.Wait != 1e8 {
		t.Errorf("booking: %+v", b)
	}
	if b := sp.DecideShare(st, true, now, 1, 50*time.Millisecond, 0, vt, 1, 2); b.Decision.Allowed || !b.ShareRefused {
		t.Errorf("booking beyond max_wait: %+v", b)
	}
	// Retrying after RetryAfter admits.
	later := store.Now{Mono: now.Mono + 1e8}
	if o := sp.DecideShare(st, true, later, 1, 0, 0, vt, 1, 2); !o.Decision.Allowed {
		t.Errorf("after RetryAfter: %+v", o)
	}
	// A request larger than the allowance passes once from an idle vtat
	// (the allowance is at least one request's increment).
	if o := sp.DecideShare(st, true, now, 2, 0, 0, 0, 1, 5); !o.Decision.Allowed || o.VTAT != 2e9 {
		t.Errorf("one large request: %+v", o)
	}
	// Uncontended: the bucket alone, vtat kept.
	fresh := taken(t, sp, 1, now)
	if o := sp.DecideShare(fresh, true, now, 1, 0, 0, 9e9, 1, 100); o.Contended || !o.Decision.Allowed || o.VTAT != 9e9 {
		t.Errorf("uncontended: %+v", o)
	}
	// A refusal by the bucket is its own.
	empty := taken(t, sp, 10, now)
	if o := sp.DecideShare(empty, true, now, 1, 0, 0, 0, 1, 1); o.Decision.Allowed || o.ShareRefused || o.Decision.RetryAfter != 1e8 {
		t.Errorf("bucket refusal: %+v", o)
	}
	// A peek reads no share.
	if o := sp.DecideShare(st, true, now, 0, 0, 0, 5e9, 1, 2); !o.Decision.Allowed || o.Contended || o.VTAT != 5e9 {
		t.Errorf("peek: %+v", o)
	}
}

// Over random states, holders and costs: the share admits only what the
// bucket alone admits, and its RetryAfter is exact: waiting exactly that
// long the share part admits the same request (the holder's virtual time
// and the set unchanged), a nanosecond less it does not.
func FuzzDecideShare(f *testing.F) {
	f.Add(int64(10), uint16(10), int64(6), int64(1), int64(0), uint32(1), uint64(2), uint32(0), int64(0))
	f.Add(int64(7), uint16(3), int64(7), int64(2), int64(9e8), uint32(2), uint64(5), uint32(250_000), int64(3e8))
	f.Fuzz(func(t *testing.T, capacity int64, rate uint16, took, cost, vtat int64, w uint32, sumW uint64, ppm uint32, wait int64) {
		if capacity < 1 || capacity > 1e6 || rate == 0 || took < 0 || took > capacity || cost < 1 || cost > capacity || vtat < 0 || vtat > 1e12 || ppm >= store.ReserveScale || wait < 0 || wait > 1e10 {
			return
		}
		sp := shareSpec(t, bucket.Limit{Capacity: capacity, Rate: float64(rate)})
		now := store.Now{Mono: 1e9, Wall: 1e9}
		st, exists := store.State{}, false
		if took > 0 {
			st, exists = taken(t, sp, took, now), true
		}
		at := store.Now{Mono: now.Mono + wait, Wall: now.Wall + wait}
		o := sp.DecideShare(st, exists, at, cost, 0, ppm, vtat, w, sumW)
		_, alone := sp.StepReserved(st, exists, at, cost, ppm)
		if o.Decision.Allowed && !alone.Allowed {
			t.Fatalf("the share admitted what the bucket refuses: %+v", o)
		}
		if o.ShareRefused != (alone.Allowed && !o.Decision.Allowed) {
			t.Fatalf("ShareRefused %v, bucket alone %v, decision %v", o.ShareRefused, alone.Allowed, o.Decision.Allowed)
		}
		if !o.ShareRefused {
			return
		}
		r := int64(o.Decision.RetryAfter)
		if r <= 0 {
			t.Fatalf("a share refusal with RetryAfter %d", r)
		}
		inc := sp.ShareInc(cost, sumW, w)
		allow := max(sp.HalfTau(ppm), inc)
		ahead := func(d int64) int64 { return max(vtat, at.Mono+d) + inc - (at.Mono + d) }
		if ahead(r) > allow || ahead(r-1) <= allow {
			t.Fatalf("RetryAfter %d not exact: ahead %d at it, %d a ns before, allowance %d", r, ahead(r), ahead(r-1), allow)
		}
	})
}
