package order_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/seckill-dev/seckill/domain/order"
)

var t0 = time.Date(2026, 6, 25, 17, 0, 0, 0, time.UTC)

// fataler is the part of testing.TB and *rapid.T that newOrder needs.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

func newOrder(t fataler) *order.Order {
	t.Helper()
	o, err := order.Create(order.NewOrder{
		OrderID: "ord_1", ReservationID: "rsv_1", MessageID: "evt_1",
		ActivityID: 10001, SKUID: 20001, UserID: 90000001, Quantity: 1,
		ReservedAt: t0, PaymentTimeout: 15 * time.Minute,
	}, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestCreateValidates(t *testing.T) {
	base := order.NewOrder{OrderID: "o", ReservationID: "r", MessageID: "m", ActivityID: 1, SKUID: 1, UserID: 1,
		Quantity: 1, ReservedAt: t0, PaymentTimeout: time.Minute}
	bad := []func(*order.NewOrder){
		func(n *order.NewOrder) { n.OrderID = "" },
		func(n *order.NewOrder) { n.ReservationID = "" },
		func(n *order.NewOrder) { n.MessageID = "" },
		func(n *order.NewOrder) { n.ActivityID = 0 },
		func(n *order.NewOrder) { n.SKUID = -1 },
		func(n *order.NewOrder) { n.UserID = 0 },
		func(n *order.NewOrder) { n.Quantity = 2 },
		func(n *order.NewOrder) { n.PaymentTimeout = 0 },
		func(n *order.NewOrder) { n.ReservedAt = time.Time{} },
		func(n *order.NewOrder) { n.UnitPrice = -1 },
		func(n *order.NewOrder) { n.UnitPrice = 1999 },
		func(n *order.NewOrder) { n.UnitPrice, n.Currency = 1999, "eur" },
		func(n *order.NewOrder) { n.UnitPrice, n.Currency = 1999, "EURO" },
		func(n *order.NewOrder) { n.Currency = "EUR" },
	}
	for i, mutate := range bad {
		n := base
		mutate(&n)
		if _, err := order.Create(n, t0); !errors.Is(err, order.ErrInvalid) {
			t.Errorf("case %d: err = %v, want ErrInvalid", i, err)
		}
	}
}

func TestLifeCycle(t *testing.T) {
	o := newOrder(t)
	s := o.Snapshot()
	if s.Status != order.StatusCreated || s.Version != 1 || !s.ExpiresAt.Equal(t0.Add(time.Second+15*time.Minute)) {
		t.Fatalf("created snapshot: %+v", s)
	}
	if err := o.Pay("pay_1", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ch := o.Changes()
	if len(ch) != 3 || ch[1].Type != order.EventPaymentStarted || ch[2].Type != order.EventPaid || ch[2].Version != 3 {
		t.Fatalf("changes after pay: %+v", ch)
	}
	if err := o.Pay("pay_1", t0.Add(2*time.Minute)); err != nil {
		t.Fatalf("repeated pay with the same id: %v", err)
	}
	if len(o.Changes()) != 3 {
		t.Fatal("repeated pay recorded an event")
	}
	if err := o.Pay("pay_2", t0); !errors.Is(err, order.ErrAlreadyPaid) {
		t.Fatalf("pay with another id: %v", err)
	}
	if err := o.Cancel(order.ReasonPaymentTimeout, t0.Add(time.Hour)); !errors.Is(err, order.ErrAlreadyPaid) {
		t.Fatalf("cancel paid: %v", err)
	}
}

func TestTimeoutCancelNeedsDeadline(t *testing.T) {
	o := newOrder(t)
	deadline := o.Snapshot().ExpiresAt
	if err := o.Cancel(order.ReasonPaymentTimeout, deadline.Add(-time.Millisecond)); !errors.Is(err, order.ErrNotExpired) {
		t.Fatalf("early timeout: %v", err)
	}
	if err := o.Cancel(order.ReasonPaymentTimeout, deadline); err != nil {
		t.Fatalf("timeout at the deadline: %v", err)
	}
	if err := o.Cancel(order.ReasonPaymentTimeout, deadline.Add(time.Hour)); err != nil {
		t.Fatalf("repeated cancel: %v", err)
	}
	if err := o.Pay("pay_1", deadline); !errors.Is(err, order.ErrAlreadyCanceled) {
		t.Fatalf("pay canceled: %v", err)
	}
	if got := len(o.Changes()); got != 2 {
		t.Fatalf("changes = %d, want 2", got)
	}
}

func TestRehydrateRejectsCorruptStreams(t *testing.T) {
	o := newOrder(t)
	if err := o.Pay("p", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	events := o.Changes()
	cases := map[string][]order.Event{
		"empty":         nil,
		"gap":           {events[0], events[2]},
		"starts at two": events[1:],
		"foreign": {events[0], func() order.Event {
			e := events[1]
			e.OrderID = "ord_other"
			return e
		}()},
		"paid after canceled": {events[0], {OrderID: "ord_1", Version: 2, Type: order.EventCanceled, Payload: order.Canceled{Reason: order.ReasonBuyerCanceled}},
			{OrderID: "ord_1", Version: 3, Type: order.EventPaid, Payload: order.Paid{PaymentID: "p"}}},
	}
	for name, stream := range cases {
		if _, err := order.Rehydrate(stream); !errors.Is(err, order.ErrCorruptStream) {
			t.Errorf("%s: err = %v, want ErrCorruptStream", name, err)
		}
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	o := newOrder(t)
	if err := o.Pay("pay", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, e := range o.Changes() {
		b, err := order.EncodePayload(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		p, err := order.DecodePayload(e.Type, e.SchemaVersion, b)
		if err != nil {
			t.Fatal(err)
		}
		if p != e.Payload {
			t.Fatalf("round trip of %s: %#v != %#v", e.Type, p, e.Payload)
		}
	}
	if _, err := order.DecodePayload(order.EventPaid, order.CurrentSchemaVersion+1, []byte(`{}`)); !errors.Is(err, order.ErrCorruptStream) {
		t.Fatalf("future schema: %v", err)
	}
	if _, err := order.DecodePayload("ORDER_SHIPPED", 1, []byte(`{}`)); !errors.Is(err, order.ErrCorruptStream) {
		t.Fatalf("unknown type: %v", err)
	}
}

// TestPropertyNoIllegalState drives random command sequences (with random
// times, payment ids and reasons) and checks after every step: the stream
// has no version gap, replaying it reproduces the state, the status is
// legal, and a paid order is never canceled (I5).
func TestPropertyNoIllegalState(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := newOrder(t)
		var stream []order.Event
		everPaid := false
		now := t0
		steps := rapid.IntRange(1, 30).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			now = now.Add(time.Duration(rapid.IntRange(0, 20*60).Draw(t, "advance_s")) * time.Second)
			pay := rapid.SampledFrom([]string{"p1", "p2"}).Draw(t, "payment")
			before := len(o.Changes())
			wasUnpaid := o.Snapshot().Status.Unpaid()
			var err error
			switch rapid.IntRange(0, 3).Draw(t, "cmd") {
			case 0:
				err = o.Pay(pay, now)
				if err == nil && wasUnpaid && !now.Before(o.Snapshot().ExpiresAt) {
					t.Fatalf("paid at %s, not before the deadline %s", now, o.Snapshot().ExpiresAt)
				}
			case 1:
				err = o.StartPayment(pay, now)
			case 2:
				err = o.Cancel(order.ReasonPaymentTimeout, now)
			case 3:
				err = o.Cancel(order.ReasonBuyerCanceled, now)
			}
			if err != nil && !errors.Is(err, order.ErrAlreadyPaid) && !errors.Is(err, order.ErrAlreadyCanceled) &&
				!errors.Is(err, order.ErrNotExpired) && !errors.Is(err, order.ErrPaymentMismatch) &&
				!errors.Is(err, order.ErrPaymentExpired) {
				t.Fatalf("unexpected error: %v", err)
			}
			changes := o.Changes()
			if err != nil && len(changes) != before {
				t.Fatalf("a failed command recorded events")
			}
			stream = changes
			for j, e := range stream {
				if e.Version != int64(j+1) {
					t.Fatalf("version gap: event %d has version %d", j, e.Version)
				}
			}
			s := o.Snapshot()
			if s.Version != int64(len(stream)) {
				t.Fatalf("snapshot version %d != stream length %d", s.Version, len(stream))
			}
			switch s.Status {
			case order.StatusCreated, order.StatusPaying, order.StatusPaid, order.StatusCanceled:
			default:
				t.Fatalf("illegal status %q", s.Status)
			}
			if s.Status == order.StatusPaid {
				everPaid = true
			}
			if everPaid && s.Status != order.StatusPaid {
				t.Fatalf("paid order moved to %s", s.Status)
			}
			replayed, err := order.Rehydrate(stream)
			if err != nil {
				t.Fatalf("rehydrate: %v", err)
			}
			rs := replayed.Snapshot()
			if rs != s {
				t.Fatalf("replay differs:\n%+v\n%+v", rs, s)
			}
		}
	})
}

// TestPayAtTheDeadlineIsRefused checks the boundary shared with the timeout
// cancel: a payment one instant before expires_at applies; one at or after
// it fails with ErrPaymentExpired and records nothing, while a timeout
// cancel at the same instant applies.
func TestPayAtTheDeadlineIsRefused(t *testing.T) {
	o := newOrder(t)
	deadline := o.Snapshot().ExpiresAt
	if err := o.Pay("pay_late", deadline); !errors.Is(err, order.ErrPaymentExpired) {
		t.Fatalf("pay at the deadline: %v, want ErrPaymentExpired", err)
	}
	if err := o.StartPayment("pay_late", deadline.Add(time.Second)); !errors.Is(err, order.ErrPaymentExpired) {
		t.Fatalf("start payment after the deadline: %v, want ErrPaymentExpired", err)
	}
	if n := len(o.Changes()); n != 1 {
		t.Fatalf("refused payments recorded %d events beyond creation", n-1)
	}
	if err := o.Cancel(order.ReasonPaymentTimeout, deadline); err != nil {
		t.Fatalf("timeout cancel at the deadline: %v", err)
	}
	o2 := newOrder(t)
	if err := o2.Pay("pay_ok", o2.Snapshot().ExpiresAt.Add(-time.Microsecond)); err != nil {
		t.Fatalf("pay just before the deadline: %v", err)
	}
}

// TestPaymentIDFollowsTheClientIDRule refuses payment ids that could not be
// stored or keyed safely.
func TestPaymentIDFollowsTheClientIDRule(t *testing.T) {
	for _, bad := range []string{"", "   ", "pay 1", strings.Repeat("é", 65)} {
		if err := newOrder(t).Pay(bad, t0.Add(time.Minute)); !errors.Is(err, order.ErrInvalid) {
			t.Errorf("Pay(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// A version-1 ORDER_CREATED as it was stored before prices were recorded
// (the JSON EncodePayload wrote then).
const createdV1JSON = `{"order_id":"ord_1","reservation_id":"rsv_1","message_id":"evt_1","activity_id":10001,` +
	`"sku_id":20001,"user_id":90000001,"quantity":1,"reserved_at":"2026-06-25T17:00:00Z",` +
	`"expires_at":"2026-06-25T17:15:01Z"}`

// A stored version-1 ORDER_CREATED is served in the version-2 form with
// the price unknown; the other fields are kept.
func TestDecodeUpcastsCreatedV1(t *testing.T) {
	if order.CurrentSchemaVersion != 2 {
		t.Fatalf("CurrentSchemaVersion = %d, want 2", order.CurrentSchemaVersion)
	}
	p, err := order.DecodePayload(order.EventCreated, 1, []byte(createdV1JSON))
	if err != nil {
		t.Fatal(err)
	}
	want := order.Created{OrderID: "ord_1", ReservationID: "rsv_1", MessageID: "evt_1", ActivityID: 10001,
		SKUID: 20001, UserID: 90000001, Quantity: 1, ReservedAt: t0, ExpiresAt: t0.Add(15*time.Minute + time.Second)}
	if p != want {
		t.Fatalf("upcast v1 = %#v, want %#v", p, want)
	}
	// The v1 payload of an unpriced order created today is what the
	// version-2 encoder writes minus the price fields.
	created := newOrder(t).Changes()[0]
	if created.SchemaVersion != 2 || created.Payload != want {
		t.Fatalf("a new order's event = %+v, want schema version 2 and %#v", created, want)
	}
	// The other payloads are the same in versions 1 and 2.
	for _, c := range []struct {
		typ  order.EventType
		json string
		want order.Payload
	}{
		{order.EventPaymentStarted, `{"payment_id":"pay_1"}`, order.PaymentStarted{PaymentID: "pay_1"}},
		{order.EventPaid, `{"payment_id":"pay_1"}`, order.Paid{PaymentID: "pay_1"}},
		{order.EventCanceled, `{"reason":"BUYER_CANCELED"}`, order.Canceled{Reason: order.ReasonBuyerCanceled}},
	} {
		for v := 1; v <= 2; v++ {
			if p, err := order.DecodePayload(c.typ, v, []byte(c.json)); err != nil || p != c.want {
				t.Errorf("%s version %d = %#v, %v; want %#v", c.typ, v, p, err, c.want)
			}
		}
	}
}

// A priced order's ORDER_CREATED is recorded as version 2 with its price
// and decodes to the same payload; version 3 and version 0 are refused, as
// is a stored version 2 that breaks the price rule.
func TestCreatedV2RoundTripAndRefusals(t *testing.T) {
	o, err := order.Create(order.NewOrder{
		OrderID: "ord_2", ReservationID: "rsv_2", MessageID: "evt_2",
		ActivityID: 10001, SKUID: 20001, UserID: 90000002, Quantity: 1,
		ReservedAt: t0, PaymentTimeout: 15 * time.Minute, UnitPrice: 1999, Currency: "EUR",
	}, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e := o.Changes()[0]
	c, ok := e.Payload.(order.Created)
	if !ok || e.SchemaVersion != 2 || c.UnitPrice != 1999 || c.Currency != "EUR" {
		t.Fatalf("created event = %+v, want schema version 2 with 1999 EUR", e)
	}
	b, err := order.EncodePayload(e.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"unit_price":1999`) || !strings.Contains(string(b), `"currency":"EUR"`) {
		t.Fatalf("stored JSON %s lacks the price", b)
	}
	p, err := order.DecodePayload(order.EventCreated, 2, b)
	if err != nil || p != e.Payload {
		t.Fatalf("round trip = %#v, %v; want %#v", p, err, e.Payload)
	}
	for _, v := range []int{0, 3} {
		if _, err := order.DecodePayload(order.EventCreated, v, b); !errors.Is(err, order.ErrCorruptStream) {
			t.Errorf("schema version %d: err = %v, want ErrCorruptStream", v, err)
		}
	}
	for _, bad := range []string{
		`{"order_id":"ord_2","unit_price":-5,"currency":"EUR"}`,
		`{"order_id":"ord_2","unit_price":5,"currency":""}`,
		`{"order_id":"ord_2","unit_price":0,"currency":"EUR"}`,
	} {
		if _, err := order.DecodePayload(order.EventCreated, 2, []byte(bad)); !errors.Is(err, order.ErrCorruptStream) {
			t.Errorf("version 2 %s: err = %v, want ErrCorruptStream", bad, err)
		}
	}
}

func TestIsCurrency(t *testing.T) {
	for code, want := range map[string]bool{"EUR": true, "USD": true, "": false, "eur": false, "EU": false,
		"EURO": false, "E1R": false, "ÉUR": false} {
		if got := order.IsCurrency(code); got != want {
			t.Errorf("IsCurrency(%q) = %v, want %v", code, got, want)
		}
	}
}
