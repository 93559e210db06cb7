package order

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// CurrentSchemaVersion is the schema version new events are recorded with.
// Decode accepts every version up to it.
const CurrentSchemaVersion = 1

// EventType is the stable name of an event kind; it is stored with each
// event and never renamed.
type EventType string

// The order event types.
const (
	EventCreated        EventType = "ORDER_CREATED"
	EventPaymentStarted EventType = "ORDER_PAYMENT_STARTED"
	EventPaid           EventType = "ORDER_PAID"
	EventCanceled       EventType = "ORDER_CANCELED"
)

// Event is one fact in an order's stream.
type Event struct {
	OrderID       string
	Version       int64 // aggregate_version: 1, 2, 3, ... without gaps
	Type          EventType
	SchemaVersion int
	OccurredAt    time.Time
	Payload       Payload
}

// Payload is the event-specific data. The implementations are Created,
// PaymentStarted, Paid and Canceled.
type Payload interface {
	// EventType names the payload's event type.
	EventType() EventType
}

// Created records the creation of an order from a reservation.
type Created struct {
	OrderID       string    `json:"order_id"`
	ReservationID string    `json:"reservation_id"`
	MessageID     string    `json:"message_id"`
	ActivityID    int64     `json:"activity_id"`
	SKUID         int64     `json:"sku_id"`
	UserID        int64     `json:"user_id"`
	Quantity      int32     `json:"quantity"`
	ReservedAt    time.Time `json:"reserved_at"`
	ExpiresAt     time.Time `json:"expires_at"`
}

// PaymentStarted records that a payment began.
type PaymentStarted struct {
	PaymentID string `json:"payment_id"`
}

// Paid records a successful payment.
type Paid struct {
	PaymentID string `json:"payment_id"`
}

// Canceled records a cancellation.
type Canceled struct {
	Reason CancelReason `json:"reason"`
}

// EventType implements Payload.
func (Created) EventType() EventType { return EventCreated }

// EventType implements Payload.
func (PaymentStarted) EventType() EventType { return EventPaymentStarted }

// EventType implements Payload.
func (Paid) EventType() EventType { return EventPaid }

// EventType implements Payload.
func (Canceled) EventType() EventType { return EventCanceled }

// EncodePayload returns the JSON form of an event's payload, as stored.
func EncodePayload(p Payload) ([]byte, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode %s payload: %w", p.EventType(), err)
	}
	return b, nil
}

// DecodePayload parses a stored payload of type t and schema version v. It
// fails for unknown types and for schema versions newer than
// CurrentSchemaVersion (upcasting of older versions happens here).
func DecodePayload(t EventType, v int, data []byte) (Payload, error) {
	if v < 1 || v > CurrentSchemaVersion {
		return nil, fmt.Errorf("%w: %s schema version %d unsupported", ErrCorruptStream, t, v)
	}
	var (
		p   Payload
		err error
	)
	switch t {
	case EventCreated:
		var c Created
		err = json.Unmarshal(data, &c)
		p = c
	case EventPaymentStarted:
		var s PaymentStarted
		err = json.Unmarshal(data, &s)
		p = s
	case EventPaid:
		var s Paid
		err = json.Unmarshal(data, &s)
		p = s
	case EventCanceled:
		var s Canceled
		err = json.Unmarshal(data, &s)
		p = s
	default:
		return nil, fmt.Errorf("%w: unknown event type %q", ErrCorruptStream, t)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: decode %s: %v", ErrCorruptStream, t, err)
	}
	return p, nil
}

// EventID is the stable identity of an order's event: its order id and
// aggregate version, "<order_id>:<aggregate_version>". The pair is unique
// in the event store, so every delivery of one event, on every path,
// carries the same id.
func EventID(orderID string, version int64) string {
	return orderID + ":" + strconv.FormatInt(version, 10)
}
