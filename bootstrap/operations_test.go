package bootstrap_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

func (s *system) deadLetters(group string) []*seckillv1.DeadLetter {
	s.t.Helper()
	res, err := s.admin.ListDeadLetters(context.Background(), authed(&seckillv1.ListDeadLettersRequest{ConsumerGroup: group}, s.token(1, true)))
	if err != nil {
		s.t.Fatal(err)
	}
	return res.Msg.GetDeadLetters()
}

func (s *system) replay(id int64, reason string) (*seckillv1.ReplayDeadLetterResponse, error) {
	res, err := s.admin.ReplayDeadLetter(context.Background(), authed(&seckillv1.ReplayDeadLetterRequest{
		DeadLetterId: id, Reason: reason}, s.token(1, true)))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// TestPoisonDeadLetterReplayAfterFix: a message for an activity that does
// not exist yet is a poison message: it lands in the dead-letter table
// after one attempt with its class. A user token can neither list nor
// replay. After the fix (the activity is created), a replay running
// together with a normal redelivery of the same message creates the order
// once; a second replay has no effect; every replay is audited.
func TestPoisonDeadLetterReplayAfterFix(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		m := createMsg(t, "poison", 30, 5, 10*time.Minute)
		s.publishCreate(m)
		var dl *seckillv1.DeadLetter
		s.eventually(30*time.Second, "the poison message is a dead letter", func() bool {
			for _, d := range s.deadLetters("") {
				if d.GetMessageId() == m.MessageID {
					dl = d
					return true
				}
			}
			return false
		})
		if dl.GetErrorClass() != "UNKNOWN_ACTIVITY" || dl.GetAttempts() != 1 || dl.GetStatus() != "OPEN" {
			t.Fatalf("dead letter %v", dl)
		}
		userTok := s.token(5, false)
		if _, err := s.admin.ListDeadLetters(context.Background(), authed(&seckillv1.ListDeadLettersRequest{}, userTok)); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("user lists dead letters: %v", err)
		}
		if _, err := s.admin.ReplayDeadLetter(context.Background(), authed(&seckillv1.ReplayDeadLetterRequest{DeadLetterId: dl.GetDeadLetterId(), Reason: "x"}, userTok)); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("user replays: %v", err)
		}
		// Before the fix the pre-check refuses the replay (audited).
		if _, err := s.replay(dl.GetDeadLetterId(), "too early"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("replay before the fix: %v", err)
		}
		// The fix.
		s.activity(30, 10, time.Minute, 10*time.Minute)
		var wg sync.WaitGroup
		var res *seckillv1.ReplayDeadLetterResponse
		var rerr error
		wg.Add(2)
		go func() { defer wg.Done(); res, rerr = s.replay(dl.GetDeadLetterId(), "activity created") }()
		go func() { defer wg.Done(); s.publishCreate(m) }() // the normal redelivery
		wg.Wait()
		if rerr != nil {
			t.Fatalf("replay after the fix: %v", rerr)
		}
		s.eventually(30*time.Second, "the order exists", func() bool {
			return s.count(`SELECT count(*) FROM orders WHERE reservation_id = $1`, m.ReservationID) == 1
		})
		time.Sleep(2 * time.Second) // let the other copy be consumed too
		second, err := s.replay(dl.GetDeadLetterId(), "again")
		if err != nil {
			t.Fatalf("second replay: %v", err)
		}
		if second.GetOutcome() != "SKIPPED_ALREADY_APPLIED" {
			t.Fatalf("second replay outcome %s", second.GetOutcome())
		}
		if n := s.count(`SELECT count(*) FROM orders WHERE reservation_id = $1`, m.ReservationID); n != 1 {
			t.Fatalf("orders %d", n)
		}
		if n := s.count(`SELECT count(*) FROM inventory_ledger WHERE reservation_id = $1`, m.ReservationID); n != 1 {
			t.Fatalf("ledger rows %d", n)
		}
		if n := s.count(`SELECT count(*) FROM admin_audit WHERE action = 'DLQ_REPLAY' AND target = $1 AND actor = 'user:1'`,
			ports.DeadLetterTarget(dl.GetDeadLetterId())); n != 3 {
			t.Fatalf("audit rows %d, want 3 (refused, replayed or skipped, skipped)", n)
		}
		t.Logf("first replay outcome %s, second %s", res.GetOutcome(), second.GetOutcome())
	})
}

// TestExhaustedRetriesReachTheDeadLetterTable: a message whose handler
// never acknowledges (the consumer dies after every commit) exhausts the
// group's retries, is moved by the broker to %DLQ%<group>, and is stored
// by the dead-letter reader. Replaying it is a no-op because the inbox
// shows the work committed.
func TestExhaustedRetriesReachTheDeadLetterTable(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker, configure: func(c *config.Config) { c.Failpoints = "consumer.after_commit=error" }})
		s.activity(31, 10, time.Minute, 10*time.Minute)
		m := createMsg(t, "exhaust", 31, 6, 10*time.Minute)
		s.publishCreate(m)
		var dl *seckillv1.DeadLetter
		s.eventually(150*time.Second, "the broker dead-letters the message", func() bool {
			for _, d := range s.deadLetters(s.app.Broker.Group(ports.GroupOrderCreate)) {
				if d.GetMessageId() == m.MessageID {
					dl = d
					return true
				}
			}
			return false
		})
		s.app.Failpoints.Clear(ports.FailConsumerAfterCommit)
		if dl.GetErrorClass() != "RETRIES_EXHAUSTED" || dl.GetAttempts() < 2 {
			t.Fatalf("dead letter %v", dl)
		}
		res, err := s.replay(dl.GetDeadLetterId(), "committed work")
		if err != nil || res.GetOutcome() != "SKIPPED_ALREADY_APPLIED" {
			t.Fatalf("replay of committed work: %v %v", res, err)
		}
		if n := s.count(`SELECT count(*) FROM orders WHERE reservation_id = $1`, m.ReservationID); n != 1 {
			t.Fatalf("orders %d", n)
		}
	})
}

// TestReconcileRepairsACrashBetweenReserveAndSend: the process dies after
// reserving and the scanner never runs; once the reservation's validity
// has passed, reconciliation decides it REJECTED and releases it once,
// and I6 holds again. The note reports the time from fault to repair.
func TestReconcileRepairsACrashBetweenReserveAndSend(t *testing.T) {
	s := startSystem(t, options{configure: func(c *config.Config) {
		c.Failpoints = "placeorder.after_reserve=error"
		c.Workers.ScannerInterval = time.Hour // the scanner would otherwise send it
		c.Workers.ReconcileGrace = time.Second
	}})
	s.app.Workers = without(s.app.Workers, "scanner")
	s.activity(32, 4, time.Minute, 2*time.Second)
	fault := time.Now()
	if _, err := s.place(context.Background(), 8, 32, "lost"); err == nil {
		t.Fatal("the crashed request must fail")
	}
	if rep := s.report(32); rep.GetPendingReservations() != 1 || rep.GetRedisAvailable() != 3 {
		t.Fatalf("after the crash: %v", rep)
	}
	var rep struct{ rejected int }
	s.eventually(30*time.Second, "reconciliation repairs the reservation", func() bool {
		r, err := s.app.Reconciler.Reconcile(context.Background(), ports.ActorReconciler)
		if err != nil {
			t.Fatal(err)
		}
		rep.rejected += r.RejectedExpired
		return rep.rejected == 1
	})
	t.Logf("reconcile decided after %s", time.Since(fault).Round(10*time.Millisecond))
	report := s.settled(32, 30*time.Second)
	t.Logf("fault to repaired I6: %s (reservation validity 2s + grace 1s)", time.Since(fault).Round(10*time.Millisecond))
	if report.GetRedisAvailable() != 4 || report.GetDrift() != 0 {
		t.Fatalf("after reconcile: %v", report)
	}
	// Another pass finds nothing more to do.
	again, err := s.app.Reconciler.Reconcile(context.Background(), ports.ActorReconciler)
	if err != nil || again.RejectedExpired != 0 || again.Released != 0 {
		t.Fatalf("second pass: %+v %v", again, err)
	}
}

// TestProjectionOutOfOrderVersions: state changes of one order arrive out
// of order (newest first, then older ones, then a gap); the view ends at
// the highest version and never moves back.
func TestProjectionOutOfOrderVersions(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		s.activity(33, 5, time.Minute, time.Minute)
		id := s.buy(4, 33, "proj")
		if _, err := s.orders.PayOrder(context.Background(), authed(&seckillv1.PayOrderRequest{OrderId: id, PaymentId: "p"}, s.paymentToken())); err != nil {
			t.Fatal(err)
		}
		s.eventually(30*time.Second, "the view shows PAID", func() bool {
			o, err := s.getOrder(4, id)
			return err == nil && o.GetStatus() == seckillv1.OrderStatus_ORDER_STATUS_PAID && o.GetAggregateVersion() == 3
		})
		// Inject stale and duplicated versions: 1 (CREATED) and 3 again.
		var rsv string
		if err := s.db.QueryRow(context.Background(), `SELECT reservation_id FROM orders WHERE order_id = $1`, id).Scan(&rsv); err != nil {
			t.Fatal(err)
		}
		for _, v := range []struct {
			version, prev int64
			status        string
		}{{1, 0, "CREATED"}, {3, 1, "PAID"}, {2, 1, "CREATED"}} {
			m := message.OrderStateChanged{Envelope: message.Envelope{SchemaVersion: 1, EventType: message.TypeOrderStateChanged,
				MessageID: "evt_inject_" + v.status, MessageKey: id, CreatedAt: time.Now()},
				OrderState: message.OrderState{OrderID: id, ReservationID: rsv, ActivityID: 33, SKUID: 1, UserID: 4,
					Status: v.status, AggregateVersion: v.version, PreviousVersion: v.prev, CreatedAt: time.Now()}}
			body, err := m.Encode()
			if err != nil {
				t.Fatal(err)
			}
			msg := ports.OutboundMessage{Topic: ports.TopicOrderStateFIFO, MessageID: m.MessageID, Tag: message.TagOrderStateChanged,
				Keys: []string{id}, MessageGroup: id, Body: body}
			if _, err := s.app.Broker.Publish(context.Background(), msg); err != nil {
				t.Fatal(err)
			}
		}
		s.eventually(30*time.Second, "the projection handled the three injected states", func() bool {
			return s.metric("mq_consume_total", "ORDER_STATE_FIFO", `result="stale"`) >= 3
		})
		o, err := s.getOrder(4, id)
		if err != nil || o.GetStatus() != seckillv1.OrderStatus_ORDER_STATUS_PAID || o.GetAggregateVersion() != 3 {
			t.Fatalf("view after stale versions: %v %v", o, err)
		}
		// A view that lost its state (Redis flushed) is rebuilt from the
		// event store.
		if err := s.redis.Del(context.Background(), s.ns+":view:{"+id+"}").Err(); err != nil {
			t.Fatal(err)
		}
		n, err := s.app.Projection.Rebuild(context.Background())
		if err != nil || n < 1 {
			t.Fatalf("rebuild: %d %v", n, err)
		}
		if exists, err := s.redis.Exists(context.Background(), s.ns+":view:{"+id+"}").Result(); err != nil || exists != 1 {
			t.Fatalf("the rebuild did not restore the view: %d %v", exists, err)
		}
		o, err = s.getOrder(4, id)
		if err != nil || o.GetStatus() != seckillv1.OrderStatus_ORDER_STATUS_PAID || o.GetAggregateVersion() != 3 {
			t.Fatalf("view after rebuild: %v %v", o, err)
		}
	})
}
