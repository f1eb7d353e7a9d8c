package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/window"
)

// Every kind is listed, named, parsed back and compiled; an added kind
// missing from one of the tables fails here.
func TestKinds(t *testing.T) {
	ks := store.Kinds()
	seen := map[store.Kind]bool{}
	for _, k := range ks {
		if seen[k] {
			t.Errorf("%v listed twice", k)
		}
		seen[k] = true
		if k.String() == "unknown" {
			t.Errorf("kind %d has no name", k)
		}
		if p, err := store.ParseKind(k.String()); err != nil || p != k {
			t.Errorf("ParseKind(%q) = %v, %v", k, p, err)
		}
	}
	for k := store.Kind(0); k.String() != "unknown"; k++ {
		if !seen[k] {
			t.Errorf("kind %v (%d) is not in Kinds()", k, k)
		}
	}
	if store.Kind(200).String() != "unknown" {
		t.Error("an unknown kind has a name")
	}
	if _, err := store.ParseKind("leaky"); err == nil {
		t.Error("leaky parsed")
	}
	limits := map[store.Kind]store.Limit{
		store.TokenBucket:   {Kind: store.TokenBucket, Bucket: bucket.PerSecond(5)},
		store.SlidingWindow: {Kind: store.SlidingWindow, Window: window.Limit{Limit: 5, Window: time.Second}},
		store.FixedWindow:   {Kind: store.FixedWindow, Window: window.Limit{Limit: 5, Window: time.Second}},
		store.Concurrency:   {Kind: store.Concurrency, MaxInFlight: 5, LeaseTTL: time.Second},
		store.Quota:         {Kind: store.Quota, Quota: quota.Limit{Limit: 5, Period: quota.Day}},
	}
	for _, k := range ks {
		l, ok := limits[k]
		if !ok {
			t.Errorf("no test limit for %v", k)
			continue
		}
		sp, err := store.NewSpec(l)
		if err != nil || sp.Kind != k || sp.Capacity() != 5 || l.Capacity() != 5 {
			t.Errorf("%v: %+v %v", k, sp, err)
		}
		if _, err := store.NewSpec(store.Limit{Kind: k}); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%v: a zero limit compiled: %v", k, err)
		}
	}
}
