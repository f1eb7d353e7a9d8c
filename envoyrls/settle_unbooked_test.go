// envoy_settle with a book that cannot claim ids (a store refusing
// writes): calls are decided as without envoy_settle, not UNAVAILABLE.

package envoyrls_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/store/book"
)

// refusingBook is a book whose claims fail (Redis at maxmemory answering
// OOM to the claim's SET).
type refusingBook struct{ book.Book }

var errRefused = errors.New("OOM command not allowed when used memory > 'maxmemory'")

func (refusingBook) Begin(context.Context, string, string) ([]byte, bool, error) {
	return nil, false, errRefused
}

func TestEnvoySettleUnbooked(t *testing.T) {
	bk := refusingBook{book.NewMemory(book.Config{}, nil)}
	t.Run("policy", func(t *testing.T) {
		c, _ := settleClient(t, settlePolicy, bk)
		// The request path books nothing (hits_addend 0: a peek), the
		// stream-done call charges its usage.
		if r, err := aiCall(c, "u1", "a", 0); err != nil || r.OverallCode != ok {
			t.Fatalf("request path with a book refusing: %v %v", r, err)
		}
		if got := remainingOf(t, c, "u1"); got != 5000 {
			t.Fatalf("%d left after the request path, want 5000 (nothing booked)", got)
		}
		if r, err := aiCall(c, "u1", "a", 700); err != nil || r.OverallCode != ok {
			t.Fatalf("stream-done with a book refusing: %v %v", r, err)
		}
		if got := remainingOf(t, c, "u1"); got != 4300 {
			t.Fatalf("%d left after the stream-done call, want 4300", got)
		}
	})
	t.Run("envoy config", func(t *testing.T) {
		c := envoySettleClient(t, settleEnvoyConfig, bk)
		if r, err := aiCall(c, "u1", "a", 0); err != nil || r.OverallCode != ok {
			t.Fatalf("request path with a book refusing: %v %v", r, err)
		}
		if got := envoyLeft(t, c, "u1"); got != 5000 {
			t.Fatalf("%d left after the request path, want 5000 (nothing booked)", got)
		}
		if r, err := aiCall(c, "u1", "a", 700); err != nil || r.OverallCode != ok {
			t.Fatalf("stream-done with a book refusing: %v %v", r, err)
		}
		if got := envoyLeft(t, c, "u1"); got != 4300 {
			t.Fatalf("%d left after the stream-done call, want 4300", got)
		}
	})
}
