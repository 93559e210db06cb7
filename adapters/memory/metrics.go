package memory

import (
	"maps"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// Metrics is a ports.Metrics that records what it is told, for assertions.
// Safe for concurrent use.
type Metrics struct {
	mu sync.Mutex
	s  MetricsSnapshot
}

var _ ports.Metrics = (*Metrics)(nil)

// Gauge is the last value reported for a count and an age.
type Gauge struct {
	Count     int64
	OldestAge time.Duration
}

// MetricsSnapshot is a copy of everything recorded. Counter maps are keyed
// by the label the application passed.
type MetricsSnapshot struct {
	ResendOutcomes map[string]int64
	// Unresolved holds the last report; UnresolvedReports counts them.
	Unresolved        Gauge
	UnresolvedReports int64
	AdmissionRejected map[string]int64
	CancelOutcomes    map[string]int64
	// CompensationApplied counts by applied (true) or duplicate (false).
	CompensationApplied map[bool]int64
	ReplayOutcomes      map[string]int64
	// DeadLetters holds the last report of open dead letters.
	DeadLetters Gauge
	// StockDrift holds the last drift reported per activity SKU.
	StockDrift map[SKU]int64
}

// NewMetrics returns empty metrics.
func NewMetrics() *Metrics {
	return &Metrics{s: MetricsSnapshot{
		ResendOutcomes:      map[string]int64{},
		AdmissionRejected:   map[string]int64{},
		CancelOutcomes:      map[string]int64{},
		CompensationApplied: map[bool]int64{},
		ReplayOutcomes:      map[string]int64{},
		StockDrift:          map[SKU]int64{},
	}}
}

// ResendOutcome counts one scanner resend by outcome.
func (m *Metrics) ResendOutcome(outcome string) {
	m.inc(func(s *MetricsSnapshot) { s.ResendOutcomes[outcome]++ })
}

// Unresolved records the unresolved-reservation backlog.
func (m *Metrics) Unresolved(count int64, oldestAge time.Duration) {
	m.inc(func(s *MetricsSnapshot) {
		s.Unresolved = Gauge{Count: count, OldestAge: oldestAge}
		s.UnresolvedReports++
	})
}

// AdmissionRejected counts one refused PlaceOrder by reason.
func (m *Metrics) AdmissionRejected(reason string) {
	m.inc(func(s *MetricsSnapshot) { s.AdmissionRejected[reason]++ })
}

// CancelOutcome counts one timeout check by outcome.
func (m *Metrics) CancelOutcome(outcome string) {
	m.inc(func(s *MetricsSnapshot) { s.CancelOutcomes[outcome]++ })
}

// CompensationApplied counts one release by whether it applied.
func (m *Metrics) CompensationApplied(applied bool) {
	m.inc(func(s *MetricsSnapshot) { s.CompensationApplied[applied]++ })
}

// DeadLetters records the last report of open dead letters.
func (m *Metrics) DeadLetters(open int64, oldestAge time.Duration) {
	m.inc(func(s *MetricsSnapshot) { s.DeadLetters = Gauge{Count: open, OldestAge: oldestAge} })
}

// ReplayOutcome counts one dead-letter replay by result.
func (m *Metrics) ReplayOutcome(result string) {
	m.inc(func(s *MetricsSnapshot) { s.ReplayOutcomes[result]++ })
}

// StockDrift records the drift of one activity SKU.
func (m *Metrics) StockDrift(activityID, skuID int64, drift int64) {
	m.inc(func(s *MetricsSnapshot) { s.StockDrift[SKU{activityID, skuID}] = drift })
}

// Snapshot returns a copy of everything recorded so far.
func (m *Metrics) Snapshot() MetricsSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.s
	s.ResendOutcomes = maps.Clone(s.ResendOutcomes)
	s.AdmissionRejected = maps.Clone(s.AdmissionRejected)
	s.CancelOutcomes = maps.Clone(s.CancelOutcomes)
	s.CompensationApplied = maps.Clone(s.CompensationApplied)
	s.ReplayOutcomes = maps.Clone(s.ReplayOutcomes)
	s.StockDrift = maps.Clone(s.StockDrift)
	return s
}

func (m *Metrics) inc(f func(*MetricsSnapshot)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&m.s)
}
