package brokerkit

import "sync"

// Bounds of the retry window: retries always have at least RetryWindowMin
// sends outstanding allowed and at most RetryWindowMax; a new window
// starts at RetryWindowStart.
const (
	RetryWindowMin   = 2
	RetryWindowMax   = 128
	RetryWindowStart = 16
)

// RetryWindow is the retry budget a publisher's callers share: the resend
// scanner's and the outbox relay's retries (ports.OutboundMessage.Retry)
// may have at most Size sends outstanding. Each retry the broker answered
// (confirmed or definitely refused) widens the window by one, so it about
// doubles per round trip while the broker keeps up; each retry that failed
// in transport (an unknown outcome not caused by the caller's context)
// halves it. A broker that is warming up after an outage therefore sees a
// trickle of retries, not a storm, and a healthy one drains a backlog at
// full speed. First sends (PlaceOrder's, the relay's first attempt of a
// row) do not take from the window: they are bounded by their own
// admission. The zero value is not usable; call NewRetryWindow. Safe for
// concurrent use.
type RetryWindow struct {
	mu          sync.Mutex
	limit       float64
	outstanding int
}

// NewRetryWindow returns a window of RetryWindowStart.
func NewRetryWindow() *RetryWindow { return &RetryWindow{limit: RetryWindowStart} }

// Acquire takes a slot for one retry; false when the window is full (the
// caller skips the retry, answering it as not attempted).
func (w *RetryWindow) Acquire() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.outstanding >= int(w.limit) {
		return false
	}
	w.outstanding++
	return true
}

// Release returns the slot of a finished retry: answered (the broker
// answered) widens the window, transportFailure halves it, neither (the
// caller's context ended first) leaves it as it is.
func (w *RetryWindow) Release(answered, transportFailure bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.outstanding--
	switch {
	case answered:
		w.limit = min(w.limit+1, RetryWindowMax)
	case transportFailure:
		w.limit = max(w.limit/2, RetryWindowMin)
	}
}

// Size is the current limit of outstanding retries.
func (w *RetryWindow) Size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.limit)
}
