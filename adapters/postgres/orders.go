package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// streamVersionKey is the UNIQUE(aggregate_id, aggregate_version)
// constraint of order_events (migration 00003).
const streamVersionKey = "order_events_stream_version_key"

// InsertOrders implements ports.OrderStore with one INSERT ... SELECT FROM
// unnest ... ON CONFLICT DO NOTHING RETURNING order_id: a row that violates
// any unique index (order id, reservation id, the user's active order for
// the activity SKU) is skipped and reported false. Rows are inserted in
// input order, so within one call the first of two conflicting orders
// wins; an order id repeated in the input is inserted at most once.
func (t *tx) InsertOrders(ctx context.Context, orders []order.Snapshot) ([]bool, error) {
	if len(orders) == 0 {
		return nil, nil
	}
	c := newOrderColumns(len(orders))
	for _, o := range orders {
		c.add(o)
	}
	inserted, err := query(ctx, t, "insert orders", `
		INSERT INTO orders
		    (order_id, reservation_id, activity_id, sku_id, user_id, quantity, status,
		     cancel_reason, payment_id, aggregate_version,
		     created_at, updated_at, expires_at, paid_at, canceled_at)
		SELECT u.order_id, u.reservation_id, u.activity_id, u.sku_id, u.user_id, u.quantity, u.status,
		       NULLIF(u.cancel_reason, ''), NULLIF(u.payment_id, ''), u.version,
		       u.created_at, u.updated_at, u.expires_at, u.paid_at, u.canceled_at
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::int[], $7::text[],
		            $8::text[], $9::text[], $10::bigint[],
		            $11::timestamptz[], $12::timestamptz[], $13::timestamptz[], $14::timestamptz[], $15::timestamptz[])
		     WITH ORDINALITY AS u(order_id, reservation_id, activity_id, sku_id, user_id, quantity, status,
		                          cancel_reason, payment_id, version,
		                          created_at, updated_at, expires_at, paid_at, canceled_at, ord)
		ORDER BY u.ord
		ON CONFLICT DO NOTHING
		RETURNING order_id`,
		pgx.RowTo[string],
		c.orderID, c.reservationID, c.activityID, c.skuID, c.userID, c.quantity, c.status,
		c.cancelReason, c.paymentID, c.version,
		c.createdAt, c.updatedAt, c.expiresAt, c.paidAt, c.canceledAt)
	if err != nil {
		return nil, err
	}
	got := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		got[id] = true
	}
	out := make([]bool, len(orders))
	for i, o := range orders {
		out[i] = got[o.OrderID]
		delete(got, o.OrderID) // a repeated id was inserted once: only its first occurrence
	}
	return out, nil
}

// UpdateOrders implements ports.OrderStore with one UPDATE ... FROM unnest,
// applied only where the stored aggregate_version is older. When an order
// appears several times in the input the highest version is used.
func (t *tx) UpdateOrders(ctx context.Context, orders []order.Snapshot) error {
	if len(orders) == 0 {
		return nil
	}
	newest := make(map[string]order.Snapshot, len(orders))
	for _, o := range orders {
		if cur, ok := newest[o.OrderID]; !ok || o.Version > cur.Version {
			newest[o.OrderID] = o
		}
	}
	// Rows are updated (locked) in order id order, so concurrent batches
	// touching the same orders wait for each other instead of deadlocking.
	c := newOrderColumns(len(newest))
	for _, id := range slices.Sorted(maps.Keys(newest)) {
		c.add(newest[id])
	}
	_, err := t.exec(ctx, "update orders", `
		UPDATE orders o
		SET status = u.status, cancel_reason = NULLIF(u.cancel_reason, ''),
		    payment_id = NULLIF(u.payment_id, ''), aggregate_version = u.version,
		    updated_at = u.updated_at, expires_at = u.expires_at,
		    paid_at = u.paid_at, canceled_at = u.canceled_at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[],
		            $6::timestamptz[], $7::timestamptz[], $8::timestamptz[], $9::timestamptz[])
		     AS u(order_id, status, cancel_reason, payment_id, version,
		          updated_at, expires_at, paid_at, canceled_at)
		WHERE o.order_id = u.order_id AND o.aggregate_version < u.version`,
		c.orderID, c.status, c.cancelReason, c.paymentID, c.version,
		c.updatedAt, c.expiresAt, c.paidAt, c.canceledAt)
	if err != nil && sqlState(err) == codeUniqueViolation && constraintOf(err) == paymentIDKey {
		return fmt.Errorf("postgres: update orders: %w: %w", ports.ErrPaymentIDReused, err)
	}
	return err
}

// paymentIDKey is the unique index that lets a payment id confirm one
// order only (migration 00014).
const paymentIDKey = "orders_payment_id_key"

// OrdersByReservation implements ports.OrderStore.
func (t *tx) OrdersByReservation(ctx context.Context, reservationIDs []string) (map[string]string, error) {
	out := make(map[string]string, len(reservationIDs))
	if len(reservationIDs) == 0 {
		return out, nil
	}
	type pair struct{ rsv, ord string }
	pairs, err := query(ctx, t, "orders by reservation", `
		SELECT reservation_id, order_id FROM orders WHERE reservation_id = ANY($1::text[])`,
		func(r pgx.CollectableRow) (pair, error) {
			var p pair
			err := r.Scan(&p.rsv, &p.ord)
			return p, err
		}, reservationIDs)
	if err != nil {
		return nil, err
	}
	for _, p := range pairs {
		out[p.rsv] = p.ord
	}
	return out, nil
}

// AppendEvents implements ports.OrderStore with one INSERT that first
// checks, per order, that the first new version is the stream's head + 1
// (otherwise nothing is inserted). A concurrent transaction appending the
// same version makes this one wait; when it commits, the unique index
// (aggregate_id, aggregate_version) fails this insert.
//
// Both cases return an error matching ports.ErrConcurrencyConflict. After
// the second one the transaction is aborted (PostgreSQL rejects further
// statements), and no savepoint is spent to avoid that: callers end the
// transaction on a conflict and retry from a fresh one, which is what
// optimistic concurrency needs anyway (reload, decide again).
//
// Every event is recorded with the traceparent of the operation that
// caused it (read back by ReadEvents as EventRecord.Traceparent): its
// order's entry in ports.WithEventTraces when ctx has one
// (ports.EventTraceFrom), else ports.TraceFrom(ctx). One that is not a
// valid W3C version-00 traceparent (validTraceparent), or none, is
// recorded as NULL. The traceparents travel as one more array of the same
// statement, so a batch of operations with as many traces is still one
// INSERT.
//
// Events of one order must be consecutive versions in the input; anything
// else is a caller bug and fails without touching the database.
func (t *tx) AppendEvents(ctx context.Context, events []order.Event) error {
	if len(events) == 0 {
		return nil
	}
	n := len(events)
	ids, types, payloads := make([]string, n), make([]string, n), make([]string, n)
	versions := make([]int64, n)
	schemas := make([]int32, n)
	occurred := make([]time.Time, n)
	traceparents := make([]*string, n) // nil: NULL
	fallback := ports.TraceFrom(ctx).Traceparent
	prev := make(map[string]int64, n)
	for i, e := range events {
		if e.Payload == nil || e.Payload.EventType() != e.Type {
			return fmt.Errorf("postgres: append events: event %d of %s: payload does not match type %s", e.Version, e.OrderID, e.Type)
		}
		if v, ok := prev[e.OrderID]; ok && e.Version != v+1 {
			return fmt.Errorf("postgres: append events: %s version %d follows %d in the input", e.OrderID, e.Version, v)
		}
		prev[e.OrderID] = e.Version
		body, err := order.EncodePayload(e.Payload)
		if err != nil {
			return fmt.Errorf("postgres: append events: %w", err)
		}
		ids[i], versions[i], types[i], schemas[i] = e.OrderID, e.Version, string(e.Type), int32(e.SchemaVersion)
		payloads[i], occurred[i] = string(body), e.OccurredAt
		tp := fallback
		if tc, ok := ports.EventTraceFrom(ctx, e.OrderID); ok {
			tp = tc.Traceparent
		}
		if validTraceparent(tp) {
			traceparents[i] = &tp
		}
	}
	inserted, err := t.exec(ctx, "append events", `
		WITH input AS (
		    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::int[], $5::text[], $6::timestamptz[], $8::text[])
		         WITH ORDINALITY AS u(aggregate_id, aggregate_version, event_type, schema_version, payload, occurred_at,
		                              traceparent, ord)
		), heads AS (
		    SELECT i.aggregate_id, min(i.aggregate_version) AS first_version,
		           (SELECT coalesce(max(e.aggregate_version), 0) FROM order_events e
		            WHERE e.aggregate_id = i.aggregate_id) AS head
		    FROM input i
		    GROUP BY i.aggregate_id
		)
		INSERT INTO order_events (aggregate_id, aggregate_version, event_type, schema_version, payload, occurred_at,
		                          recorded_at, traceparent)
		SELECT i.aggregate_id, i.aggregate_version, i.event_type, i.schema_version, i.payload::jsonb, i.occurred_at,
		       coalesce($7::timestamptz, now()), i.traceparent
		FROM input i
		WHERE NOT EXISTS (SELECT 1 FROM heads h WHERE h.first_version <> h.head + 1)
		ORDER BY i.ord`,
		ids, versions, types, schemas, payloads, occurred, t.nowArg(), traceparents)
	if err != nil {
		if sqlState(err) == codeUniqueViolation && constraintOf(err) == streamVersionKey {
			return fmt.Errorf("postgres: append events: %w: %w", ports.ErrConcurrencyConflict, err)
		}
		return err
	}
	if inserted != int64(n) {
		return fmt.Errorf("postgres: append events: a stream moved past the expected version: %w", ports.ErrConcurrencyConflict)
	}
	return nil
}

// validTraceparent reports whether s is a W3C trace context traceparent of
// version 00: "00-<32 hex>-<16 hex>-<2 hex>", lower-case hex, with a trace
// id and a parent id that are not all zeros (the specification's invalid
// values).
func validTraceparent(s string) bool {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return false
	}
	traceID, parentID, flags := s[3:35], s[36:52], s[53:]
	return isLowerHex(traceID) && isLowerHex(parentID) && isLowerHex(flags) &&
		traceID != strings.Repeat("0", 32) && parentID != strings.Repeat("0", 16)
}

// isLowerHex reports whether s holds only the digits 0-9 and a-f.
func isLowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// LoadOrderEvents implements ports.OrderStore. Payloads are decoded with
// order.DecodePayload; an undecodable one fails with order.ErrCorruptStream.
func (t *tx) LoadOrderEvents(ctx context.Context, orderID string) ([]order.Event, error) {
	events, err := query(ctx, t, "load order events", `
		SELECT aggregate_id, aggregate_version, event_type, schema_version, payload, occurred_at
		FROM order_events WHERE aggregate_id = $1 ORDER BY aggregate_version`,
		scanEvent, orderID)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("postgres: load order events of %s: %w", orderID, ports.ErrNotFound)
	}
	return events, nil
}

func scanEvent(r pgx.CollectableRow) (order.Event, error) {
	var (
		e       order.Event
		typ     string
		schema  int32
		payload []byte
	)
	if err := r.Scan(&e.OrderID, &e.Version, &typ, &schema, &payload, &e.OccurredAt); err != nil {
		return order.Event{}, err
	}
	e.Type, e.SchemaVersion, e.OccurredAt = order.EventType(typ), int(schema), e.OccurredAt.UTC()
	p, err := order.DecodePayload(e.Type, e.SchemaVersion, payload)
	if err != nil {
		return order.Event{}, fmt.Errorf("event %d of %s: %w", e.Version, e.OrderID, err)
	}
	e.Payload = p
	return e, nil
}

// orderColumns holds order snapshots as column arrays for unnest.
type orderColumns struct {
	orderID, reservationID, status, cancelReason, paymentID []string
	activityID, skuID, userID, version                      []int64
	quantity                                                []int32
	createdAt, updatedAt, expiresAt, paidAt, canceledAt     []pgtype.Timestamptz
}

func newOrderColumns(n int) *orderColumns {
	return &orderColumns{
		orderID: make([]string, 0, n), reservationID: make([]string, 0, n), status: make([]string, 0, n),
		cancelReason: make([]string, 0, n), paymentID: make([]string, 0, n),
		activityID: make([]int64, 0, n), skuID: make([]int64, 0, n), userID: make([]int64, 0, n),
		version: make([]int64, 0, n), quantity: make([]int32, 0, n),
		createdAt: make([]pgtype.Timestamptz, 0, n), updatedAt: make([]pgtype.Timestamptz, 0, n),
		expiresAt: make([]pgtype.Timestamptz, 0, n), paidAt: make([]pgtype.Timestamptz, 0, n),
		canceledAt: make([]pgtype.Timestamptz, 0, n),
	}
}

func (c *orderColumns) add(o order.Snapshot) {
	c.orderID = append(c.orderID, o.OrderID)
	c.reservationID = append(c.reservationID, o.ReservationID)
	c.status = append(c.status, string(o.Status))
	c.cancelReason = append(c.cancelReason, string(o.CancelReason))
	c.paymentID = append(c.paymentID, o.PaymentID)
	c.activityID = append(c.activityID, o.ActivityID)
	c.skuID = append(c.skuID, o.SKUID)
	c.userID = append(c.userID, o.UserID)
	c.version = append(c.version, o.Version)
	c.quantity = append(c.quantity, o.Quantity)
	c.createdAt = append(c.createdAt, timestamptz(o.CreatedAt))
	c.updatedAt = append(c.updatedAt, timestamptz(o.UpdatedAt))
	c.expiresAt = append(c.expiresAt, timestamptz(o.ExpiresAt))
	c.paidAt = append(c.paidAt, timestamptz(o.PaidAt))
	c.canceledAt = append(c.canceledAt, timestamptz(o.CanceledAt))
}

// timestamptz maps the zero time to NULL.
func timestamptz(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

// timeOf maps NULL to the zero time and anything else to UTC.
func timeOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}
