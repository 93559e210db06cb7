// Package view is the sales view of the example consumer salesview: a
// projection of seckill's order events (seckill.v1.EventService/Subscribe)
// into the consumer's own PostgreSQL database, written through the consumer
// kit (adapters/projector).
//
// Each version of the view has two tables, named by projector.View.Table:
//
//   - minutes (activity_id, minute, currency, accepted, paid, canceled,
//     revenue): per activity, per minute of the events' occurred_at
//     (truncated to the minute, UTC) and per currency of the order, how many
//     orders were created (accepted, ORDER_CREATED), paid (ORDER_PAID) and
//     canceled (ORDER_CANCELED), and revenue, the sum of unit_price*quantity
//     of the orders paid in that minute, in minor units of currency. Orders
//     whose price is unknown (unit_price 0, currency "": created before the
//     service recorded prices, or of an activity without a price) are
//     counted under currency "" with revenue 0, apart from the priced ones.
//   - orders (order_id, user_id, activity_id, sku_id, status, unit_price,
//     currency, quantity, cancel_reason, created_at, updated_at,
//     last_version): each order's current state, the buyers' order
//     histories. status is CREATED, PAYING, PAID or CANCELED.
//
// The kit applies every event exactly once (the handler's writes and the
// checkpoint commit in one transaction). Apply still compares the event's
// aggregate_version with the order's last_version and skips an event that
// is not newer: defence in depth, so a replay or a bug upstream cannot count
// an order twice. Event types this view does not know are skipped (the kit
// advances past them), as docs/events.md asks of every consumer.
//
// The query functions (Books, Totals, Minutes, History) read one version;
// ActiveView says which one to read.
package view

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckill-dev/seckill/adapters/projector"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// Name is the projection's name: the prefix of its tables and its key in
// the kit's checkpoints and active-version tables.
const Name = "salesview"

// The event types this view applies (docs/events.md). Any other type is
// skipped.
const (
	EventCreated        = "ORDER_CREATED"
	EventPaymentStarted = "ORDER_PAYMENT_STARTED"
	EventPaid           = "ORDER_PAID"
	EventCanceled       = "ORDER_CANCELED"
)

// The statuses of an order in the orders table.
const (
	StatusCreated  = "CREATED"
	StatusPaying   = "PAYING"
	StatusPaid     = "PAID"
	StatusCanceled = "CANCELED"
)

// Handler writes the sales view; it implements projector.Handler and
// projector.SideEffects. The zero value is ready to use.
type Handler struct {
	// OnPaid, when set, is the view's side effect: it is called once after
	// the commit of each ORDER_PAID event (a receipt mail, a webhook). The
	// kit never calls it while the version is rebuilding, so a new version
	// replaying history does not mail old buyers again; it calls it at most
	// once per event (a crash right after the commit skips it).
	OnPaid func(ctx context.Context, v projector.View, e *seckillv1.OrderEvent)
}

// Setup creates the tables of version v if they do not exist.
func (Handler) Setup(ctx context.Context, tx pgx.Tx, v projector.View) error {
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + v.Table("minutes") + ` (
			activity_id bigint      NOT NULL,
			minute      timestamptz NOT NULL,
			currency    text        NOT NULL,
			accepted    bigint      NOT NULL DEFAULT 0,
			paid        bigint      NOT NULL DEFAULT 0,
			canceled    bigint      NOT NULL DEFAULT 0,
			revenue     bigint      NOT NULL DEFAULT 0,
			PRIMARY KEY (activity_id, minute, currency))`,
		`CREATE TABLE IF NOT EXISTS ` + v.Table("orders") + ` (
			order_id      text        PRIMARY KEY,
			user_id       bigint      NOT NULL,
			activity_id   bigint      NOT NULL,
			sku_id        bigint      NOT NULL,
			status        text        NOT NULL,
			unit_price    bigint      NOT NULL,
			currency      text        NOT NULL,
			quantity      integer     NOT NULL,
			cancel_reason text        NOT NULL DEFAULT '',
			created_at    timestamptz NOT NULL,
			updated_at    timestamptz NOT NULL,
			last_version  bigint      NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS ` + v.Table("orders_by_user") + ` ON ` + v.Table("orders") +
			` (user_id, created_at DESC, order_id DESC)`,
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("salesview: set up version %d: %w", v.Version, err)
		}
	}
	return nil
}

// Apply writes e's effect on version v in tx. An event of an unknown type,
// or one whose aggregate_version is not newer than the order's
// last_version, changes nothing and returns nil. An event that cannot be
// applied whatever the retries (no order id, no occurred_at, an
// ORDER_CREATED without its payload or with a quantity below 1) is an error
// wrapping projector.ErrPermanent, so the kit parks it at once.
func (Handler) Apply(ctx context.Context, tx pgx.Tx, v projector.View, e *seckillv1.OrderEvent) error {
	typ := e.GetEventType()
	switch typ {
	case EventCreated, EventPaymentStarted, EventPaid, EventCanceled:
	default:
		return nil
	}
	if e.GetOrderId() == "" || e.GetAggregateVersion() < 1 || e.GetOccurredAt() == nil {
		return fmt.Errorf("salesview: event %q at position %d has no order_id, aggregate_version or occurred_at: %w",
			e.GetEventId(), e.GetPosition(), projector.ErrPermanent)
	}
	at := e.GetOccurredAt().AsTime().UTC()
	orders := v.Table("orders")

	var (
		last      int64
		unitPrice int64
		currency  string
		quantity  int32
	)
	err := tx.QueryRow(ctx, `SELECT last_version, unit_price, currency, quantity FROM `+orders+
		` WHERE order_id = $1 FOR UPDATE`, e.GetOrderId()).Scan(&last, &unitPrice, &currency, &quantity)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("salesview: read order %s: %w", e.GetOrderId(), err)
	}
	if found && last >= e.GetAggregateVersion() {
		// Already applied: the kit's exactly-once makes this unreachable in
		// normal operation; the check keeps a replay from counting twice.
		return nil
	}

	var m minuteDelta
	switch typ {
	case EventCreated:
		c := e.GetCreated()
		if c == nil || c.GetQuantity() < 1 {
			return fmt.Errorf("salesview: ORDER_CREATED %q without a payload or with quantity < 1: %w",
				e.GetEventId(), projector.ErrPermanent)
		}
		unitPrice, currency, quantity = c.GetUnitPrice(), c.GetCurrency(), c.GetQuantity()
		_, err = tx.Exec(ctx, `INSERT INTO `+orders+` AS o (order_id, user_id, activity_id, sku_id, status,
				unit_price, currency, quantity, created_at, updated_at, last_version)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10)
			ON CONFLICT (order_id) DO UPDATE SET unit_price = EXCLUDED.unit_price, currency = EXCLUDED.currency,
				quantity = EXCLUDED.quantity, created_at = EXCLUDED.created_at, last_version = EXCLUDED.last_version`,
			e.GetOrderId(), e.GetUserId(), e.GetActivityId(), e.GetSkuId(), StatusCreated,
			unitPrice, currency, quantity, at, e.GetAggregateVersion())
		m.accepted = 1
	case EventPaymentStarted:
		err = setStatus(ctx, tx, orders, e, at, StatusPaying, "")
	case EventPaid:
		err = setStatus(ctx, tx, orders, e, at, StatusPaid, "")
		m.paid, m.revenue = 1, unitPrice*int64(quantity)
	case EventCanceled:
		err = setStatus(ctx, tx, orders, e, at, StatusCanceled, e.GetCanceled().GetReason())
		m.canceled = 1
	}
	if err != nil {
		return fmt.Errorf("salesview: write order %s (%s): %w", e.GetOrderId(), typ, err)
	}
	if m == (minuteDelta{}) {
		return nil
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+v.Table("minutes")+` AS m
			(activity_id, minute, currency, accepted, paid, canceled, revenue)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (activity_id, minute, currency) DO UPDATE SET
			accepted = m.accepted + EXCLUDED.accepted, paid = m.paid + EXCLUDED.paid,
			canceled = m.canceled + EXCLUDED.canceled, revenue = m.revenue + EXCLUDED.revenue`,
		e.GetActivityId(), at.Truncate(time.Minute), currency, m.accepted, m.paid, m.canceled, m.revenue)
	if err != nil {
		return fmt.Errorf("salesview: count %s of order %s: %w", typ, e.GetOrderId(), err)
	}
	return nil
}

// AfterCommit calls OnPaid for an ORDER_PAID event when OnPaid is set.
func (h Handler) AfterCommit(ctx context.Context, v projector.View, e *seckillv1.OrderEvent) {
	if h.OnPaid != nil && e.GetEventType() == EventPaid {
		h.OnPaid(ctx, v, e)
	}
}

// minuteDelta is one event's change of a minutes row.
type minuteDelta struct {
	accepted, paid, canceled, revenue int64
}

// setStatus moves an order to status. An order this view has not seen
// created (a subscription filtered by type, or history the store no longer
// serves) gets a row with its price unknown (unit_price 0, currency "",
// quantity 0), created_at = the event's occurred_at.
func setStatus(ctx context.Context, tx pgx.Tx, orders string, e *seckillv1.OrderEvent, at time.Time, status, reason string) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+orders+` AS o (order_id, user_id, activity_id, sku_id, status,
			unit_price, currency, quantity, cancel_reason, created_at, updated_at, last_version)
		VALUES ($1, $2, $3, $4, $5, 0, '', 0, $6, $7, $7, $8)
		ON CONFLICT (order_id) DO UPDATE SET status = EXCLUDED.status, cancel_reason = EXCLUDED.cancel_reason,
			updated_at = EXCLUDED.updated_at, last_version = EXCLUDED.last_version`,
		e.GetOrderId(), e.GetUserId(), e.GetActivityId(), e.GetSkuId(), status, reason, at, e.GetAggregateVersion())
	return err
}
