package ports

import "time"

// Metrics receives the application-level measurements of spec 28.2 that
// no adapter can see by itself (adapters export their own: for example the
// Redis adapter computes reservation_mq_pending at scrape time). The Prometheus adapter implements it; a nil
// Metrics is not allowed (use a no-op implementation in tests).
type Metrics interface {
	// ResendOutcome counts one scanner resend by outcome (CONFIRMED,
	// UNKNOWN, DEFINITE_FAILURE): reservation_resend_total{outcome}.
	ResendOutcome(outcome string)
	// Unresolved reports reservations with no order and no release yet,
	// and the age of the oldest: the order-create backlog age that drives
	// admission (mq_consumer_lag_seconds is its broker-side sibling).
	Unresolved(count int64, oldestAge time.Duration)
	// AdmissionRejected counts PlaceOrder calls refused before touching
	// stock, by reason (BACKLOG, RATE_LIMITED).
	AdmissionRejected(reason string)
	// CancelOutcome counts timeout checks: cancel_message_total and, by
	// outcome, cancel_transition_success_total, cancel_noop_paid_total,
	// cancel_noop_not_expired_total (outcomes CANCELED, NOOP_PAID,
	// NOOP_NOT_EXPIRED, NOOP_CANCELED, NOOP_MISSING).
	CancelOutcome(outcome string)
	// CompensationApplied counts releases by whether this delivery released
	// the reservation (applied) or found it released already (duplicate).
	CompensationApplied(applied bool)
	// DeadLetters reports the open dead letters and the age of the oldest:
	// mq_dlq_messages and mq_dlq_oldest_age_seconds.
	DeadLetters(open int64, oldestAge time.Duration)
	// ReplayOutcome counts dead-letter replays: mq_dlq_replay_total{result}.
	ReplayOutcome(result string)
	// StockDrift reports the I6 drift of one activity SKU.
	StockDrift(activityID, skuID int64, drift int64)
}
