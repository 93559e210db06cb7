package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// Field names of the order view hash.
const (
	vOrderID          = "order_id"
	vReservationID    = "reservation_id"
	vActivityID       = "activity_id"
	vSKUID            = "sku_id"
	vUserID           = "user_id"
	vStatus           = "status"
	vReason           = "reason"
	vAggregateVersion = "aggregate_version"
	vPaymentID        = "payment_id"
	vCreatedAt        = "created_at"
	vUpdatedAt        = "updated_at"
	vExpiresAt        = "expires_at"
	vPaidAt           = "paid_at"
	vCanceledAt       = "canceled_at"
	// vApplyCall is the token of the Apply call that stored the view
	// (view_apply.lua), not part of ports.OrderView.
	vApplyCall = "apply_call"
)

// OrderViews is the Redis query view of orders; it implements
// ports.OrderViews. Get it from Store.OrderViews (a separate type because
// ports.Reservations and ports.OrderViews both name a Get method).
type OrderViews struct {
	s *Store
}

var _ ports.OrderViews = (*OrderViews)(nil)

// OrderViews returns the order view store sharing s's client, namespace
// and metrics.
func (s *Store) OrderViews() *OrderViews { return &OrderViews{s: s} }

// Apply stores v in <ns>:view:{<order_id>} when its AggregateVersion is
// newer than the stored one (compared atomically in Lua) and reports
// whether it did. Every field is written, so a newer view replaces the
// older one entirely. Times keep their full precision (RFC 3339, UTC;
// empty for the zero time). With Config.OrderViewTTL > 0 the view expires
// that long after its last applied update.
func (o *OrderViews) Apply(ctx context.Context, v ports.OrderView) (bool, error) {
	if v.OrderID == "" {
		return false, ports.InvalidField("order_id", "is required")
	}
	s := o.s
	args := []any{
		itoa(v.AggregateVersion), itoa(s.cfg.OrderViewTTL.Milliseconds()),
		vOrderID, v.OrderID,
		vReservationID, v.ReservationID,
		vActivityID, itoa(v.ActivityID),
		vSKUID, itoa(v.SKUID),
		vUserID, itoa(v.UserID),
		vStatus, string(v.Status),
		vReason, v.Reason,
		vAggregateVersion, itoa(v.AggregateVersion),
		vPaymentID, v.PaymentID,
		vCreatedAt, fmtTime(v.CreatedAt),
		vUpdatedAt, fmtTime(v.UpdatedAt),
		vExpiresAt, fmtTime(v.ExpiresAt),
		vPaidAt, fmtTime(v.PaidAt),
		vCanceledAt, fmtTime(v.CanceledAt),
		vApplyCall, s.callToken(),
	}
	n, err := s.run(ctx, scriptViewApply, []string{s.keys.view(v.OrderID)}, args...).Int64()
	if err != nil {
		return false, wrapErr("apply order view", err)
	}
	return n == 1, nil
}

// Get returns the stored view of orderID or ports.ErrNotFound.
func (o *OrderViews) Get(ctx context.Context, orderID string) (ports.OrderView, error) {
	s := o.s
	m, err := s.client.HGetAll(ctx, s.keys.view(orderID)).Result()
	if err != nil {
		return ports.OrderView{}, wrapErr("get order view", err)
	}
	if len(m) == 0 {
		return ports.OrderView{}, fmt.Errorf("order view %s: %w", orderID, ports.ErrNotFound)
	}
	var (
		v    ports.OrderView
		errs []error
	)
	v.OrderID = m[vOrderID]
	v.ReservationID = m[vReservationID]
	v.Status = ports.OrderStatus(m[vStatus])
	v.Reason = m[vReason]
	v.PaymentID = m[vPaymentID]
	v.ActivityID, errs = parseInt(m, vActivityID, errs)
	v.SKUID, errs = parseInt(m, vSKUID, errs)
	v.UserID, errs = parseInt(m, vUserID, errs)
	v.AggregateVersion, errs = parseInt(m, vAggregateVersion, errs)
	v.CreatedAt, errs = parseTime(m, vCreatedAt, errs)
	v.UpdatedAt, errs = parseTime(m, vUpdatedAt, errs)
	v.ExpiresAt, errs = parseTime(m, vExpiresAt, errs)
	v.PaidAt, errs = parseTime(m, vPaidAt, errs)
	v.CanceledAt, errs = parseTime(m, vCanceledAt, errs)
	if err := errors.Join(errs...); err != nil {
		return ports.OrderView{}, fmt.Errorf("redis order view %s: %w", orderID, err)
	}
	return v, nil
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func parseTime(m map[string]string, field string, errs []error) (time.Time, []error) {
	s := m[field]
	if s == "" {
		return time.Time{}, errs
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, append(errs, fmt.Errorf("field %s: %w", field, err))
	}
	return t, errs
}

func parseInt(m map[string]string, field string, errs []error) (int64, []error) {
	s := m[field]
	if s == "" {
		return 0, errs
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, append(errs, fmt.Errorf("field %s: %w", field, err))
	}
	return v, errs
}
