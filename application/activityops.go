package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// The audit actions and the refusal outcome of ActivityOps.
const (
	auditUpdateActivity = "UPDATE_ACTIVITY"
	auditPauseActivity  = "PAUSE_ACTIVITY"
	auditResumeActivity = "RESUME_ACTIVITY"
	auditCloseActivity  = "CLOSE_ACTIVITY"
	// auditRefused: the change did not apply in the activity's state or
	// with these parameters; nothing changed.
	auditRefused = "REFUSED"
)

// Page sizes of ListActivities.
const (
	defaultActivityPage = 50
	maxActivityPage     = 500
)

// ActivityOps implements ports.ActivityOperations.
//
// Every change (UpdateActivity, PauseActivity, ResumeActivity,
// CloseActivity) runs in two steps. First one PostgreSQL transaction locks
// the activity row, decides, writes the new state and appends the audit
// row with the state before and after (a refusal appends a REFUSED row and
// changes nothing; an unknown activity a NOT_FOUND row of its own). Then,
// after the commit, the change is switched in Redis (ports.ActivitySwitch,
// what the entry's reservation script checks) before the call answers: the
// guarantee of the port ("once it returns, no PlaceOrder is accepted")
// holds from the switch on. When the switch fails the call answers its
// error although PostgreSQL already holds the new state, which is the
// truth: the same call again finds it there (UNCHANGED for a pause, the
// same ends_at for an update) and switches again, so a retry is
// idempotent (a retry that is refused because the first call's change
// is stored, a closed sale closed again, a resumed one resumed again,
// switches the stored state again before it answers the refusal); and a
// rebuild of the SKU's Redis books from PostgreSQL seeds
// paused and ends_at as stored, so a Redis that lost its data or missed a
// switch comes back with the PostgreSQL state.
//
// The states are computed per ports.ActivityState's precedence at the
// time of the transaction (the database's now). SOLD_OUT is Redis's
// answer: no stock left in the activity SKU's Redis counter.
type ActivityOps struct {
	uow          ports.UnitOfWork
	reservations ports.Reservations
	reconciler   *Reconciler
	activities   *Activities
	sw           ports.ActivitySwitch
	clock        ports.Clock
	log          *slog.Logger
}

// NewActivityOps wires the operator side of running a sale.
func NewActivityOps(uow ports.UnitOfWork, reservations ports.Reservations, reconciler *Reconciler, activities *Activities,
	sw ports.ActivitySwitch, clock ports.Clock, log *slog.Logger) *ActivityOps {
	return &ActivityOps{uow: uow, reservations: reservations, reconciler: reconciler, activities: activities, sw: sw,
		clock: clock, log: log}
}

var _ ports.ActivityOperations = (*ActivityOps)(nil)

// selling reports whether only Redis tells a's state (ON_SALE or
// SOLD_OUT) at now.
func selling(a ports.Activity, now time.Time) bool {
	return !a.Ended(now) && !now.Before(a.StartsAt) && !a.Paused
}

// soldOut asks Redis whether the SKU has no stock left. A SKU Redis does
// not know (its books are being rebuilt) counts as not sold out.
func soldOut(ctx context.Context, r ports.Reservations, activityID, skuID int64) (bool, error) {
	inv, err := r.Inventory(ctx, activityID, skuID)
	if errors.Is(err, ports.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("redis inventory of %d/%d: %w", activityID, skuID, err)
	}
	return inv.Available <= 0, nil
}

func statusOf(rec ports.ActivityRecord, soldOut bool, now time.Time) ports.ActivityStatus {
	return ports.ActivityStatus{Activity: rec.Activity, State: rec.Activity.StateAt(now, soldOut),
		Paused: rec.Activity.Paused, ClosedAt: rec.Activity.ClosedAt, SoldOut: soldOut, UpdatedAt: rec.UpdatedAt}
}

// endedError refuses a change of an ended sale: it matches both
// ports.ErrActivityState and ports.ErrActivityEnded.
func endedError(a ports.Activity) error {
	if !a.ClosedAt.IsZero() {
		return fmt.Errorf("%w: %w: closed at %s", ports.ErrActivityState, ports.ErrActivityEnded,
			a.ClosedAt.Format(time.RFC3339Nano))
	}
	return fmt.Errorf("%w: %w: ended at %s", ports.ErrActivityState, ports.ErrActivityEnded, a.EndsAt.Format(time.RFC3339Nano))
}

// activityToken encodes the key of a page's last activity.
func activityToken(k ports.ActivityKey) string {
	return strconv.FormatInt(k.ActivityID, 10) + "." + strconv.FormatInt(k.SKUID, 10)
}

func parseActivityToken(s string) (ports.ActivityKey, error) {
	if s == "" {
		return ports.ActivityKey{}, nil
	}
	bad := ports.InvalidField("page_token", "is not a token returned by this method")
	a, b, ok := strings.Cut(s, ".")
	if !ok {
		return ports.ActivityKey{}, bad
	}
	id, err1 := strconv.ParseInt(a, 10, 64)
	sku, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || id <= 0 || sku <= 0 {
		return ports.ActivityKey{}, bad
	}
	return ports.ActivityKey{ActivityID: id, SKUID: sku}, nil
}

// ListActivities implements ports.ActivityOperations. PostgreSQL selects
// the page by the states it knows (ended, scheduled, paused, selling);
// for the selling ones Redis tells ON_SALE from SOLD_OUT and the page
// keeps those asked for, so a filtered page may hold fewer than pageSize
// activities while a next token remains (the token continues after the
// last activity PostgreSQL returned). SoldOut is measured for the
// selling activities only (it decides nothing for the others).
func (o *ActivityOps) ListActivities(ctx context.Context, f ports.ActivityFilter, pageSize int, pageToken string) (ports.ActivityPage, error) {
	switch {
	case pageSize == 0:
		pageSize = defaultActivityPage
	case pageSize < 0 || pageSize > maxActivityPage:
		return ports.ActivityPage{}, ports.InvalidField("page_size", "must be between 1 and %d (0 means %d)",
			maxActivityPage, defaultActivityPage)
	}
	for _, s := range f.States {
		if !slices.Contains(ports.ActivityStates(), s) {
			return ports.ActivityPage{}, ports.InvalidField("states", "unknown state %q", s)
		}
	}
	after, err := parseActivityToken(pageToken)
	if err != nil {
		return ports.ActivityPage{}, err
	}
	now := o.clock.Now()
	var recs []ports.ActivityRecord
	if err := o.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		recs, err = tx.ListActivityRecords(ctx, ports.ActivityListQuery{After: after, Limit: pageSize, States: f.States, Now: now})
		return err
	}); err != nil {
		return ports.ActivityPage{}, fmt.Errorf("list activities: %w", err)
	}
	var page ports.ActivityPage
	for _, rec := range recs {
		out := false
		if selling(rec.Activity, now) {
			if out, err = soldOut(ctx, o.reservations, rec.Activity.ActivityID, rec.Activity.SKUID); err != nil {
				return ports.ActivityPage{}, fmt.Errorf("list activities: %w", err)
			}
		}
		st := statusOf(rec, out, now)
		if len(f.States) == 0 || slices.Contains(f.States, st.State) {
			page.Activities = append(page.Activities, st)
		}
	}
	if len(recs) == pageSize {
		last := recs[len(recs)-1].Activity
		page.NextToken = activityToken(ports.ActivityKey{ActivityID: last.ActivityID, SKUID: last.SKUID})
	}
	return page, nil
}

// GetActivity implements ports.ActivityOperations: the stored activity
// and the stock report measured now (Reconciler.StockReport); SoldOut is
// the report's Redis available at 0.
func (o *ActivityOps) GetActivity(ctx context.Context, activityID, skuID int64) (ports.ActivityDetail, error) {
	var rec ports.ActivityRecord
	if err := o.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		rec, err = tx.GetActivityRecord(ctx, activityID, skuID, false)
		return err
	}); err != nil {
		return ports.ActivityDetail{}, fmt.Errorf("get activity %d/%d: %w", activityID, skuID, err)
	}
	books, err := o.reconciler.StockReport(ctx, activityID, skuID)
	if err != nil {
		return ports.ActivityDetail{}, fmt.Errorf("get activity %d/%d: books: %w", activityID, skuID, err)
	}
	return ports.ActivityDetail{Status: statusOf(rec, books.RedisAvailable <= 0, o.clock.Now()), Books: books}, nil
}

// change is one operator change decided inside the transaction.
type change struct {
	action string
	// decide returns the activity to store, or stored = false to keep
	// rec as it is (outcome UNCHANGED), or a refusal (outcome REFUSED,
	// returned after the audit commits).
	decide func(rec ports.ActivityRecord, now time.Time) (next ports.Activity, stored bool, refusal error)
	params map[string]any
}

// apply runs c in one transaction (lock, decide, write, audit) and
// returns the record after it and the transaction's now. An unknown
// activity is audited NOT_FOUND in a transaction of its own.
func (o *ActivityOps) apply(ctx context.Context, actor string, activityID, skuID int64, c change) (ports.ActivityRecord, time.Time, error) {
	if actor == "" {
		return ports.ActivityRecord{}, time.Time{}, errNoActor
	}
	target := ports.ActivityTarget(activityID, skuID)
	var (
		after   ports.ActivityRecord
		now     time.Time
		refusal error
	)
	err := o.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		before, err := tx.GetActivityRecord(ctx, activityID, skuID, true)
		if err != nil {
			return err
		}
		if now, err = tx.Now(ctx); err != nil {
			return err
		}
		next, stored, ref := c.decide(before, now.UTC())
		refusal, after = ref, before
		outcome := ports.AuditOK
		switch {
		case ref != nil:
			outcome = auditRefused
		case !stored:
			outcome = ports.AuditUnchanged
		default:
			if after, err = tx.ChangeActivity(ctx, next); err != nil {
				return err
			}
		}
		params := map[string]any{"before": recordParams(before)}
		for k, v := range c.params {
			params[k] = v
		}
		if ref != nil {
			params["error"] = ref.Error()
		} else {
			params["after"] = recordParams(after)
		}
		return tx.AppendAudit(ctx, ports.AuditEntry{Actor: actor, Action: c.action, Target: target, Params: params,
			Outcome: outcome})
	})
	if errors.Is(err, ports.ErrNotFound) {
		aerr := auditAlone(ctx, o.uow, ports.AuditEntry{Actor: actor, Action: c.action, Target: target,
			Params: c.params, Outcome: ports.AuditNotFound})
		return ports.ActivityRecord{}, time.Time{}, errors.Join(err, aerr)
	}
	if err != nil {
		return ports.ActivityRecord{}, time.Time{}, err
	}
	if refusal != nil {
		o.reassert(ctx, after.Activity, refusal)
		return ports.ActivityRecord{}, time.Time{}, refusal
	}
	o.activities.put(after.Activity)
	return after, now.UTC(), nil
}

// reassert switches Redis to the stored state a refusal found, best
// effort: a change whose switch failed is refused when retried (the sale
// is closed already, or not paused any more), and this completes it. A
// failure is logged; the refusal is answered either way.
func (o *ActivityOps) reassert(ctx context.Context, a ports.Activity, refusal error) {
	var err error
	switch {
	case errors.Is(refusal, ports.ErrActivityEnded) && !a.ClosedAt.IsZero():
		err = errors.Join(o.sw.SetPaused(ctx, a, true), o.sw.SetEndsAt(ctx, a, a.EndsAt))
	case errors.Is(refusal, ports.ErrActivityEnded):
		err = o.sw.SetEndsAt(ctx, a, a.EndsAt)
	case errors.Is(refusal, ports.ErrActivityState):
		err = o.sw.SetPaused(ctx, a, a.Paused)
	default:
		return
	}
	if err != nil {
		o.log.WarnContext(ctx, "switching the stored state of a refused change failed", "activity_id", a.ActivityID,
			"sku_id", a.SKUID, "error", err)
	}
}

// recordParams are the audited operator state of an activity.
func recordParams(r ports.ActivityRecord) map[string]any {
	p := map[string]any{
		"ends_at":    r.Activity.EndsAt.Format(time.RFC3339Nano),
		"paused":     r.Activity.Paused,
		"updated_at": r.UpdatedAt.Format(time.RFC3339Nano),
		"stock":      r.Activity.Stock,
	}
	if !r.Activity.ClosedAt.IsZero() {
		p["closed_at"] = r.Activity.ClosedAt.Format(time.RFC3339Nano)
	}
	return p
}

// logChange writes the one INFO line of an applied change.
func (o *ActivityOps) logChange(ctx context.Context, msg, actor string, a ports.Activity, attrs ...slog.Attr) {
	attrs = append(attrs, slog.String("actor", actor), slog.Int64("activity_id", a.ActivityID),
		slog.Int64("sku_id", a.SKUID))
	if tc := ports.TraceFrom(ctx); tc.TraceID != "" {
		attrs = append(attrs, slog.String("trace_id", tc.TraceID))
	}
	o.log.LogAttrs(ctx, slog.LevelInfo, msg, attrs...)
}

// switched wraps a failed Redis switch: PostgreSQL holds the change, a
// retry of the same call completes it.
func switched(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: stored in PostgreSQL but not yet switched in Redis (retry the call): %w", what, err)
}

// UpdateActivity implements ports.ActivityOperations: EndsAt (at store
// precision) must be after the transaction's now and after starts_at; the
// same ends_at again is UNCHANGED (and switched again).
func (o *ActivityOps) UpdateActivity(ctx context.Context, actor string, u ports.ActivityUpdate) (ports.ActivityStatus, error) {
	if u.EndsAt == nil {
		return ports.ActivityStatus{}, ports.InvalidField("update_mask", "names nothing to change (ends_at is the only field)")
	}
	endsAt := u.EndsAt.UTC().Truncate(time.Microsecond)
	after, now, err := o.apply(ctx, actor, u.ActivityID, u.SKUID, change{
		action: auditUpdateActivity,
		params: map[string]any{"ends_at": endsAt.Format(time.RFC3339Nano)},
		decide: func(rec ports.ActivityRecord, now time.Time) (ports.Activity, bool, error) {
			a := rec.Activity
			switch {
			case a.Ended(now):
				return a, false, endedError(a)
			case !endsAt.After(now):
				return a, false, ports.InvalidField("ends_at",
					"must be in the future (now is %s); use CloseActivity to end the sale now", now.Format(time.RFC3339))
			case !endsAt.After(a.StartsAt):
				return a, false, ports.InvalidField("ends_at", "must be after starts_at (%s)", a.StartsAt.Format(time.RFC3339))
			case endsAt.Equal(a.EndsAt):
				return a, false, nil
			}
			a.EndsAt = endsAt
			return a, true, nil
		},
	})
	if err != nil {
		return ports.ActivityStatus{}, fmt.Errorf("update activity %d/%d: %w", u.ActivityID, u.SKUID, err)
	}
	if err := o.sw.SetEndsAt(ctx, after.Activity, after.Activity.EndsAt); err != nil {
		return ports.ActivityStatus{}, switched("update activity", err)
	}
	o.logChange(ctx, "activity updated", actor, after.Activity, slog.Time("ends_at", after.Activity.EndsAt))
	return o.status(ctx, after, now)
}

// status computes the state after a change (SoldOut asked of Redis for a
// selling activity).
func (o *ActivityOps) status(ctx context.Context, rec ports.ActivityRecord, now time.Time) (ports.ActivityStatus, error) {
	out := false
	if selling(rec.Activity, now) {
		var err error
		if out, err = soldOut(ctx, o.reservations, rec.Activity.ActivityID, rec.Activity.SKUID); err != nil {
			return ports.ActivityStatus{}, err
		}
	}
	return statusOf(rec, out, now), nil
}

// PauseActivity implements ports.ActivityOperations. A paused sale is
// UNCHANGED and switched again (completing an earlier call whose switch
// failed).
func (o *ActivityOps) PauseActivity(ctx context.Context, actor string, activityID, skuID int64) (ports.ActivityStatus, error) {
	return o.setPaused(ctx, actor, activityID, skuID, true)
}

// ResumeActivity implements ports.ActivityOperations. A sale that is not
// paused is refused with ports.ErrActivityState (an ended one also
// matches ports.ErrActivityEnded).
func (o *ActivityOps) ResumeActivity(ctx context.Context, actor string, activityID, skuID int64) (ports.ActivityStatus, error) {
	return o.setPaused(ctx, actor, activityID, skuID, false)
}

func (o *ActivityOps) setPaused(ctx context.Context, actor string, activityID, skuID int64, paused bool) (ports.ActivityStatus, error) {
	action, verb := auditPauseActivity, "pause"
	if !paused {
		action, verb = auditResumeActivity, "resume"
	}
	after, now, err := o.apply(ctx, actor, activityID, skuID, change{
		action: action,
		decide: func(rec ports.ActivityRecord, now time.Time) (ports.Activity, bool, error) {
			a := rec.Activity
			switch {
			case a.Ended(now):
				return a, false, endedError(a)
			case a.Paused == paused && paused:
				return a, false, nil
			case a.Paused == paused:
				return a, false, fmt.Errorf("%w: the sale is not paused", ports.ErrActivityState)
			}
			a.Paused = paused
			return a, true, nil
		},
	})
	if err != nil {
		return ports.ActivityStatus{}, fmt.Errorf("%s activity %d/%d: %w", verb, activityID, skuID, err)
	}
	if err := o.sw.SetPaused(ctx, after.Activity, paused); err != nil {
		return ports.ActivityStatus{}, switched(verb+" activity", err)
	}
	o.logChange(ctx, "activity "+verb+"d", actor, after.Activity)
	return o.status(ctx, after, now)
}

// CloseActivity implements ports.ActivityOperations: closed_at = ends_at
// = the earlier of the transaction's now and this process's clock (a sale
// closed before its start ends before it). Redis is then switched twice:
// paused first, then ends_at. The end is a time that Reserve compares
// with the reservation's creation, taken from the clock of the instance
// that serves the PlaceOrder; an instance whose clock lags would still
// sell until its clock reaches ends_at. The pause is a flag, which every
// instance sees at once, so no PlaceOrder is accepted once the call
// returns whatever the clocks (an instance that lags answers
// ACTIVITY_PAUSED until its clock passes the end, then ACTIVITY_ENDED).
// PostgreSQL keeps paused as it was: the stored end alone ends the sale,
// and a rebuild seeds it. Unsold is the Redis stock counter read after the
// switch (no reservation takes a unit any more).
func (o *ActivityOps) CloseActivity(ctx context.Context, actor string, activityID, skuID int64) (ports.CloseResult, error) {
	after, now, err := o.apply(ctx, actor, activityID, skuID, change{
		action: auditCloseActivity,
		decide: func(rec ports.ActivityRecord, now time.Time) (ports.Activity, bool, error) {
			a := rec.Activity
			if a.Ended(now) {
				return a, false, endedError(a)
			}
			at := now
			if local := o.clock.Now().UTC().Truncate(time.Microsecond); local.Before(at) {
				at = local
			}
			a.ClosedAt, a.EndsAt = at, at
			return a, true, nil
		},
	})
	if err != nil {
		return ports.CloseResult{}, fmt.Errorf("close activity %d/%d: %w", activityID, skuID, err)
	}
	if err := o.sw.SetPaused(ctx, after.Activity, true); err != nil {
		return ports.CloseResult{}, switched("close activity", err)
	}
	if err := o.sw.SetEndsAt(ctx, after.Activity, after.Activity.EndsAt); err != nil {
		return ports.CloseResult{}, switched("close activity", err)
	}
	inv, err := o.reservations.Inventory(ctx, activityID, skuID)
	if err != nil {
		return ports.CloseResult{}, fmt.Errorf("close activity %d/%d: closed; unsold stock unknown: %w", activityID, skuID, err)
	}
	o.logChange(ctx, "activity closed", actor, after.Activity, slog.Int64("unsold", inv.Available))
	return ports.CloseResult{Status: statusOf(after, inv.Available <= 0, now), Unsold: inv.Available}, nil
}
