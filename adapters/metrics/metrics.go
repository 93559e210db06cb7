// Package metrics implements ports.Metrics with Prometheus collectors
// registered on the one registry the process serves on /metrics. Names
// follow spec 28.2.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is the Prometheus implementation of ports.Metrics.
type Metrics struct {
	resend          *prometheus.CounterVec
	unresolved      prometheus.Gauge
	unresolvedAge   prometheus.Gauge
	admissionReject *prometheus.CounterVec
	cancelMessages  prometheus.Counter
	cancelSuccess   prometheus.Counter
	cancelNoopPaid  prometheus.Counter
	cancelNoopEarly prometheus.Counter
	cancelOutcomes  *prometheus.CounterVec
	compensations   *prometheus.CounterVec
	replays         *prometheus.CounterVec
	dlqOpen         prometheus.Gauge
	dlqOldestAge    prometheus.Gauge
	drift           *prometheus.GaugeVec
}

// New creates and registers the collectors on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		resend: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reservation_resend_total",
			Help: "Scanner resends of order-create messages by outcome."}, []string{"outcome"}),
		unresolved: prometheus.NewGauge(prometheus.GaugeOpts{Name: "reservation_unresolved",
			Help: "Reservations with neither an order nor a release."}),
		unresolvedAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "reservation_unresolved_oldest_age_seconds",
			Help: "Age of the oldest unresolved reservation: the order-create backlog age that drives admission."}),
		admissionReject: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "admission_rejected_total",
			Help: "PlaceOrder calls refused before touching stock, by reason."}, []string{"reason"}),
		cancelMessages: prometheus.NewCounter(prometheus.CounterOpts{Name: "cancel_message_total",
			Help: "Payment-timeout checks handled."}),
		cancelSuccess: prometheus.NewCounter(prometheus.CounterOpts{Name: "cancel_transition_success_total",
			Help: "Timeout checks that canceled an unpaid order."}),
		cancelNoopPaid: prometheus.NewCounter(prometheus.CounterOpts{Name: "cancel_noop_paid_total",
			Help: "Timeout checks that found the order paid."}),
		cancelNoopEarly: prometheus.NewCounter(prometheus.CounterOpts{Name: "cancel_noop_not_expired_total",
			Help: "Timeout checks that arrived before the deadline."}),
		cancelOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cancel_outcome_total",
			Help: "Timeout checks by outcome."}, []string{"outcome"}),
		compensations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "compensation_total",
			Help: "Compensation deliveries by result (applied, duplicate)."}, []string{"result"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mq_dlq_replay_total",
			Help: "Dead-letter replays by result."}, []string{"result"}),
		dlqOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mq_dlq_messages",
			Help: "Open dead letters (stored, not replayed or resolved)."}),
		dlqOldestAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mq_dlq_oldest_age_seconds",
			Help: "Age of the oldest open dead letter."}),
		drift: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "stock_conservation_drift",
			Help: "Invariant I6 drift per activity SKU (0 when the books balance)."}, []string{"activity_id", "sku_id"}),
	}
	for _, c := range []prometheus.Collector{m.resend, m.unresolved, m.unresolvedAge,
		m.admissionReject, m.cancelMessages, m.cancelSuccess, m.cancelNoopPaid, m.cancelNoopEarly,
		m.cancelOutcomes, m.compensations, m.replays, m.dlqOpen, m.dlqOldestAge, m.drift} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Series at zero from the start for the label values the use cases
	// report, so that dashboards and rates see them before the first
	// event: admission refusals (application/placeorder.go) and replay
	// results (application/deadletters.go).
	for _, reason := range []string{"SOLD_OUT_MARK", "RATE_LIMITED", "BACKLOG"} {
		m.admissionReject.WithLabelValues(reason)
	}
	for _, result := range []string{"REPLAYED", "SKIPPED_ALREADY_APPLIED", "REFUSED", "FAILED"} {
		m.replays.WithLabelValues(result)
	}
	return m, nil
}

// ResendOutcome implements ports.Metrics.
func (m *Metrics) ResendOutcome(outcome string) { m.resend.WithLabelValues(outcome).Inc() }

// Unresolved implements ports.Metrics.
func (m *Metrics) Unresolved(count int64, oldestAge time.Duration) {
	m.unresolved.Set(float64(count))
	m.unresolvedAge.Set(oldestAge.Seconds())
}

// AdmissionRejected implements ports.Metrics.
func (m *Metrics) AdmissionRejected(reason string) { m.admissionReject.WithLabelValues(reason).Inc() }

// CancelOutcome implements ports.Metrics.
func (m *Metrics) CancelOutcome(outcome string) {
	m.cancelMessages.Inc()
	m.cancelOutcomes.WithLabelValues(outcome).Inc()
	switch outcome {
	case "CANCELED":
		m.cancelSuccess.Inc()
	case "NOOP_PAID":
		m.cancelNoopPaid.Inc()
	case "NOOP_NOT_EXPIRED":
		m.cancelNoopEarly.Inc()
	}
}

// CompensationApplied implements ports.Metrics.
func (m *Metrics) CompensationApplied(applied bool) {
	result := "duplicate"
	if applied {
		result = "applied"
	}
	m.compensations.WithLabelValues(result).Inc()
}

// DeadLetters implements ports.Metrics.
func (m *Metrics) DeadLetters(open int64, oldestAge time.Duration) {
	m.dlqOpen.Set(float64(open))
	m.dlqOldestAge.Set(oldestAge.Seconds())
}

// ReplayOutcome implements ports.Metrics.
func (m *Metrics) ReplayOutcome(result string) { m.replays.WithLabelValues(result).Inc() }

// StockDrift implements ports.Metrics.
func (m *Metrics) StockDrift(activityID, skuID int64, drift int64) {
	m.drift.WithLabelValues(strconv.FormatInt(activityID, 10), strconv.FormatInt(skuID, 10)).Set(float64(drift))
}
