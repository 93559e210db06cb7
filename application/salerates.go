package application

import (
	"math"
	"sync"
	"time"
)

// Shape of the sale-rate recorder.
const (
	// SaleRateWindow is the window of SaleRates' figures: the current
	// second and the SaleRateWindow/time.Second-1 seconds before it.
	SaleRateWindow = 10 * time.Second
	// saleRateSlots is the number of one-second buckets of the window.
	saleRateSlots = int(SaleRateWindow / time.Second)
	// saleLatencyBuckets is the number of latency buckets per second:
	// bucket i holds latencies up to saleLatencyBound(i), four per
	// doubling from 100 µs; the last one holds everything longer.
	saleLatencyBuckets = 64
	// saleLatencyBase is the upper bound of latency bucket 0.
	saleLatencyBase = 100 * time.Microsecond
	// DefaultSaleRateActivities is how many activity SKUs a SaleRates of
	// NewSaleRates(0) tracks at once.
	DefaultSaleRateActivities = 256
)

// SaleRates records, per activity SKU and in this process only, the
// PlaceOrder calls and the reservations they accepted over the last
// SaleRateWindow, with the calls' latency distribution (for the status
// page). It tracks at most a fixed number of activity SKUs at once: the
// first call of an activity SKU takes the slot of one idle for a whole
// window, or is not recorded when every slot is busy (Untracked counts
// those calls). Recording allocates only for the first call of an
// activity SKU; it takes a read lock of the index and the activity SKU's
// own mutex, and SaleRates runs no goroutine. The zero value is not
// usable; a nil *SaleRates records nothing.
type SaleRates struct {
	max int

	mu        sync.RWMutex
	entries   map[saleKey]*saleEntry
	untracked uint64 // calls not recorded, under mu (write lock)
}

// saleKey identifies an activity SKU.
type saleKey struct{ activityID, skuID int64 }

// saleEntry is the window of one activity SKU.
type saleEntry struct {
	mu    sync.Mutex
	last  int64 // the Unix second of the last record
	slots [saleRateSlots]saleSlot
}

// saleSlot is one second of an activity SKU's window.
type saleSlot struct {
	sec      int64 // the Unix second it counts (stale when outside the window)
	calls    uint32
	accepted uint32
	latency  [saleLatencyBuckets]uint32
}

// SaleRate is an activity SKU's figures over the window ending at the
// time asked.
type SaleRate struct {
	// Window is SaleRateWindow.
	Window time.Duration
	// Calls is the PlaceOrder calls recorded in the window; Accepted
	// those that took a reservation.
	Calls, Accepted int64
	// AcceptedPerSecond is Accepted divided by the window's seconds.
	AcceptedPerSecond float64
	// P99 is an upper bound of the 99th percentile of the calls'
	// latency (the bound of its bucket, within 19 %); 0 without calls.
	P99 time.Duration
}

// NewSaleRates returns a recorder tracking at most maxActivities activity
// SKUs at once (0: DefaultSaleRateActivities).
func NewSaleRates(maxActivities int) *SaleRates {
	if maxActivities <= 0 {
		maxActivities = DefaultSaleRateActivities
	}
	return &SaleRates{max: maxActivities, entries: make(map[saleKey]*saleEntry, maxActivities)}
}

// Record counts one PlaceOrder call of the activity SKU that ended at at
// after latency; accepted says it took a reservation.
func (r *SaleRates) Record(activityID, skuID int64, at time.Time, latency time.Duration, accepted bool) {
	if r == nil {
		return
	}
	sec := at.Unix()
	e := r.entry(saleKey{activityID, skuID}, sec)
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &e.slots[sec%int64(saleRateSlots)]
	if s.sec != sec {
		*s = saleSlot{sec: sec}
	}
	s.calls++
	if accepted {
		s.accepted++
	}
	s.latency[saleLatencyBucket(latency)]++
	e.last = max(e.last, sec)
}

// entry returns the window of k, making one when there is room (or an
// idle one to replace); nil when every slot is busy.
func (r *SaleRates) entry(k saleKey, sec int64) *saleEntry {
	r.mu.RLock()
	e := r.entries[k]
	r.mu.RUnlock()
	if e != nil {
		return e
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[k]; e != nil {
		return e
	}
	if len(r.entries) >= r.max {
		// A caller still holding the replaced entry records into it
		// once more: that record is lost, nothing else.
		for ik, ie := range r.entries {
			ie.mu.Lock()
			idle := ie.last <= sec-int64(saleRateSlots)
			ie.mu.Unlock()
			if idle {
				delete(r.entries, ik)
				break
			}
		}
		if len(r.entries) >= r.max {
			r.untracked++
			return nil
		}
	}
	e = &saleEntry{}
	r.entries[k] = e
	return e
}

// Rate returns the activity SKU's figures over the window ending at now.
func (r *SaleRates) Rate(activityID, skuID int64, now time.Time) SaleRate {
	out := SaleRate{Window: SaleRateWindow}
	if r == nil {
		return out
	}
	r.mu.RLock()
	e := r.entries[saleKey{activityID, skuID}]
	r.mu.RUnlock()
	if e == nil {
		return out
	}
	var latency [saleLatencyBuckets]int64
	sec := now.Unix()
	e.mu.Lock()
	for i := range e.slots {
		s := &e.slots[i]
		if s.sec > sec || s.sec <= sec-int64(saleRateSlots) {
			continue
		}
		out.Calls += int64(s.calls)
		out.Accepted += int64(s.accepted)
		for b, n := range s.latency {
			latency[b] += int64(n)
		}
	}
	e.mu.Unlock()
	out.AcceptedPerSecond = float64(out.Accepted) / SaleRateWindow.Seconds()
	if out.Calls > 0 {
		rank := int64(math.Ceil(0.99 * float64(out.Calls)))
		var seen int64
		for b, n := range latency {
			seen += n
			if seen >= rank {
				out.P99 = saleLatencyBound(b)
				break
			}
		}
	}
	return out
}

// Untracked returns how many calls were not recorded because every slot
// was busy with another activity SKU.
func (r *SaleRates) Untracked() uint64 {
	if r == nil {
		return 0
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.untracked
}

// saleLatencyBucket returns the bucket of latency: the first i whose
// saleLatencyBound(i) is at least latency.
func saleLatencyBucket(latency time.Duration) int {
	if latency <= saleLatencyBase {
		return 0
	}
	i := int(math.Ceil(4 * math.Log2(float64(latency)/float64(saleLatencyBase))))
	return min(i, saleLatencyBuckets-1)
}

// saleLatencyBound returns the upper bound of latency bucket i
// (100 µs × 2^(i/4)); the last bucket has none and reports its lower
// bound's successor the same way.
func saleLatencyBound(i int) time.Duration {
	return time.Duration(float64(saleLatencyBase) * math.Pow(2, float64(i)/4))
}
