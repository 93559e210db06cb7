package message

import (
	"fmt"
	"time"
)

// CancelOrderIfUnpaid (schema v1, spec 19.1) is the delayed trigger of the
// payment timeout. It only says "check now": the consumer cancels only when
// the order is still unpaid and expires_at <= the database's now().
// Topic: ORDER_TIMEOUT (DELAY, delivery time = DeliverAt). Key: order_id.
type CancelOrderIfUnpaid struct {
	Envelope
	OrderID       string    `json:"order_id"`
	ReservationID string    `json:"reservation_id"`
	ActivityID    int64     `json:"activity_id"`
	SKUID         int64     `json:"sku_id"`
	UserID        int64     `json:"user_id"`
	DeliverAt     time.Time `json:"deliver_at"`
}

// Validate checks the fields.
func (m CancelOrderIfUnpaid) Validate() error {
	if err := m.Envelope.validate(TypeCancelOrderIfUnpaid); err != nil {
		return err
	}
	return validateOrderRef(m.OrderID, m.ReservationID, m.ActivityID, m.SKUID, m.UserID)
}

// Encode validates m and returns its JSON body.
func (m CancelOrderIfUnpaid) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return encode(m)
}

// DecodeCancelOrderIfUnpaid parses and validates a body.
func DecodeCancelOrderIfUnpaid(body []byte) (CancelOrderIfUnpaid, error) {
	var m CancelOrderIfUnpaid
	if err := decodeObject(body, &m); err != nil {
		return CancelOrderIfUnpaid{}, err
	}
	if err := m.Validate(); err != nil {
		return CancelOrderIfUnpaid{}, err
	}
	return m, nil
}

// MaxTimeoutChecks bounds the checks one CancelOrdersIfUnpaid carries.
const MaxTimeoutChecks = 1000

// CancelOrdersIfUnpaid (schema v1) is the coalesced payment-timeout
// trigger: one delay message standing for the CancelOrderIfUnpaid checks
// of several orders of one activity that fall due in the same second (the
// outbox relay merges the rows it claims together). It says no more than
// its checks would alone: "check these orders now". Each check keeps its
// own envelope, so its message_id stays the inbox key of that order's
// check and its trace the order's; the trigger's own message_id only
// names the trigger. DeliverAt is not before any check's DeliverAt.
// Topic: ORDER_TIMEOUT (DELAY, delivery time = DeliverAt). Key:
// activity_id.
type CancelOrdersIfUnpaid struct {
	Envelope
	ActivityID int64                 `json:"activity_id"`
	DeliverAt  time.Time             `json:"deliver_at"`
	Checks     []CancelOrderIfUnpaid `json:"checks"`
}

// Validate checks the fields: 1..MaxTimeoutChecks valid checks, all of
// ActivityID and due no later than DeliverAt.
func (m CancelOrdersIfUnpaid) Validate() error {
	if err := m.Envelope.validate(TypeCancelOrdersIfUnpaid); err != nil {
		return err
	}
	switch {
	case m.ActivityID <= 0:
		return fmt.Errorf("%w: activity_id must be positive", ErrInvalid)
	case m.DeliverAt.IsZero():
		return fmt.Errorf("%w: deliver_at is missing", ErrInvalid)
	case len(m.Checks) == 0 || len(m.Checks) > MaxTimeoutChecks:
		return fmt.Errorf("%w: checks must hold 1..%d checks, not %d", ErrInvalid, MaxTimeoutChecks, len(m.Checks))
	}
	for i, c := range m.Checks {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("checks[%d]: %w", i, err)
		}
		if c.ActivityID != m.ActivityID {
			return fmt.Errorf("%w: checks[%d] is of activity %d, the trigger of %d", ErrInvalid, i, c.ActivityID, m.ActivityID)
		}
		if c.DeliverAt.After(m.DeliverAt) {
			return fmt.Errorf("%w: checks[%d] is due after the trigger's deliver_at", ErrInvalid, i)
		}
	}
	return nil
}

// Encode validates m and returns its JSON body.
func (m CancelOrdersIfUnpaid) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return encode(m)
}

// DecodePaymentTimeout parses and validates a body of the ORDER_TIMEOUT
// topic, a CancelOrderIfUnpaid or a CancelOrdersIfUnpaid, and returns its
// envelope and the checks it asks for (one, or the trigger's). Any other
// event_type is ErrUnsupportedSchema.
func DecodePaymentTimeout(body []byte) (Envelope, []CancelOrderIfUnpaid, error) {
	env, err := PeekEnvelope(body)
	if err != nil {
		return Envelope{}, nil, err
	}
	switch env.EventType {
	case TypeCancelOrderIfUnpaid:
		m, err := DecodeCancelOrderIfUnpaid(body)
		if err != nil {
			return env, nil, err
		}
		return m.Envelope, []CancelOrderIfUnpaid{m}, nil
	case TypeCancelOrdersIfUnpaid:
		var m CancelOrdersIfUnpaid
		if err := decodeObject(body, &m); err != nil {
			return env, nil, err
		}
		if err := m.Validate(); err != nil {
			return env, nil, err
		}
		return m.Envelope, m.Checks, nil
	}
	return env, nil, fmt.Errorf("%w: event_type %q on the payment-timeout topic", ErrUnsupportedSchema, env.EventType)
}

// ReleaseReservation (schema v1) asks the compensation consumer to give a
// reservation's stock back in Redis. It is a compensation task (seed 004
// 4.1): it names the failure class that caused it and bounds its own
// retries with MaxAttempts and RetryUntil; what exhausts them goes to the
// dead-letter path. Applying it twice has no further effect (invariant I4).
// Topic: INVENTORY_COMPENSATE (NORMAL). Key: reservation_id.
type ReleaseReservation struct {
	Envelope
	ReservationID string `json:"reservation_id"`
	OrderID       string `json:"order_id"`
	ActivityID    int64  `json:"activity_id"`
	SKUID         int64  `json:"sku_id"`
	UserID        int64  `json:"user_id"`
	// Reason is a reservation.ReleaseReason (RESERVATION_EXPIRED, ...).
	Reason string `json:"reason"`
	// FailureClass groups reasons for operations: BUSINESS_REJECT,
	// ORDER_CANCELED, SEND_FAILED or RECONCILE.
	FailureClass string    `json:"failure_class"`
	MaxAttempts  int32     `json:"max_attempts"`
	RetryUntil   time.Time `json:"retry_until"`
}

// Validate checks the fields.
func (m ReleaseReservation) Validate() error {
	if err := m.Envelope.validate(TypeReleaseReservation); err != nil {
		return err
	}
	if err := validateOrderRef(m.OrderID, m.ReservationID, m.ActivityID, m.SKUID, m.UserID); err != nil {
		return err
	}
	switch {
	case m.Reason == "":
		return fmt.Errorf("%w: reason is empty", ErrInvalid)
	case m.FailureClass == "":
		return fmt.Errorf("%w: failure_class is empty", ErrInvalid)
	case m.MaxAttempts <= 0:
		return fmt.Errorf("%w: max_attempts must be > 0", ErrInvalid)
	case m.RetryUntil.IsZero():
		return fmt.Errorf("%w: retry_until is missing", ErrInvalid)
	}
	return nil
}

// Encode validates m and returns its JSON body.
func (m ReleaseReservation) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return encode(m)
}

// DecodeReleaseReservation parses and validates a body.
func DecodeReleaseReservation(body []byte) (ReleaseReservation, error) {
	var m ReleaseReservation
	if err := decodeObject(body, &m); err != nil {
		return ReleaseReservation{}, err
	}
	if err := m.Validate(); err != nil {
		return ReleaseReservation{}, err
	}
	return m, nil
}

// OrderState is the order snapshot carried by order events and state
// changes. Status is CREATED, PAID, CANCELED or REJECTED.
type OrderState struct {
	OrderID          string `json:"order_id"`
	ReservationID    string `json:"reservation_id"`
	ActivityID       int64  `json:"activity_id"`
	SKUID            int64  `json:"sku_id"`
	UserID           int64  `json:"user_id"`
	Status           string `json:"status"`
	Reason           string `json:"reason,omitempty"`
	PaymentID        string `json:"payment_id,omitempty"`
	AggregateVersion int64  `json:"aggregate_version"`
	// PreviousVersion is the version the change started from (one command
	// may append several events); a projection holding exactly this
	// version can apply the change without looking further.
	PreviousVersion int64     `json:"previous_version"`
	CreatedAt       time.Time `json:"order_created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
	ExpiresAt       time.Time `json:"expires_at,omitzero"`
	PaidAt          time.Time `json:"paid_at,omitzero"`
	CanceledAt      time.Time `json:"canceled_at,omitzero"`
}

func (s OrderState) validate() error {
	if err := validateOrderRef(s.OrderID, s.ReservationID, s.ActivityID, s.SKUID, s.UserID); err != nil {
		return err
	}
	switch s.Status {
	case "CREATED", "PAYING", "PAID", "CANCELED", "REJECTED":
	default:
		return fmt.Errorf("%w: status %q", ErrInvalid, s.Status)
	}
	if s.AggregateVersion <= 0 {
		return fmt.Errorf("%w: aggregate_version must be > 0", ErrInvalid)
	}
	if s.PreviousVersion < 0 || s.PreviousVersion >= s.AggregateVersion {
		return fmt.Errorf("%w: previous_version must be in [0, aggregate_version)", ErrInvalid)
	}
	return nil
}

// OrderEvent (schema v1) is a domain event for downstream consumers:
// event_type ORDER_CREATED, ORDER_PAID or ORDER_CANCELED. Topic: ORDER_EVENT
// (NORMAL). Key: order_id. Tag: the event type.
type OrderEvent struct {
	Envelope
	OrderState
}

// Validate checks the fields.
func (m OrderEvent) Validate() error {
	switch m.EventType {
	case TypeOrderCreated, TypeOrderPaid, TypeOrderCanceled:
	default:
		return fmt.Errorf("%w: event_type %q", ErrUnsupportedSchema, m.EventType)
	}
	if err := m.Envelope.validate(m.EventType); err != nil {
		return err
	}
	return m.OrderState.validate()
}

// Encode validates m and returns its JSON body.
func (m OrderEvent) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return encode(m)
}

// DecodeOrderEvent parses and validates a body.
func DecodeOrderEvent(body []byte) (OrderEvent, error) {
	var m OrderEvent
	if err := decodeObject(body, &m); err != nil {
		return OrderEvent{}, err
	}
	if err := m.Validate(); err != nil {
		return OrderEvent{}, err
	}
	return m, nil
}

// OrderStateChanged (schema v1) feeds the query-view projection. One is
// emitted per committed change of an order (or its rejection), carrying the
// state after the change and its aggregate_version; a projection applies it
// only when the version is newer than what it holds. Topic: ORDER_STATE_FIFO
// (FIFO, message group = order_id). Key: order_id.
type OrderStateChanged struct {
	Envelope
	OrderState
}

// Validate checks the fields.
func (m OrderStateChanged) Validate() error {
	if err := m.Envelope.validate(TypeOrderStateChanged); err != nil {
		return err
	}
	return m.OrderState.validate()
}

// Encode validates m and returns its JSON body.
func (m OrderStateChanged) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return encode(m)
}

// DecodeOrderStateChanged parses and validates a body.
func DecodeOrderStateChanged(body []byte) (OrderStateChanged, error) {
	var m OrderStateChanged
	if err := decodeObject(body, &m); err != nil {
		return OrderStateChanged{}, err
	}
	if err := m.Validate(); err != nil {
		return OrderStateChanged{}, err
	}
	return m, nil
}

func validateOrderRef(orderID, reservationID string, activityID, skuID, userID int64) error {
	switch {
	case orderID == "" || len(orderID) > 63:
		return fmt.Errorf("%w: order_id must be 1..63 characters", ErrInvalid)
	case reservationID == "":
		return fmt.Errorf("%w: reservation_id is empty", ErrInvalid)
	case activityID <= 0 || skuID <= 0 || userID <= 0:
		return fmt.Errorf("%w: activity_id, sku_id and user_id must be > 0", ErrInvalid)
	}
	return nil
}
