package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// AuditStock implements ports.AuditStore in one statement, so every term
// comes from one snapshot even inside the caller's READ COMMITTED
// transaction:
//
//   - InitialStock: activities.stock;
//   - PGFinalStock: the sum of the SKU's sku_stock buckets;
//   - NonCanceledOrders: the SKU's orders whose status is not CANCELED (rows,
//     an index-only count over orders_one_active_per_user);
//   - OrderedHeld: the held reservations whose order is not CANCELED;
//   - ReleasedHeld: the other held reservations that PostgreSQL released:
//     their order is CANCELED, or they have a rejection, or their
//     reservation outcome is REJECTED.
//
// The two lists are disjoint, keep the input order and hold a repeated id
// once; a held id PostgreSQL knows nothing about is in neither (pending).
// Reservation ids are global, so held ids are looked up whatever SKU they
// belong to. ports.ErrNotFound for an unknown activity SKU.
func (t *tx) AuditStock(ctx context.Context, activityID, skuID int64, held []string) (ports.StockAudit, error) {
	var a ports.StockAudit
	err := t.queryRow(ctx, "audit stock", `
		WITH held AS (
		    SELECT h.id, min(h.ord) AS ord
		    FROM unnest($3::text[]) WITH ORDINALITY AS h(id, ord)
		    GROUP BY h.id
		), classified AS (
		    SELECT h.id, h.ord,
		           CASE
		               WHEN o.status <> 'CANCELED' THEN 'ORDERED'
		               WHEN o.status = 'CANCELED'
		                 OR EXISTS (SELECT 1 FROM order_rejections r WHERE r.reservation_id = h.id)
		                 OR EXISTS (SELECT 1 FROM reservation_outcomes x
		                            WHERE x.reservation_id = h.id AND x.status = 'REJECTED')
		               THEN 'RELEASED'
		           END AS class
		    FROM held h
		    LEFT JOIN orders o ON o.reservation_id = h.id
		)
		SELECT a.stock,
		       (SELECT coalesce(sum(s.available), 0)::bigint FROM sku_stock s
		        WHERE s.activity_id = a.activity_id AND s.sku_id = a.sku_id),
		       (SELECT count(*) FROM orders o
		        WHERE o.activity_id = a.activity_id AND o.sku_id = a.sku_id AND o.status <> 'CANCELED'),
		       coalesce((SELECT array_agg(c.id ORDER BY c.ord) FROM classified c WHERE c.class = 'ORDERED'), '{}'),
		       coalesce((SELECT array_agg(c.id ORDER BY c.ord) FROM classified c WHERE c.class = 'RELEASED'), '{}')
		FROM activities a
		WHERE a.activity_id = $1 AND a.sku_id = $2`,
		activityID, skuID, nonNil(held)).Scan(
		&a.InitialStock, &a.PGFinalStock, &a.NonCanceledOrders, &a.OrderedHeld, &a.ReleasedHeld)
	if errors.Is(err, pgx.ErrNoRows) {
		return ports.StockAudit{}, fmt.Errorf("postgres: audit stock of activity %d sku %d: %w", activityID, skuID, ports.ErrNotFound)
	}
	if err != nil {
		return ports.StockAudit{}, err
	}
	if len(a.OrderedHeld) == 0 {
		a.OrderedHeld = nil
	}
	if len(a.ReleasedHeld) == 0 {
		a.ReleasedHeld = nil
	}
	return a, nil
}

// LiveHolders implements ports.AuditStore: the user and reservation of
// every non-canceled order of one activity SKU, by user id (the partial
// index orders_one_active_per_user holds exactly these rows).
func (t *tx) LiveHolders(ctx context.Context, activityID, skuID int64) ([]ports.Holder, error) {
	return query(ctx, t, "live holders", `
		SELECT user_id, reservation_id FROM orders
		WHERE activity_id = $1 AND sku_id = $2 AND status <> 'CANCELED'
		ORDER BY user_id`,
		func(r pgx.CollectableRow) (ports.Holder, error) {
			var h ports.Holder
			err := r.Scan(&h.UserID, &h.ReservationID)
			return h, err
		}, activityID, skuID)
}

// CanceledReservations implements ports.AuditStore.
func (t *tx) CanceledReservations(ctx context.Context, activityID, skuID int64) ([]string, error) {
	return query(ctx, t, "canceled reservations", `
		SELECT reservation_id FROM orders
		WHERE activity_id = $1 AND sku_id = $2 AND status = 'CANCELED'
		ORDER BY reservation_id`,
		func(r pgx.CollectableRow) (string, error) {
			var id string
			err := r.Scan(&id)
			return id, err
		}, activityID, skuID)
}

// ReservationStates implements ports.AuditStore in one statement: one
// state per input id, in input order (a repeated id is repeated). The
// outcome is the reservation_outcomes row's; a PROCESSING row (visible
// only to the transaction that claimed it, since claims are finished in
// their own transaction) reads as undecided (""). Without an outcome row,
// an order makes the reservation ORDERED and a rejection REJECTED (rows
// written before outcomes were recorded). Reason is set for REJECTED (the
// outcome's reason, else the rejection's), OrderStatus for ORDERED when
// the order row exists.
func (t *tx) ReservationStates(ctx context.Context, reservationIDs []string) ([]ports.ReservationState, error) {
	if len(reservationIDs) == 0 {
		return nil, nil
	}
	return query(ctx, t, "reservation states", `
		SELECT u.id,
		       CASE
		           WHEN x.status = 'PROCESSING' THEN ''
		           WHEN x.status IS NOT NULL THEN x.status
		           WHEN o.order_id IS NOT NULL THEN 'ORDERED'
		           WHEN r.order_id IS NOT NULL THEN 'REJECTED'
		           ELSE ''
		       END,
		       coalesce(x.reason, r.reason, ''),
		       coalesce(o.status, '')
		FROM unnest($1::text[]) WITH ORDINALITY AS u(id, ord)
		LEFT JOIN reservation_outcomes x ON x.reservation_id = u.id
		LEFT JOIN orders o ON o.reservation_id = u.id
		LEFT JOIN order_rejections r ON r.reservation_id = u.id
		ORDER BY u.ord`,
		func(r pgx.CollectableRow) (ports.ReservationState, error) {
			var (
				s              ports.ReservationState
				reason, status string
			)
			if err := r.Scan(&s.ReservationID, &s.Outcome, &reason, &status); err != nil {
				return ports.ReservationState{}, err
			}
			switch s.Outcome {
			case ports.OutcomeRejected:
				s.Reason = reason
			case ports.OutcomeOrdered:
				s.OrderStatus = order.Status(status)
			}
			return s, nil
		}, reservationIDs)
}

// StaleReleases implements ports.AuditStore in one statement: a canceled
// order's canceled_at, else the rejection's rejected_at, else a REJECTED
// outcome's updated_at, before cutoff.
func (t *tx) StaleReleases(ctx context.Context, held []string, cutoff time.Time) ([]ports.StaleRelease, error) {
	if len(held) == 0 {
		return nil, nil
	}
	return query(ctx, t, "stale releases", `
		WITH h AS (
		    SELECT id, min(ord) AS ord FROM unnest($1::text[]) WITH ORDINALITY AS u(id, ord) GROUP BY id
		), s AS (
		    SELECT h.id, h.ord,
		           coalesce(o.user_id, r.user_id, 0) AS user_id,
		           o.status IS NOT DISTINCT FROM 'CANCELED' AS canceled,
		           coalesce(r.reason, x.reason, '') AS reason,
		           CASE
		               WHEN o.status = 'CANCELED' THEN o.canceled_at
		               WHEN o.order_id IS NOT NULL THEN NULL
		               WHEN r.order_id IS NOT NULL THEN r.rejected_at
		               WHEN x.status = 'REJECTED' THEN x.updated_at
		           END AS released_at
		    FROM h
		    LEFT JOIN orders o ON o.reservation_id = h.id
		    LEFT JOIN order_rejections r ON r.reservation_id = h.id
		    LEFT JOIN reservation_outcomes x ON x.reservation_id = h.id
		)
		SELECT id, user_id, canceled, reason, released_at FROM s
		WHERE released_at < $2
		ORDER BY ord`,
		func(r pgx.CollectableRow) (ports.StaleRelease, error) {
			var s ports.StaleRelease
			err := r.Scan(&s.ReservationID, &s.UserID, &s.Canceled, &s.Reason, &s.ReleasedAt)
			if s.Canceled {
				s.Reason = ""
			}
			return s, err
		}, held, cutoff)
}

// ExpiredUnpaidOrders implements ports.AuditStore: up to limit orders in
// CREATED or PAYING with expires_at < cutoff, earliest deadline first
// (then by order id), from the partial index orders_unpaid_expiry. A limit
// <= 0 returns nothing.
func (t *tx) ExpiredUnpaidOrders(ctx context.Context, cutoff time.Time, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	return query(ctx, t, "expired unpaid orders", `
		SELECT order_id FROM orders
		WHERE status IN ('CREATED', 'PAYING') AND expires_at < $1
		ORDER BY expires_at, order_id
		LIMIT $2`, pgx.RowTo[string], cutoff, limit)
}

// OrderStreams implements ports.AuditStore in one statement: the complete
// streams (oldest event first, payloads decoded as LoadOrderEvents does)
// of the first limit order ids of the event store greater than
// afterOrderID, in order id order. A limit <= 0 returns nothing; an
// undecodable payload fails the call with order.ErrCorruptStream.
//
// The statement finds the limit-th distinct id on the stream index and
// reads the id range (afterOrderID, that id] in one index range scan; a
// join of the ids with order_events instead made the generic plan (which
// does not know the limit) hash-join a sequential scan of every event
// (README.md, Queries).
func (t *tx) OrderStreams(ctx context.Context, afterOrderID string, limit int) ([][]order.Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	events, err := query(ctx, t, "order streams", `
		SELECT e.aggregate_id, e.aggregate_version, e.event_type, e.schema_version, e.payload, e.occurred_at
		FROM order_events e
		WHERE e.aggregate_id > $1
		  AND e.aggregate_id <= (
		      SELECT max(ids.aggregate_id)
		      FROM (SELECT DISTINCT aggregate_id FROM order_events
		            WHERE aggregate_id > $1
		            ORDER BY aggregate_id
		            LIMIT $2) ids)
		ORDER BY e.aggregate_id, e.aggregate_version`,
		scanEvent, afterOrderID, limit)
	if err != nil {
		return nil, err
	}
	var streams [][]order.Event
	for i, e := range events {
		if i == 0 || events[i-1].OrderID != e.OrderID {
			streams = append(streams, nil)
		}
		streams[len(streams)-1] = append(streams[len(streams)-1], e)
	}
	return streams, nil
}

// Rejections implements ports.AuditStore: up to limit rejections with
// order_id > afterOrderID, in order id order (the primary key). A limit
// <= 0 returns nothing.
func (t *tx) Rejections(ctx context.Context, afterOrderID string, limit int) ([]ports.Rejection, error) {
	if limit <= 0 {
		return nil, nil
	}
	return query(ctx, t, "rejections", `
		SELECT order_id, reservation_id, message_id, activity_id, sku_id, user_id, reason, rejected_at
		FROM order_rejections
		WHERE order_id > $1
		ORDER BY order_id
		LIMIT $2`,
		func(r pgx.CollectableRow) (ports.Rejection, error) {
			var x ports.Rejection
			err := r.Scan(&x.OrderID, &x.ReservationID, &x.MessageID, &x.ActivityID, &x.SKUID, &x.UserID,
				&x.Reason, &x.RejectedAt)
			x.RejectedAt = x.RejectedAt.UTC()
			return x, err
		}, afterOrderID, limit)
}

// ListActivities implements ports.AuditStore: every activity, by
// (activity_id, sku_id), as GetActivity returns them.
func (t *tx) ListActivities(ctx context.Context) ([]ports.Activity, error) {
	return query(ctx, t, "list activities", `
		SELECT activity_id, sku_id, stock, starts_at, ends_at, payment_timeout, reservation_ttl, stock_lanes,
		       unit_price, currency, paused, closed_at, updated_at
		FROM activities ORDER BY activity_id, sku_id`,
		func(r pgx.CollectableRow) (ports.Activity, error) {
			// The operator's state too (Paused, ClosedAt): the stock
			// recovery seeds a rebuilt Redis from these rows.
			rec, err := scanActivityRecord(r)
			return rec.Activity, err
		})
}

// AppendAudit implements ports.AdminAuditStore: one admin_audit row, at =
// the transaction's Now, params stored as AuditEntry.ParamsJSON.
// An invalid entry fails before any statement runs, so the transaction
// stays usable.
func (t *tx) AppendAudit(ctx context.Context, e ports.AuditEntry) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("postgres: append audit: %w", err)
	}
	params, err := e.ParamsJSON()
	if err != nil {
		return fmt.Errorf("postgres: append audit: %w", err)
	}
	_, err = t.exec(ctx, "append audit", `
		INSERT INTO admin_audit (actor, action, target, params, outcome, at)
		VALUES ($1, $2, $3, $4::jsonb, $5, coalesce($6::timestamptz, now()))`,
		e.Actor, e.Action, e.Target, string(params), e.Outcome, t.nowArg())
	return err
}

// ListAudit implements ports.AdminAuditStore with a primary-key range
// scan; limit <= 0 returns nothing.
func (t *tx) ListAudit(ctx context.Context, afterID int64, limit int) ([]ports.AuditRecord, error) {
	if limit <= 0 {
		return nil, nil
	}
	return query(ctx, t, "list audit", `
		SELECT id, actor, action, target, params::text, outcome, at
		FROM admin_audit WHERE id > $1 ORDER BY id LIMIT $2`,
		func(r pgx.CollectableRow) (ports.AuditRecord, error) {
			var (
				rec    ports.AuditRecord
				params string
			)
			if err := r.Scan(&rec.ID, &rec.Actor, &rec.Action, &rec.Target, &params, &rec.Outcome, &rec.At); err != nil {
				return ports.AuditRecord{}, err
			}
			if err := json.Unmarshal([]byte(params), &rec.Params); err != nil {
				return ports.AuditRecord{}, fmt.Errorf("audit %d: decode params: %w", rec.ID, err)
			}
			if rec.Params == nil {
				rec.Params = map[string]any{}
			}
			rec.At = rec.At.UTC()
			return rec, nil
		}, afterID, limit)
}
