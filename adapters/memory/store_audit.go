package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// AuditStock measures the PostgreSQL terms of invariant I6 for one activity
// SKU, as the PostgreSQL adapter does: the activity's initial stock, its
// final stock, the number of its orders that are not CANCELED, and the
// held reservations classified as ordered (an order that is not CANCELED)
// or released (otherwise: a CANCELED order, a rejection or a REJECTED
// outcome). Both lists keep the input order, hold a repeated id once and
// never share an id; unknown ids are in neither. ports.ErrNotFound for an
// unknown activity SKU.
func (t *tx) AuditStock(ctx context.Context, activityID, skuID int64, held []string) (ports.StockAudit, error) {
	after, err := t.enter(ctx, "AuditStock")
	if err != nil {
		return ports.StockAudit{}, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return ports.StockAudit{}, after
	}
	k := SKU{activityID, skuID}
	act, ok := t.activities.get(k)
	if !ok {
		return ports.StockAudit{}, fmt.Errorf("audit stock of activity %d sku %d: %w", activityID, skuID, ports.ErrNotFound)
	}
	final, _ := t.stock.get(k)
	a := ports.StockAudit{InitialStock: act.Stock, PGFinalStock: final}
	t.orders.each(func(_ string, o order.Snapshot) bool {
		if o.ActivityID == activityID && o.SKUID == skuID && o.Status != order.StatusCanceled {
			a.NonCanceledOrders++
		}
		return true
	})
	seen := make(map[string]bool, len(held))
	for _, id := range held {
		if seen[id] {
			continue
		}
		seen[id] = true
		var status order.Status
		if oid, ok := t.ordersByRsv.get(id); ok {
			o, _ := t.orders.get(oid)
			status = o.Status
		}
		out, _ := t.outcomes.get(id)
		switch {
		case status != "" && status != order.StatusCanceled:
			a.OrderedHeld = append(a.OrderedHeld, id)
		case status == order.StatusCanceled || t.rejByRsv.has(id) || out.Status == ports.OutcomeRejected:
			a.ReleasedHeld = append(a.ReleasedHeld, id)
		}
	}
	return a, nil
}

// ReservationStates returns one state per input id, in input order: the
// outcome row's ORDERED or REJECTED (a PROCESSING row, claimed by this very
// transaction, reads as undecided ""), else ORDERED when the reservation
// has an order, REJECTED when it has a rejection, else "". Reason is set
// for REJECTED (the outcome's reason, else the rejection's), OrderStatus
// for ORDERED.
func (t *tx) ReservationStates(ctx context.Context, reservationIDs []string) ([]ports.ReservationState, error) {
	after, err := t.enter(ctx, "ReservationStates")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return nil, after
	}
	var out []ports.ReservationState
	for _, id := range reservationIDs {
		s := ports.ReservationState{ReservationID: id}
		oid, hasOrder := t.ordersByRsv.get(id)
		rid, hasRej := t.rejByRsv.get(id)
		row, hasOutcome := t.outcomes.get(id)
		switch {
		case hasOutcome && row.Status == outcomeProcessing:
		case hasOutcome:
			s.Outcome = row.Status
		case hasOrder:
			s.Outcome = ports.OutcomeOrdered
		case hasRej:
			s.Outcome = ports.OutcomeRejected
		}
		switch s.Outcome {
		case ports.OutcomeOrdered:
			if hasOrder {
				o, _ := t.orders.get(oid)
				s.OrderStatus = o.Status
			}
		case ports.OutcomeRejected:
			s.Reason = row.Reason
			if s.Reason == "" && hasRej {
				r, _ := t.rejections.get(rid)
				s.Reason = r.Rejection.Reason
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// ExpiredUnpaidOrders returns up to limit ids of CREATED or PAYING orders
// whose deadline is before cutoff, earliest deadline first, then by order
// id. A limit <= 0 returns nothing.
func (t *tx) ExpiredUnpaidOrders(ctx context.Context, cutoff time.Time, limit int) ([]string, error) {
	after, err := t.enter(ctx, "ExpiredUnpaidOrders")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return nil, after
	}
	if limit <= 0 {
		return nil, nil
	}
	var due []order.Snapshot
	t.orders.each(func(_ string, o order.Snapshot) bool {
		if (o.Status == order.StatusCreated || o.Status == order.StatusPaying) && o.ExpiresAt.Before(cutoff) {
			due = append(due, o)
		}
		return true
	})
	slices.SortFunc(due, func(a, b order.Snapshot) int {
		return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), strings.Compare(a.OrderID, b.OrderID))
	})
	ids := make([]string, 0, min(limit, len(due)))
	for _, o := range due[:min(limit, len(due))] {
		ids = append(ids, o.OrderID)
	}
	return ids, nil
}

// OrderStreams returns copies of the complete event streams of the first
// limit order ids greater than afterOrderID (in id order), oldest event
// first. A limit <= 0 returns nothing.
func (t *tx) OrderStreams(ctx context.Context, afterOrderID string, limit int) ([][]order.Event, error) {
	after, err := t.enter(ctx, "OrderStreams")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return nil, after
	}
	if limit <= 0 {
		return nil, nil
	}
	var ids []string
	t.events.each(func(id string, evs []order.Event) bool {
		if id > afterOrderID && len(evs) > 0 {
			ids = append(ids, id)
		}
		return true
	})
	slices.Sort(ids)
	var out [][]order.Event
	for _, id := range ids[:min(limit, len(ids))] {
		evs, _ := t.events.get(id)
		out = append(out, slices.Clone(evs))
	}
	return out, nil
}

// Rejections returns up to limit rejections with order ids greater than
// afterOrderID, in order id order. A limit <= 0 returns nothing.
func (t *tx) Rejections(ctx context.Context, afterOrderID string, limit int) ([]ports.Rejection, error) {
	after, err := t.enter(ctx, "Rejections")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return nil, after
	}
	if limit <= 0 {
		return nil, nil
	}
	var out []ports.Rejection
	t.rejections.each(func(id string, r RejectionRow) bool {
		if id > afterOrderID {
			out = append(out, r.Rejection)
		}
		return true
	})
	slices.SortFunc(out, func(a, b ports.Rejection) int { return strings.Compare(a.OrderID, b.OrderID) })
	return out[:min(limit, len(out))], nil
}

// ListActivities returns every activity, by (activity id, sku id).
func (t *tx) ListActivities(ctx context.Context) ([]ports.Activity, error) {
	after, err := t.enter(ctx, "ListActivities")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return nil, after
	}
	var out []ports.Activity
	t.activities.each(func(_ SKU, a ports.Activity) bool {
		out = append(out, a)
		return true
	})
	slices.SortFunc(out, func(a, b ports.Activity) int {
		return cmp.Or(cmp.Compare(a.ActivityID, b.ActivityID), cmp.Compare(a.SKUID, b.SKUID))
	})
	return out, nil
}

// AuditRow is a stored admin audit entry (admin_audit). Entry.Params is
// the decoded form of the stored JSON, as ListAudit returns it.
type AuditRow struct {
	ID    int64
	Entry ports.AuditEntry
	// At is the appending transaction's Now.
	At time.Time
	// params is the stored JSON (ports.AuditEntry.ParamsJSON).
	params []byte
}

// AppendAudit stores e as the PostgreSQL adapter does: an entry failing
// ports.AuditEntry.Validate or ParamsJSON fails the call; otherwise it is
// stored under an id from a sequence that is not rolled back, at the
// transaction's Now, with its params kept as their JSON encoding.
func (t *tx) AppendAudit(ctx context.Context, e ports.AuditEntry) error {
	after, err := t.enter(ctx, "AppendAudit")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	if err := e.Validate(); err != nil {
		return fmt.Errorf("memory store AppendAudit: %w", err)
	}
	params, err := e.ParamsJSON()
	if err != nil {
		return fmt.Errorf("memory store AppendAudit: %w", err)
	}
	e.Params, err = decodeAuditParams(params)
	if err != nil {
		return fmt.Errorf("memory store AppendAudit: %w", err)
	}
	id := t.s.auditSeq.Add(1)
	t.dlAudit.put(id, AuditRow{ID: id, Entry: e, At: t.now, params: params})
	return after
}

// ListAudit returns up to limit audit records with id > afterID in id
// order, committed or appended by this transaction, each with freshly
// decoded params; limit <= 0 returns nothing.
func (t *tx) ListAudit(ctx context.Context, afterID int64, limit int) ([]ports.AuditRecord, error) {
	after, err := t.enter(ctx, "ListAudit")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return nil, after
	}
	if limit <= 0 {
		return nil, nil
	}
	var rows []AuditRow
	t.dlAudit.each(func(id int64, row AuditRow) bool {
		if id > afterID {
			rows = append(rows, row)
		}
		return true
	})
	slices.SortFunc(rows, func(a, b AuditRow) int { return cmp.Compare(a.ID, b.ID) })
	out := make([]ports.AuditRecord, 0, min(limit, len(rows)))
	for _, row := range rows[:min(limit, len(rows))] {
		rec := ports.AuditRecord{ID: row.ID, AuditEntry: row.Entry, At: row.At}
		if rec.Params, err = decodeAuditParams(row.params); err != nil {
			return nil, fmt.Errorf("memory store ListAudit: audit %d: %w", row.ID, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// decodeAuditParams decodes stored params as PostgreSQL's jsonb reads back
// through encoding/json: a non-nil map, numbers as float64.
func decodeAuditParams(raw []byte) (map[string]any, error) {
	m := map[string]any{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("decode audit params: %w", err)
	}
	return m, nil
}

// LiveHolders returns the user and reservation of every non-canceled order
// of one activity SKU, ordered by user id.
func (t *tx) LiveHolders(ctx context.Context, activityID, skuID int64) ([]ports.Holder, error) {
	after, err := t.enter(ctx, "LiveHolders")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return nil, after
	}
	var hs []ports.Holder
	t.orders.each(func(_ string, o order.Snapshot) bool {
		if o.ActivityID == activityID && o.SKUID == skuID && o.Status != order.StatusCanceled {
			hs = append(hs, ports.Holder{UserID: o.UserID, ReservationID: o.ReservationID})
		}
		return true
	})
	slices.SortFunc(hs, func(a, b ports.Holder) int { return cmp.Compare(a.UserID, b.UserID) })
	return hs, nil
}
