package limiter_test

// The compact receipt encoding: it decodes to what the JSON one does, and
// settles alike.

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/limiter"
)

// A receipt through MarshalCompact settles exactly as one through
// MarshalBinary (JSON), once, on the limits it was taken from; it is
// about a third of the JSON's size; JSON receipts (written by an earlier
// version, or kept elsewhere) still decode.
func TestCompactReceiptSettlesAsJSON(t *testing.T) {
	ctx := context.Background()
	settleVia := func(marshal func(limiter.Receipt) ([]byte, error)) (peek limiter.Result, size int) {
		l, _ := newLimiter(t)
		r := check(t, l, limiter.Request{Descriptors: map[string]string{"user": "llm", "tenant": "x"}, Cost: 3, Receipt: true})
		if !r.Allowed || r.Receipt.Empty() {
			t.Fatalf("%+v", r)
		}
		b, err := marshal(r.Receipt)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := l.UnmarshalReceipt(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Settle(ctx, rc, 1); err != nil { // used 1: 2 come back
			t.Fatal(err)
		}
		if err := l.Settle(ctx, rc, 1); err == nil {
			t.Fatal("settled twice")
		}
		return check(t, l, limiter.Request{Descriptors: map[string]string{"user": "llm", "tenant": "x"}, Peek: true}), len(b)
	}
	pj, nj := settleVia(limiter.Receipt.MarshalBinary)
	pc, nc := settleVia(limiter.Receipt.MarshalCompact)
	if len(pj.Limits) == 0 || len(pj.Limits) != len(pc.Limits) {
		t.Fatalf("statuses: %+v / %+v", pj.Limits, pc.Limits)
	}
	for i := range pj.Limits {
		if pj.Limits[i].Name != pc.Limits[i].Name || pj.Limits[i].TokensRemaining != pc.Limits[i].TokensRemaining {
			t.Errorf("after settling: %s %d via JSON, %s %d via compact", pj.Limits[i].Name, pj.Limits[i].TokensRemaining, pc.Limits[i].Name, pc.Limits[i].TokensRemaining)
		}
	}
	if 2*nc > nj {
		t.Errorf("compact receipt %d B, JSON %d B", nc, nj)
	}
	t.Logf("receipt: %d B compact, %d B JSON", nc, nj)
}

// Every truncation of a compact receipt, and garbage after its version
// byte, is a clear error (never a panic, never a partial receipt).
func TestCompactReceiptMalformed(t *testing.T) {
	l, _ := newLimiter(t)
	r := check(t, l, limiter.Request{Descriptors: map[string]string{"user": "u", "tenant": "x"}, Receipt: true})
	b, _ := r.Receipt.MarshalCompact()
	if rc, err := l.UnmarshalReceipt(b); err != nil || rc.Empty() {
		t.Fatalf("whole: %v", err)
	}
	for n := 2; n < len(b); n++ {
		if _, err := l.UnmarshalReceipt(b[:n]); err == nil || !strings.Contains(err.Error(), "bad receipt") {
			t.Fatalf("truncated to %d of %d bytes: %v", n, len(b), err)
		}
	}
	if _, err := l.UnmarshalReceipt(append(b, 0)); err == nil {
		t.Error("a byte past the entries: no error")
	}
	for _, bad := range [][]byte{{1}, {1, 0xff}, {1, 1, 0x80, 0x80, 0x80}, {1, 1, 200, 1, 'a'}, {1, 1, 9, 2, 'a', 'b'}, {1, 200, 0}} {
		if _, err := l.UnmarshalReceipt(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if rc, err := l.UnmarshalReceipt([]byte{1, 0}); err != nil || !rc.Empty() {
		t.Errorf("no entries: %v", err)
	}
}

// MarshalCompact's buffer is exactly the encoding (a kept receipt holds no
// spare capacity), for names shared with the key or not, costs of every
// size and RefundBefore going up, down or 0.
func TestCompactReceiptExactSize(t *testing.T) {
	l, _ := newLimiter(t)
	for _, req := range []limiter.Request{
		{Descriptors: map[string]string{"user": "u", "tenant": "x"}, Receipt: true},
		{Descriptors: map[string]string{"user": "a-much-longer-user-name-than-the-others", "tenant": "y", "route": "/export"}, Cost: 3, Receipt: true},
	} {
		r := check(t, l, req)
		b, _ := r.Receipt.MarshalCompact()
		if len(b) != cap(b) {
			t.Errorf("%d bytes in a buffer of %d", len(b), cap(b))
		}
		if rc, err := l.UnmarshalReceipt(b); err != nil || rc.Empty() {
			t.Fatal(err)
		}
	}
}
