package bootstrap_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// startLoggedSystem starts a service whose every log line is checked by
// newCapturingLogger and kept for assertions, with the "service" and
// "instance" fields LoggerFor adds (so a line repeating them fails too).
func startLoggedSystem(t *testing.T, broker string) (*system, func() []map[string]any) {
	t.Helper()
	log, lines := newCapturingLogger(t, slog.LevelWarn)
	s := startSystem(t, options{broker: broker, logger: log.With("service", "seckill", "instance", "logs")})
	return s, lines
}

// logQuery selects captured lines.
type logQuery struct {
	level  string            // "" for any level
	msg    string            // "" for any message
	fields map[string]string // each field formatted with %v must equal
}

func (q logQuery) match(l map[string]any) bool {
	if q.level != "" && l["level"] != q.level || q.msg != "" && l["msg"] != q.msg {
		return false
	}
	for k, v := range q.fields {
		got, ok := l[k]
		if !ok || fmt.Sprint(got) != v {
			return false
		}
	}
	return true
}

func selectLines(lines []map[string]any, q logQuery) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if q.match(l) {
			out = append(out, l)
		}
	}
	return out
}

// exactlyOne fails unless exactly one captured line matches q and it has
// every field of want (present, any value); it returns the line.
func exactlyOne(t *testing.T, lines []map[string]any, q logQuery, want ...string) map[string]any {
	t.Helper()
	got := selectLines(lines, q)
	if len(got) != 1 {
		t.Errorf("%d lines match %+v, want 1: %v", len(got), q, got)
		return nil
	}
	for _, f := range want {
		if _, ok := got[0][f]; !ok {
			t.Errorf("line %v has no %s", got[0], f)
		}
	}
	return got[0]
}

// TestBusinessActionsLogOneLineEach: against the real service, on each
// broker, every log line passes the strict check (one JSON object, no key
// twice: consumer_group, service and instance included); the per-order
// pipeline logs at DEBUG only, so the INFO lines carrying an order id do
// not grow from 20 orders to 40; and each business action writes exactly
// one INFO line with its ids: CreateActivity (activity ready), PayOrder
// (order paid, then payment refused for another payment id), a buyer's
// CancelOrder (order canceled; cancel refused for the paid order), the
// release of the canceled order's unit (reservation released, once),
// ReplayDeadLetter (dead letter replay) and a reconciliation pass
// (reconciled), the admin ones with the actor.
func TestBusinessActionsLogOneLineEach(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s, lines := startLoggedSystem(t, broker)
		const activity = 61
		admin := ports.UserActor(1)
		s.activity(activity, 100, time.Minute, time.Minute)
		exactlyOne(t, lines(), logQuery{level: "INFO", msg: "activity ready",
			fields: map[string]string{"activity_id": "61", "sku_id": "1", "actor": admin, "outcome": ports.AuditCreated}}, "stock")

		// Per-order lines are DEBUG: the INFO lines with an order id do
		// not grow with the number of orders.
		var orders []string
		buy := func(n int) int {
			for range n {
				user := int64(100 + len(orders))
				orders = append(orders, s.buy(user, activity, fmt.Sprint("logs-", user)))
			}
			for _, id := range orders { // every order's consume line is written
				s.eventually(30*time.Second, "the consume line of "+id, func() bool {
					return len(selectLines(lines(), logQuery{msg: "mq consume", fields: map[string]string{"order_id": id}})) > 0
				})
			}
			perOrder := 0
			for _, l := range selectLines(lines(), logQuery{level: "INFO"}) {
				if _, ok := l["order_id"]; ok {
					perOrder++
					t.Errorf("INFO line for one order in the order pipeline: %v", l)
				}
			}
			return perOrder
		}
		after20 := buy(20)
		after40 := buy(20)
		if after40 != after20 {
			t.Errorf("INFO lines with an order id: %d after 20 orders, %d after 40", after20, after40)
		}
		t.Logf("after 40 orders: %d lines, %d at INFO or above", len(lines()), len(lines())-len(selectLines(lines(), logQuery{level: "DEBUG"})))

		paid, canceled := orders[0], orders[1]
		payer := s.paymentToken()
		if _, err := s.orders.PayOrder(context.Background(), authed(&seckillv1.PayOrderRequest{OrderId: paid, PaymentId: "pay-logs-1"}, payer)); err != nil {
			t.Fatal(err)
		}
		exactlyOne(t, lines(), logQuery{level: "INFO", msg: "order paid", fields: map[string]string{
			"order_id": paid, "payment_id": "pay-logs-1", "user_id": "100", "activity_id": "61", "sku_id": "1", "outcome": "PAID"}},
			"reservation_id", "trace_id")
		if _, err := s.orders.PayOrder(context.Background(), authed(&seckillv1.PayOrderRequest{OrderId: paid, PaymentId: "pay-logs-2"}, payer)); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("a second payment id: %v", err)
		}
		exactlyOne(t, lines(), logQuery{level: "INFO", msg: "payment refused", fields: map[string]string{
			"order_id": paid, "payment_id": "pay-logs-2", "user_id": "100", "reason": "ALREADY_PAID"}}, "activity_id", "sku_id")

		if _, err := s.orders.CancelOrder(context.Background(), authed(&seckillv1.CancelOrderRequest{OrderId: canceled}, s.token(101, false))); err != nil {
			t.Fatal(err)
		}
		exactlyOne(t, lines(), logQuery{level: "INFO", msg: "order canceled", fields: map[string]string{
			"order_id": canceled, "user_id": "101", "activity_id": "61", "sku_id": "1", "outcome": "CANCELED"}}, "reservation_id", "trace_id")
		if _, err := s.orders.CancelOrder(context.Background(), authed(&seckillv1.CancelOrderRequest{OrderId: paid}, s.token(100, false))); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("canceling a paid order: %v", err)
		}
		exactlyOne(t, lines(), logQuery{level: "INFO", msg: "cancel refused", fields: map[string]string{
			"order_id": paid, "user_id": "100", "reason": "ALREADY_PAID"}})

		// The canceled order's unit goes back once, logged once.
		s.settled(activity, 30*time.Second)
		var rsv string
		if o, err := s.getOrder(101, canceled); err != nil {
			t.Fatal(err)
		} else {
			rsv = o.GetReservationId()
		}
		var releases []map[string]any
		for _, l := range lines() {
			if m, _ := l["msg"].(string); strings.Contains(m, "release") && l["level"] != "DEBUG" {
				releases = append(releases, l)
			}
		}
		if len(releases) != 1 || !(logQuery{msg: "reservation released", fields: map[string]string{"reservation_id": rsv,
			"order_id": canceled, "user_id": "101", "activity_id": "61", "sku_id": "1"}}).match(releases[0]) {
			t.Errorf("release lines above DEBUG: %v, want one reservation released line of %s", releases, rsv)
		}

		if _, err := s.replay(987654, "logs test"); connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("replay of an unknown dead letter: %v", err)
		}
		exactlyOne(t, lines(), logQuery{level: "INFO", msg: "dead letter replay", fields: map[string]string{
			"dead_letter_id": "987654", "actor": admin, "outcome": ports.AuditNotFound}})

		if _, err := s.app.Reconciler.Reconcile(context.Background(), admin); err != nil {
			t.Fatal(err)
		}
		exactlyOne(t, lines(), logQuery{level: "INFO", msg: "reconciled", fields: map[string]string{
			"actor": admin, "outcome": ports.AuditOK}}, "examined", "released")
	})
}
