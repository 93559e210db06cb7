package rocketmq

import (
	"sync"
)

// Retry window bounds: retries never have fewer than retryWindowMin sends
// outstanding allowed (so they always make progress) nor more than
// retryWindowMax.
const (
	retryWindowMin   = 2
	retryWindowMax   = 128
	retryWindowStart = 16
)

// retryWindow is the retry budget the publisher's callers share: the
// resend scanner's and the outbox relay's retries (ports.OutboundMessage
// Retry) may have at most limit sends outstanding. Each retry the broker
// answered widens the window by one (it doubles per round trip while the
// broker keeps up), each retry that failed in transport halves it, so a
// broker that is warming up sees a trickle of retries, not a storm, and a
// healthy one drains a backlog at full speed. First sends (PlaceOrder's,
// the relay's first attempt of a row) do not take from the window: they
// are bounded by their own admission. Safe for concurrent use.
type retryWindow struct {
	mu          sync.Mutex
	limit       float64
	outstanding int
}

func newRetryWindow() *retryWindow { return &retryWindow{limit: retryWindowStart} }

// acquire takes a slot; false when the window is full (skip the retry).
func (w *retryWindow) acquire() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.outstanding >= int(w.limit) {
		return false
	}
	w.outstanding++
	return true
}

// release returns a slot with the retry's result.
func (w *retryWindow) release(result sendResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.outstanding--
	switch result {
	case resultAnswered:
		w.limit = min(w.limit+1, retryWindowMax)
	case resultTransportFailure:
		w.limit = max(w.limit/2, retryWindowMin)
	}
}

// size is the current limit.
func (w *retryWindow) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.limit)
}
