package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/seckill-dev/seckill/ports"
)

// Bounds of a stock change request.
const (
	// maxStockRequestID bounds the length of a stock change's request id.
	maxStockRequestID = 128
	// maxStockQuantity bounds the units of one stock change.
	maxStockQuantity = 1_000_000_000
)

// Defaults of StockChangesConfig.
const (
	// DefaultStockChangeRecoverAfter is StockChangesConfig.RecoverAfter's
	// default.
	DefaultStockChangeRecoverAfter = 5 * time.Second
	// DefaultStockChangeInterval is StockChangesConfig.Interval's default.
	DefaultStockChangeInterval = 2 * time.Second
	// DefaultStockChangeBatch is StockChangesConfig.Batch's default.
	DefaultStockChangeBatch = 100
)

// StockChangesConfig tunes the recovery worker of StockChanges (Run).
type StockChangesConfig struct {
	// RecoverAfter is how old a PENDING change must be before the worker
	// finishes it (younger ones are most likely being finished by the
	// call that recorded them). Default 5s.
	RecoverAfter time.Duration
	// Interval is how often the worker looks for PENDING changes.
	// Default 2s.
	Interval time.Duration
	// Batch bounds the changes one pass finishes. Default 100.
	Batch int
}

// StockChanges implements ports.StockOperations (docs/architecture.md
// "Stock changes"): a change is first recorded PENDING in PostgreSQL
// under its request id (a retry finds it there), then finished in one
// transaction that locks the row, applies the change to the Redis books
// (ports.StockChanger: once per request id and books epoch), and records
// it APPLIED (activities.stock and the final stock moved) or REFUSED, with
// its audit row. A crash or failure between the Redis step and the commit
// leaves the change PENDING with Redis applied; the retry of the call or
// the worker (Run) finishes it, and the Redis step then changes nothing
// again. Safe for concurrent use.
type StockChanges struct {
	uow        ports.UnitOfWork
	redis      ports.StockChanger
	activities *Activities
	place      *PlaceOrder
	fp         ports.Failpoints
	log        *slog.Logger
	cfg        StockChangesConfig
}

// NewStockChanges wires the stock changes. activities (the activity cache,
// updated with the new stock) and place (whose sold-out mark of the SKU
// is dropped at once by a restock) may be nil; fp may be nil (no
// failpoints). Zero fields of cfg take their defaults.
func NewStockChanges(uow ports.UnitOfWork, redis ports.StockChanger, activities *Activities, place *PlaceOrder,
	fp ports.Failpoints, log *slog.Logger, cfg StockChangesConfig) *StockChanges {
	if cfg.RecoverAfter <= 0 {
		cfg.RecoverAfter = DefaultStockChangeRecoverAfter
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultStockChangeInterval
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultStockChangeBatch
	}
	return &StockChanges{uow: uow, redis: redis, activities: activities, place: place, fp: fp,
		log: log.With("component", "stock-changes"), cfg: cfg}
}

// AddStock implements ports.StockOperations.
func (s *StockChanges) AddStock(ctx context.Context, actor string, c ports.StockChange) (ports.StockChangeResult, error) {
	return s.change(ctx, actor, c, 1)
}

// RemoveStock implements ports.StockOperations.
func (s *StockChanges) RemoveStock(ctx context.Context, actor string, c ports.StockChange) (ports.StockChangeResult, error) {
	return s.change(ctx, actor, c, -1)
}

// validateStockChange checks a request before anything is stored.
func validateStockChange(actor string, c ports.StockChange) error {
	switch {
	case actor == "":
		return errNoActor
	case c.ActivityID <= 0:
		return ports.InvalidField("activity_id", "must be > 0")
	case c.SKUID <= 0:
		return ports.InvalidField("sku_id", "must be > 0")
	case c.Quantity <= 0:
		return ports.InvalidField("quantity", "must be > 0")
	case c.Quantity > maxStockQuantity:
		return ports.InvalidField("quantity", "must be at most %d", maxStockQuantity)
	case c.RequestID == "":
		return ports.InvalidField("request_id", "is required")
	case len(c.RequestID) > maxStockRequestID || !stockRequestText(c.RequestID):
		return ports.InvalidField("request_id", "must be valid UTF-8 text of at most %d bytes", maxStockRequestID)
	}
	return nil
}

// stockRequestText reports whether s is valid UTF-8 without NUL characters.
func stockRequestText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := range len(s) {
		if s[i] == 0 {
			return false
		}
	}
	return true
}

// change runs one AddStock (sign 1) or RemoveStock (sign -1).
func (s *StockChanges) change(ctx context.Context, actor string, c ports.StockChange, sign int64) (ports.StockChangeResult, error) {
	if err := validateStockChange(actor, c); err != nil {
		return ports.StockChangeResult{}, fmt.Errorf("stock change: %w", err)
	}
	action := ports.AuditAddStock
	if sign < 0 {
		action = ports.AuditRemoveStock
	}
	want := ports.StockChangeRecord{RequestID: c.RequestID, ActivityID: c.ActivityID, SKUID: c.SKUID,
		Delta: sign * c.Quantity, Actor: actor}
	entry := ports.AuditEntry{Actor: actor, Action: action, Target: ports.ActivityTarget(c.ActivityID, c.SKUID),
		Params: map[string]any{"request_id": c.RequestID, "quantity": c.Quantity}}

	stored, err := s.begin(ctx, want)
	var outcome string
	switch {
	case errors.Is(err, ports.ErrNotFound):
		outcome = ports.AuditNotFound
	case errors.Is(err, ports.ErrRequestIDReused):
		outcome = ports.AuditRequestIDReused
	case errors.Is(err, ports.ErrActivityState):
		outcome = ports.AuditActivityEnded
	case err != nil:
		outcome = ports.AuditFailed
	case stored.Status != ports.StockChangePending:
		outcome = ports.AuditStockRepeated
	}
	if outcome != "" {
		if err != nil {
			entry.Params["error"] = err.Error()
		} else {
			entry.Params["status"] = string(stored.Status)
		}
		entry.Outcome = outcome
		if aerr := auditAlone(ctx, s.uow, entry); aerr != nil {
			err = errors.Join(err, aerr)
		}
		if err != nil {
			return ports.StockChangeResult{}, fmt.Errorf("stock change %q: %w", c.RequestID, err)
		}
		return stockChangeResult(stored, false)
	}

	done, fresh, err := s.finish(ctx, c.RequestID, entry)
	if err != nil {
		entry.Outcome, entry.Params["error"] = ports.AuditFailed, err.Error()
		if aerr := auditAlone(ctx, s.uow, entry); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return ports.StockChangeResult{}, fmt.Errorf("stock change %q: %w", c.RequestID, err)
	}
	return stockChangeResult(done, fresh)
}

// stockChangeResult is the answer of a finished change: the stored outcome, with
// Applied when this call applied it; a refused removal is a *FieldError
// on "quantity" naming how many units could be removed.
func stockChangeResult(c ports.StockChangeRecord, fresh bool) (ports.StockChangeResult, error) {
	if c.Status == ports.StockChangeRefused {
		return ports.StockChangeResult{}, fmt.Errorf("remove stock %q: %w", c.RequestID,
			ports.InvalidField("quantity", "only %d unreserved units can be removed (asked for %d)", c.Available, -c.Delta))
	}
	return ports.StockChangeResult{Applied: fresh && c.Status == ports.StockChangeApplied, Stock: c.StockAfter,
		Available: c.Available}, nil
}

// begin records want as PENDING, or returns the change stored under its
// request id (ErrRequestIDReused when that asks for another change). A
// new change of a sale that has ended is ErrActivityState; a stored one
// is returned whatever the sale's state (it was accepted before).
func (s *StockChanges) begin(ctx context.Context, want ports.StockChangeRecord) (ports.StockChangeRecord, error) {
	var stored ports.StockChangeRecord
	err := s.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		a, err := tx.GetActivity(ctx, want.ActivityID, want.SKUID)
		if err != nil {
			return err
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if !now.Before(a.EndsAt) || !a.ClosedAt.IsZero() {
			prior, err := tx.LockStockChange(ctx, want.RequestID)
			switch {
			case errors.Is(err, ports.ErrNotFound):
				return fmt.Errorf("activity %d sku %d ended at %s: %w", a.ActivityID, a.SKUID,
					a.EndsAt.UTC().Format(time.RFC3339), ports.ErrActivityState)
			case err != nil:
				return err
			}
			stored = prior
		} else if stored, _, err = tx.BeginStockChange(ctx, want); err != nil {
			return err
		}
		if !stored.Same(want) {
			return fmt.Errorf("request id %q names a change of %+d units of activity %d sku %d: %w",
				want.RequestID, stored.Delta, stored.ActivityID, stored.SKUID, ports.ErrRequestIDReused)
		}
		return nil
	})
	return stored, err
}

// finish finishes the change requestID if it is still PENDING: in one
// transaction it locks the row, applies the change to Redis, and records
// the outcome with entry (its outcome and results filled in) as the audit
// row. fresh reports that this call finished it. After an applied change
// the activity cache takes the new stock and a restock drops the
// sold-out mark of the SKU.
func (s *StockChanges) finish(ctx context.Context, requestID string, entry ports.AuditEntry) (done ports.StockChangeRecord, fresh bool, err error) {
	var act ports.Activity
	err = s.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		fresh = false
		c, err := tx.LockStockChange(ctx, requestID)
		if err != nil {
			return err
		}
		done = c
		if c.Status != ports.StockChangePending {
			return nil
		}
		a, err := tx.GetActivity(ctx, c.ActivityID, c.SKUID)
		if err != nil {
			return err
		}
		rc, err := s.redis.ChangeStock(ctx, a, c.RequestID, c.Delta)
		if err != nil {
			return fmt.Errorf("redis books: %w", err)
		}
		if err := ports.Inject(ctx, s.fp, ports.FailStockChangeAfterRedis); err != nil {
			return err
		}
		if rc.Refused {
			if done, err = tx.RefuseStockChange(ctx, c.RequestID, rc.Available); err != nil {
				return err
			}
			entry.Outcome, entry.Params["removable"] = ports.AuditStockRefused, rc.Available
		} else {
			if done, err = tx.ApplyStockChange(ctx, c.RequestID, rc.Available); err != nil {
				return err
			}
			entry.Outcome = ports.AuditStockApplied
			entry.Params["stock_before"], entry.Params["stock_after"] = done.StockBefore, done.StockAfter
			entry.Params["available"] = done.Available
		}
		if err := tx.AppendAudit(ctx, entry); err != nil {
			return err
		}
		fresh = true
		act = a
		act.Stock = done.StockAfter
		return nil
	})
	if err == nil && fresh && done.Status == ports.StockChangeApplied {
		s.applied(act, done)
	}
	return done, fresh, err
}

// applied updates what this process caches once an applied change
// committed: the activity cache holds the new stock, and a restock drops
// the SKU's sold-out mark at once (other processes see the units when
// their mark expires, PlaceOrderConfig.SoldOutTTL).
func (s *StockChanges) applied(a ports.Activity, c ports.StockChangeRecord) {
	if s.activities != nil {
		s.activities.put(a)
	}
	if s.place != nil && c.Delta > 0 {
		s.place.soldOut.clear(c.ActivityID, c.SKUID)
	}
}

// Run finishes PENDING changes older than RecoverAfter every Interval
// until ctx is canceled. Failures are logged and retried at the next
// pass.
func (s *StockChanges) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if n, err := s.Recover(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "stock changes left pending", "finished", n, "error", err)
		} else if n > 0 {
			s.log.InfoContext(ctx, "pending stock changes finished", "finished", n)
		}
	}
}

// Recover runs one pass of the worker: it finishes up to Batch PENDING
// changes recorded more than RecoverAfter ago (by the database's clock),
// each audited under its operator with finished_by ActorStockChanges, and
// returns how many it finished. A change that cannot be finished now (the
// Redis books are frozen for a recovery) stays PENDING; the pass goes on
// with the others and returns the errors joined.
func (s *StockChanges) Recover(ctx context.Context) (int, error) {
	var pending []ports.StockChangeRecord
	if err := s.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		pending, err = tx.PendingStockChanges(ctx, now.Add(-s.cfg.RecoverAfter), s.cfg.Batch)
		return err
	}); err != nil {
		return 0, fmt.Errorf("list pending stock changes: %w", err)
	}
	var errs []error
	n := 0
	for _, c := range pending {
		if ctx.Err() != nil {
			break
		}
		action := ports.AuditAddStock
		if c.Delta < 0 {
			action = ports.AuditRemoveStock
		}
		entry := ports.AuditEntry{Actor: c.Actor, Action: action, Target: ports.ActivityTarget(c.ActivityID, c.SKUID),
			Params: map[string]any{"request_id": c.RequestID, "quantity": max(c.Delta, -c.Delta),
				"finished_by": ports.ActorStockChanges}}
		_, fresh, err := s.finish(ctx, c.RequestID, entry)
		if err != nil {
			errs = append(errs, fmt.Errorf("stock change %q: %w", c.RequestID, err))
			continue
		}
		if fresh {
			n++
		}
	}
	return n, errors.Join(errs...)
}

var _ ports.StockOperations = (*StockChanges)(nil)
