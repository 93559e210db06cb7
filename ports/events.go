package ports

import (
	"context"
	"errors"

	"github.com/seckill-dev/seckill/domain/order"
)

// ErrSubscriberTooSlow ends a subscription whose subscriber did not take
// its events within the bound: the subscriber resumes from the last
// position it handled.
var ErrSubscriberTooSlow = errors.New("subscriber too slow")

// EventRecord is one order event as the event log serves it to
// subscribers: the domain event, upcast to the current schema version, with
// the position the log gave it and the ids of its order.
type EventRecord struct {
	// Position is the event's place in the global log: positions are
	// strictly increasing in the order subscribers receive events, and a
	// position is assigned only once no transaction that could still
	// commit an earlier event is in flight, so a reader that has seen
	// position p never later finds a committed event below p it has not
	// seen.
	Position int64
	// ActivityID, SKUID and UserID are the ids of the event's order.
	ActivityID, SKUID, UserID int64
	// Event is the domain event: order id, aggregate version, type,
	// schema version (after upcasting), occurrence time and payload.
	Event order.Event
	// StoredSchemaVersion is the schema version the event was recorded
	// with (Event.SchemaVersion may be newer after upcasting).
	StoredSchemaVersion int
	// Traceparent is the W3C trace context of the request that caused
	// the event, as recorded with it; empty when none was recorded.
	Traceparent string
}

// EventID is the event's stable identity, the same on every delivery and
// on every path (subscription or broker): "<order_id>:<aggregate_version>".
func (r EventRecord) EventID() string { return order.EventID(r.Event.OrderID, r.Event.Version) }

// EventFilter selects events of the log. The zero value selects every
// event.
type EventFilter struct {
	// ActivityID selects the events of one activity's orders (0: any).
	ActivityID int64
	// Types selects these event types (empty: any).
	Types []order.EventType
}

// EventLog is the sequenced log of order events.
//
// Contract: ReadEvents returns, in position order, up to limit events
// whose position is greater than after and that match f, and head, the
// highest position the log has assigned, read in the same snapshot as the
// events: head >= the last returned position, and when fewer than limit
// events come back no event in (after, head] matching f was left out, so
// a filtered reader may advance to head. Positions it returns are final:
// a later call never returns an event below a position already returned
// that was not returned before. It is safe for concurrent use.
type EventLog interface {
	ReadEvents(ctx context.Context, after int64, f EventFilter, limit int) (events []EventRecord, head int64, err error)
}

// EventSequencer assigns positions to committed events.
//
// Contract: Sequence gives positions, in one transaction, to up to limit
// events whose writing transactions are settled (older than every
// transaction still in flight), in the order those transactions' events
// were written, except that an order's events always keep their
// aggregate_version order (an earlier version is placed first), and
// returns how many it sequenced. Concurrent callers (in
// one process or several) are serialised, so positions never interleave.
type EventSequencer interface {
	Sequence(ctx context.Context, limit int) (int, error)
}

// EventSink receives a subscription's stream.
type EventSink interface {
	// Event delivers one event; an error ends the subscription with it.
	Event(ctx context.Context, e EventRecord) error
	// Checkpoint tells the subscriber that every event up to c.Position
	// matching its filter has been delivered (sent periodically, so that a
	// filtered or idle subscriber can advance, and once when the
	// subscription first reaches the log's head, with c.Live set); an
	// error ends the subscription with it.
	Checkpoint(ctx context.Context, c Checkpoint) error
}

// EventBatchSink is an optional extension of EventSink: a sink that
// implements it is given each page of events in one Events call (in
// position order, never empty) instead of one Event call per event, so it
// can send them with one flush. Events must deliver every event of the
// page or return an error (which ends the subscription as Event's would).
type EventBatchSink interface {
	EventSink
	Events(ctx context.Context, events []EventRecord) error
}

// Checkpoint is a position a subscriber may advance to.
type Checkpoint struct {
	// Position: every event up to it matching the subscription's filter
	// has been delivered.
	Position int64
	// Live is set on every checkpoint sent after the subscription first
	// reached the log's head: every event the log held when the
	// subscription started has been delivered (catch-up is over). The
	// first such checkpoint is sent as soon as the head is reached, so a
	// rebuilding consumer learns at once that it is current.
	Live bool
}

// EventSubscriptions is the driving port of EventService.Subscribe.
//
// Contract: Subscribe delivers to sink, in position order, every event
// with a position greater than from that matches f: first from the store
// (catch-up), then as new events are sequenced (live), with no gap and no
// duplicate at the switch. It returns when ctx ends (nil), when the sink
// fails (its error), or with ErrSubscriberTooSlow when the sink does not
// keep up within the configured bound. A negative from, or one beyond the
// log's head, is a *FieldError on "from_position"; an unknown event type
// in f is a *FieldError on "event_types"; a negative activity id is a
// *FieldError on "activity_id".
type EventSubscriptions interface {
	Subscribe(ctx context.Context, from int64, f EventFilter, sink EventSink) error
}
