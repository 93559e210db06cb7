package ports

import (
	"context"
	"time"
)

// Topic names a logical topic; the broker adapter maps it to the physical
// topic name (with the configured environment prefix).
type Topic string

// The logical topics of the design (docs/architecture.md).
const (
	// TopicOrderCreate: OrderCreateRequested, NORMAL.
	TopicOrderCreate Topic = "ORDER_CREATE"
	// TopicOrderTimeout: CancelOrderIfUnpaid, DELAY.
	TopicOrderTimeout Topic = "ORDER_TIMEOUT"
	// TopicOrderEvent: ORDER_CREATED/PAID/CANCELED, NORMAL.
	TopicOrderEvent Topic = "ORDER_EVENT"
	// TopicInventoryCompensate: ReleaseReservation, NORMAL.
	TopicInventoryCompensate Topic = "INVENTORY_COMPENSATE"
	// TopicOrderStateFIFO: OrderStateChanged, FIFO grouped by order_id.
	TopicOrderStateFIFO Topic = "ORDER_STATE_FIFO"
)

// Topics lists every logical topic.
var Topics = []Topic{TopicOrderCreate, TopicOrderTimeout, TopicOrderEvent, TopicInventoryCompensate, TopicOrderStateFIFO}

// OutboundMessage is a message to publish. MessageID is the business
// message id (the consumers' inbox key); it is also set as a property.
// MessageGroup is set only for the FIFO topic and DeliverAt only for the
// DELAY topic; never both.
type OutboundMessage struct {
	Topic        Topic
	MessageID    string
	Tag          string
	Keys         []string
	MessageGroup string
	DeliverAt    time.Time
	Body         []byte
	Properties   map[string]string
	// Retry marks a send of a message whose earlier send failed or has an
	// unknown outcome (the resend scanner, the outbox relay's later
	// attempts). Retries share the publisher's retry budget: when it is
	// spent the send is not attempted and the error matches
	// ErrBrokerUnavailable, like a send skipped by an open breaker.
	Retry bool
}

// SendReceipt is the broker's confirmation of a stored message.
type SendReceipt struct {
	// BrokerMessageID is the broker's own id; it may differ between
	// resends of the same business message and must not be used for
	// idempotency.
	BrokerMessageID string
}

// Publisher sends messages to the broker with a bounded synchronous send.
//
// A nil error means CONFIRMED: the broker stored the message. An error
// matching ErrSendUnknown means the outcome is unknown (deadline exceeded,
// connection lost, server-side internal error): the message may be stored,
// so the caller must not compensate and must resend with the same
// MessageID later. An error matching ErrSendRejected means the message was
// definitely not stored (topic missing, permission, invalid message). Any
// other error is treated as unknown. Safe for concurrent use; messages of
// one FIFO group must be published by one goroutine at a time to keep
// their order.
type Publisher interface {
	// Publish sends msg. The deadline is the smaller of ctx's and the
	// adapter's configured send timeout.
	Publish(ctx context.Context, msg OutboundMessage) (SendReceipt, error)
}

// DeadLetterOrigin says where a dead letter comes from: the consumer group
// whose retries ran out and how often that group received it. A broker
// adapter reads it off a dead-lettered delivery.
type DeadLetterOrigin struct {
	Group      string
	Deliveries int32
}

// Delivery is one received message.
type Delivery struct {
	// Topic is the physical topic the message was received from.
	Topic           string
	Tag             string
	Keys            []string
	MessageGroup    string
	Body            []byte
	Properties      map[string]string
	BrokerMessageID string
	// DeliveryAttempt counts deliveries to this consumer group, from 1.
	DeliveryAttempt int32
	// BornAt is when the producer created the message.
	BornAt time.Time
	// Queue and Offset locate the message in the broker (for logs; zero
	// when the broker has no such notion).
	Queue  int32
	Offset int64
}

// Decision is a handler's verdict on one delivery.
type Decision struct {
	// Ack acknowledges the message: it will not be delivered again to
	// this consumer group. Only ever set after the effect committed.
	Ack bool
	// RetryAfter, when Ack is false and RetryAfter > 0, asks for the next
	// delivery after this delay instead of after the receive's invisible
	// duration.
	RetryAfter time.Duration
	// Outcome is a short label for metrics and logs (for example
	// "created", "duplicate", "rejected", "quarantined", "transient").
	Outcome string
	// Reason refines a "rejected" outcome (for example
	// RESERVATION_EXPIRED) for the business-reject metric.
	Reason string
	// Inbox, Effect and TxLatency describe the handler's transaction for
	// the consumer's log line (the inbox_result, order_result and
	// tx_latency_ms fields): the inbox row ("inserted" or "duplicate"),
	// what the transaction did for this message (for example "created",
	// "rejected", "none") and how long it took. Empty when the handler has
	// no such transaction.
	Inbox     string
	Effect    string
	TxLatency time.Duration
}

// Acked returns an acknowledging decision with the outcome label.
func Acked(outcome string) Decision { return Decision{Ack: true, Outcome: outcome} }

// RetryLater returns a non-acknowledging decision.
func RetryLater(outcome string, after time.Duration) Decision {
	return Decision{Outcome: outcome, RetryAfter: after}
}

// BatchHandler processes received messages. The consumer runner calls
// HandleBatch with up to its batch size of deliveries from one receive and
// applies the returned decisions, which must have the same length and
// order as the deliveries. Implementations must be safe for concurrent
// calls; the runner bounds their number. ctx is canceled on shutdown; a
// handler should then finish or abandon its transaction and return
// non-acknowledging decisions for unfinished work.
type BatchHandler interface {
	// HandleBatch returns one decision per delivery.
	HandleBatch(ctx context.Context, deliveries []Delivery) []Decision
}

// BrokerHealth is implemented by publishers that keep a view of the
// broker's health (a circuit breaker). Workers that send in bulk (the
// resend scanner, the outbox relay) ask it before claiming work, so that
// nothing is claimed and sent just to time out while the broker is down.
type BrokerHealth interface {
	// BrokerAvailable reports whether sends are attempted now; when not,
	// retryAt is when the next probe send will be let through.
	BrokerAvailable() (ok bool, retryAt time.Time)
}
