package application

import (
	"context"
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

// ReplayDeadLetter implements ports.AdminService.
func (a *Admin) ReplayDeadLetter(ctx context.Context, actor string, id int64, reason string) (ports.ReplayResult, error) {
	return a.deadLetters.Replay(ctx, actor, id, reason)
}

// CreateActivity stores the activity and its final stock in PostgreSQL,
// then seeds Redis. Both steps are idempotent, so a retry after a crash
// between them completes the seeding. Different settings for an existing
// activity SKU fail with ErrAlreadyExists.
func (a *Admin) CreateActivity(ctx context.Context, act ports.Activity) (ports.Activity, error) {
	act.StartsAt = act.StartsAt.UTC().Truncate(time.Microsecond) // the database's precision
	act.EndsAt = act.EndsAt.UTC().Truncate(time.Microsecond)
	var stored ports.Activity
	err := a.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		stored, _, err = tx.CreateActivity(ctx, act)
		return err
	})
	if err != nil {
		return ports.Activity{}, fmt.Errorf("create activity: %w", err)
	}
	if !sameActivity(stored, act) {
		return ports.Activity{}, fmt.Errorf("activity %d/%d: %w", act.ActivityID, act.SKUID, ports.ErrAlreadyExists)
	}
	if err := a.reservations.SeedActivity(ctx, stored); err != nil {
		return ports.Activity{}, fmt.Errorf("seed activity: %w", err)
	}
	a.activities.put(stored)
	a.log.InfoContext(ctx, "activity ready", "activity_id", stored.ActivityID, "sku_id", stored.SKUID, "stock", stored.Stock)
	return stored, nil
}

func sameActivity(a, b ports.Activity) bool {
	return a.ActivityID == b.ActivityID && a.SKUID == b.SKUID && a.Stock == b.Stock &&
		a.StartsAt.Equal(b.StartsAt) && a.EndsAt.Equal(b.EndsAt) &&
		a.PaymentTimeout == b.PaymentTimeout && a.ReservationTTL == b.ReservationTTL
}
