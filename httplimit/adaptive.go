// The transport's part in a gate's learning ceiling (gate.Config.Adaptive):
// which answers are overloads, and telling the gate.

package httplimit

import (
	"net/http"
	"time"
)

// StatusOverloaded is the status Anthropic's API answers when it is
// overloaded (529), which net/http has no name for.
const StatusOverloaded = 529

// WithOverloadClassifier replaces the transport's verdict of which answers
// are overloads of the other side (default: IsOverload). Each answer f
// reports true for lowers the gate's adaptive ceiling (gate.Gate.Overloaded,
// at most once per its Cooldown); with a gate without Config.Adaptive it
// does nothing. f must not consume the body.
func WithOverloadClassifier(f func(*http.Response) bool) TransportOption {
	return func(t *transport) { t.overload = f }
}

// IsOverload is the transport's default verdict: a 429, 503 or 529 that
// carries no usable retry hint (RetryHint: no Retry-After, retry-after-ms
// or exhausted RateLimit field to pause on), the answer of a provider or
// tool that is overloaded without saying its limits. An answer with a
// hint pauses the gate instead.
func IsOverload(res *http.Response) bool {
	switch res.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, StatusOverloaded:
	default:
		return false
	}
	_, hinted := RetryHint(res.Header, time.Now(), DefaultMaxRetryAfter)
	return !hinted
}

// feedback tells an adaptive gate of an overload answer.
func (t *transport) feedback(res *http.Response) {
	if res == nil || t.g.Config().Adaptive == nil {
		return
	}
	f := t.overload
	if f == nil {
		f = IsOverload
	}
	if f(res) {
		t.g.Overloaded()
	}
}
