package view_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/adapters/projector"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/examples/salesview/view"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// waitBound bounds every wait of these tests for the kit to commit (a
// failure guard, not a speed assertion).
const waitBound = 60 * time.Second

var base = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// at is base plus minutes and seconds.
func at(min, sec int) time.Time {
	return base.Add(time.Duration(min)*time.Minute + time.Duration(sec)*time.Second)
}

// history builds order events with increasing positions.
type history struct {
	events []*seckillv1.OrderEvent
}

func (h *history) add(order string, user, activity, version int64, typ string, when time.Time) *seckillv1.OrderEvent {
	e := &seckillv1.OrderEvent{
		Position:         int64(len(h.events) + 1),
		EventId:          fmt.Sprintf("%s:%d", order, version),
		OrderId:          order,
		ActivityId:       activity,
		SkuId:            activity * 10,
		UserId:           user,
		AggregateVersion: version,
		EventType:        typ,
		SchemaVersion:    2,
		OccurredAt:       timestamppb.New(when),
	}
	h.events = append(h.events, e)
	return e
}

func (h *history) created(order string, user, activity int64, when time.Time, price int64, currency string, qty int32) {
	h.add(order, user, activity, 1, view.EventCreated, when).Payload = &seckillv1.OrderEvent_Created{Created: &seckillv1.OrderCreated{
		ReservationId: "res_" + order, Quantity: qty, UnitPrice: price, Currency: currency,
		ReservedAt: timestamppb.New(when), ExpiresAt: timestamppb.New(when.Add(15 * time.Minute)),
	}}
}

func (h *history) paid(order string, user, activity, version int64, when time.Time) {
	h.add(order, user, activity, version, view.EventPaymentStarted, when).Payload =
		&seckillv1.OrderEvent_PaymentStarted{PaymentStarted: &seckillv1.OrderPaymentStarted{PaymentId: "pay_" + order}}
	h.add(order, user, activity, version+1, view.EventPaid, when).Payload =
		&seckillv1.OrderEvent_Paid{Paid: &seckillv1.OrderPaid{PaymentId: "pay_" + order}}
}

func (h *history) canceled(order string, user, activity, version int64, when time.Time, reason string) {
	h.add(order, user, activity, version, view.EventCanceled, when).Payload =
		&seckillv1.OrderEvent_Canceled{Canceled: &seckillv1.OrderCanceled{Reason: reason}}
}

// sale is the story every test feeds: activity 7 priced 19.99 EUR,
// activity 8 without a price.
//
//   - A (user 1, activity 7, 2 units): created 10:00:15, paid 10:01:05; then
//     its ORDER_PAID delivered again (a duplicate version) and an event of
//     a type this view does not know (version 4).
//   - B (user 1, activity 7): created 10:00:40, canceled by timeout 10:16.
//   - C (user 2, activity 7): created 10:01:10, canceled by the buyer
//     10:02; then its ORDER_CREATED delivered again.
//   - D (user 2, activity 8, no price): created 10:00:20, paid 10:03.
//   - E (user 3, activity 7): created 10:05:00, payment started.
//   - F (user 3, activity 7): created 10:05:30.
func sale() []*seckillv1.OrderEvent {
	var h history
	h.created("ord_A", 1, 7, at(0, 15), 1999, "EUR", 2)
	h.created("ord_D", 2, 8, at(0, 20), 0, "", 1)
	h.created("ord_B", 1, 7, at(0, 40), 1999, "EUR", 1)
	h.paid("ord_A", 1, 7, 2, at(1, 5))
	h.created("ord_C", 2, 7, at(1, 10), 1999, "EUR", 1)
	h.canceled("ord_C", 2, 7, 2, at(2, 0), "BUYER_CANCELED")
	h.paid("ord_D", 2, 8, 2, at(3, 0))
	dup := proto.Clone(h.events[4]).(*seckillv1.OrderEvent) // ord_A's ORDER_PAID (version 3) again
	h.events = append(h.events, dup)
	h.add("ord_A", 1, 7, 4, "ORDER_REFUNDED", at(4, 0)) // a type added later
	h.created("ord_C", 2, 7, at(1, 10), 1999, "EUR", 1) // ord_C's ORDER_CREATED again
	h.created("ord_E", 3, 7, at(5, 0), 1999, "EUR", 1)
	h.add("ord_E", 3, 7, 2, view.EventPaymentStarted, at(5, 20)).Payload =
		&seckillv1.OrderEvent_PaymentStarted{PaymentStarted: &seckillv1.OrderPaymentStarted{PaymentId: "pay_E"}}
	h.created("ord_F", 3, 7, at(5, 30), 1999, "EUR", 1)
	h.canceled("ord_B", 1, 7, 2, at(16, 0), "PAYMENT_TIMEOUT")
	for i, e := range h.events {
		e.Position = int64(i + 1)
	}
	return h.events
}

// checkSale asserts the view v holds exactly the effect of sale().
func checkSale(t *testing.T, pool *pgxpool.Pool, v projector.View) {
	t.Helper()
	ctx := t.Context()

	books, err := view.Books(ctx, pool, v)
	if err != nil {
		t.Fatal(err)
	}
	wantBooks := map[int64]map[string]int64{
		7: {view.StatusPaid: 1, view.StatusCanceled: 2, view.StatusPaying: 1, view.StatusCreated: 1},
		8: {view.StatusPaid: 1},
	}
	if !reflect.DeepEqual(books, wantBooks) {
		t.Errorf("Books = %v, want %v", books, wantBooks)
	}

	totals, err := view.Totals(ctx, pool, v)
	if err != nil {
		t.Fatal(err)
	}
	wantTotals := map[int64]view.Total{
		7: {ActivityID: 7, Accepted: 5, Paid: 1, Canceled: 2, Revenue: map[string]int64{"EUR": 2 * 1999}},
		8: {ActivityID: 8, Accepted: 1, Paid: 1, Revenue: map[string]int64{}, UnpricedPaid: 1},
	}
	if !reflect.DeepEqual(totals, wantTotals) {
		t.Errorf("Totals = %+v, want %+v", totals, wantTotals)
	}

	minutes, err := view.Minutes(ctx, pool, v, 7)
	if err != nil {
		t.Fatal(err)
	}
	wantMinutes := []view.Minute{
		{Minute: at(0, 0), Currency: "EUR", Accepted: 2},
		{Minute: at(1, 0), Currency: "EUR", Accepted: 1, Paid: 1, Revenue: 2 * 1999},
		{Minute: at(2, 0), Currency: "EUR", Canceled: 1},
		{Minute: at(5, 0), Currency: "EUR", Accepted: 2},
		{Minute: at(16, 0), Currency: "EUR", Canceled: 1},
	}
	if !reflect.DeepEqual(minutes, wantMinutes) {
		t.Errorf("Minutes(7) = %+v, want %+v", minutes, wantMinutes)
	}
	minutes, err = view.Minutes(ctx, pool, v, 8)
	if err != nil {
		t.Fatal(err)
	}
	wantMinutes = []view.Minute{
		{Minute: at(0, 0), Currency: "", Accepted: 1},
		{Minute: at(3, 0), Currency: "", Paid: 1},
	}
	if !reflect.DeepEqual(minutes, wantMinutes) {
		t.Errorf("Minutes(8) = %+v, want %+v", minutes, wantMinutes)
	}
	if minutes, err = view.Minutes(ctx, pool, v, 9); err != nil || len(minutes) != 0 {
		t.Errorf("Minutes(9) = %+v, %v; want none", minutes, err)
	}

	hist, err := view.History(ctx, pool, v, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantHist := []view.Order{
		{OrderID: "ord_B", UserID: 1, ActivityID: 7, SKUID: 70, Status: view.StatusCanceled, UnitPrice: 1999, Currency: "EUR",
			Quantity: 1, CancelReason: "PAYMENT_TIMEOUT", CreatedAt: at(0, 40), UpdatedAt: at(16, 0), LastVersion: 2},
		{OrderID: "ord_A", UserID: 1, ActivityID: 7, SKUID: 70, Status: view.StatusPaid, UnitPrice: 1999, Currency: "EUR",
			Quantity: 2, CreatedAt: at(0, 15), UpdatedAt: at(1, 5), LastVersion: 3},
	}
	if !reflect.DeepEqual(hist, wantHist) {
		t.Errorf("History(1) = %+v, want %+v", hist, wantHist)
	}
	if hist, err = view.History(ctx, pool, v, 1, 1); err != nil || len(hist) != 1 || hist[0].OrderID != "ord_B" {
		t.Errorf("History(1, limit 1) = %+v, %v; want ord_B only", hist, err)
	}
	hist, err = view.History(ctx, pool, v, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].OrderID != "ord_C" || hist[0].Status != view.StatusCanceled ||
		hist[0].CancelReason != "BUYER_CANCELED" || hist[0].LastVersion != 2 ||
		hist[1].OrderID != "ord_D" || hist[1].Status != view.StatusPaid || hist[1].Currency != "" {
		t.Errorf("History(2) = %+v, want ord_C canceled by the buyer (version 2), then ord_D paid without a price", hist)
	}
	for _, limit := range []int{0, -1, view.MaxHistory + 1} {
		if _, err := view.History(ctx, pool, v, 1, limit); !errors.Is(err, view.ErrInvalidLimit) {
			t.Errorf("History(limit %d) = %v, want ErrInvalidLimit", limit, err)
		}
	}
}

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return pgtest.Pool(t, pgtest.NewEmptyDatabase(t))
}

// TestApply feeds the sale to Setup and Apply directly, one transaction per
// event, and checks every query.
func TestApply(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	v := projector.View{Name: view.Name, Version: 1}
	var h view.Handler
	for i := range 2 { // Setup is idempotent
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Setup(ctx, tx, v); err != nil {
			t.Fatalf("Setup #%d: %v", i+1, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range sale() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Apply(ctx, tx, v, e); err != nil {
			t.Fatalf("Apply(%s %s): %v", e.GetEventId(), e.GetEventType(), err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkSale(t, pool, v)

	// Events that no retry can fix are permanent errors (the kit parks them).
	bad := []*seckillv1.OrderEvent{
		{Position: 100, OrderId: "ord_X", AggregateVersion: 1, EventType: view.EventCreated, OccurredAt: timestamppb.New(base)},
		{Position: 101, OrderId: "ord_X", AggregateVersion: 1, EventType: view.EventCreated},
		{Position: 102, AggregateVersion: 1, EventType: view.EventPaid, OccurredAt: timestamppb.New(base)},
	}
	for _, e := range bad {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = h.Apply(ctx, tx, v, e)
		_ = tx.Rollback(ctx)
		if !errors.Is(err, projector.ErrPermanent) {
			t.Errorf("Apply(position %d) = %v, want an error wrapping projector.ErrPermanent", e.GetPosition(), err)
		}
	}
}

// TestTablesPerVersion: two versions of the view do not share tables.
func TestTablesPerVersion(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	var h view.Handler
	v1, v2 := projector.View{Name: view.Name, Version: 1}, projector.View{Name: view.Name, Version: 2}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []projector.View{v1, v2} {
		if err := h.Setup(ctx, tx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Apply(ctx, tx, v1, sale()[0]); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for v, want := range map[projector.View]int{v1: 1, v2: 0} {
		books, err := view.Books(ctx, pool, v)
		if err != nil {
			t.Fatal(err)
		}
		if got := int(books[7][view.StatusCreated]); got != want {
			t.Errorf("version %d: %d created orders, want %d", v.Version, got, want)
		}
	}
}

// source is an in-test projector.Source: the items of a slice, then the
// items sent on more, until the context ends.
type source struct {
	items []projector.Item
	more  chan projector.Item
}

func (s *source) Stream(ctx context.Context, from int64, fn func(context.Context, projector.Item) error) error {
	for _, it := range s.items {
		if it.Position <= from {
			continue
		}
		if err := fn(ctx, it); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case it := <-s.more:
			if err := fn(ctx, it); err != nil {
				return err
			}
		}
	}
}

// waitPosition waits (bounded) until the kit has committed position p of
// version v.
func waitPosition(t *testing.T, store *projector.Store, v int, p int64, runErr <-chan error) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		got, err := store.Position(t.Context(), view.Name, v)
		if err != nil {
			t.Fatal(err)
		}
		if got >= p {
			return
		}
		select {
		case err := <-runErr:
			t.Fatalf("Run ended before position %d (at %d): %v", p, got, err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("position of version %d is %d after %v, want %d", v, got, waitBound, p)
		}
	}
}

// TestThroughRun projects the sale with the kit: the queries read the
// active version once the first live checkpoint made it active; the paid
// orders of the catch-up cause no side effect, a paid order after it does.
func TestThroughRun(t *testing.T) {
	pool := newPool(t)
	store := projector.NewStore(pool)
	if err := store.Migrate(t.Context()); err != nil { // Run migrates too; the test reads positions before
		t.Fatal(err)
	}
	events := sale()
	last := events[len(events)-1].GetPosition()
	src := &source{more: make(chan projector.Item)}
	for _, e := range events {
		src.items = append(src.items, projector.Item{Event: e, Position: e.GetPosition()})
	}
	src.items = append(src.items, projector.Item{Position: last + 5, Live: true})

	var (
		mu     sync.Mutex
		paidAt []string
	)
	notified := make(chan string, 8)
	h := view.Handler{OnPaid: func(_ context.Context, v projector.View, e *seckillv1.OrderEvent) {
		mu.Lock()
		defer mu.Unlock()
		paidAt = append(paidAt, fmt.Sprintf("v%d %s rebuilding=%v", v.Version, e.GetOrderId(), v.Rebuilding))
		notified <- e.GetOrderId()
	}}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	runErr := make(chan error, 1)
	go func() {
		runErr <- projector.Run(ctx, src, h, store, projector.Options{Name: view.Name, Version: 1, Batch: 4})
	}()

	waitPosition(t, store, 1, last+5, runErr)
	v, err := view.ActiveView(t.Context(), store, view.Name)
	if err != nil {
		t.Fatalf("ActiveView after the live checkpoint: %v", err)
	}
	if v != (projector.View{Name: view.Name, Version: 1}) {
		t.Fatalf("ActiveView = %+v, want version 1 not rebuilding", v)
	}
	checkSale(t, pool, v)
	mu.Lock()
	if len(paidAt) != 0 {
		t.Errorf("side effects during the catch-up: %v", paidAt)
	}
	mu.Unlock()

	// Live now: a new order paid has its side effect, once.
	var h2 history
	h2.created("ord_G", 4, 7, at(20, 0), 1999, "EUR", 1)
	h2.paid("ord_G", 4, 7, 2, at(20, 30))
	for i, e := range h2.events {
		e.Position = last + 10 + int64(i)
		select {
		case src.more <- projector.Item{Event: e, Position: e.GetPosition()}:
		case err := <-runErr:
			t.Fatalf("Run ended: %v", err)
		case <-time.After(waitBound):
			t.Fatal("the kit does not take the live events")
		}
	}
	select {
	case id := <-notified:
		if id != "ord_G" {
			t.Errorf("side effect for %s, want ord_G", id)
		}
	case err := <-runErr:
		t.Fatalf("Run ended: %v", err)
	case <-time.After(waitBound):
		t.Fatal("no side effect for the order paid live")
	}
	waitPosition(t, store, 1, last+12, runErr)
	totals, err := view.Totals(t.Context(), pool, v)
	if err != nil {
		t.Fatal(err)
	}
	if got := totals[7]; got.Accepted != 6 || got.Paid != 2 || got.Revenue["EUR"] != 3*1999 {
		t.Errorf("Totals[7] after ord_G = %+v, want accepted 6, paid 2, revenue 3*1999 EUR", got)
	}
	parked, err := store.Parked(t.Context(), view.Name, 1)
	if err != nil || len(parked) != 0 {
		t.Errorf("Parked = %+v, %v; want none", parked, err)
	}

	cancel()
	select {
	case err := <-runErr:
		if err != nil {
			t.Errorf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(waitBound):
		t.Fatal("Run does not end with its context")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"v1 ord_G rebuilding=false"}; !reflect.DeepEqual(paidAt, want) {
		t.Errorf("side effects = %v, want %v", paidAt, want)
	}
}

// TestActiveViewBeforeLive: nothing to read before a version is active.
func TestActiveViewBeforeLive(t *testing.T) {
	pool := newPool(t)
	store := projector.NewStore(pool)
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := view.ActiveView(t.Context(), store, view.Name); !errors.Is(err, view.ErrNoActiveView) {
		t.Fatalf("ActiveView with no active version = %v, want ErrNoActiveView", err)
	}
}
