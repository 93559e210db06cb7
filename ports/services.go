package ports

import (
	"context"
	"time"
)

// OrderStatus is the externally visible status of an order.
type OrderStatus string

// The visible statuses.
const (
	OrderQueuing  OrderStatus = "QUEUING"
	OrderCreated  OrderStatus = "CREATED"
	OrderPaid     OrderStatus = "PAID"
	OrderCanceled OrderStatus = "CANCELED"
	OrderRejected OrderStatus = "REJECTED"
)

// OrderView is the query view of an order.
type OrderView struct {
	OrderID          string
	ReservationID    string
	ActivityID       int64
	SKUID            int64
	UserID           int64
	Status           OrderStatus
	Reason           string
	AggregateVersion int64
	PaymentID        string
	CreatedAt        time.Time
	UpdatedAt        time.Time
	ExpiresAt        time.Time
	PaidAt           time.Time
	CanceledAt       time.Time
}

// PlaceOrderCommand is a buyer's purchase attempt. UserID comes from the
// authenticated identity, never from the request body.
type PlaceOrderCommand struct {
	UserID     int64
	ActivityID int64
	SKUID      int64
	RequestID  string
}

// PlaceOrderResult acknowledges a reservation.
type PlaceOrderResult struct {
	OrderID       string
	ReservationID string
	Status        OrderStatus
}

// OrderService is the buyer-facing driving port.
type OrderService interface {
	// PlaceOrder reserves one unit and queues the order's creation.
	// Errors: *FieldError, ErrSoldOut, ErrAlreadyPurchased (wrapped in a
	// *RetryAfterError with ErrReleaseInFlight while the buyer's canceled
	// purchase is still being given back), ErrActivityNotFound,
	// ErrActivityNotStarted (a *NotStartedError), ErrActivityEnded,
	// ErrActivityPaused, ErrStockPaused, ErrBacklog, ErrRateLimited,
	// ErrRequestIDReused.
	PlaceOrder(ctx context.Context, cmd PlaceOrderCommand) (PlaceOrderResult, error)
	// GetOrder returns userID's order. ErrNotFound also when the order
	// belongs to someone else.
	GetOrder(ctx context.Context, userID int64, orderID string) (OrderView, error)
	// PayOrder confirms the payment paymentID of orderID on behalf of the
	// payment side (callers authorise it: never a buyer). It is idempotent
	// per payment id. Errors: ErrNotFound, ErrOrderNotPayable,
	// ErrPaymentExpired (at or after expires_at, database clock),
	// ErrPaymentIDReused (paymentID confirmed another order).
	PayOrder(ctx context.Context, orderID, paymentID string) (OrderView, error)
	// CancelOrder cancels userID's unpaid order. Errors: ErrNotFound,
	// ErrOrderNotCancelable.
	CancelOrder(ctx context.Context, userID int64, orderID string) (OrderView, error)
}

// StockReport holds the terms of invariant I6 for one activity SKU.
type StockReport struct {
	ActivityID          int64
	SKUID               int64
	InitialStock        int64
	RedisAvailable      int64
	PendingReservations int64
	NonCanceledOrders   int64
	ReleasesInFlight    int64
	PGFinalStock        int64
	MeasuredAt          time.Time
}

// Drift is InitialStock minus the four conservation terms; 0 when the
// books balance.
func (r StockReport) Drift() int64 {
	return r.InitialStock - r.RedisAvailable - r.PendingReservations - r.NonCanceledOrders - r.ReleasesInFlight
}

// DeadLetter is a stored dead letter.
type DeadLetter struct {
	ID            int64
	ConsumerGroup string
	Topic         string
	MessageID     string
	ErrorClass    string
	LastError     string
	Attempts      int32
	FirstSeenAt   time.Time
	LastSeenAt    time.Time
	ReplayCount   int32
	Status        string
}

// DeadLetterPage is one page of dead letters.
type DeadLetterPage struct {
	DeadLetters []DeadLetter
	NextToken   string
}

// ReplayResult reports a replay.
type ReplayResult struct {
	ReplayID    string
	ReplayCount int32
	Outcome     string
}

// AdminService is the operator-facing driving port. The caller's admin
// scope is checked by the driving adapter; actor names the operator for
// the audit trail (UserActor of the verified token, or a system actor such
// as ActorSeedDemo) and is required by every method that changes state:
// each such call appends exactly one AuditEntry. Read-only methods are not
// audited.
type AdminService interface {
	// CreateActivity stores and seeds an activity, audited under actor.
	// Times and durations are kept at microsecond precision (finer parts
	// are truncated before anything is stored or compared). It leaves
	// either a sellable activity (stored and seeded) or nothing, and is
	// idempotent: a repeated call with equal settings succeeds; different
	// settings for an existing activity fail with ErrAlreadyExists.
	CreateActivity(ctx context.Context, actor string, a Activity) (Activity, error)
	// GetStockReport measures the I6 terms of one activity SKU.
	GetStockReport(ctx context.Context, activityID, skuID int64) (StockReport, error)
	// ListDeadLetters pages through stored dead letters.
	ListDeadLetters(ctx context.Context, group string, pageSize int, pageToken string) (DeadLetterPage, error)
	// ReplayDeadLetter republishes a dead letter with its original
	// message id, audited under actor whatever the outcome (an unknown id
	// too: ErrNotFound, audited as AuditNotFound).
	ReplayDeadLetter(ctx context.Context, actor string, id int64, reason string) (ReplayResult, error)
}
