package message

import (
	"fmt"
	"time"
)

// OrderCreateRequested (schema v1, spec 9.1) asks the order-create consumer
// to turn a reservation into an order. Producer: PlaceOrder and the resend
// scanner. Key: reservation_id. Tag: CREATE_ORDER. Topic: ORDER_CREATE
// (NORMAL).
type OrderCreateRequested struct {
	Envelope
	RequestID            string    `json:"request_id"`
	ReservationID        string    `json:"reservation_id"`
	OrderID              string    `json:"order_id"`
	ActivityID           int64     `json:"activity_id"`
	SKUID                int64     `json:"sku_id"`
	UserID               int64     `json:"user_id"`
	Quantity             int32     `json:"quantity"`
	ReservationCreatedAt time.Time `json:"reservation_created_at"`
	// ReservationValidUntil is the immutable business deadline: the order
	// may only be created before it, however late the message arrives.
	ReservationValidUntil time.Time `json:"reservation_valid_until"`
}

// Validate checks the message against spec 12: schema 1, the event type,
// all ids present, positive numeric ids, quantity 1 and a validity window
// that ends after it starts.
func (m OrderCreateRequested) Validate() error {
	if err := m.Envelope.validate(TypeOrderCreateRequested); err != nil {
		return err
	}
	switch {
	case m.RequestID == "" || len(m.RequestID) > 128:
		return fmt.Errorf("%w: request_id must be 1..128 characters", ErrInvalid)
	case m.ReservationID == "":
		return fmt.Errorf("%w: reservation_id is empty", ErrInvalid)
	case m.OrderID == "" || len(m.OrderID) > 63:
		return fmt.Errorf("%w: order_id must be 1..63 characters", ErrInvalid)
	case m.ActivityID <= 0:
		return fmt.Errorf("%w: activity_id must be > 0", ErrInvalid)
	case m.SKUID <= 0:
		return fmt.Errorf("%w: sku_id must be > 0", ErrInvalid)
	case m.UserID <= 0:
		return fmt.Errorf("%w: user_id must be > 0", ErrInvalid)
	case m.Quantity != 1:
		return fmt.Errorf("%w: quantity must be 1", ErrInvalid)
	case m.ReservationCreatedAt.IsZero():
		return fmt.Errorf("%w: reservation_created_at is missing", ErrInvalid)
	case !m.ReservationValidUntil.After(m.ReservationCreatedAt):
		return fmt.Errorf("%w: reservation_valid_until must be after reservation_created_at", ErrInvalid)
	}
	return nil
}

// Encode validates m and returns its JSON body.
func (m OrderCreateRequested) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return encode(m)
}

// Properties returns the broker properties of spec 12 for m.
func (m OrderCreateRequested) Properties() map[string]string {
	return map[string]string{
		PropMessageID:     m.MessageID,
		PropRequestID:     m.RequestID,
		PropReservationID: m.ReservationID,
		PropOrderID:       m.OrderID,
		PropSchemaVersion: fmt.Sprint(m.SchemaVersion),
		PropTraceparent:   m.Trace.Traceparent,
	}
}

// DecodeOrderCreateRequested parses and validates a body. It never panics;
// errors match ErrMalformed, ErrUnsupportedSchema or ErrInvalid.
func DecodeOrderCreateRequested(body []byte) (OrderCreateRequested, error) {
	var m OrderCreateRequested
	if err := decodeObject(body, &m); err != nil {
		return OrderCreateRequested{}, err
	}
	if err := m.Validate(); err != nil {
		return OrderCreateRequested{}, err
	}
	return m, nil
}
