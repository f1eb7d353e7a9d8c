package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
)

func TestMemoryOnce(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	o := store.NewMemoryOnce(func() time.Time { return now })
	ctx := context.Background()
	if ok, _ := o.Claim(ctx, "k", time.Minute); !ok {
		t.Fatal("the first claim loses")
	}
	if ok, _ := o.Claim(ctx, "k", time.Minute); ok {
		t.Fatal("a second claim wins")
	}
	now = now.Add(time.Minute)
	if ok, _ := o.Claim(ctx, "k", time.Minute); !ok {
		t.Fatal("a claim after the ttl loses")
	}
	o.Max = 4
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		o.Claim(ctx, k, time.Hour)
	}
	if ok, _ := o.Claim(ctx, "e", time.Hour); ok {
		t.Fatal("the newest claim was swept")
	}
}
