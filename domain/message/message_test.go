package message_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
)

// specExample is the message of spec section 9.1.
const specExample = `{
  "schema_version": 1,
  "event_type": "ORDER_CREATE_REQUESTED",
  "message_id": "evt_01K0YV6M3RM4DAK1XKED6W9Y2Q",
  "message_key": "rsv_01K0YV6KZ8B8QNY6H5N6BMEPXV",
  "request_id": "req_01K0YV6HGNMTHWMTMH0PV40T58",
  "reservation_id": "rsv_01K0YV6KZ8B8QNY6H5N6BMEPXV",
  "order_id": "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5",
  "activity_id": 10001,
  "sku_id": 20001,
  "user_id": 90000001,
  "quantity": 1,
  "reservation_created_at": "2026-06-25T17:00:00.123Z",
  "reservation_valid_until": "2026-06-25T17:05:00.123Z",
  "created_at": "2026-06-25T17:00:00.130Z",
  "retry_count": 0,
  "replay_count": 0,
  "producer": "seckill-access-service",
  "trace": {
    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "span_id": "00f067aa0ba902b7",
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
  }
}`

func TestDecodeSpecExample(t *testing.T) {
	m, err := message.DecodeOrderCreateRequested([]byte(specExample))
	if err != nil {
		t.Fatal(err)
	}
	if m.UserID != 90000001 || m.OrderID != "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5" ||
		!m.ReservationValidUntil.Equal(time.Date(2026, 6, 25, 17, 5, 0, 123e6, time.UTC)) {
		t.Fatalf("decoded %+v", m)
	}
	again, err := message.DecodeOrderCreateRequested(mustEncode(t, m))
	if err != nil || again != m {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, again, m)
	}
}

func mustEncode(t *testing.T, m message.OrderCreateRequested) []byte {
	t.Helper()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mutate(t *testing.T, f func(map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(specExample), &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeClassifiesBadInput(t *testing.T) {
	cases := []struct {
		name  string
		body  []byte
		class string
	}{
		{"empty", nil, "INVALID_JSON"},
		{"array", []byte(`[1,2]`), "INVALID_JSON"},
		{"truncated", []byte(specExample[:40]), "INVALID_JSON"},
		{"trailing", []byte(specExample + `{}`), "INVALID_JSON"},
		{"wrong type", mutate(t, func(m map[string]any) { m["user_id"] = "ninety" }), "INVALID_JSON"},
		{"schema 2", mutate(t, func(m map[string]any) { m["schema_version"] = 2 }), "UNSUPPORTED_SCHEMA"},
		{"no schema", mutate(t, func(m map[string]any) { delete(m, "schema_version") }), "UNSUPPORTED_SCHEMA"},
		{"other event", mutate(t, func(m map[string]any) { m["event_type"] = "ORDER_PAID" }), "UNSUPPORTED_SCHEMA"},
		{"no message id", mutate(t, func(m map[string]any) { delete(m, "message_id") }), "INVALID_EVENT"},
		{"no order id", mutate(t, func(m map[string]any) { m["order_id"] = "" }), "INVALID_EVENT"},
		{"user zero", mutate(t, func(m map[string]any) { m["user_id"] = 0 }), "INVALID_EVENT"},
		{"quantity 2", mutate(t, func(m map[string]any) { m["quantity"] = 2 }), "INVALID_EVENT"},
		{"window inverted", mutate(t, func(m map[string]any) {
			m["reservation_valid_until"] = "2026-06-25T16:00:00Z"
		}), "INVALID_EVENT"},
		{"long request id", mutate(t, func(m map[string]any) { m["request_id"] = strings.Repeat("r", 129) }), "INVALID_EVENT"},
	}
	for _, c := range cases {
		_, err := message.DecodeOrderCreateRequested(c.body)
		if got := message.Class(err); got != c.class {
			t.Errorf("%s: class %q (err %v), want %q", c.name, got, err, c.class)
		}
	}
}

func TestWithReplayKeepsMessageID(t *testing.T) {
	body, count, err := message.WithReplay([]byte(specExample), "rpl_1")
	if err != nil || count != 1 {
		t.Fatalf("replay: %v %d", err, count)
	}
	body, count, err = message.WithReplay(body, "rpl_2")
	if err != nil || count != 2 {
		t.Fatalf("second replay: %v %d", err, count)
	}
	m, err := message.DecodeOrderCreateRequested(body)
	if err != nil {
		t.Fatal(err)
	}
	if m.MessageID != "evt_01K0YV6M3RM4DAK1XKED6W9Y2Q" || m.ReplayCount != 2 || m.ReplayID != "rpl_2" {
		t.Fatalf("after replays: %+v", m.Envelope)
	}
	if _, _, err := message.WithReplay([]byte(`"x"`), "r"); !errors.Is(err, message.ErrMalformed) {
		t.Fatalf("non-object: %v", err)
	}
}

func TestOtherMessagesRoundTrip(t *testing.T) {
	env := func(typ string) message.Envelope {
		return message.Envelope{SchemaVersion: 1, EventType: typ, MessageID: "evt_x", MessageKey: "k",
			CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	}
	state := message.OrderState{OrderID: "ord_1", ReservationID: "rsv_1", ActivityID: 1, SKUID: 2, UserID: 3,
		Status: "PAID", AggregateVersion: 3, CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := message.CancelOrderIfUnpaid{Envelope: env(message.TypeCancelOrderIfUnpaid), OrderID: "ord_1",
		ReservationID: "rsv_1", ActivityID: 1, SKUID: 2, UserID: 3, DeliverAt: time.Date(2026, 1, 1, 0, 15, 0, 0, time.UTC)}
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := message.DecodeCancelOrderIfUnpaid(b); err != nil || got != c {
		t.Fatalf("cancel: %v %+v", err, got)
	}
	r := message.ReleaseReservation{Envelope: env(message.TypeReleaseReservation), ReservationID: "rsv_1", OrderID: "ord_1",
		ActivityID: 1, SKUID: 2, UserID: 3, Reason: "ORDER_CANCELED", FailureClass: "ORDER_CANCELED",
		MaxAttempts: 8, RetryUntil: time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)}
	if b, err = r.Encode(); err != nil {
		t.Fatal(err)
	}
	if got, err := message.DecodeReleaseReservation(b); err != nil || got != r {
		t.Fatalf("release: %v %+v", err, got)
	}
	s := message.OrderStateChanged{Envelope: env(message.TypeOrderStateChanged), OrderState: state}
	if b, err = s.Encode(); err != nil {
		t.Fatal(err)
	}
	if got, err := message.DecodeOrderStateChanged(b); err != nil || got != s {
		t.Fatalf("state: %v %+v", err, got)
	}
	e := message.OrderEvent{Envelope: env(message.TypeOrderPaid), OrderState: state}
	if b, err = e.Encode(); err != nil {
		t.Fatal(err)
	}
	if got, err := message.DecodeOrderEvent(b); err != nil || got != e {
		t.Fatalf("event: %v %+v", err, got)
	}
	if _, err := (message.OrderStateChanged{Envelope: env(message.TypeOrderStateChanged)}).Encode(); !errors.Is(err, message.ErrInvalid) {
		t.Fatalf("empty state encoded: %v", err)
	}
}

// FuzzDecodeOrderCreateRequested checks that decoding never panics, that
// every failure is classified, and that whatever decodes re-encodes to a
// body that decodes to the same message.
func FuzzDecodeOrderCreateRequested(f *testing.F) {
	f.Add([]byte(specExample))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"schema_version":1,"event_type":"ORDER_CREATE_REQUESTED"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := message.DecodeOrderCreateRequested(body)
		if err != nil {
			if message.Class(err) == "" {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		b, err := m.Encode()
		if err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
		again, err := message.DecodeOrderCreateRequested(b)
		if err != nil || again.MessageID != m.MessageID || again.OrderID != m.OrderID {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// TestPaymentTimeoutTrigger: a CancelOrdersIfUnpaid round-trips with its
// checks' own envelopes, DecodePaymentTimeout reads both timeout shapes
// as checks, and a trigger that is empty, mixes activities, holds a check
// due after it or an invalid check, or an unknown event type on the topic,
// is refused with the right class.
func TestPaymentTimeoutTrigger(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 15, 0, 0, time.UTC)
	check := func(n int, activity int64) message.CancelOrderIfUnpaid {
		return message.CancelOrderIfUnpaid{Envelope: message.Envelope{SchemaVersion: 1, EventType: message.TypeCancelOrderIfUnpaid,
			MessageID: fmt.Sprintf("evt_ord_%d_timeout_1", n), MessageKey: fmt.Sprintf("ord_%d", n), CreatedAt: at.Add(-15 * time.Minute),
			Trace: message.TraceContext{Traceparent: fmt.Sprintf("00-%032d-%016d-01", n, n)}},
			OrderID: fmt.Sprintf("ord_%d", n), ReservationID: fmt.Sprintf("rsv_%d", n), ActivityID: activity, SKUID: 2, UserID: int64(n),
			DeliverAt: at.Add(-time.Duration(n) * time.Millisecond)}
	}
	trigger := message.CancelOrdersIfUnpaid{Envelope: message.Envelope{SchemaVersion: 1, EventType: message.TypeCancelOrdersIfUnpaid,
		MessageID: "evt_timeouts_7", MessageKey: "7", CreatedAt: at.Add(-15 * time.Minute)},
		ActivityID: 7, DeliverAt: at, Checks: []message.CancelOrderIfUnpaid{check(1, 7), check(2, 7)}}
	b, err := trigger.Encode()
	if err != nil {
		t.Fatal(err)
	}
	env, checks, err := message.DecodePaymentTimeout(b)
	if err != nil || env.MessageID != "evt_timeouts_7" || len(checks) != 2 || checks[0] != trigger.Checks[0] || checks[1] != trigger.Checks[1] {
		t.Fatalf("trigger: %v %+v %+v", err, env, checks)
	}
	one, err := check(3, 7).Encode()
	if err != nil {
		t.Fatal(err)
	}
	if env, checks, err := message.DecodePaymentTimeout(one); err != nil || env.MessageID != "evt_ord_3_timeout_1" || len(checks) != 1 || checks[0] != check(3, 7) {
		t.Fatalf("single check: %v %+v %+v", err, env, checks)
	}

	bad := map[string]func(m *message.CancelOrdersIfUnpaid){
		"no checks":         func(m *message.CancelOrdersIfUnpaid) { m.Checks = nil },
		"another activity":  func(m *message.CancelOrdersIfUnpaid) { m.Checks = append(m.Checks, check(4, 8)) },
		"a check due later": func(m *message.CancelOrdersIfUnpaid) { m.DeliverAt = at.Add(-2 * time.Hour) },
		"an invalid check":  func(m *message.CancelOrdersIfUnpaid) { m.Checks[0].OrderID = "" },
		"no activity":       func(m *message.CancelOrdersIfUnpaid) { m.ActivityID = 0 },
	}
	for name, mutate := range bad {
		m := trigger
		m.Checks = slices.Clone(trigger.Checks)
		mutate(&m)
		if _, err := m.Encode(); !errors.Is(err, message.ErrInvalid) {
			t.Errorf("%s: encode %v, want ErrInvalid", name, err)
		}
		raw, _ := json.Marshal(m)
		if _, _, err := message.DecodePaymentTimeout(raw); !errors.Is(err, message.ErrInvalid) {
			t.Errorf("%s: decode %v, want ErrInvalid", name, err)
		}
	}
	other, _ := json.Marshal(message.Envelope{SchemaVersion: 1, EventType: message.TypeOrderPaid, MessageID: "x", CreatedAt: at})
	if _, _, err := message.DecodePaymentTimeout(other); !errors.Is(err, message.ErrUnsupportedSchema) {
		t.Errorf("an ORDER_PAID on the timeout topic: %v, want ErrUnsupportedSchema", err)
	}
	if _, _, err := message.DecodePaymentTimeout([]byte("[1]")); !errors.Is(err, message.ErrMalformed) {
		t.Errorf("not an object: %v, want ErrMalformed", err)
	}
}
