package application

import (
	"sync"
	"time"
)

// soldOutMarks remembers, per activity SKU, that the stock gate answered
// SOLD_OUT, for a short time. While a SKU is marked, PlaceOrder answers a
// new request SOLD_OUT after one read-only look at the buyer
// (Admission.BuyerState: a retried request that was accepted before still
// gets its order, a holder still hears ALREADY_PURCHASED), without the
// claim, rate-limit, reservation and forget scripts: a sold-out answer
// costs one pipelined Redis read instead of three scripts. A unit
// that comes back (a release, a cancellation, in any instance) is visible
// again at most TTL later; a reservation this process makes clears the
// mark at once. Safe for concurrent use.
type soldOutMarks struct {
	ttl   time.Duration
	mu    sync.RWMutex
	until map[skuKey]time.Time
}

type skuKey struct{ activityID, skuID int64 }

func newSoldOutMarks(ttl time.Duration) *soldOutMarks {
	return &soldOutMarks{ttl: ttl, until: map[skuKey]time.Time{}}
}

// soldOut reports whether the SKU is marked at now.
func (m *soldOutMarks) soldOut(activityID, skuID int64, now time.Time) bool {
	if m.ttl <= 0 {
		return false
	}
	m.mu.RLock()
	until, ok := m.until[skuKey{activityID, skuID}]
	m.mu.RUnlock()
	return ok && now.Before(until)
}

// mark records a SOLD_OUT answer at now.
func (m *soldOutMarks) mark(activityID, skuID int64, now time.Time) {
	if m.ttl <= 0 {
		return
	}
	m.mu.Lock()
	m.until[skuKey{activityID, skuID}] = now.Add(m.ttl)
	m.mu.Unlock()
}

// clear removes the SKU's mark (a reservation succeeded: stock exists).
func (m *soldOutMarks) clear(activityID, skuID int64) {
	k := skuKey{activityID, skuID}
	m.mu.RLock()
	_, ok := m.until[k]
	m.mu.RUnlock()
	if !ok {
		return
	}
	m.mu.Lock()
	delete(m.until, k)
	m.mu.Unlock()
}
