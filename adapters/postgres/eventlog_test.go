package postgres_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// paidOrder returns a new order of activity/user with its three events
// (created, payment started, paid) recorded.
func paidOrder(t *testing.T, activityID, userID int64, now time.Time) *order.Order {
	t.Helper()
	o := newOrder(t, activityID, 1, userID, now)
	if err := o.Pay(newID("pay"), now); err != nil {
		t.Fatal(err)
	}
	return o
}

// writeOrder stores o's row and events in tx.
func writeOrder(ctx context.Context, tx ports.Tx, o *order.Order) error {
	if _, err := tx.InsertOrders(ctx, []order.Snapshot{o.Snapshot()}); err != nil {
		return err
	}
	return tx.AppendEvents(ctx, o.Changes())
}

// heldTx is a real transaction that wrote an order and stays open until
// end is called; end(true) commits, end(false) rolls back.
type heldTx struct {
	end  func(commit bool)
	done chan struct{} // closed when the transaction ended, err set
	err  error
}

// wait ends the transaction as end said and returns its error.
func (h *heldTx) wait() error {
	<-h.done
	return h.err
}

// holdOrderTx starts a transaction that writes o and waits.
func holdOrderTx(t *testing.T, e *env, o *order.Order) *heldTx {
	t.Helper()
	written, release := make(chan error, 1), make(chan bool, 1)
	h := &heldTx{done: make(chan struct{})}
	var once sync.Once
	h.end = func(commit bool) { once.Do(func() { release <- commit }) }
	t.Cleanup(func() { h.end(false); <-h.done })
	ctx := testCtx(t)
	go func() {
		errAbort := errors.New("abort on purpose")
		err := e.store.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
			err := writeOrder(ctx, tx, o)
			written <- err
			if err != nil {
				return err
			}
			select {
			case commit := <-release:
				if !commit {
					return errAbort
				}
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if errors.Is(err, errAbort) {
			err = nil
		}
		h.err = err
		close(h.done)
	}()
	if err := <-written; err != nil {
		t.Fatalf("held transaction: write: %v", err)
	}
	return h
}

// sequenceAll calls Sequence until want events are sequenced in total,
// bounded: transactions of other tests in the same PostgreSQL cluster
// move the fence too, so a call may sequence nothing for a moment.
func sequenceAll(t *testing.T, s *postgres.Store, want int) {
	t.Helper()
	got := 0
	for range 500 {
		n, err := s.Sequence(testCtx(t), 100)
		if err != nil {
			t.Fatalf("Sequence: %v", err)
		}
		got += n
		if got >= want {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got != want {
		t.Fatalf("sequenced %d events, want %d", got, want)
	}
}

// readAll reads the whole log after `after` with f in pages of page.
func readAll(t *testing.T, s *postgres.Store, after int64, f ports.EventFilter, page int) ([]ports.EventRecord, int64) {
	t.Helper()
	var out []ports.EventRecord
	for range 10000 {
		evs, head, err := s.ReadEvents(testCtx(t), after, f, page)
		if err != nil {
			t.Fatalf("ReadEvents: %v", err)
		}
		out = append(out, evs...)
		if len(evs) < page {
			return out, head
		}
		after = evs[len(evs)-1].Position
	}
	t.Fatal("ReadEvents did not end")
	return nil, 0
}

// ids returns the event ids of recs in order.
func eventIDs(recs []ports.EventRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.EventID()
	}
	return out
}

// orderEventIDs returns the event ids of the orders, order by order.
func orderEventIDs(os ...*order.Order) []string {
	var out []string
	for _, o := range os {
		for _, e := range o.Changes() {
			out = append(out, order.EventID(e.OrderID, e.Version))
		}
	}
	return out
}

// checkPositions fails unless recs have positions 1..len(recs).
func checkPositions(t *testing.T, recs []ports.EventRecord) {
	t.Helper()
	for i, r := range recs {
		if r.Position != int64(i+1) {
			t.Fatalf("event %d (%s) has position %d, want %d (no gap, no repeat)", i, r.EventID(), r.Position, i+1)
		}
	}
}

// The fence with two real transactions: A writes first (lower id and
// transaction id) and stays open; B writes later and commits. B is not
// sequenced while A is in flight; once A commits, A's events come first
// and the log has no gap.
func TestSequenceWaitsForAnEarlierTransactionThatCommits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	a, b := paidOrder(t, 1, 1, now), paidOrder(t, 1, 2, now)
	held := holdOrderTx(t, e, a)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return writeOrder(ctx, tx, b) })

	for range 3 {
		n, err := e.store.Sequence(testCtx(t), 100)
		if err != nil || n != 0 {
			t.Fatalf("Sequence with A in flight = %d, %v; want 0 (B's transaction is younger than A's)", n, err)
		}
	}
	if evs, head := readAll(t, e.store, 0, ports.EventFilter{}, 10); len(evs) != 0 || head != 0 {
		t.Fatalf("log with A in flight: %v, head %d; want empty", eventIDs(evs), head)
	}

	held.end(true)
	if err := held.wait(); err != nil {
		t.Fatalf("commit A: %v", err)
	}
	sequenceAll(t, e.store, 6)
	evs, head := readAll(t, e.store, 0, ports.EventFilter{}, 4)
	checkPositions(t, evs)
	if want := orderEventIDs(a, b); !slices.Equal(eventIDs(evs), want) {
		t.Fatalf("log = %v, want %v (A before B: (txid, id) order)", eventIDs(evs), want)
	}
	if head != 6 {
		t.Fatalf("head = %d, want 6", head)
	}
	if r := evs[0]; r.ActivityID != 1 || r.SKUID != 1 || r.UserID != 1 || r.Event.Type != order.EventCreated ||
		r.StoredSchemaVersion != order.CurrentSchemaVersion || r.Event.Payload.(order.Created).OrderID != a.Snapshot().OrderID {
		t.Fatalf("first record = %+v", r)
	}
}

// An order's versions keep their order in the log even when the
// transaction appending version 2 took its transaction id before the one
// that created version 1: T2 writes another order first (so it holds the
// lower txid), T1 creates order X (version 1) and commits, then T2 appends
// X's versions 2 and 3 and commits. In (txid, id) order X's 2 and 3 come
// before its 1; the log must still hold 1, 2, 3.
func TestSequenceKeepsAnOrdersVersionsInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	x, y := newOrder(t, 1, 1, 1, now), newOrder(t, 1, 1, 2, now)
	wroteY, appendX, done := make(chan error, 1), make(chan struct{}), make(chan error, 1)
	var xPaid []order.Event
	go func() {
		done <- e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
			err := writeOrder(ctx, tx, y) // T2's first write: its txid is taken now
			wroteY <- err
			if err != nil {
				return err
			}
			select {
			case <-appendX:
			case <-ctx.Done():
				return ctx.Err()
			}
			return tx.AppendEvents(ctx, xPaid)
		})
	}()
	if err := <-wroteY; err != nil {
		t.Fatalf("T2: write Y: %v", err)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return writeOrder(ctx, tx, x) }) // T1
	loaded, err := order.Rehydrate(x.Changes())
	if err != nil {
		t.Fatal(err)
	}
	if err := loaded.Pay(newID("pay"), now); err != nil {
		t.Fatal(err)
	}
	xPaid = loaded.Changes()
	close(appendX)
	if err := <-done; err != nil {
		t.Fatalf("T2: %v", err)
	}
	sequenceAll(t, e.store, 4)
	evs, _ := readAll(t, e.store, 0, ports.EventFilter{}, 100)
	checkPositions(t, evs)
	var xs []string
	for _, r := range evs {
		if r.Event.OrderID == x.Snapshot().OrderID {
			xs = append(xs, r.EventID())
		}
	}
	want := append(orderEventIDs(x), order.EventID(x.Snapshot().OrderID, 2), order.EventID(x.Snapshot().OrderID, 3))
	if !slices.Equal(xs, want) {
		t.Fatalf("order X in the log: %v, want %v (its versions in order)", xs, want)
	}
}

// The same with A aborting: B is sequenced once A has ended, and the log
// holds B only, from position 1.
func TestSequenceWaitsForAnEarlierTransactionThatAborts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	a, b := paidOrder(t, 1, 1, now), paidOrder(t, 1, 2, now)
	held := holdOrderTx(t, e, a)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return writeOrder(ctx, tx, b) })
	if n, err := e.store.Sequence(testCtx(t), 100); err != nil || n != 0 {
		t.Fatalf("Sequence with A in flight = %d, %v; want 0", n, err)
	}
	held.end(false)
	if err := held.wait(); err != nil {
		t.Fatalf("abort A: %v", err)
	}
	sequenceAll(t, e.store, 3)
	evs, _ := readAll(t, e.store, 0, ports.EventFilter{}, 100)
	checkPositions(t, evs)
	if want := orderEventIDs(b); !slices.Equal(eventIDs(evs), want) {
		t.Fatalf("log = %v, want %v", eventIDs(evs), want)
	}
}

// Sequencers in several goroutines (as in several instances) while orders
// are written: every event gets exactly one position, positions are
// 1..n without gap, and each order's events are in version order.
func TestSequenceConcurrentSequencers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{MaxConns: 16})
	now := time.Now().UTC().Truncate(time.Microsecond)
	const writers, perWriter = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter+8)
	stop := make(chan struct{})
	orders := make([]*order.Order, writers*perWriter)
	for i := range orders {
		orders[i] = paidOrder(t, 1, int64(i+1), now)
	}
	for w := range writers {
		wg.Go(func() {
			for _, o := range orders[w*perWriter : (w+1)*perWriter] {
				if err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error { return writeOrder(ctx, tx, o) }); err != nil {
					errs <- err
				}
			}
		})
	}
	var seqWG sync.WaitGroup
	for range 4 {
		seqWG.Go(func() {
			for range 2000 {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.store.Sequence(testCtx(t), 7); err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	close(stop)
	seqWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := writers * perWriter * 3
	already := int(e.count(t, `SELECT count(*) FROM event_log`))
	sequenceAll(t, e.store, total-already)
	evs, head := readAll(t, e.store, 0, ports.EventFilter{}, 50)
	checkPositions(t, evs)
	if len(evs) != total || head != int64(total) {
		t.Fatalf("log has %d events, head %d; want %d", len(evs), head, total)
	}
	seen := map[string]int64{}
	for _, r := range evs {
		if v := seen[r.Event.OrderID]; r.Event.Version != v+1 {
			t.Fatalf("%s follows version %d of its order", r.EventID(), v)
		}
		seen[r.Event.OrderID] = r.Event.Version
	}
	if n := e.count(t, `SELECT count(*) FROM order_events e WHERE NOT EXISTS (SELECT 1 FROM event_log l WHERE l.event_id = e.id)`); n != 0 {
		t.Fatalf("%d events have no position", n)
	}
}

// Filters select by activity and type; head is the log's highest position
// whatever the filter, and with nothing matching tells how far a
// filtered reader may advance.
func TestReadEventsFiltersAndHead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	a1, a2 := paidOrder(t, 1, 1, now), paidOrder(t, 2, 1, now)
	c := newOrder(t, 2, 1, 2, now)
	if err := c.Cancel(order.ReasonBuyerCanceled, now); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*order.Order{a1, a2, c} {
		e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return writeOrder(ctx, tx, o) })
	}
	sequenceAll(t, e.store, 8)

	evs, head := readAll(t, e.store, 0, ports.EventFilter{ActivityID: 2}, 2)
	if want := orderEventIDs(a2, c); !slices.Equal(eventIDs(evs), want) || head != 8 {
		t.Fatalf("activity 2: %v head %d, want %v head 8", eventIDs(evs), head, want)
	}
	for _, r := range evs {
		if r.ActivityID != 2 {
			t.Fatalf("activity filter returned %+v", r)
		}
	}
	evs, _ = readAll(t, e.store, 0, ports.EventFilter{Types: []order.EventType{order.EventPaid, order.EventCanceled}}, 100)
	var kinds []order.EventType
	for _, r := range evs {
		kinds = append(kinds, r.Event.Type)
	}
	if want := []order.EventType{order.EventPaid, order.EventPaid, order.EventCanceled}; !slices.Equal(kinds, want) {
		t.Fatalf("type filter: %v, want %v", kinds, want)
	}
	if evs[2].Position != 8 || evs[2].Event.Payload != (order.Canceled{Reason: order.ReasonBuyerCanceled}) {
		t.Fatalf("canceled record = %+v", evs[2])
	}
	// Nothing of activity 1 after position 3, but the head has moved to 8.
	evs, head, err := e.store.ReadEvents(testCtx(t), 3, ports.EventFilter{ActivityID: 1}, 10)
	if err != nil || len(evs) != 0 || head != 8 {
		t.Fatalf("activity 1 after 3: %v head %d err %v, want none head 8", eventIDs(evs), head, err)
	}
	// After the head: nothing, and the head.
	evs, head, err = e.store.ReadEvents(testCtx(t), 100, ports.EventFilter{}, 10)
	if err != nil || len(evs) != 0 || head != 8 {
		t.Fatalf("after 100: %v head %d err %v", eventIDs(evs), head, err)
	}
	// A limit cuts the page; the head still covers the whole log.
	evs, head, err = e.store.ReadEvents(testCtx(t), 0, ports.EventFilter{}, 3)
	if err != nil || len(evs) != 3 || evs[2].Position != 3 || head != 8 {
		t.Fatalf("limit 3: %v head %d err %v", eventIDs(evs), head, err)
	}
}

// An event whose order row is missing is a bug: Sequence fails and
// assigns nothing.
func TestSequenceFailsOnAnEventWithoutItsOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	o := newOrder(t, 1, 1, 1, now)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.AppendEvents(ctx, o.Changes()) })
	var err error
	for range 500 {
		if _, err = e.store.Sequence(testCtx(t), 10); err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err == nil {
		t.Fatal("Sequence of an event without its order row succeeded")
	}
	if n := e.count(t, `SELECT count(*) FROM event_log`); n != 0 {
		t.Fatalf("event_log has %d rows after the failure", n)
	}
}

// Migration 00016 on a store that already holds events: Down removes the
// log, the events written without it get positions 1..n in id order when
// it is applied again, and the sequencer continues after them with
// nothing skipped or repeated.
func TestEventLogMigrationBackfillsExistingEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	m, err := postgres.NewMigrator(e.dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	// Later migrations (00017 and on) are rolled back first, down to 00016.
	for i := 0; ; i++ {
		v, err := m.Down(testCtx(t))
		if err != nil || i == 10 {
			t.Fatalf("Down = %q, %v; want 00016 rolled back within 10 steps", v, err)
		}
		if strings.Contains(v, "00016") {
			break
		}
	}
	// The events of that time are written as the service wrote them then
	// (raw rows without the columns of later migrations, which the
	// adapter's AppendEvents names).
	now := time.Now().UTC().Truncate(time.Microsecond)
	before := []*order.Order{paidOrder(t, 1, 1, now), newOrder(t, 1, 1, 2, now), paidOrder(t, 1, 3, now)}
	for _, o := range before {
		e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
			_, err := tx.InsertOrders(ctx, []order.Snapshot{o.Snapshot()})
			return err
		})
		insertEventsRaw(t, e, o.Changes())
	}
	if _, err := m.Up(testCtx(t)); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if n := e.count(t, `SELECT count(*) FROM event_log l JOIN order_events e ON e.id = l.event_id
		WHERE l.position <> (SELECT count(*) FROM order_events x WHERE x.id <= e.id)`); n != 0 {
		t.Fatalf("%d backfilled positions are not the events' rank in id order", n)
	}
	if n := e.count(t, `SELECT count(*) FROM event_log_cursor c
		WHERE c.id = (SELECT max(id) FROM order_events) AND c.txid = (SELECT max(txid) FROM order_events)`); n != 1 {
		t.Fatal("the cursor is not at the last backfilled event")
	}
	after := paidOrder(t, 1, 4, now)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return writeOrder(ctx, tx, after) })
	sequenceAll(t, e.store, 3)
	evs, _ := readAll(t, e.store, 0, ports.EventFilter{}, 5)
	checkPositions(t, evs)
	if want := orderEventIDs(append(before, after)...); !slices.Equal(eventIDs(evs), want) {
		t.Fatalf("log = %v, want %v", eventIDs(evs), want)
	}
}

// Events stored as schema version 1, before prices were recorded, as the
// service wrote them then (raw rows: the v1 JSON, schema_version 1, with
// their orders row), are served by ReadEvents as version 2 through the
// domain's upcaster: SchemaVersion 2, StoredSchemaVersion 1, the unit
// price unknown (0, ""), every other field kept. A version-2 event written
// after them carries its price.
func TestReadEventsUpcastsStoredVersion1(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	ctx := testCtx(t)
	const orderID = "ord_v1_upcast"
	_, err := e.db.Exec(ctx, `
		INSERT INTO orders (order_id, reservation_id, activity_id, sku_id, user_id, quantity, status, cancel_reason,
		                    aggregate_version, created_at, updated_at, expires_at, canceled_at)
		VALUES ($1, 'rsv_v1_upcast', 5, 50, 500, 1, 'CANCELED', 'BUYER_CANCELED', 2,
		        '2026-03-01T12:00:01Z', '2026-03-01T12:01:00Z', '2026-03-01T12:15:01Z', '2026-03-01T12:01:00Z')`, orderID)
	if err != nil {
		t.Fatalf("insert v1 order row: %v", err)
	}
	_, err = e.db.Exec(ctx, `
		INSERT INTO order_events (aggregate_id, aggregate_version, event_type, schema_version, payload, occurred_at)
		VALUES ($1, 1, 'ORDER_CREATED', 1, $2::jsonb, '2026-03-01T12:00:01Z'),
		       ($1, 2, 'ORDER_CANCELED', 1, '{"reason":"BUYER_CANCELED"}'::jsonb, '2026-03-01T12:01:00Z')`,
		orderID, `{"order_id":"ord_v1_upcast","reservation_id":"rsv_v1_upcast","message_id":"evt_v1_upcast",`+
			`"activity_id":5,"sku_id":50,"user_id":500,"quantity":1,"reserved_at":"2026-03-01T12:00:00Z",`+
			`"expires_at":"2026-03-01T12:15:01Z"}`)
	if err != nil {
		t.Fatalf("insert v1 events: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	o, err := order.Create(order.NewOrder{
		OrderID: newID("ord"), ReservationID: newID("rsv"), MessageID: newID("evt"),
		ActivityID: 5, SKUID: 50, UserID: 501, Quantity: 1,
		ReservedAt: now.Add(-time.Second), PaymentTimeout: 15 * time.Minute, UnitPrice: 1999, Currency: "EUR",
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return writeOrder(ctx, tx, o) })
	sequenceAll(t, e.store, 3)

	evs, _ := readAll(t, e.store, 0, ports.EventFilter{}, 10)
	checkPositions(t, evs)
	if want := []string{orderID + ":1", orderID + ":2", order.EventID(o.Snapshot().OrderID, 1)}; !slices.Equal(eventIDs(evs), want) {
		t.Fatalf("log = %v, want %v", eventIDs(evs), want)
	}
	for _, r := range evs[:2] {
		if r.Event.SchemaVersion != 2 || r.StoredSchemaVersion != 1 {
			t.Fatalf("%s: schema version %d stored %d, want 2 stored 1", r.EventID(), r.Event.SchemaVersion, r.StoredSchemaVersion)
		}
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	want := order.Created{OrderID: orderID, ReservationID: "rsv_v1_upcast", MessageID: "evt_v1_upcast",
		ActivityID: 5, SKUID: 50, UserID: 500, Quantity: 1, ReservedAt: at, ExpiresAt: at.Add(15*time.Minute + time.Second)}
	if c, ok := evs[0].Event.Payload.(order.Created); !ok || !c.ReservedAt.Equal(want.ReservedAt) ||
		!c.ExpiresAt.Equal(want.ExpiresAt) || c.OrderID != want.OrderID || c.ReservationID != want.ReservationID ||
		c.MessageID != want.MessageID || c.ActivityID != 5 || c.SKUID != 50 || c.UserID != 500 || c.Quantity != 1 ||
		c.UnitPrice != 0 || c.Currency != "" {
		t.Fatalf("upcast v1 created = %#v, want %#v (price unknown)", evs[0].Event.Payload, want)
	}
	if evs[0].UserID != 500 || evs[1].Event.Payload != (order.Canceled{Reason: order.ReasonBuyerCanceled}) {
		t.Fatalf("v1 records = %+v, %+v", evs[0], evs[1])
	}
	r := evs[2]
	if c, ok := r.Event.Payload.(order.Created); !ok || r.Event.SchemaVersion != 2 || r.StoredSchemaVersion != 2 ||
		c.UnitPrice != 1999 || c.Currency != "EUR" {
		t.Fatalf("v2 record = %+v, want schema 2 stored 2 with 1999 EUR", r)
	}
	// The stored rows are not rewritten by reading them.
	if n := e.count(t, `SELECT count(*) FROM order_events WHERE aggregate_id = $1 AND schema_version = 1
		AND NOT payload ? 'unit_price'`, orderID); n != 2 {
		t.Fatalf("%d of the 2 version-1 rows are left as stored", n)
	}
	// Loading the order for a command reads through the same upcaster.
	var loaded []order.Event
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		loaded, err = tx.LoadOrderEvents(ctx, orderID)
		return err
	})
	if _, err := order.Rehydrate(loaded); err != nil || len(loaded) != 2 {
		t.Fatalf("Rehydrate of the version-1 stream: %d events, %v", len(loaded), err)
	}
	if c, ok := loaded[0].Payload.(order.Created); !ok || c.UnitPrice != 0 || c.UserID != 500 {
		t.Fatalf("loaded v1 created = %#v", loaded[0].Payload)
	}
}
