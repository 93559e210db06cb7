package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// ReconcileConfig tunes the reconciler.
type ReconcileConfig struct {
	// Grace is how old an inconsistency must be before it is repaired, so
	// that work still in flight is not mistaken for a fault.
	Grace time.Duration
	// Batch bounds the reservations and orders examined per run.
	Batch int
}

// ReconcileReport counts what one reconciliation found and did.
type ReconcileReport struct {
	Examined int
	// Repaired: the Redis write-back of an order (ORDERED) was missing.
	RepairedOrdered int
	// Released: PostgreSQL had released the unit (rejected or canceled)
	// but Redis still held it (an unresolved reservation, or a held one
	// whose release task was lost more than the grace ago); released now
	// (at most once, guarded).
	Released int
	// RejectedExpired: reservations whose validity ended without any
	// PostgreSQL outcome; decided REJECTED (so a late message cannot create
	// the order) and released.
	RejectedExpired int
	// PendingSend: unresolved and still valid, left to the scanner.
	PendingSend int
	// SentNotConsumed: confirmed by the broker, still valid, no outcome
	// yet: reported (the consumer, its retries and the DLQ own them).
	SentNotConsumed int
	// CanceledExpired: unpaid orders past their deadline whose timeout
	// message never took effect; canceled now.
	CanceledExpired int
	// Drift is the I6 drift of every activity SKU after the repairs, in
	// the order of ListActivities; orders without a Redis counterpart show
	// up here and are left to an operator. An activity SKU with a stock
	// change in flight is left out.
	Drift []SKUDrift
	// StockChangesInFlight counts the activity SKUs left out of Drift
	// because a stock change of theirs was PENDING (the books differ by
	// it until it finishes; the next pass measures them).
	StockChangesInFlight int
}

// SKUDrift is the I6 drift of one activity SKU (0 when the books balance).
type SKUDrift struct {
	ActivityID int64
	SKUID      int64
	Drift      int64
}

// Reconciler repairs what asynchronous steps left unfinished (spec 27) and
// audits the stock books (I6). Every repair goes through the same guards
// as the normal path: the reservation-outcome claim in PostgreSQL and the
// release guard in Redis, so a repair can never double an effect. Run it
// periodically or with `seckill reconcile`.
type Reconciler struct {
	uow          ports.UnitOfWork
	reservations ports.Reservations
	activities   *Activities
	life         *OrderLifecycle
	clock        ports.Clock
	metrics      ports.Metrics
	log          *slog.Logger
	policy       CompensationPolicy
	cfg          ReconcileConfig
}

// NewReconciler wires the reconciler.
func NewReconciler(uow ports.UnitOfWork, reservations ports.Reservations, activities *Activities, life *OrderLifecycle,
	clock ports.Clock, metrics ports.Metrics, log *slog.Logger, policy CompensationPolicy, cfg ReconcileConfig) *Reconciler {
	return &Reconciler{uow: uow, reservations: reservations, activities: activities, life: life, clock: clock,
		metrics: metrics, log: log.With("component", "reconcile"), policy: policy, cfg: cfg}
}

// Run reconciles every interval until ctx is canceled, each pass audited
// under actor (ports.ActorReconciler for the service's periodic worker).
func (r *Reconciler) Run(ctx context.Context, actor string, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		_, _ = r.Reconcile(ctx, actor) // logged by Reconcile; the next pass retries
	}
}

// Reconcile runs one pass on behalf of actor and records it as exactly one
// RECONCILE audit row, written after the pass in a transaction of its own
// (the pass spans many transactions and Redis calls): outcome OK, or
// FAILED with the error, and params summarising what the pass found and
// repaired (reconcileParams). Repairs made before a failure stay made and
// are counted in the report and the row. An audit failure is returned
// even when the pass succeeded. Every pass writes one log line, "reconciled",
// with the actor, the outcome and the counts: INFO when it succeeded, WARN
// when it (or its audit) failed.
func (r *Reconciler) Reconcile(ctx context.Context, actor string) (ReconcileReport, error) {
	if actor == "" {
		return ReconcileReport{}, fmt.Errorf("reconcile: %w", errNoActor)
	}
	rep, err := r.pass(ctx)
	e := ports.AuditEntry{Actor: actor, Action: ports.AuditReconcile, Outcome: ports.AuditOK, Params: reconcileParams(rep)}
	if err != nil {
		e.Outcome, e.Params["error"] = ports.AuditFailed, err.Error()
	}
	if aerr := auditAlone(ctx, r.uow, e); aerr != nil {
		err = errors.Join(err, aerr)
	}
	r.logPass(ctx, actor, e.Outcome, rep, err)
	return rep, err
}

// logPass writes the one line of a reconciliation pass.
func (r *Reconciler) logPass(ctx context.Context, actor, outcome string, rep ReconcileReport, err error) {
	level := slog.LevelInfo
	attrs := []slog.Attr{slog.String("actor", actor), slog.String("outcome", outcome),
		slog.Int("examined", rep.Examined), slog.Int("repaired_ordered", rep.RepairedOrdered),
		slog.Int("released", rep.Released), slog.Int("rejected_expired", rep.RejectedExpired),
		slog.Int("pending_send", rep.PendingSend), slog.Int("sent_not_consumed", rep.SentNotConsumed),
		slog.Int("canceled_expired", rep.CanceledExpired)}
	if tc := ports.TraceFrom(ctx); tc.TraceID != "" {
		attrs = append(attrs, slog.String("trace_id", tc.TraceID))
	}
	if err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	r.log.LogAttrs(ctx, level, "reconciled", attrs...)
}

// maxAuditedDrift bounds the drifting activity SKUs listed in a pass's
// audit row; the row always has their count.
const maxAuditedDrift = 20

// reconcileParams summarises a pass for its audit row: the counts of the
// report, the number of activity SKUs checked and drifting, and up to
// maxAuditedDrift of the drifting ones (balanced books are not listed).
func reconcileParams(rep ReconcileReport) map[string]any {
	drifting := []map[string]any{}
	n := 0
	for _, d := range rep.Drift {
		if d.Drift == 0 {
			continue
		}
		n++
		if len(drifting) < maxAuditedDrift {
			drifting = append(drifting, map[string]any{"activity_id": d.ActivityID, "sku_id": d.SKUID, "drift": d.Drift})
		}
	}
	return map[string]any{
		"examined": rep.Examined, "repaired_ordered": rep.RepairedOrdered, "released": rep.Released,
		"rejected_expired": rep.RejectedExpired, "pending_send": rep.PendingSend,
		"sent_not_consumed": rep.SentNotConsumed, "canceled_expired": rep.CanceledExpired,
		"skus_checked": len(rep.Drift), "skus_drifting": n, "drift": drifting,
		"skus_stock_changes_in_flight": rep.StockChangesInFlight,
	}
}

// pass runs one reconciliation: reservations, orders, then the drift of
// every activity SKU.
func (r *Reconciler) pass(ctx context.Context) (ReconcileReport, error) {
	var rep ReconcileReport
	now := r.clock.Now()
	if err := r.reservationsPass(ctx, now, &rep); err != nil {
		return rep, err
	}
	if err := r.ordersPass(ctx, now, &rep); err != nil {
		return rep, err
	}
	var acts []ports.Activity
	err := r.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		acts, err = tx.ListActivities(ctx)
		return err
	})
	if err != nil {
		return rep, fmt.Errorf("list activities: %w", err)
	}
	for _, a := range acts {
		changing, err := r.stockChanging(ctx, a)
		if err != nil {
			return rep, err
		}
		if changing {
			rep.StockChangesInFlight++
			continue
		}
		sr, err := r.StockReport(ctx, a.ActivityID, a.SKUID)
		if err != nil {
			return rep, err
		}
		// The drift counts a release in flight as given back, so it is the
		// same before and after the repair; the holders are read again
		// only when there is one.
		if sr.ReleasesInFlight > 0 {
			if err := r.staleReleases(ctx, a, now.Add(-r.cfg.Grace), &rep); err != nil {
				return rep, err
			}
		}
		if changing, err = r.stockChanging(ctx, a); err != nil {
			return rep, err
		}
		if changing {
			rep.StockChangesInFlight++
			continue
		}
		rep.Drift = append(rep.Drift, SKUDrift{ActivityID: a.ActivityID, SKUID: a.SKUID, Drift: sr.Drift()})
	}
	return rep, nil
}

// staleReleases gives back the units of the activity SKU's reservations
// that Redis holds although PostgreSQL released them (a canceled order, a
// rejection) before cutoff: their release task was lost on the way, for
// example handed by the broker to a consumer that died before it could
// run it. Each goes through the release guard of the normal path, so a
// task that arrives after all gives nothing back a second time (I4).
func (r *Reconciler) staleReleases(ctx context.Context, a ports.Activity, cutoff time.Time, rep *ReconcileReport) error {
	inv, err := r.reservations.Inventory(ctx, a.ActivityID, a.SKUID)
	if err != nil {
		return fmt.Errorf("redis inventory of activity %d sku %d: %w", a.ActivityID, a.SKUID, err)
	}
	var stale []ports.StaleRelease
	if err := r.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		stale, err = tx.StaleReleases(ctx, inv.Held, cutoff)
		return err
	}); err != nil {
		return fmt.Errorf("stale releases of activity %d sku %d: %w", a.ActivityID, a.SKUID, err)
	}
	for _, s := range stale {
		reason := reservation.ReasonOrderCanceled
		if !s.Canceled {
			reason = reservation.ReleaseReason(s.Reason)
		}
		snap := reservation.Snapshot{ReservationID: s.ReservationID, ActivityID: a.ActivityID, SKUID: a.SKUID, UserID: s.UserID}
		released, err := r.release(ctx, snap, reason, rep)
		switch {
		case errors.Is(err, ports.ErrNotFound): // its hash expired: nothing to give back here
			r.log.WarnContext(ctx, "held reservation unknown to redis", "reservation_id", s.ReservationID,
				"activity_id", a.ActivityID, "sku_id", a.SKUID)
		case err != nil:
			return err
		case released:
			r.log.WarnContext(ctx, "reservation released late", "reservation_id", s.ReservationID,
				"activity_id", a.ActivityID, "sku_id", a.SKUID, "released_in_postgres_at", s.ReleasedAt)
		}
	}
	return nil
}

// stockChanging reports whether an activity SKU has a PENDING stock change
// (StockChanges): until it finishes, Redis may hold it and PostgreSQL not,
// a difference that is not drift. The pass asks before and after
// measuring the SKU and leaves it out of the drift when either says yes.
func (r *Reconciler) stockChanging(ctx context.Context, a ports.Activity) (bool, error) {
	var changing bool
	err := r.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		changing, err = tx.HasPendingStockChanges(ctx, a.ActivityID, a.SKUID)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("pending stock changes of activity %d sku %d: %w", a.ActivityID, a.SKUID, err)
	}
	return changing, nil
}

// reservationsPass settles unresolved reservations older than the grace.
func (r *Reconciler) reservationsPass(ctx context.Context, now time.Time, rep *ReconcileReport) error {
	list, err := r.reservations.Unresolved(ctx, now.Add(-r.cfg.Grace), r.cfg.Batch)
	if err != nil {
		return fmt.Errorf("list unresolved: %w", err)
	}
	rep.Examined = len(list)
	if len(list) == 0 {
		return nil
	}
	ids := make([]string, len(list))
	for i, s := range list {
		ids[i] = s.ReservationID
	}
	var states []ports.ReservationState
	if err := r.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		states, err = tx.ReservationStates(ctx, ids)
		return err
	}); err != nil {
		return fmt.Errorf("reservation states: %w", err)
	}
	byID := make(map[string]ports.ReservationState, len(states))
	for _, s := range states {
		byID[s.ReservationID] = s
	}
	for _, s := range list {
		ref := ports.ReservationRef{ActivityID: s.ActivityID, SKUID: s.SKUID, ReservationID: s.ReservationID, UserID: s.UserID}
		st := byID[s.ReservationID]
		switch {
		case st.Outcome == ports.OutcomeOrdered && st.OrderStatus == order.StatusCanceled:
			if _, err := r.release(ctx, s, reservation.ReasonOrderCanceled, rep); err != nil {
				return err
			}
		case st.Outcome == ports.OutcomeOrdered:
			if err := r.reservations.MarkOrdered(ctx, []ports.ReservationRef{ref}); err != nil {
				return fmt.Errorf("repair ordered: %w", err)
			}
			rep.RepairedOrdered++
		case st.Outcome == ports.OutcomeRejected:
			if _, err := r.release(ctx, s, reservation.ReleaseReason(st.Reason), rep); err != nil {
				return err
			}
		case reservation.Expired(s.ValidUntil.Add(r.cfg.Grace), now):
			decided, err := r.rejectExpired(ctx, s)
			if err != nil {
				return err
			}
			if decided {
				rep.RejectedExpired++
				released, err := r.reservations.Release(ctx, ref, reservation.ReasonReconciledExpired)
				if err != nil {
					return fmt.Errorf("release expired: %w", err)
				}
				if released {
					r.logRelease(ctx, s, reservation.ReasonReconciledExpired)
				}
			}
		case s.Status == reservation.StatusSent:
			rep.SentNotConsumed++
		default:
			rep.PendingSend++
		}
	}
	return nil
}

// release gives s's unit back for reason (RECONCILED_EXPIRED when reason
// is not a release reason), counts and logs it, and says whether this call
// released it (false: it was released already).
func (r *Reconciler) release(ctx context.Context, s reservation.Snapshot, reason reservation.ReleaseReason, rep *ReconcileReport) (bool, error) {
	if !reservation.ValidReleaseReason(reason) {
		reason = reservation.ReasonReconciledExpired
	}
	ref := ports.ReservationRef{ActivityID: s.ActivityID, SKUID: s.SKUID, ReservationID: s.ReservationID, UserID: s.UserID}
	released, err := r.reservations.Release(ctx, ref, reason)
	if err != nil {
		return false, fmt.Errorf("release %s: %w", ref.ReservationID, err)
	}
	if released {
		rep.Released++
		r.logRelease(ctx, s, reason)
	}
	return released, nil
}

// logRelease writes the one line of a unit the reconciler gave back.
func (r *Reconciler) logRelease(ctx context.Context, s reservation.Snapshot, reason reservation.ReleaseReason) {
	r.log.InfoContext(ctx, "reservation released", "reservation_id", s.ReservationID, "order_id", s.OrderID,
		"request_id", s.RequestID, "activity_id", s.ActivityID, "sku_id", s.SKUID, "user_id", s.UserID,
		"reason", string(reason), "decision", "released")
}

// rejectExpired decides an expired, undecided reservation as REJECTED in
// PostgreSQL, with its rejection and compensation task, through the same
// claim the consumer uses: if the consumer decided it meanwhile, nothing
// happens.
func (r *Reconciler) rejectExpired(ctx context.Context, s reservation.Snapshot) (bool, error) {
	decided := false
	err := r.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		claimed, err := tx.ClaimReservations(ctx, []ports.ReservationClaim{{
			ReservationID: s.ReservationID, OrderID: s.OrderID, MessageID: s.MessageID}})
		if err != nil || len(claimed) == 0 {
			return err
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		reason := reservation.ReasonReconciledExpired
		ref := releaseRef{ReservationID: s.ReservationID, OrderID: s.OrderID, ActivityID: s.ActivityID, SKUID: s.SKUID, UserID: s.UserID}
		release, err := releaseMessage(ref, reason, ClassReconcile, r.policy, now, message.TraceContext{})
		if err != nil {
			return err
		}
		state, err := stateChanged(message.OrderState{OrderID: s.OrderID, ReservationID: s.ReservationID,
			ActivityID: s.ActivityID, SKUID: s.SKUID, UserID: s.UserID, Status: string(ports.OrderRejected),
			Reason: string(reason), AggregateVersion: 1, CreatedAt: s.CreatedAt, UpdatedAt: now}, now, message.TraceContext{})
		if err != nil {
			return err
		}
		if err := tx.RecordRejections(ctx, []ports.Rejection{{OrderID: s.OrderID, ReservationID: s.ReservationID,
			MessageID: s.MessageID, ActivityID: s.ActivityID, SKUID: s.SKUID, UserID: s.UserID,
			Reason: string(reason), RejectedAt: now}}); err != nil {
			return err
		}
		if err := tx.AppendOutbox(ctx, []ports.OutboundMessage{release, state}); err != nil {
			return err
		}
		decided = true
		return tx.FinishReservations(ctx, []ports.ReservationOutcome{{ReservationID: s.ReservationID,
			Outcome: ports.OutcomeRejected, Reason: string(reason)}})
	})
	if err != nil {
		return false, fmt.Errorf("reject expired %s: %w", s.ReservationID, err)
	}
	return decided, nil
}

// ordersPass cancels unpaid orders whose deadline passed more than the
// grace ago (their timeout message never took effect).
func (r *Reconciler) ordersPass(ctx context.Context, now time.Time, rep *ReconcileReport) error {
	var ids []string
	if err := r.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		ids, err = tx.ExpiredUnpaidOrders(ctx, now.Add(-r.cfg.Grace), r.cfg.Batch)
		return err
	}); err != nil {
		return fmt.Errorf("expired unpaid orders: %w", err)
	}
	for _, id := range ids {
		_, changed, err := r.life.execute(ctx, id, 0, nil, func(o *order.Order, now time.Time) error {
			return o.Cancel(order.ReasonPaymentTimeout, now)
		})
		if err != nil {
			r.log.WarnContext(ctx, "cancel expired order failed", "order_id", id, "error", err)
			continue
		}
		if changed {
			rep.CanceledExpired++
		}
	}
	return nil
}

// StockReport measures the I6 terms of one activity SKU and exports the
// drift.
func (r *Reconciler) StockReport(ctx context.Context, activityID, skuID int64) (ports.StockReport, error) {
	if _, err := r.activities.Get(ctx, activityID, skuID); err != nil {
		return ports.StockReport{}, err
	}
	inv, err := r.reservations.Inventory(ctx, activityID, skuID)
	if err != nil {
		return ports.StockReport{}, fmt.Errorf("redis inventory: %w", err)
	}
	var audit ports.StockAudit
	if err := r.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		audit, err = tx.AuditStock(ctx, activityID, skuID, inv.Held)
		return err
	}); err != nil {
		return ports.StockReport{}, fmt.Errorf("audit stock: %w", err)
	}
	rep := ports.StockReport{
		ActivityID: activityID, SKUID: skuID, InitialStock: audit.InitialStock, RedisAvailable: inv.Available,
		PendingReservations: int64(len(inv.Held) - len(audit.OrderedHeld) - len(audit.ReleasedHeld)),
		NonCanceledOrders:   audit.NonCanceledOrders, ReleasesInFlight: int64(len(audit.ReleasedHeld)),
		PGFinalStock: audit.PGFinalStock, MeasuredAt: r.clock.Now(),
	}
	r.metrics.StockDrift(activityID, skuID, rep.Drift())
	return rep, nil
}
