package saleload

import (
	"maps"
	"sort"
	"time"

	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// Counts returns the answers so far by outcome.
func (l *Load) Counts() Counts {
	return Counts{Accepted: l.counts[0].Load(), SoldOut: l.counts[1].Load(),
		AlreadyPurchased: l.counts[2].Load(), Other: l.counts[3].Load()}
}

// OtherByCode returns the answers counted as Other so far, by their
// Connect code and ErrorInfo reason ("unavailable", "ok/canceled", ...).
func (l *Load) OtherByCode() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.otherByCode)
}

// TakeInterval returns the PlaceOrder latencies recorded since its last
// call (since the start for the first) and starts a new interval.
func (l *Load) TakeInterval() salekit.Latencies {
	l.mu.Lock()
	defer l.mu.Unlock()
	lat := l.interval
	l.interval = nil
	return lat
}

// Latencies returns the latency of every PlaceOrder call so far.
func (l *Load) Latencies() salekit.Latencies {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all
}

// LastAnswerAt returns when the last answer arrived (the zero time
// before the first).
func (l *Load) LastAnswerAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastAny
}

// AnsweredAfter returns how many answers arrived after t.
func (l *Load) AnsweredAfter(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.answeredAt {
		if at.After(t) {
			n++
		}
	}
	return n
}

// AcceptedIDs returns every distinct accepted order id, sorted, and the
// latest first-receive time among them (the client time of the last
// accepted reservation; the zero time for none).
func (l *Load) AcceptedIDs() ([]string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.firstSeen))
	var last time.Time
	for id, at := range l.firstSeen {
		ids = append(ids, id)
		if at.After(last) {
			last = at
		}
	}
	sort.Strings(ids)
	return ids, last
}

// IdempotencyBreaks returns the buyers told two different order ids and
// the attempts that reused an accepted request_id and were refused
// instead of answered with the same order id: both 0 when the service
// keeps one order per buyer and a retried request_id's answer.
func (l *Load) IdempotencyBreaks() (twoOrders, changedRetries int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.twoOrders, l.changedRetry
}
