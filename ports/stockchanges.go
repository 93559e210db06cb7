package ports

import (
	"context"
	"time"
)

// FailStockChangeAfterRedis is the failpoint between the two steps of a
// stock change (StockOperations): the Redis books are changed, the
// PostgreSQL transaction that records the change as APPLIED has not
// committed. An error there leaves the change PENDING in PostgreSQL and
// applied in Redis, as if the process had died; the recovery worker (or a
// retry of the same request id) finishes it without changing Redis again.
const FailStockChangeAfterRedis = "stockchange.after_redis"

// StockChangeStatus is where a recorded stock change stands.
type StockChangeStatus string

// The stock change statuses. PENDING is the only one that changes: to
// APPLIED or to REFUSED, once.
const (
	// StockChangePending: recorded, not yet known to be applied in both
	// books (Redis may or may not hold it).
	StockChangePending StockChangeStatus = "PENDING"
	// StockChangeApplied: both books hold the change.
	StockChangeApplied StockChangeStatus = "APPLIED"
	// StockChangeRefused: a removal of more units than were unreserved;
	// neither book changed.
	StockChangeRefused StockChangeStatus = "REFUSED"
)

// StockChangeRecord is one stock change as PostgreSQL records it (table
// stock_changes).
type StockChangeRecord struct {
	RequestID         string
	ActivityID, SKUID int64
	// Delta is the change of the stock: > 0 adds units, < 0 removes them.
	Delta  int64
	Status StockChangeStatus
	// Actor is the operator who asked for the change (AuditEntry.Actor).
	Actor string
	// CreatedAt is when the change was recorded; AppliedAt when it became
	// APPLIED or REFUSED (zero while PENDING).
	CreatedAt, AppliedAt time.Time
	// StockBefore and StockAfter are the activity SKU's initial stock
	// (activities.stock) around an APPLIED change.
	StockBefore, StockAfter int64
	// Available is Redis's unreserved stock after an APPLIED change, or
	// the units that could have been removed for a REFUSED one.
	Available int64
}

// Same reports whether r asks for the same change as o (the activity SKU
// and delta): a request id sent again with another change is
// ErrRequestIDReused.
func (r StockChangeRecord) Same(o StockChangeRecord) bool {
	return r.ActivityID == o.ActivityID && r.SKUID == o.SKUID && r.Delta == o.Delta
}

// StockChangeStore records stock changes in PostgreSQL (see
// StockOperations for the guarantees and docs/architecture.md "Stock
// changes" for the steps). Every method runs in the caller's transaction.
type StockChangeStore interface {
	// BeginStockChange inserts c as PENDING (CreatedAt the transaction's
	// time; c's Status and results are ignored) unless a change with
	// c.RequestID exists, and returns the stored change with created =
	// false then (whatever it asks for: the caller compares with Same).
	// ErrNotFound for an unknown activity SKU.
	BeginStockChange(ctx context.Context, c StockChangeRecord) (stored StockChangeRecord, created bool, err error)
	// LockStockChange returns the change with requestID and locks it
	// until the transaction ends (a concurrent call waits). ErrNotFound.
	LockStockChange(ctx context.Context, requestID string) (StockChangeRecord, error)
	// ApplyStockChange finishes the locked PENDING change requestID as
	// APPLIED: the activity SKU's initial stock (activities.stock) and its
	// final stock (sku_stock) move by the change's delta; available is
	// Redis's unreserved stock after it. It returns the finished change.
	// A removal larger than the final stock fails (the caller's
	// transaction must then roll back; PostgreSQL's final stock is never
	// below Redis's unreserved stock, so this is a fault); a change that
	// is not PENDING fails with ErrActivityState.
	ApplyStockChange(ctx context.Context, requestID string, available int64) (StockChangeRecord, error)
	// RefuseStockChange finishes the locked PENDING change requestID as
	// REFUSED: removable is how many units could have been removed.
	// ErrActivityState when it is not PENDING.
	RefuseStockChange(ctx context.Context, requestID string, removable int64) (StockChangeRecord, error)
	// PendingStockChanges returns up to limit PENDING changes recorded
	// before createdBefore, oldest first (for the recovery worker).
	PendingStockChanges(ctx context.Context, createdBefore time.Time, limit int) ([]StockChangeRecord, error)
	// LockPendingStockChanges locks every PENDING change of an activity
	// SKU until the transaction ends and returns their request ids in
	// order. The stock recovery holds these locks while it rebuilds the
	// Redis books, so that no change of the SKU becomes APPLIED between
	// its read of PostgreSQL and its write of Redis.
	LockPendingStockChanges(ctx context.Context, activityID, skuID int64) ([]string, error)
	// HasPendingStockChanges reports whether an activity SKU has a
	// PENDING change (the reconciler does not count the drift of such a
	// SKU: the two books differ by the change until it finishes).
	HasPendingStockChanges(ctx context.Context, activityID, skuID int64) (bool, error)
}

// RedisStockChange is the outcome of StockChanger.ChangeStock.
type RedisStockChange struct {
	// Fresh: this call changed the Redis books (false when the change was
	// applied before, in the books' current epoch).
	Fresh bool
	// Refused: a removal found fewer unreserved units than it asks for
	// and changed nothing.
	Refused bool
	// Available is the unreserved stock after the change, or, for a
	// refused removal, the units that could have been removed.
	Available int64
}

// StockChanger is the Redis side of a stock change (implemented by the
// reservation store's adapter).
//
// Contract: ChangeStock applies delta to the activity SKU's stock counters
// at most once per requestID within the books' current epoch (the epoch
// changes when StockBooks.Rebuild rewrites the books from PostgreSQL,
// which counts only APPLIED changes, so a PENDING change applies once
// more after a rebuild and never twice before). An addition gives each
// stock lane its share (delta / lanes, the first delta % lanes lanes one
// more); a removal takes only unreserved units and, when fewer than
// -delta are unreserved over every lane, changes nothing and reports
// Refused. Calling it again with the same arguments is safe at any time:
// it never applies a change twice in one epoch (a refused removal keeps
// nothing, so a later call may find the units and apply it). A frozen activity SKU (a recovery is
// pending) fails with ErrStockPaused and changes nothing; an unseeded one
// with ErrNotFound.
type StockChanger interface {
	ChangeStock(ctx context.Context, a Activity, requestID string, delta int64) (RedisStockChange, error)
}

// Audited actions and outcomes of StockOperations (AuditEntry). The
// target is ActivityTarget; params hold request_id and quantity, and
// stock_before, stock_after and available once applied (removable when
// refused).
const (
	// AuditAddStock: StockOperations.AddStock.
	AuditAddStock = "ADD_STOCK"
	// AuditRemoveStock: StockOperations.RemoveStock.
	AuditRemoveStock = "REMOVE_STOCK"
	// AuditStockApplied: the change was applied to both books by this
	// call (or by the recovery worker: params finished_by).
	AuditStockApplied = "APPLIED"
	// AuditStockRefused: a removal of more units than were unreserved.
	AuditStockRefused = "REFUSED"
	// AuditStockRepeated: a retry of a finished change; nothing changed
	// (params status: the first outcome).
	AuditStockRepeated = "REPEATED"
	// AuditRequestIDReused: the request id names another change.
	AuditRequestIDReused = "REQUEST_ID_REUSED"
	// AuditActivityEnded: the sale has ended; nothing changed.
	AuditActivityEnded = "ENDED"
)

// ActorStockChanges finishes the stock changes a crash or a failure left
// PENDING (the recovery worker of StockOperations).
const ActorStockChanges = "system:stock-changes"
