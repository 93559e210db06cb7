package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// Admin implements the operator-facing driving port.
type Admin struct {
	uow          ports.UnitOfWork
	reservations ports.Reservations
	activities   *Activities
	reconciler   *Reconciler
	deadLetters  *DeadLetters
	log          *slog.Logger
}

// NewAdmin wires the admin side.
func NewAdmin(uow ports.UnitOfWork, reservations ports.Reservations, activities *Activities, reconciler *Reconciler,
	deadLetters *DeadLetters, log *slog.Logger) *Admin {
	return &Admin{uow: uow, reservations: reservations, activities: activities, reconciler: reconciler,
		deadLetters: deadLetters, log: log}
}

var _ ports.AdminService = (*Admin)(nil)

// GetStockReport implements ports.AdminService.
func (a *Admin) GetStockReport(ctx context.Context, activityID, skuID int64) (ports.StockReport, error) {
	return a.reconciler.StockReport(ctx, activityID, skuID)
}

// ListDeadLetters implements ports.AdminService.
func (a *Admin) ListDeadLetters(ctx context.Context, group string, pageSize int, pageToken string) (ports.DeadLetterPage, error) {
	return a.deadLetters.List(ctx, group, pageSize, pageToken)
}

// ReplayDeadLetter implements ports.AdminService; see DeadLetters.Replay.
func (a *Admin) ReplayDeadLetter(ctx context.Context, actor string, id int64, reason string) (ports.ReplayResult, error) {
	return a.deadLetters.Replay(ctx, actor, id, reason)
}

// CreateActivity implements ports.AdminService. The settings are first
// brought to the store's precision (atStorePrecision), so what is stored,
// compared, seeded and returned is the same value. One transaction stores
// the activity and its final stock, seeds Redis and appends the audit
// (CREATED, UNCHANGED for a repeated call with equal settings, or
// ALREADY_EXISTS for different ones, which changes nothing and fails with
// ports.ErrAlreadyExists): a failure anywhere rolls the row back, so the
// caller is left with a sellable activity or with no row at all. Seeding
// is idempotent and never resets a counter, so a retry of the same call,
// including after a commit that failed once Redis was seeded, completes
// the activity; a Redis slot seeded by an attempt whose commit failed is
// not sellable, because PlaceOrder needs the PostgreSQL row.
func (a *Admin) CreateActivity(ctx context.Context, actor string, act ports.Activity) (ports.Activity, error) {
	if actor == "" {
		return ports.Activity{}, fmt.Errorf("create activity: %w", errNoActor)
	}
	act = atStorePrecision(act)
	if err := act.Validate(); err != nil {
		return ports.Activity{}, fmt.Errorf("create activity: %w", err)
	}
	var (
		stored  ports.Activity
		outcome string
	)
	err := a.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		s, created, err := tx.CreateActivity(ctx, act)
		if err != nil {
			return err
		}
		switch {
		case !sameActivity(s, act):
			outcome = ports.AuditAlreadyExists
		case created:
			outcome = ports.AuditCreated
		default:
			outcome = ports.AuditUnchanged
		}
		if outcome != ports.AuditAlreadyExists {
			if err := a.reservations.SeedActivity(ctx, s); err != nil {
				return fmt.Errorf("seed activity: %w", err)
			}
		}
		stored = s // the stored settings, also when they differ
		return tx.AppendAudit(ctx, ports.AuditEntry{Actor: actor, Action: ports.AuditCreateActivity,
			Target: ports.ActivityTarget(act.ActivityID, act.SKUID), Params: activityParams(act), Outcome: outcome})
	})
	if err != nil {
		return ports.Activity{}, fmt.Errorf("create activity %d/%d: %w", act.ActivityID, act.SKUID, err)
	}
	if outcome == ports.AuditAlreadyExists {
		a.logActivity(ctx, "activity refused", actor, outcome, act)
		return ports.Activity{}, fmt.Errorf("activity %d/%d: %w", act.ActivityID, act.SKUID,
			&ports.SettingsConflictError{Fields: settingDiffs(stored, act)})
	}
	a.activities.put(stored)
	a.logActivity(ctx, "activity ready", actor, outcome, stored)
	return stored, nil
}

// logActivity writes the one INFO line of a CreateActivity call that
// reached a decision (the outcome audited with it).
func (a *Admin) logActivity(ctx context.Context, msg, actor, outcome string, act ports.Activity) {
	attrs := []slog.Attr{slog.String("actor", actor), slog.String("outcome", outcome),
		slog.Int64("activity_id", act.ActivityID), slog.Int64("sku_id", act.SKUID), slog.Int64("stock", act.Stock),
		slog.Int("stock_lanes", act.Lanes())}
	if tc := ports.TraceFrom(ctx); tc.TraceID != "" {
		attrs = append(attrs, slog.String("trace_id", tc.TraceID))
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, msg, attrs...)
}

// atStorePrecision returns a as the stores keep it: times in UTC, times
// and durations truncated to the microsecond (PostgreSQL's timestamptz
// and interval precision). Every setting goes through it before it is
// stored or compared.
func atStorePrecision(a ports.Activity) ports.Activity {
	a.StartsAt = a.StartsAt.UTC().Truncate(time.Microsecond)
	a.EndsAt = a.EndsAt.UTC().Truncate(time.Microsecond)
	a.PaymentTimeout = a.PaymentTimeout.Truncate(time.Microsecond)
	a.ReservationTTL = a.ReservationTTL.Truncate(time.Microsecond)
	return a
}

// sameActivity reports whether two activities at store precision have
// equal settings.
func sameActivity(a, b ports.Activity) bool {
	return a.ActivityID == b.ActivityID && a.SKUID == b.SKUID && a.Stock == b.Stock &&
		a.StartsAt.Equal(b.StartsAt) && a.EndsAt.Equal(b.EndsAt) &&
		a.PaymentTimeout == b.PaymentTimeout && a.ReservationTTL == b.ReservationTTL && a.Lanes() == b.Lanes() &&
		a.UnitPrice == b.UnitPrice && a.Currency == b.Currency
}

// settingDiffs names the settings of wanted that differ from stored's, as
// the API spells them. Stock and ends_at may have been changed since the
// creation (AddStock, RemoveStock, UpdateActivity, CloseActivity): a
// caller that retries a creation after such a change is told so.
func settingDiffs(stored, wanted ports.Activity) []ports.SettingDiff {
	var out []ports.SettingDiff
	diff := func(field string, same bool, s, w any) {
		if !same {
			out = append(out, ports.SettingDiff{Field: field, Stored: fmt.Sprint(s), Wanted: fmt.Sprint(w)})
		}
	}
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	diff("stock", stored.Stock == wanted.Stock, stored.Stock, wanted.Stock)
	diff("starts_at", stored.StartsAt.Equal(wanted.StartsAt), ts(stored.StartsAt), ts(wanted.StartsAt))
	diff("ends_at", stored.EndsAt.Equal(wanted.EndsAt), ts(stored.EndsAt), ts(wanted.EndsAt))
	diff("payment_timeout", stored.PaymentTimeout == wanted.PaymentTimeout, stored.PaymentTimeout, wanted.PaymentTimeout)
	diff("reservation_ttl", stored.ReservationTTL == wanted.ReservationTTL, stored.ReservationTTL, wanted.ReservationTTL)
	diff("stock_lanes", stored.Lanes() == wanted.Lanes(), stored.Lanes(), wanted.Lanes())
	diff("unit_price", stored.UnitPrice == wanted.UnitPrice, stored.UnitPrice, wanted.UnitPrice)
	diff("currency", stored.Currency == wanted.Currency, fmt.Sprintf("%q", stored.Currency), fmt.Sprintf("%q", wanted.Currency))
	return out
}

// activityParams are the audited settings of a requested activity.
func activityParams(a ports.Activity) map[string]any {
	return map[string]any{
		"stock":           a.Stock,
		"starts_at":       a.StartsAt.Format(time.RFC3339Nano),
		"ends_at":         a.EndsAt.Format(time.RFC3339Nano),
		"payment_timeout": a.PaymentTimeout.String(),
		"reservation_ttl": a.ReservationTTL.String(),
		"stock_lanes":     a.Lanes(),
		"unit_price":      a.UnitPrice,
		"currency":        a.Currency,
	}
}

// RebuildProjection runs p.Rebuild (the query view rebuilt from the event
// store) on behalf of actor and records it as one PROJECTION_REBUILD
// audit row: outcome OK with the number of views, or FAILED with the
// views applied so far and the error. The rebuild writes only Redis, so
// the row is written after it, in a transaction of its own; an audit
// failure is returned even when the rebuild succeeded (rebuilding again is
// harmless).
func (a *Admin) RebuildProjection(ctx context.Context, actor string, p *ProjectOrderStates) (int, error) {
	if actor == "" {
		return 0, fmt.Errorf("projection rebuild: %w", errNoActor)
	}
	n, err := p.Rebuild(ctx)
	e := ports.AuditEntry{Actor: actor, Action: ports.AuditProjectionRebuild, Outcome: ports.AuditOK,
		Params: map[string]any{"views": n}}
	if err != nil {
		e.Outcome, e.Params["error"] = ports.AuditFailed, err.Error()
	}
	if aerr := auditAlone(ctx, a.uow, e); aerr != nil {
		return n, errors.Join(err, aerr)
	}
	level, attrs := slog.LevelInfo, []slog.Attr{slog.String("actor", actor), slog.Int("views", n), slog.String("outcome", e.Outcome)}
	if err != nil {
		level, attrs = slog.LevelWarn, append(attrs, slog.String("error", err.Error()))
	}
	a.log.LogAttrs(ctx, level, "projection rebuilt", attrs...)
	return n, err
}
