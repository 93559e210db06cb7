package rabbitmq

import "sync"

// Retry window bounds (the RocketMQ adapter's values): retries always
// have at least retryWindowMin sends outstanding allowed, at most
// retryWindowMax.
const (
	retryWindowMin   = 2
	retryWindowMax   = 128
	retryWindowStart = 16
)

// retryWindow is the retry budget of ports.OutboundMessage.Retry sends
// (the resend scanner's, the outbox relay's later attempts): at most
// limit of them outstanding; each retry the broker answered (confirmed or
// nacked) widens the window by one, each that failed in transport
// (UNKNOWN, not caused by the caller's context) halves it. The same
// algorithm as the RocketMQ adapter's retryWindow (README.md, "Left for
// later": a broker-neutral home). Safe for concurrent use.
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

// release returns a slot: answered widens the window, transportFailure
// halves it, neither (the caller's context ended) leaves it.
func (w *retryWindow) release(answered, transportFailure bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.outstanding--
	switch {
	case answered:
		w.limit = min(w.limit+1, retryWindowMax)
	case transportFailure:
		w.limit = max(w.limit/2, retryWindowMin)
	}
}

// size is the current limit.
func (w *retryWindow) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.limit)
}
