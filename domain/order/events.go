package order

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// CurrentSchemaVersion is the schema version new events are recorded with.
// It is one number for every event type: version 2 changed only the
// ORDER_CREATED payload (it added unit_price and currency); the payloads of
// ORDER_PAYMENT_STARTED, ORDER_PAID and ORDER_CANCELED are the same in
// versions 1 and 2. DecodePayload accepts every version from 1 up to it and
// returns the payload in the current version's form; stored events are
// never rewritten.
const CurrentSchemaVersion = 2

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

// Created records the creation of an order from a reservation. This is its
// schema version 2 form; version 1 had no UnitPrice and Currency
// (createdV1).
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
	// UnitPrice is the price of one unit in minor units of Currency (for
	// example cents), copied from the activity when the order was created.
	// 0 means unknown: the order was created before prices were recorded
	// (a stored schema version 1 event, upcast) or its activity has no
	// price.
	UnitPrice int64 `json:"unit_price"`
	// Currency is the ISO 4217 code of UnitPrice (three upper-case
	// letters), empty exactly when UnitPrice is 0 (price unknown).
	Currency string `json:"currency"`
}

// createdV1 is the ORDER_CREATED payload of schema version 1, as stored
// before prices were recorded. It is only read, never written.
type createdV1 struct {
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

// upcast returns the version-2 form of a version-1 payload: the unit price
// is unknown (0, "").
func (c createdV1) upcast() Created {
	return Created{
		OrderID: c.OrderID, ReservationID: c.ReservationID, MessageID: c.MessageID,
		ActivityID: c.ActivityID, SKUID: c.SKUID, UserID: c.UserID, Quantity: c.Quantity,
		ReservedAt: c.ReservedAt, ExpiresAt: c.ExpiresAt,
	}
}

// IsCurrency reports whether code has the form of an ISO 4217 currency
// code: exactly three upper-case ASCII letters ("EUR", "USD"). It does not
// check the code against the ISO list.
func IsCurrency(code string) bool {
	if len(code) != 3 {
		return false
	}
	for i := range len(code) {
		if code[i] < 'A' || code[i] > 'Z' {
			return false
		}
	}
	return true
}

// checkPrice checks the price rule shared by NewOrder and a decoded
// Created: unitPrice >= 0, and currency is an ISO 4217 code when unitPrice
// > 0 and empty when it is 0. It names the failing field.
func checkPrice(unitPrice int64, currency string) error {
	switch {
	case unitPrice < 0:
		return errors.New("unit_price must be >= 0")
	case unitPrice > 0 && !IsCurrency(currency):
		return fmt.Errorf("currency %q must be three upper-case letters (ISO 4217) when unit_price > 0", currency)
	case unitPrice == 0 && currency != "":
		return fmt.Errorf("currency %q must be empty when unit_price is 0", currency)
	}
	return nil
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

// DecodePayload parses a stored payload of type t and schema version v and
// returns it in the form of CurrentSchemaVersion. It is the one upcasting
// point of the service: every reader of stored events (Rehydrate's callers,
// the event subscription) decodes through it, so nothing outside the
// domain sees an old version. A version-1 ORDER_CREATED is read in its
// version-1 form and upcast: UnitPrice 0 and Currency "" (the price is
// unknown, the order was created before prices were recorded). It fails
// with ErrCorruptStream for unknown types, for schema versions below 1 or
// newer than CurrentSchemaVersion, for malformed JSON and for a
// version-2 ORDER_CREATED whose price breaks the price rule.
func DecodePayload(t EventType, v int, data []byte) (Payload, error) {
	if v < 1 || v > CurrentSchemaVersion {
		return nil, fmt.Errorf("%w: %s schema version %d unsupported", ErrCorruptStream, t, v)
	}
	var (
		p   Payload
		err error
	)
	switch {
	case t == EventCreated && v == 1:
		var c createdV1
		err = json.Unmarshal(data, &c)
		p = c.upcast()
	case t == EventCreated:
		var c Created
		if err = json.Unmarshal(data, &c); err == nil {
			err = checkPrice(c.UnitPrice, c.Currency)
		}
		p = c
	case t == EventPaymentStarted:
		var s PaymentStarted
		err = json.Unmarshal(data, &s)
		p = s
	case t == EventPaid:
		var s Paid
		err = json.Unmarshal(data, &s)
		p = s
	case t == EventCanceled:
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
