package ports

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Entry answers that tell an activity's cases apart (PlaceOrder). Each is
// matched with errors.Is; ErrActivityNotStarted comes wrapped in a
// *NotStartedError that carries the start.
var (
	// ErrActivityNotFound: no activity SKU with these ids exists.
	ErrActivityNotFound = errors.New("activity not found")
	// ErrActivityNotStarted: the sale has not started yet (see
	// NotStartedError for when it starts).
	ErrActivityNotStarted = errors.New("activity not started")
	// ErrActivityEnded: the sale is over: its ends_at passed, or an
	// operator closed it.
	ErrActivityEnded = errors.New("activity ended")
	// ErrActivityPaused: an operator paused the sale; it may resume.
	ErrActivityPaused = errors.New("activity paused")
	// ErrReleaseInFlight: the buyer's earlier reservation or order of the
	// activity SKU was canceled and its stock is still being released;
	// the buyer may buy again once it is (it always wraps
	// ErrAlreadyPurchased, so callers that only know that one keep
	// working). Wrapped in a *RetryAfterError with the hint.
	ErrReleaseInFlight = errors.New("the previous purchase's release is still in flight")
	// ErrActivityState: the operation does not apply to the activity in
	// its current state (pausing an ended sale, closing a closed one,
	// resuming one that is not paused).
	ErrActivityState = errors.New("not allowed in the activity's state")
)

// NotStartedError is ErrActivityNotStarted with the sale's start.
type NotStartedError struct{ StartsAt time.Time }

// Error implements error.
func (e *NotStartedError) Error() string {
	return fmt.Sprintf("%v: it starts at %s", ErrActivityNotStarted, e.StartsAt.UTC().Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrActivityNotStarted) hold.
func (e *NotStartedError) Unwrap() error { return ErrActivityNotStarted }

// SettingsConflictError is ErrAlreadyExists for a CreateActivity whose
// settings differ from the stored activity's: Fields names each differing
// setting as the API spells it, with the stored and the asked value.
type SettingsConflictError struct {
	Fields []SettingDiff
}

// SettingDiff is one setting that differs.
type SettingDiff struct {
	Field          string
	Stored, Wanted string
}

// Error implements error.
func (e *SettingsConflictError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, d := range e.Fields {
		parts[i] = fmt.Sprintf("%s (stored %s, asked %s)", d.Field, d.Stored, d.Wanted)
	}
	return fmt.Sprintf("%v: the activity exists with other settings: %s", ErrAlreadyExists, strings.Join(parts, ", "))
}

// Unwrap makes errors.Is(err, ErrAlreadyExists) hold.
func (e *SettingsConflictError) Unwrap() error { return ErrAlreadyExists }

// RetryAfterError is Err with a hint of when a retry may succeed.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

// Error implements error.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry in %s)", e.Err, e.After)
}

// Unwrap returns Err.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// ActivityState is where an activity SKU stands, as operators and buyers
// see it. The order of precedence when several hold: ENDED (ends_at
// passed or closed), then SCHEDULED (not started), then PAUSED, then
// SOLD_OUT, else ON_SALE.
type ActivityState string

// The activity states.
const (
	ActivityScheduled ActivityState = "SCHEDULED"
	ActivityOnSale    ActivityState = "ON_SALE"
	ActivityPaused    ActivityState = "PAUSED"
	ActivitySoldOut   ActivityState = "SOLD_OUT"
	ActivityEnded     ActivityState = "ENDED"
)

// StateAt returns a's state at now with the precedence of ActivityState:
// ENDED (closed by an operator, or ends_at reached), then SCHEDULED, then
// PAUSED, then SOLD_OUT (soldOut: the entry has no unit left), else
// ON_SALE. Every reader of a state (the operators' and buyers' calls, the
// status page) computes it here.
func (a Activity) StateAt(now time.Time, soldOut bool) ActivityState {
	switch {
	case a.Ended(now):
		return ActivityEnded
	case now.Before(a.StartsAt):
		return ActivityScheduled
	case a.Paused:
		return ActivityPaused
	case soldOut:
		return ActivitySoldOut
	}
	return ActivityOnSale
}

// Ended reports whether a's sale is over at now: an operator closed it,
// or its ends_at is reached.
func (a Activity) Ended(now time.Time) bool {
	return !a.ClosedAt.IsZero() || !now.Before(a.EndsAt)
}

// ActivityStates lists every state, in the order of a sale's life.
func ActivityStates() []ActivityState {
	return []ActivityState{ActivityScheduled, ActivityOnSale, ActivityPaused, ActivitySoldOut, ActivityEnded}
}

// ActivityStatus is an activity SKU's settings with its state. Settings
// changed by operators are in Activity: EndsAt moved by UpdateActivity or
// CloseActivity, Stock changed by AddStock and RemoveStock.
type ActivityStatus struct {
	Activity Activity
	State    ActivityState
	// Paused: an operator paused the sale (State shows PAUSED only while
	// the sale is otherwise open).
	Paused bool
	// ClosedAt is when an operator closed the sale (zero: not closed).
	ClosedAt time.Time
	// SoldOut: no unit is left to reserve (as far as the entry knows).
	SoldOut bool
	// UpdatedAt is the last change by an operator (or the creation).
	UpdatedAt time.Time
}

// ActivityFilter selects activities for ListActivities.
type ActivityFilter struct {
	// States selects these states (empty: every state).
	States []ActivityState
}

// ActivityPage is one page of activities, ordered by activity id then
// SKU id.
type ActivityPage struct {
	Activities []ActivityStatus
	NextToken  string
}

// ActivityDetail is one activity SKU's status with its live books.
type ActivityDetail struct {
	Status ActivityStatus
	Books  StockReport
}

// ActivityUpdate is what UpdateActivity may change during a sale. A nil
// field is left as it is.
type ActivityUpdate struct {
	ActivityID, SKUID int64
	// EndsAt moves the end of the sale: later, or earlier but not before
	// now (use CloseActivity to end it now).
	EndsAt *time.Time
}

// CloseResult reports a closed sale.
type CloseResult struct {
	Status ActivityStatus
	// Unsold is the number of units no reservation took when the sale
	// closed (the stock left in Redis at that moment).
	Unsold int64
}

// StockChange asks for quantity units to be added to or removed from an
// activity SKU's stock, exactly once per RequestID.
type StockChange struct {
	ActivityID, SKUID int64
	Quantity          int64 // > 0
	// RequestID identifies the change: a retry with the same id changes
	// nothing more and answers the first outcome; another change with the
	// same id is ErrRequestIDReused.
	RequestID string
}

// StockChangeResult is the outcome of a stock change.
type StockChangeResult struct {
	// Applied is false for a retry of a change already applied (the books
	// did not change again).
	Applied bool
	// Stock is the activity SKU's initial stock after the change (the
	// I1/I6 total); Available is Redis's unreserved stock after it.
	Stock, Available int64
}

// ActivityOperations is the operator-facing driving port of running a
// sale. The caller's admin scope is checked by the driving adapter; actor
// names the operator for the audit trail and every method that changes
// state appends exactly one AuditEntry (with the state before and after),
// a refused change too.
type ActivityOperations interface {
	// ListActivities pages through activities (pageSize 1..500, 0: 50)
	// in (activity_id, sku_id) order. A bad token is a *FieldError on
	// "page_token".
	ListActivities(ctx context.Context, f ActivityFilter, pageSize int, pageToken string) (ActivityPage, error)
	// GetActivity returns one activity SKU with its books. ErrNotFound.
	GetActivity(ctx context.Context, activityID, skuID int64) (ActivityDetail, error)
	// UpdateActivity changes what is safe to change during a sale
	// (ActivityUpdate); a change of anything else, or an EndsAt in the
	// past, is a *FieldError saying why. ErrNotFound; ErrActivityState
	// for an ended sale.
	UpdateActivity(ctx context.Context, actor string, u ActivityUpdate) (ActivityStatus, error)
	// PauseActivity stops the entry of the sale: once it returns, no
	// PlaceOrder of the SKU is accepted (ErrActivityPaused) until
	// ResumeActivity; everything accepted before goes on. Pausing a
	// paused sale succeeds and changes nothing. ErrNotFound;
	// ErrActivityState for an ended sale.
	PauseActivity(ctx context.Context, actor string, activityID, skuID int64) (ActivityStatus, error)
	// ResumeActivity undoes PauseActivity. ErrActivityState when the sale
	// is not paused or ended.
	ResumeActivity(ctx context.Context, actor string, activityID, skuID int64) (ActivityStatus, error)
	// CloseActivity ends the sale now: once it returns no PlaceOrder is
	// accepted (ErrActivityEnded); reservations accepted before still
	// become orders or are released. ErrActivityState when it has ended.
	CloseActivity(ctx context.Context, actor string, activityID, skuID int64) (CloseResult, error)
}

// StockOperations changes an activity SKU's stock during a sale, exactly
// once per request id: the Redis books (every stock lane gets its share,
// the sold-out mark is dropped on a restock) and the PostgreSQL books
// (the initial stock of I1 and I6) change once each even when the call is
// retried or the process dies between the two steps, and a Redis rebuild
// from PostgreSQL includes every applied change. Audited like
// ActivityOperations.
type StockOperations interface {
	// AddStock adds c.Quantity units. *FieldError for a quantity <= 0 or
	// a missing request id; ErrNotFound; ErrActivityState for an ended
	// sale; ErrRequestIDReused.
	AddStock(ctx context.Context, actor string, c StockChange) (StockChangeResult, error)
	// RemoveStock removes c.Quantity units not yet reserved, never below
	// zero: when fewer are unreserved it removes nothing and fails with
	// a *FieldError on "quantity" saying how many could be removed.
	RemoveStock(ctx context.Context, actor string, c StockChange) (StockChangeResult, error)
}

// ActivitySwitch changes what the entry's reservation script checks for
// an activity SKU in Redis (implemented by the reservation store's
// adapter).
//
// Contract: once SetPaused(ctx, a, true) returns nil, no Reserve of the
// SKU succeeds (ErrActivityPaused) until SetPaused(ctx, a, false)
// returns; once SetEndsAt(ctx, a, t) returns, Reserve refuses with
// ErrActivityEnded at and after t (a t in the past ends the sale at
// once). Every stock lane of a laned SKU changes before either returns.
// Both are idempotent. A rebuild of the SKU's books from PostgreSQL seeds
// Activity.Paused and Activity.EndsAt as stored, so the switch survives a
// Redis that lost its data. An unseeded SKU is ErrNotFound.
type ActivitySwitch interface {
	SetPaused(ctx context.Context, a Activity, paused bool) error
	SetEndsAt(ctx context.Context, a Activity, endsAt time.Time) error
}

// BuyerActivity is what a buyer may know of an activity SKU: its state
// and window, and the server's clock (so a client counts down against
// the service's time, not its own); never the exact stock.
type BuyerActivity struct {
	ActivityID, SKUID int64
	State             ActivityState
	StartsAt, EndsAt  time.Time
	SoldOut           bool
	ServerTime        time.Time
	UnitPrice         int64
	Currency          string
}

// OrderPage is one page of a buyer's orders, newest first.
type OrderPage struct {
	Orders    []OrderView
	NextToken string
}

// BuyerQueries is the buyer-facing driving port of the new reads.
type BuyerQueries interface {
	// GetActivity returns an activity SKU as a buyer may see it.
	// ErrNotFound.
	GetActivity(ctx context.Context, activityID, skuID int64) (BuyerActivity, error)
	// ListMyOrders pages through userID's own orders, newest first
	// (pageSize 1..100, 0: 20). A bad token is a *FieldError on
	// "page_token".
	ListMyOrders(ctx context.Context, userID int64, pageSize int, pageToken string) (OrderPage, error)
}
