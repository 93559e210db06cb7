package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// withTraceparent returns ctx carrying tp as its trace context, as the API
// and the message handlers put it there.
func withTraceparent(ctx context.Context, tp string) context.Context {
	tc := message.TraceContext{Traceparent: tp}
	if len(tp) == 55 {
		tc.TraceID, tc.SpanID = tp[3:35], tp[36:52]
	}
	return ports.WithTrace(ctx, tc)
}

// traceparentsByOrder reads the whole log and returns, per order id, the
// traceparents of its events in version order.
func traceparentsByOrder(t *testing.T, s *postgres.Store, want int) map[string][]string {
	t.Helper()
	sequenceAll(t, s, want)
	evs, _ := readAll(t, s, 0, ports.EventFilter{}, 100)
	if len(evs) != want {
		t.Fatalf("read %d events, want %d", len(evs), want)
	}
	out := map[string][]string{}
	for _, r := range evs {
		out[r.Event.OrderID] = append(out[r.Event.OrderID], r.Traceparent)
	}
	return out
}

// AppendEvents records with every event the traceparent of its context
// and ReadEvents serves it: two orders appended in one transaction under
// two traces keep their own; an order appended without a trace, or with
// one that is not a valid version-00 traceparent, is served with an empty
// one and stored as NULL; a row written before the column existed (raw,
// without it) is served empty too.
func TestEventTraceRecordedAndServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	const (
		tpA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		tpB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	)
	a, b := paidOrder(t, 1, 1, now), newOrder(t, 1, 1, 2, now)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		if err := writeOrder(withTraceparent(ctx, tpA), tx, a); err != nil {
			return err
		}
		return writeOrder(withTraceparent(ctx, tpB), tx, b)
	})
	none := newOrder(t, 1, 1, 3, now)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return writeOrder(ctx, tx, none) })
	invalid := []string{
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  // upper-case hex
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // another version
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // all-zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // all-zero parent id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",     // no flags
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", // trailing dash
		"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",  // wrong separators
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  // not hex
		"'; DROP TABLE order_events; --",
	}
	var bad []*order.Order
	for i, tp := range invalid {
		o := newOrder(t, 1, 1, int64(10+i), now)
		bad = append(bad, o)
		e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return writeOrder(withTraceparent(ctx, tp), tx, o) })
	}
	const oldID = "ord_before_00018"
	ctx := testCtx(t)
	if _, err := e.db.Exec(ctx, `
		INSERT INTO orders (order_id, reservation_id, activity_id, sku_id, user_id, quantity, status, cancel_reason,
		                    aggregate_version, created_at, updated_at, expires_at, canceled_at)
		VALUES ($1, 'rsv_before_00018', 1, 1, 99, 1, 'CANCELED', 'BUYER_CANCELED', 2,
		        '2026-03-01T12:00:01Z', '2026-03-01T12:01:00Z', '2026-03-01T12:15:01Z', '2026-03-01T12:01:00Z')`, oldID); err != nil {
		t.Fatalf("insert old order row: %v", err)
	}
	if _, err := e.db.Exec(ctx, `
		INSERT INTO order_events (aggregate_id, aggregate_version, event_type, schema_version, payload, occurred_at)
		VALUES ($1, 1, 'ORDER_CREATED', 1, $2::jsonb, '2026-03-01T12:00:01Z'),
		       ($1, 2, 'ORDER_CANCELED', 1, '{"reason":"BUYER_CANCELED"}'::jsonb, '2026-03-01T12:01:00Z')`,
		oldID, `{"order_id":"ord_before_00018","reservation_id":"rsv_before_00018","message_id":"evt_before_00018",`+
			`"activity_id":1,"sku_id":1,"user_id":99,"quantity":1,"reserved_at":"2026-03-01T12:00:00Z",`+
			`"expires_at":"2026-03-01T12:15:01Z"}`); err != nil {
		t.Fatalf("insert old events: %v", err)
	}

	got := traceparentsByOrder(t, e.store, 3+1+1+len(bad)+2)
	check := func(name, orderID string, want ...string) {
		t.Helper()
		tps := got[orderID]
		if len(tps) != len(want) {
			t.Fatalf("%s: %d events, want %d", name, len(tps), len(want))
		}
		for i := range want {
			if tps[i] != want[i] {
				t.Errorf("%s: event %d traceparent %q, want %q", name, i+1, tps[i], want[i])
			}
		}
	}
	id := func(o *order.Order) string { return o.Snapshot().OrderID }
	check("traced order A", id(a), tpA, tpA, tpA)
	check("traced order B", id(b), tpB)
	check("order without trace", id(none), "")
	for i, o := range bad {
		check("invalid "+invalid[i], id(o), "")
	}
	check("row written before the column", oldID, "", "")
	if n := e.count(t, `SELECT count(*) FROM order_events WHERE traceparent IS NOT NULL`); n != 4 {
		t.Fatalf("%d events have a stored traceparent, want 4 (the others NULL)", n)
	}
}

// The column's check rejects a malformed traceparent written past the
// adapter; NULL (no trace) is allowed.
func TestEventTraceColumnCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	ctx := testCtx(t)
	insert := func(tp any) error {
		_, err := e.db.Exec(ctx, `
			INSERT INTO order_events (aggregate_id, aggregate_version, event_type, schema_version, payload, occurred_at, traceparent)
			VALUES ($1, 1, 'ORDER_CREATED', 2, '{}'::jsonb, now(), $2)`, newID("ord"), tp)
		return err
	}
	if err := insert("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"); err != nil {
		t.Fatalf("valid traceparent: %v", err)
	}
	if err := insert(nil); err != nil {
		t.Fatalf("NULL traceparent: %v", err)
	}
	if err := insert("not-a-traceparent"); err == nil {
		t.Fatal("a malformed traceparent was stored")
	}
}

// insertEventsRaw inserts events into order_events with plain SQL, one
// statement per event, naming only the columns of the table before
// migration 00016 (so it works on a database migrated down that far): the
// rows the service wrote before the later columns existed.
func insertEventsRaw(t *testing.T, e *env, events []order.Event) {
	t.Helper()
	ctx := testCtx(t)
	for _, ev := range events {
		body, err := order.EncodePayload(ev.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.Exec(ctx, `
			INSERT INTO order_events (aggregate_id, aggregate_version, event_type, schema_version, payload, occurred_at)
			VALUES ($1, $2, $3, $4, $5::jsonb, $6)`,
			ev.OrderID, ev.Version, string(ev.Type), ev.SchemaVersion, string(body), ev.OccurredAt); err != nil {
			t.Fatalf("insert event %s: %v", order.EventID(ev.OrderID, ev.Version), err)
		}
	}
}

// One AppendEvents call with the events of three orders, two mapped to
// different traces by ports.WithEventTraces and one mapped to none (while
// ctx itself carries a third trace, which only orders absent from the map
// take), records each order's own: A's and B's traceparents, NULL for C,
// the ctx trace for D, which is not in the map. All the rows come from a
// single INSERT: they share the transaction's command id (cmin).
func TestEventTracePerOrderInOneAppend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	const (
		tpA   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		tpB   = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
		tpCtx = "00-11111111111111111111111111111111-2222222222222222-01"
	)
	a, b, c, d := paidOrder(t, 1, 1, now), newOrder(t, 1, 1, 2, now), paidOrder(t, 1, 3, now), newOrder(t, 1, 1, 4, now)
	id := func(o *order.Order) string { return o.Snapshot().OrderID }
	traces := map[string]message.TraceContext{
		id(a): {Traceparent: tpA, TraceID: tpA[3:35], SpanID: tpA[36:52]},
		id(b): {Traceparent: tpB, TraceID: tpB[3:35], SpanID: tpB[36:52]},
		id(c): {},
	}
	var events []order.Event
	var snaps []order.Snapshot
	for _, o := range []*order.Order{a, b, c, d} {
		events = append(events, o.Changes()...)
		snaps = append(snaps, o.Snapshot())
	}
	// Interleave the orders' events (each order's versions stay in order)
	// so that the per-row mapping, not the position, decides.
	slices.SortStableFunc(events, func(x, y order.Event) int { return int(x.Version - y.Version) })
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		if _, err := tx.InsertOrders(ctx, snaps); err != nil {
			return err
		}
		return tx.AppendEvents(ports.WithEventTraces(withTraceparent(ctx, tpCtx), traces), events)
	})
	if n := e.count(t, `SELECT count(DISTINCT (xmin::text, cmin::text)) FROM order_events`); n != 1 {
		t.Fatalf("the events came from %d statements, want 1", n)
	}
	got := traceparentsByOrder(t, e.store, len(events))
	for _, w := range []struct {
		name string
		o    *order.Order
		tp   string
	}{{"A", a, tpA}, {"B", b, tpB}, {"C (mapped to no trace)", c, ""}, {"D (not mapped)", d, tpCtx}} {
		tps, want := got[id(w.o)], len(w.o.Changes())
		if len(tps) != want {
			t.Fatalf("order %s: %d events, want %d", w.name, len(tps), want)
		}
		for i, tp := range tps {
			if tp != w.tp {
				t.Errorf("order %s: event %d traceparent %q, want %q", w.name, i+1, tp, w.tp)
			}
		}
	}
	if n := e.count(t, `SELECT count(*) FROM order_events WHERE traceparent IS NULL`); n != int64(len(c.Changes())) {
		t.Fatalf("%d events stored NULL, want %d (order C's)", n, len(c.Changes()))
	}
}
