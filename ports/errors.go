package ports

import (
	"errors"
	"fmt"
)

// Sentinel errors shared by ports and the application. Adapters wrap them
// (fmt.Errorf("...: %w", ports.ErrX)) and callers match with errors.Is. The
// Connect adapter maps each to one status code in one place.
var (
	// ErrNotFound: the addressed entity does not exist (or is not visible
	// to the caller).
	ErrNotFound = errors.New("not found")
	// ErrPermissionDenied: the caller may not act on the entity.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrAlreadyExists: an entity with the same key but different content
	// exists.
	ErrAlreadyExists = errors.New("already exists")

	// ErrSoldOut: no stock left to reserve.
	ErrSoldOut = errors.New("sold out")
	// ErrAlreadyPurchased: the user already holds a unit of the activity
	// SKU (a reservation or an order whose stock was not given back; the
	// reservation store answers it in a *HolderError naming the holder).
	// The other refusals of the entry are in activities.go
	// (ErrActivityNotFound, ErrActivityNotStarted, ErrActivityEnded,
	// ErrActivityPaused, ErrReleaseInFlight).
	ErrAlreadyPurchased = errors.New("already purchased")
	// ErrBacklog: admission is closed because the order-create backlog is
	// too old compared to reservation validity.
	ErrBacklog = errors.New("backlog too old, admission closed")
	// ErrStockPaused: selling of the activity SKU is paused while its Redis
	// books are verified and rebuilt after Redis came back as a different
	// process (StockBooks); retry in a few seconds.
	ErrStockPaused = errors.New("stock paused for verification")
	// ErrRateLimited: the user's request rate exceeded the token bucket.
	ErrRateLimited = errors.New("rate limited")
	// ErrRequestIDReused: a request_id was reused for a different activity
	// or SKU.
	ErrRequestIDReused = errors.New("request_id reused with different parameters")
	// ErrOrderNotPayable: the order is canceled (or paid with another
	// payment).
	ErrOrderNotPayable = errors.New("order not payable")
	// ErrPaymentExpired: a payment arrived at or after the order's
	// expires_at (by the database's clock); the order is left to the
	// timeout cancellation.
	ErrPaymentExpired = errors.New("payment deadline passed")
	// ErrPaymentIDReused: the payment id already confirmed another order.
	ErrPaymentIDReused = errors.New("payment id already used for another order")
	// ErrOrderNotCancelable: the order is paid.
	ErrOrderNotCancelable = errors.New("order not cancelable")
	// ErrReplayRefused: a dead letter failed a replay pre-check (replay cap
	// reached, schema still unsupported, message still unprocessable).
	ErrReplayRefused = errors.New("replay refused")

	// ErrConcurrencyConflict: an optimistic-concurrency check failed (the
	// event stream moved past the expected version). Callers reload and
	// decide again.
	ErrConcurrencyConflict = errors.New("concurrency conflict")
	// ErrTransient: a store or broker failure that may succeed when retried
	// (connection loss, deadlock, serialization failure, timeout).
	ErrTransient = errors.New("transient failure")

	// ErrSendUnknown: a publish whose outcome is unknown (timeout, connection
	// reset, server-side internal error): the message may or may not be
	// stored. Never compensate on it; resend with the same message_id.
	ErrSendUnknown = errors.New("send outcome unknown")
	// ErrBrokerUnavailable: the publisher did not write the message: it
	// believes the broker is down (its circuit breaker is open), or it
	// could not start the write within the send bound (every connection
	// or channel it writes on was busy). The message was not stored. It is always wrapped together with
	// ErrSendUnknown, so callers that only know that one retry later with
	// the same message id; callers that know it should pause instead of
	// retrying at once.
	ErrBrokerUnavailable = errors.New("broker unavailable, send not attempted")
	// ErrSendRejected: a publish that definitely did not store the message
	// (topic missing, forbidden, invalid message).
	ErrSendRejected = errors.New("send definitely failed")
)

// HolderError is ErrAlreadyPurchased with the reservation that holds the
// buyer's unit of the activity SKU (Reservations.Reserve answers it), so
// the caller can tell a live purchase from a canceled one whose unit is
// still being given back (ErrReleaseInFlight).
type HolderError struct {
	// ReservationID and OrderID are the holding reservation's ids.
	ReservationID, OrderID string
}

// Error implements error.
func (e *HolderError) Error() string {
	return fmt.Sprintf("%v (held by reservation %s, order %s)", ErrAlreadyPurchased, e.ReservationID, e.OrderID)
}

// Unwrap makes errors.Is(err, ErrAlreadyPurchased) hold.
func (e *HolderError) Unwrap() error { return ErrAlreadyPurchased }

// FieldError reports an invalid request field. Field is the field's name as
// the client spelled it (for example "request_id").
type FieldError struct {
	Field       string
	Description string
}

// Error implements error.
func (e *FieldError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Description)
}

// InvalidField returns a *FieldError for field.
func InvalidField(field, format string, args ...any) error {
	return &FieldError{Field: field, Description: fmt.Sprintf(format, args...)}
}
