// Overrides' announcements: every Put and Delete publishes on the store's
// channel, and Watch subscribes to it, so that instances read a change as
// soon as it is made instead of at their next poll.

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/overrides"
)

// Backoff between Watch's subscription attempts: from the first to the
// last, doubling, each with up to a quarter more at random.
const (
	watchBackoffMin = 50 * time.Millisecond
	watchBackoffMax = 5 * time.Second
)

// Channel returns the Pub/Sub channel the store announces its changes on:
// the store's prefix, OverridesTag, ":changed". Each Put and Delete that
// changes something publishes one message on it ("epoch:counter", the
// change's version), from the change's own script: a subscriber hears of
// a change after it is made, never before. Expiries are not announced
// (every instance applies an expiry at its time without being told).
// PUBLISH reaches the subscribers of every node of a Redis Cluster.
func (x *Overrides) Channel() string { return x.channel }

// Watch calls changed after each change announced on Channel (a Put or a
// Delete through any instance), and each time its subscription starts,
// the first time included: messages published while it was not
// subscribed are lost, so changed then stands for them. It runs until ctx
// is done or the store is closed, and returns ctx's error or
// overrides.ErrClosed.
//
// changed and failed are called from Watch's goroutine or rueidis' reader
// and must not block (a non-blocking channel send, say); several
// announcements may come between two reads of the changes, and a caller
// that reads them on each call may read once for all (changed says that
// something changed, not what).
//
// Watch never holds up the store's other calls: it subscribes on a
// connection of the store's client, and a subscription not confirmed
// within the store's timeout (WithTimeout) is dropped. A connection lost
// (Redis restarting, the connection killed) is subscribed again as soon
// as the client reconnects, which changed announces; a subscription that
// fails or ends calls failed, when not nil, with the error (an *Error, op
// "overrides watch", counted in ErrorCounts), and Watch subscribes again
// after a backoff: 50 ms, doubling up to 5 s, back to 50 ms once a
// subscription is confirmed. Announcements are not delivered while no
// connection holds the subscription, so a caller also polls Changes:
// Watch makes a change arrive early, a poll makes it arrive at all.
func (x *Overrides) Watch(ctx context.Context, changed func(), failed func(error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // a closed store ends the subscription
		select {
		case <-x.s.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	backoff := watchBackoffMin
	for {
		if err := x.check(); err != nil {
			return err
		}
		confirmed, err := x.subscribe(ctx, changed)
		if err := x.check(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if confirmed {
			backoff = watchBackoffMin
		}
		if err == nil {
			err = errors.New("subscription ended")
		}
		err = x.s.fail("overrides watch", fmt.Errorf("subscription to %s: %w", x.channel, err))
		if failed != nil {
			failed(err)
		}
		wait := backoff + rand.N(backoff/4+1)
		backoff = min(2*backoff, watchBackoffMax)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// subscribe holds one subscription to the channel until it ends: the
// error of its end, and whether Redis confirmed it.
func (x *Overrides) subscribe(ctx context.Context, changed func()) (confirmed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ok atomic.Bool
	timeout := time.AfterFunc(x.s.cfg.timeout, func() {
		if !ok.Load() {
			cancel()
		}
	})
	defer timeout.Stop()
	hooked := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if s.Kind == "subscribe" && s.Channel == x.channel {
			ok.Store(true)
			changed()
		}
	})
	c := x.s.c
	err = c.Receive(hooked, c.B().Subscribe().Channel(x.channel).Build(), func(rueidis.PubSubMessage) { changed() })
	if errors.Is(err, context.Canceled) && !ok.Load() && ctx.Err() != nil {
		err = fmt.Errorf("not confirmed within %v: %w", x.s.cfg.timeout, context.DeadlineExceeded)
	}
	return ok.Load(), err
}

// (Watch is a store of changes that announces them; the server keeps its
// Set fresh by both.)
var _ interface {
	overrides.Store
	Watch(context.Context, func(), func(error)) error
} = (*Overrides)(nil)
