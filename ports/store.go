package ports

import (
	"context"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
)

// UnitOfWork runs PostgreSQL transactions.
type UnitOfWork interface {
	// InTx runs fn in one READ COMMITTED transaction. When fn returns nil
	// the transaction commits and InTx returns the commit's error (never
	// dropped); when fn returns an error, or panics, it rolls back and
	// InTx returns fn's error. Failures worth retrying (connection loss,
	// deadlock, serialization failure, statement timeout, a terminated
	// backend) match ErrTransient. fn must not retain tx after returning.
	// After any error inside fn the transaction may be unusable (PostgreSQL
	// aborts it): fn should return the error. A panic in fn rolls back and
	// re-panics.
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
}

// Tx is the set of stores available inside one transaction. All their
// writes commit or roll back together.
type Tx interface {
	// Now returns the database's transaction timestamp (now()): every
	// time-based decision that races with other transactions (reservation
	// expiry, payment timeout) uses it.
	Now(ctx context.Context) (time.Time, error)

	InboxStore
	OrderStore
	StockStore
	LedgerStore
	OutboxStore
	RejectionStore
	QuarantineStore
	ActivityStore
	StockChangeStore
	ReservationOutcomeStore
	DeadLetterStore
	AuditStore
}

// InboxEntry is a received message about to be processed by a consumer
// group.
type InboxEntry struct {
	MessageID       string
	Topic           string
	ReservationID   string
	OrderID         string
	DeliveryAttempt int32
}

// InboxStatus is the final state of an inbox row.
type InboxStatus string

// The inbox outcomes.
const (
	InboxProcessing InboxStatus = "PROCESSING"
	InboxSucceeded  InboxStatus = "SUCCEEDED"
	InboxRejected   InboxStatus = "REJECTED"
	InboxDuplicate  InboxStatus = "DUPLICATE"
	InboxNoop       InboxStatus = "NOOP"
)

// InboxResult records the outcome of one claimed message.
type InboxResult struct {
	MessageID string
	Status    InboxStatus
	Detail    string
}

// InboxStore is the consumer inbox: UNIQUE(consumer_group, message_id).
type InboxStore interface {
	// ClaimInbox inserts a PROCESSING row per entry not yet recorded for
	// group and returns the message ids it inserted, in input order. An
	// entry committed by an earlier transaction is not returned (already
	// processed); one inserted by a concurrent, uncommitted transaction
	// makes this call wait for it. Entries repeated within the call count
	// once.
	ClaimInbox(ctx context.Context, group string, entries []InboxEntry) ([]string, error)
	// FinishInbox sets the final status of claimed rows; every entry must
	// name a row claimed for group, otherwise ErrNotFound.
	FinishInbox(ctx context.Context, group string, results []InboxResult) error
	// InboxStatusOf returns the status of a message for a group, or
	// ErrNotFound.
	InboxStatusOf(ctx context.Context, group, messageID string) (InboxStatus, error)
}

// OrderStore is the order event store with its inline projection (the
// orders table). The projection enforces at most one non-canceled order
// per (activity, sku, user) and one order per reservation.
type OrderStore interface {
	// InsertOrders inserts the projection rows of new orders (version 1)
	// and reports, per input, whether it was inserted. A row is not
	// inserted when its order or reservation already has an order, or its
	// user already holds a non-canceled order for the activity SKU.
	InsertOrders(ctx context.Context, orders []order.Snapshot) ([]bool, error)
	// AppendEvents appends events to their streams. For each order the
	// first event's version must follow the stream's last version;
	// otherwise nothing of the whole call is written and the error matches
	// ErrConcurrencyConflict. Every event records the trace context of
	// its cause: its order's entry in the map of WithEventTraces when ctx
	// carries one for it (EventTraceFrom), else TraceFrom(ctx); a store
	// records only a valid W3C traceparent and none otherwise. One call
	// thus appends the events of operations with different traces.
	AppendEvents(ctx context.Context, events []order.Event) error
	// LoadOrderEvents returns an order's stream, oldest first, or
	// ErrNotFound.
	LoadOrderEvents(ctx context.Context, orderID string) ([]order.Event, error)
	// UpdateOrders overwrites projection rows with newer snapshots (only
	// where the stored version is older).
	UpdateOrders(ctx context.Context, orders []order.Snapshot) error
	// OrdersByReservation maps reservation ids to existing order ids.
	OrdersByReservation(ctx context.Context, reservationIDs []string) (map[string]string, error)
}

// StockStore is PostgreSQL's final stock per activity SKU.
type StockStore interface {
	// TakeStock decrements the final stock by up to n units without ever
	// going below zero and returns how many units it took (0..n).
	// ErrNotFound for an unknown activity SKU.
	TakeStock(ctx context.Context, activityID, skuID, n int64) (int64, error)
	// ReturnStock increments the final stock by n.
	ReturnStock(ctx context.Context, activityID, skuID, n int64) error
}

// LedgerReason names an inventory movement.
type LedgerReason string

// The ledger reasons.
const (
	LedgerOrderCreated  LedgerReason = "ORDER_CREATED"
	LedgerOrderCanceled LedgerReason = "ORDER_CANCELED"
)

// LedgerEntry is one inventory movement. At most one entry exists per
// (reservation, reason).
type LedgerEntry struct {
	ActivityID    int64
	SKUID         int64
	Delta         int64
	Reason        LedgerReason
	OrderID       string
	ReservationID string
	MessageID     string
}

// LedgerStore appends to the inventory ledger.
type LedgerStore interface {
	// AppendLedger inserts entries; an entry repeating an existing
	// (reservation, reason) fails the call with an error matching
	// ErrAlreadyExists (a doubled effect is a bug).
	AppendLedger(ctx context.Context, entries []LedgerEntry) error
}

// OutboxRecord is a stored outbound message.
type OutboxRecord struct {
	ID       int64
	Message  OutboundMessage
	Attempts int
}

// OutboxStore is the transactional outbox.
type OutboxStore interface {
	// AppendOutbox stores messages to publish after commit.
	AppendOutbox(ctx context.Context, msgs []OutboundMessage) error
	// ClaimOutbox locks up to limit unpublished, due rows (SKIP LOCKED, so
	// several relays share the work) of transactions that are no longer
	// in flight, oldest transaction first. A row of a FIFO message group is
	// claimed only when no earlier unpublished row of that group exists.
	// Rows written by the calling transaction itself are unspecified (the
	// relay never writes rows). The locks hold until the transaction ends.
	ClaimOutbox(ctx context.Context, limit int) ([]OutboxRecord, error)
	// MarkPublished marks rows published.
	MarkPublished(ctx context.Context, ids []int64) error
	// DeferOutbox records a failed publish: attempts + 1, due again at
	// next.
	DeferOutbox(ctx context.Context, ids []int64, next time.Time, lastErr string) error
	// HoldOutbox makes rows due at until without counting an attempt: the
	// relay holds a delayed message back until it is due when the broker
	// cannot delay it.
	HoldOutbox(ctx context.Context, ids []int64, until time.Time) error
	// PruneOutbox deletes up to limit (> 0) rows published before
	// olderThan and returns how many.
	PruneOutbox(ctx context.Context, olderThan time.Time, limit int) (int64, error)
}

// Rejection is a reservation that the order-create consumer refused.
type Rejection struct {
	OrderID       string
	ReservationID string
	MessageID     string
	ActivityID    int64
	SKUID         int64
	UserID        int64
	Reason        string
	RejectedAt    time.Time
}

// RejectionStore records terminal rejections (one per order id and one per
// reservation).
type RejectionStore interface {
	// RecordRejections inserts rejections; an existing one is kept.
	RecordRejections(ctx context.Context, rs []Rejection) error
}

// QuarantinedMessage is a message that can never be processed as is.
type QuarantinedMessage struct {
	ConsumerGroup   string
	Topic           string
	MessageID       string // may be empty when the body is undecodable
	BrokerMessageID string
	ErrorClass      string
	Reason          string
	Body            []byte
	Properties      map[string]string
	DeliveryAttempt int32
}

// QuarantineStore isolates poison messages.
type QuarantineStore interface {
	// Quarantine stores m; storing the same broker message for the same
	// group twice keeps one row.
	Quarantine(ctx context.Context, m QuarantinedMessage) error
}

// ActivityStore persists activities and seeds their final stock.
type ActivityStore interface {
	// CreateActivity stores a and its final stock. It returns created =
	// false and the stored activity when one with the same ids exists.
	CreateActivity(ctx context.Context, a Activity) (stored Activity, created bool, err error)
	// GetActivity returns an activity, with its operator state (Paused,
	// ClosedAt, EndsAt as moved), or ErrNotFound.
	GetActivity(ctx context.Context, activityID, skuID int64) (Activity, error)
	// GetActivityRecord returns an activity with its UpdatedAt, or
	// ErrNotFound. With lock it locks the row until the transaction ends
	// (SELECT ... FOR UPDATE), so that a read-change-write of an operator
	// is not interleaved with another one of the same activity SKU.
	GetActivityRecord(ctx context.Context, activityID, skuID int64, lock bool) (ActivityRecord, error)
	// ChangeActivity stores a's operator state: EndsAt, Paused and
	// ClosedAt (zero: not closed); every other field of a is ignored. It
	// sets updated_at to the transaction's now and returns the stored
	// record (the "after" of the audit). ErrNotFound for an unknown
	// activity SKU.
	ChangeActivity(ctx context.Context, a Activity) (ActivityRecord, error)
	// ListActivityRecords returns up to q.Limit activities after q.After
	// in (activity_id, sku_id) order, keeping those whose stored state at
	// q.Now is one of q.States (empty: all). The store tells apart what
	// PostgreSQL knows: ActivityEnded (ends_at <= now or closed),
	// ActivityScheduled (not ended, starts_at > now) and ActivityPaused
	// (started, not ended, paused); ActivityOnSale and ActivitySoldOut
	// both select the started, open, unpaused ones (Redis tells them
	// apart, so the caller filters those further).
	ListActivityRecords(ctx context.Context, q ActivityListQuery) ([]ActivityRecord, error)
}

// ActivityRecord is a stored activity with the time of its last change by
// an operator (or its creation).
type ActivityRecord struct {
	Activity  Activity
	UpdatedAt time.Time
}

// ActivityKey addresses an activity SKU; the zero key is before every
// activity.
type ActivityKey struct{ ActivityID, SKUID int64 }

// ActivityListQuery selects a page of ListActivityRecords.
type ActivityListQuery struct {
	// After is the last key of the previous page (zero: from the first).
	After ActivityKey
	// Limit is the page's size, > 0.
	Limit int
	// States keeps activities in these states (empty: all); see
	// ListActivityRecords for how the store reads them.
	States []ActivityState
	// Now is the instant the states are computed at.
	Now time.Time
}

// OrderQueries reads order state outside transactions.
type OrderQueries interface {
	// GetOrderView returns the order's projection (a PAYING order shows as
	// CREATED), or its rejection as a REJECTED view (AggregateVersion 0,
	// CreatedAt = UpdatedAt = rejected_at), or ErrNotFound.
	GetOrderView(ctx context.Context, orderID string) (OrderView, error)
	// ListUserOrders returns up to limit (> 0) of userID's orders (the
	// orders projection, as GetOrderView shows them: rejections and
	// reservations still queuing are not orders) newest first, by
	// (CreatedAt, OrderID) descending, strictly after the cursor (zero:
	// from the newest).
	ListUserOrders(ctx context.Context, userID int64, after OrderCursor, limit int) ([]OrderView, error)
}

// OrderCursor is the place of an order in a buyer's orders newest first:
// the (CreatedAt, OrderID) of the last order of a page.
type OrderCursor struct {
	CreatedAt time.Time
	OrderID   string
}

// ReservationClaim asks to decide a reservation's fate in this
// transaction.
type ReservationClaim struct {
	ReservationID string
	OrderID       string
	MessageID     string
}

// ReservationOutcome is the decided fate of a reservation.
type ReservationOutcome struct {
	ReservationID string
	// Outcome is ORDERED or REJECTED.
	Outcome string
	Reason  string
}

// The reservation outcomes.
const (
	OutcomeOrdered  = "ORDERED"
	OutcomeRejected = "REJECTED"
)

// ReservationOutcomeStore decides every reservation exactly once, whatever
// message id carries it: an order and a rejection of the same reservation
// are mutually exclusive (reservation_outcomes, PRIMARY KEY reservation_id).
type ReservationOutcomeStore interface {
	// ClaimReservations inserts a PROCESSING row per reservation that has
	// no committed row yet (PROCESSING or decided) and returns the reservation ids it inserted, in input order.
	// A reservation decided by a committed transaction is not returned;
	// one claimed by a concurrent, uncommitted transaction makes the call
	// wait for it. Repeated ids within the call count once.
	ClaimReservations(ctx context.Context, claims []ReservationClaim) ([]string, error)
	// FinishReservations records the outcome of claimed reservations;
	// every entry must name a claimed row, otherwise ErrNotFound.
	FinishReservations(ctx context.Context, outcomes []ReservationOutcome) error
}
