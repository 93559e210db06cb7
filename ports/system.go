package ports

import (
	"context"
	"time"
)

// Clock tells the application's time. Decisions that race with PostgreSQL
// state (expiry, timeouts) use the database's clock instead (Tx.Now).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// IDKind is the prefix of a generated id.
type IDKind string

// The id kinds.
const (
	IDReservation IDKind = "rsv"
	IDOrder       IDKind = "ord"
	IDMessage     IDKind = "evt"
	IDReplay      IDKind = "rpl"
)

// IDGenerator makes globally unique, roughly time-ordered string ids of the
// form "<kind>_<26 characters>". Safe for concurrent use.
type IDGenerator interface {
	// NewID returns a new id of the given kind.
	NewID(kind IDKind) string
}

// Failpoints injects faults at named points, for crash and delay tests. A
// nil Failpoints means every point is off; callers check for nil so that
// disabled failpoints cost nothing.
type Failpoints interface {
	// Inject returns nil when the point is off. Otherwise it applies the
	// configured action: sleep (then nil), return an error (the caller
	// abandons the operation exactly as if the process had died there,
	// without cleanup), or terminate the process.
	Inject(ctx context.Context, name string) error
}

// The named failpoints.
const (
	// FailAfterReserve: PlaceOrder reserved in Redis, nothing sent yet.
	FailAfterReserve = "placeorder.after_reserve"
	// FailAfterSend: the broker confirmed the message, MQ_SENT not yet
	// recorded.
	FailAfterSend = "placeorder.after_send"
	// FailConsumerInTx: the order-create transaction did its work and has
	// not committed yet (a delay here lets a test kill the backend).
	FailConsumerInTx = "consumer.in_tx"
	// FailConsumerAfterCommit: the consumer committed, not yet acknowledged.
	FailConsumerAfterCommit = "consumer.after_commit"
	// FailRelayAfterPublish: the relay published, rows not yet marked.
	FailRelayAfterPublish = "relay.after_publish"
)

// Inject calls fp.Inject unless fp is nil.
func Inject(ctx context.Context, fp Failpoints, name string) error {
	if fp == nil {
		return nil
	}
	return fp.Inject(ctx, name)
}
