// Tests of the book wrapper across a frozen Redis: the claim that finds it
// frozen opens the circuit within one timeout, and ids claimed in process
// during the outage are answered there after it.
package failover_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/failover"
)

func TestBookOutageClaimsKeptAfterRecovery(t *testing.T) {
	r := newRig(t, failover.Local, 1)
	b := rigBook(t, r)
	ctx := context.Background()
	if _, owner, err := b.Begin(ctx, "before", "fp"); !owner || err != nil {
		t.Fatalf("claim with Redis up: owner %v, %v", owner, err)
	}
	b.Finish(ctx, "before", "fp", []byte("shared answer"))
	r.srv.Pause()
	defer r.srv.Resume()
	// The first call to find Redis frozen is a claim: it waits one
	// timeout (not two), opens the circuit and claims in process.
	start := time.Now()
	_, owner, err := b.Begin(ctx, "F1", "fp")
	d := time.Since(start)
	if !owner || err != nil {
		t.Fatalf("the claim that finds Redis frozen: owner %v, %v (want claimed in process)", owner, err)
	}
	if d > timeout+50*time.Millisecond {
		t.Fatalf("the claim that finds Redis frozen took %v (timeout %v)", d, timeout)
	}
	if !r.fs.Degraded() {
		t.Fatal("a claim that neither Redis nor a ping answered did not open the circuit")
	}
	id, err := b.AddRecord(ctx, book.Record{Receipt: []byte("booking")})
	if err != nil || !strings.HasPrefix(id, "local~") {
		t.Fatalf("record while degraded: %q %v", id, err)
	}
	b.Finish(ctx, "F1", "fp", []byte("r:"+id))
	// A second id claimed while degraded, its answer forgotten (an error).
	if _, owner, err := b.Begin(ctx, "F2", "fp"); !owner || err != nil {
		t.Fatalf("claim while degraded: owner %v, %v", owner, err)
	}
	b.Finish(ctx, "F2", "fp", nil)
	r.srv.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for r.fs.Degraded() {
		if time.Now().After(deadline) {
			t.Fatal("no recovery after SIGCONT")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Back on Redis: F1 is answered from the in-process book, its record
	// taken there.
	ans, owner, err := b.Begin(ctx, "F1", "fp")
	if owner || err != nil || string(ans) != "r:"+id {
		t.Fatalf("F1 after recovery: %q, owner %v, %v (want the answer kept in process)", ans, owner, err)
	}
	if rc, err := b.TakeReceipt(ctx, id, nil); err != nil || string(rc) != "booking" {
		t.Fatalf("the record made while degraded, after recovery: %q %v", rc, err)
	}
	if _, owner, err := b.Begin(ctx, "F1", "other"); owner || err == nil {
		t.Fatalf("F1 with another fingerprint after recovery: owner %v, %v (want a mismatch)", owner, err)
	}
	// F2 was forgotten: claimed anew, on Redis (its claim is seen there).
	if _, owner, err := b.Begin(ctx, "F2", "fp"); !owner || err != nil {
		t.Fatalf("F2 after recovery: owner %v, %v", owner, err)
	}
	if ans, owner, err := b.Begin(ctx, "before", "fp"); owner || err != nil || string(ans) != "shared answer" {
		t.Fatalf("an id claimed on Redis before the outage: owner %v, %v", owner, err)
	}
	b.Finish(ctx, "F2", "fp", []byte("f2"))
	if ans, _, err := b.Begin(ctx, "F2", "fp"); err != nil || string(ans) != "f2" {
		t.Fatalf("F2's answer after recovery: %q %v", ans, err)
	}
}
