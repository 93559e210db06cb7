package ports

import (
	"context"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
)

// DeadLetterRecord is a message that exhausted a consumer group's retries,
// as read from the group's dead-letter topic.
type DeadLetterRecord struct {
	ConsumerGroup string
	// Topic is the logical topic the message was originally sent to.
	Topic           Topic
	MessageID       string
	BrokerMessageID string
	Tag             string
	Keys            []string
	MessageGroup    string
	ErrorClass      string
	LastError       string
	Attempts        int32
	Body            []byte
	Properties      map[string]string
	SeenAt          time.Time
}

// StoredDeadLetter is a dead letter with its payload, for replay.
type StoredDeadLetter struct {
	DeadLetter
	Record DeadLetterRecord
}

// AuditEntry records one operator action on a dead letter.
type AuditEntry struct {
	DeadLetterID int64
	Actor        string
	Action       string // REPLAY
	Reason       string
	ReplayID     string
	Outcome      string
}

// DeadLetterStats summarizes open dead letters.
type DeadLetterStats struct {
	Open         int64
	OldestOpenAt time.Time // zero when none
}

// DeadLetterStore keeps dead letters and the audit of their handling.
type DeadLetterStore interface {
	// RecordDeadLetter stores r keyed by (consumer group, message id): the
	// first arrival inserts an OPEN row; a later arrival of the same message
	// (for example a replay that failed again) updates last_seen_at,
	// attempts and last error and reopens it. It returns the row id and
	// whether the row is new.
	RecordDeadLetter(ctx context.Context, r DeadLetterRecord) (int64, bool, error)
	// ListDeadLetters returns up to limit dead letters with id < beforeID
	// (0 = from the newest), newest first, optionally of one group.
	ListDeadLetters(ctx context.Context, group string, limit int, beforeID int64) ([]DeadLetter, error)
	// GetDeadLetter returns a dead letter with its payload, locked for
	// update until the transaction ends, or ErrNotFound.
	GetDeadLetter(ctx context.Context, id int64) (StoredDeadLetter, error)
	// MarkReplayed sets status REPLAYED, increments replay_count and
	// returns the new count.
	MarkReplayed(ctx context.Context, id int64) (int32, error)
	// MarkResolved sets status RESOLVED (nothing left to replay).
	MarkResolved(ctx context.Context, id int64) error
	// AppendAudit records an operator action.
	AppendAudit(ctx context.Context, e AuditEntry) error
	// DeadLetterStats counts open dead letters and finds the oldest.
	DeadLetterStats(ctx context.Context) (DeadLetterStats, error)
}

// StockAudit is PostgreSQL's side of one activity SKU's books.
type StockAudit struct {
	InitialStock      int64
	PGFinalStock      int64
	NonCanceledOrders int64
	// OrderedHeld are the given held reservations that have a non-canceled
	// order.
	OrderedHeld []string
	// ReleasedHeld are the given held reservations whose stock PostgreSQL
	// released (rejected, or order canceled): their Redis release is in
	// flight.
	ReleasedHeld []string
}

// ReservationState is PostgreSQL's knowledge of a reservation.
type ReservationState struct {
	ReservationID string
	// Outcome is "" (undecided), ORDERED or REJECTED.
	Outcome string
	// Reason is the rejection reason when Outcome is REJECTED.
	Reason string
	// OrderStatus is the order's status when Outcome is ORDERED.
	OrderStatus order.Status
}

// AuditStore answers the reconciler's and auditor's questions.
type AuditStore interface {
	// AuditStock measures the PostgreSQL terms of invariant I6 for one
	// activity SKU, classifying the given Redis-held reservations.
	AuditStock(ctx context.Context, activityID, skuID int64, held []string) (StockAudit, error)
	// ReservationStates returns what PostgreSQL knows of each reservation
	// id (every input id appears in the result).
	ReservationStates(ctx context.Context, reservationIDs []string) ([]ReservationState, error)
	// ExpiredUnpaidOrders returns up to limit orders still CREATED or
	// PAYING whose expires_at is before cutoff.
	ExpiredUnpaidOrders(ctx context.Context, cutoff time.Time, limit int) ([]string, error)
	// OrderStreams returns the event streams of up to limit orders with
	// ids greater than afterOrderID, in id order (projection rebuild).
	OrderStreams(ctx context.Context, afterOrderID string, limit int) ([][]order.Event, error)
	// Rejections returns up to limit rejections with order ids greater
	// than afterOrderID, in id order.
	Rejections(ctx context.Context, afterOrderID string, limit int) ([]Rejection, error)
	// ListActivities returns every activity, by (activity_id, sku_id).
	ListActivities(ctx context.Context) ([]Activity, error)
}
