package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// StockRecoveryConfig tunes the rebuild of the Redis stock books.
type StockRecoveryConfig struct {
	// Settle is how long a recovery waits after it found a pending
	// generation before it reads PostgreSQL, so that the order-create
	// messages of reservations the new Redis lost, already in the broker,
	// are consumed first. One consumed later is adopted (ports.StockBooks).
	Settle time.Duration
	// Interval is how often the worker looks for a pending generation
	// that no connection of this process saw (another instance's).
	Interval time.Duration
}

// StockRecoveryReport counts what one recovery did.
type StockRecoveryReport struct {
	// Generation is the Redis generation recovered ("" when none was
	// pending).
	Generation string
	// Rebuilt activity SKUs; Skipped ones were rebuilt by another
	// instance or frozen again by a newer generation.
	Rebuilt, Skipped int
	// InFlight units held by reservations only Redis and the broker knew;
	// Overdraft units acknowledged beyond PostgreSQL's remaining stock.
	InFlight, Overdraft int64
	// Finished: the generation is verified and the books are open again.
	Finished bool
}

// StockRecovery rebuilds the Redis stock books from PostgreSQL after Redis
// came back as a different process that may hold less than it
// acknowledged (ports.StockBooks): for every activity SKU, the available
// units are the initial stock minus PostgreSQL's non-canceled orders minus
// the reservations still in flight, and the holders are the users of those
// orders and reservations. Selling of a frozen activity SKU resumes when
// its books are rebuilt. Instances may recover concurrently: a slot is
// rebuilt only while frozen by the pending generation, so once one
// instance reopened it, the others skip it.
type StockRecovery struct {
	books ports.StockBooks
	uow   ports.UnitOfWork
	log   *slog.Logger
	cfg   StockRecoveryConfig
}

// NewStockRecovery wires the recovery.
func NewStockRecovery(books ports.StockBooks, uow ports.UnitOfWork, log *slog.Logger, cfg StockRecoveryConfig) *StockRecovery {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	return &StockRecovery{books: books, uow: uow, log: log.With("component", "stock-recovery"), cfg: cfg}
}

// Run recovers whenever wake is signaled or a pending generation is found
// (every Interval), until ctx is canceled. Failures are logged and
// retried at the next turn: the books stay frozen, never open unverified.
func (r *StockRecovery) Run(ctx context.Context, wake <-chan struct{}) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		rep, err := r.Recover(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			r.log.WarnContext(ctx, "stock recovery failed; books stay frozen", "error", err)
		case rep.Generation != "":
			r.log.WarnContext(ctx, "stock books rebuilt", "generation", rep.Generation, "rebuilt", rep.Rebuilt,
				"skipped", rep.Skipped, "in_flight", rep.InFlight, "overdraft", rep.Overdraft, "finished", rep.Finished)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-t.C:
		}
	}
}

// Recover runs one recovery if a generation is pending.
func (r *StockRecovery) Recover(ctx context.Context) (StockRecoveryReport, error) {
	gen, err := r.books.RecoveryPending(ctx)
	if err != nil || gen == "" {
		return StockRecoveryReport{}, err
	}
	rep := StockRecoveryReport{Generation: gen}
	select {
	case <-ctx.Done():
		return rep, ctx.Err()
	case <-time.After(r.cfg.Settle):
	}
	var acts []ports.Activity
	if err := r.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		acts, err = tx.ListActivities(ctx)
		return err
	}); err != nil {
		return rep, fmt.Errorf("list activities: %w", err)
	}
	for _, a := range acts {
		res, err := r.rebuild(ctx, gen, a)
		switch {
		case errors.Is(err, ports.ErrStockPaused):
			rep.Skipped++
			continue
		case err != nil:
			return rep, fmt.Errorf("rebuild activity %d sku %d: %w", a.ActivityID, a.SKUID, err)
		}
		rep.Rebuilt++
		rep.InFlight += res.InFlight
		rep.Overdraft += res.Overdraft
		if res.Overdraft > 0 {
			r.log.ErrorContext(ctx, "redis acknowledged more reservations than stock; the surplus will be rejected",
				"activity_id", a.ActivityID, "sku_id", a.SKUID, "overdraft", res.Overdraft)
		}
	}
	rep.Finished, err = r.books.FinishRecovery(ctx, gen)
	return rep, err
}

// rebuild reads one activity SKU's in-flight reservations from Redis, then
// PostgreSQL's facts, then rewrites the books. The order matters: a
// reservation decided between the two reads reads as decided, and one
// decided after both is handled by rebuild.lua's re-check.
//
// The facts transaction first locks the SKU's PENDING stock changes and
// stays open while Redis is rewritten: a change cannot become APPLIED (the
// StockChanges transaction that applies it holds the same row lock while
// it changes Redis) between the read of the initial stock and the write of
// the books. So each change is either APPLIED and counted in Base, or
// still PENDING and not counted; the rebuild starts a new books epoch in
// which a PENDING change is applied once more by whoever finishes it
// (ports.StockChanger).
func (r *StockRecovery) rebuild(ctx context.Context, gen string, a ports.Activity) (ports.RebuildResult, error) {
	inflight, err := r.books.InFlight(ctx, gen, a)
	if err != nil {
		return ports.RebuildResult{}, fmt.Errorf("in flight: %w", err)
	}
	ids := make([]string, len(inflight))
	for i, s := range inflight {
		ids[i] = s.ReservationID
	}
	facts := ports.StockRebuild{Generation: gen, Activity: a}
	var res ports.RebuildResult
	var rebuildErr error
	if err := r.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		if _, err := tx.LockPendingStockChanges(ctx, a.ActivityID, a.SKUID); err != nil {
			return err
		}
		audit, err := tx.AuditStock(ctx, a.ActivityID, a.SKUID, ids)
		if err != nil {
			return err
		}
		facts.Base = audit.InitialStock - audit.NonCanceledOrders
		facts.Activity.Stock = audit.InitialStock
		facts.Ordered, facts.Released = audit.OrderedHeld, audit.ReleasedHeld
		decided := make(map[string]bool, len(audit.OrderedHeld)+len(audit.ReleasedHeld))
		for _, id := range audit.OrderedHeld {
			decided[id] = true
		}
		for _, id := range audit.ReleasedHeld {
			decided[id] = true
		}
		for _, id := range ids {
			if !decided[id] {
				facts.InFlight = append(facts.InFlight, id)
			}
		}
		// Base counts the units of canceled orders as available; their
		// reservations, ORDERED in Redis while the release is in flight
		// and so not held, must read as released, or that release would
		// give the unit back a second time.
		canceled, err := tx.CanceledReservations(ctx, a.ActivityID, a.SKUID)
		if err != nil {
			return err
		}
		for _, id := range canceled {
			if !decided[id] {
				facts.Released = append(facts.Released, id)
			}
		}
		if facts.Holders, err = tx.LiveHolders(ctx, a.ActivityID, a.SKUID); err != nil {
			return err
		}
		res, rebuildErr = r.books.Rebuild(ctx, facts)
		return rebuildErr
	}); err != nil {
		if rebuildErr != nil {
			return ports.RebuildResult{}, rebuildErr
		}
		return ports.RebuildResult{}, fmt.Errorf("postgres facts: %w", err)
	}
	return res, nil
}
