package scenarios_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// An activity's unit price: CreateActivity stores and returns it, refuses
// the same ids with another price (ALREADY_EXISTS, like every other
// setting) and a price that breaks the rule (a FieldError naming the
// field), and every order of the activity records it in its ORDER_CREATED
// event, stored as schema version 2.
func TestActivityPriceIsRecordedInOrderCreated(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	actor := ports.UserActor(1)
	a := ports.Activity{ActivityID: 1, SKUID: 1, Stock: 5, StartsAt: start.Add(-time.Minute),
		EndsAt: start.Add(24 * time.Hour), PaymentTimeout: 15 * time.Minute, ReservationTTL: 5 * time.Minute,
		UnitPrice: 1999, Currency: "EUR"}
	stored, err := h.admin.CreateActivity(ctx, actor, a)
	if err != nil {
		t.Fatal(err)
	}
	if stored.UnitPrice != 1999 || stored.Currency != "EUR" {
		t.Fatalf("stored activity price %d %q, want 1999 EUR", stored.UnitPrice, stored.Currency)
	}
	if _, err := h.admin.CreateActivity(ctx, actor, a); err != nil {
		t.Fatalf("the same activity again: %v", err)
	}
	for _, other := range []ports.Activity{
		func() ports.Activity { o := a; o.UnitPrice = 2500; return o }(),
		func() ports.Activity { o := a; o.Currency = "USD"; return o }(),
		func() ports.Activity { o := a; o.UnitPrice, o.Currency = 0, ""; return o }(),
	} {
		if _, err := h.admin.CreateActivity(ctx, actor, other); !errors.Is(err, ports.ErrAlreadyExists) {
			t.Fatalf("create with price %d %q: %v, want ErrAlreadyExists", other.UnitPrice, other.Currency, err)
		}
	}
	for field, bad := range map[string]ports.Activity{
		"unit_price": func() ports.Activity { o := a; o.ActivityID, o.UnitPrice = 2, -1; return o }(),
		"currency":   func() ports.Activity { o := a; o.ActivityID, o.Currency = 2, "eur"; return o }(),
	} {
		var fe *ports.FieldError
		if _, err := h.admin.CreateActivity(ctx, actor, bad); !errors.As(err, &fe) || fe.Field != field {
			t.Fatalf("create with price %d %q: %v, want a FieldError on %s", bad.UnitPrice, bad.Currency, err, field)
		}
	}
	h.measure()

	res, err := h.placeOrder(7, 1, "req-price")
	if err != nil {
		t.Fatal(err)
	}
	h.settle()
	if n := h.count(`SELECT count(*) FROM order_events WHERE aggregate_id = $1 AND event_type = 'ORDER_CREATED'
		AND schema_version = 2 AND payload->>'unit_price' = '1999' AND payload->>'currency' = 'EUR'`, res.OrderID); n != 1 {
		t.Fatalf("%d stored ORDER_CREATED events of %s with schema version 2 and 1999 EUR, want 1", n, res.OrderID)
	}
	var events []order.Event
	if err := h.pg.InTx(h.ctx(), func(ctx context.Context, tx ports.Tx) error {
		var err error
		events, err = tx.LoadOrderEvents(ctx, res.OrderID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 {
		t.Fatalf("order %s has no events", res.OrderID)
	}
	c, ok := events[0].Payload.(order.Created)
	if !ok || c.UnitPrice != 1999 || c.Currency != "EUR" || c.UserID != 7 {
		t.Fatalf("created event %+v, want 1999 EUR for user 7", events[0])
	}
	h.invariants(1)
}
