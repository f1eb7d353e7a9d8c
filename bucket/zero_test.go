package bucket_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bucket"
)

// A zero Bucket never panics: every method with an error says it was not
// made with New, the others return zero values.
func TestZeroBucket(t *testing.T) {
	var b bucket.Bucket
	const want = "sluice: bucket: not made with bucket.New"
	check := func(name string, err error) {
		t.Helper()
		if err == nil || err.Error() != want || !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%s: %v, want %q matching sluice.ErrInvalidLimit", name, err, want)
		}
	}
	now := time.Now()
	for _, cost := range []int64{-1, 0, 1} {
		d, err := b.Allow(cost)
		check("Allow", err)
		if d != (sluice.Decision{}) {
			t.Errorf("Allow: %+v", d)
		}
		_, err = b.AllowAt(now, cost)
		check("AllowAt", err)
		d, rc, err := b.Take(cost)
		check("Take", err)
		if d != (sluice.Decision{}) || b.Undo(rc) {
			t.Errorf("Take: %+v, and Undo gave something back", d)
		}
		r, err := b.Reserve(cost, time.Hour)
		check("Reserve", err)
		if r != nil {
			t.Errorf("Reserve: %v", r)
		}
		_, err = b.ReserveAt(now, cost, 0)
		check("ReserveAt", err)
		check("Wait", b.Wait(context.Background(), cost))
	}
	check("SetLimit", b.SetLimit(bucket.Limit{Capacity: 1, Rate: 1}))
	check("SetLimitAt", b.SetLimitAt(now, bucket.Limit{Capacity: 1, Rate: 1}))
	check("SetLimit of an invalid limit", b.SetLimit(bucket.Limit{}))
	if got := b.Tokens(); got != 0 {
		t.Errorf("Tokens: %v", got)
	}
	if got := b.TokensAt(now); got != 0 {
		t.Errorf("TokensAt: %v", got)
	}
	if got := b.Limit(); got != (bucket.Limit{}) {
		t.Errorf("Limit: %+v", got)
	}
	// A receipt of another bucket, given to a zero one.
	made, err := bucket.New(bucket.Limit{Capacity: 2, Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, rc, err := made.Take(1)
	if err != nil || b.Undo(rc) {
		t.Errorf("Undo of another bucket's receipt: %v", err)
	}
	// Still nothing: the failed SetLimit did not make the bucket usable.
	_, err = b.Allow(1)
	check("Allow after SetLimit", err)
}

// The zero-value check keeps Allow free of allocations, errors included.
func TestZeroBucketAllowDoesNotAllocate(t *testing.T) {
	var b bucket.Bucket
	if n := testing.AllocsPerRun(100, func() { b.Allow(1) }); n != 0 {
		t.Errorf("zero Bucket: %v allocations", n)
	}
	nb, _ := bucket.New(bucket.Limit{Capacity: 1e9, Rate: 1e9})
	if n := testing.AllocsPerRun(100, func() { nb.Allow(1) }); n != 0 {
		t.Errorf("Allow: %v allocations", n)
	}
}
