package bootstrap_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// createMsg builds an OrderCreateRequested as PlaceOrder would, for
// driving the consumer directly through the broker.
func createMsg(t *testing.T, id string, activity, user int64, validFor time.Duration) message.OrderCreateRequested {
	t.Helper()
	now := time.Now().UTC()
	return message.OrderCreateRequested{
		Envelope: message.Envelope{SchemaVersion: 1, EventType: message.TypeOrderCreateRequested,
			MessageID: "evt_" + id, MessageKey: "rsv_" + id, CreatedAt: now, Producer: "test"},
		RequestID: "req_" + id, ReservationID: "rsv_" + id, OrderID: "ord_" + id,
		ActivityID: activity, SKUID: 1, UserID: user, Quantity: 1,
		ReservationCreatedAt: now.Add(-time.Minute), ReservationValidUntil: now.Add(validFor),
	}
}

// publish sends a message body to the order-create topic.
func (s *system) publishCreate(m message.OrderCreateRequested) {
	s.t.Helper()
	body, err := m.Encode()
	if err != nil {
		s.t.Fatal(err)
	}
	s.publishRaw(ports.TopicOrderCreate, m.MessageID, body)
}

func (s *system) publishRaw(topic ports.Topic, messageID string, body []byte) {
	s.t.Helper()
	msg := ports.OutboundMessage{Topic: topic, MessageID: messageID, Tag: message.TagCreateOrder,
		Keys: []string{messageID}, Body: body, Properties: map[string]string{message.PropMessageID: messageID}}
	if topic == ports.TopicOrderTimeout && s.app.Broker.Features().DelayedDelivery {
		// A DELAY topic takes only delayed messages; a past time is due
		// at once. A broker without delay takes the message as it is,
		// as the relay publishes a held row once due.
		msg.DeliverAt = time.Now()
	}
	// An unknown outcome (the send bound passed on a loaded machine) is
	// sent again with the same message id, as the scanner does: the
	// consumers' inbox and the dead-letter table fold the copies.
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if _, err = s.app.Broker.Publish(context.Background(), msg); !errors.Is(err, ports.ErrSendUnknown) {
			break
		}
	}
	if err != nil {
		s.t.Fatalf("publish %s: %v", messageID, err)
	}
}

// TestConsumerExactlyOnceEffects covers spec 29.2 cases 1-3 and the
// business rejections, through the real broker and PostgreSQL.
func TestConsumerExactlyOnceEffects(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		const activity = 10
		s.activity(activity, 100, time.Minute, time.Minute)
		ctx := context.Background()

		// Case 1: the same message 100 times concurrently -> one order, one
		// ledger row.
		same := createMsg(t, "same", activity, 1, time.Minute)
		concurrently(100, 16, func(int) { s.publishCreate(same) })
		// Case 2: different message ids, same reservation -> one order.
		for i := 0; i < 5; i++ {
			m := createMsg(t, "rsv2", activity, 2, time.Minute)
			m.MessageID = fmt.Sprintf("evt_rsv2_%d", i)
			s.publishCreate(m)
		}
		// Case 3: the same user with different reservations -> one valid order.
		for i := 0; i < 5; i++ {
			s.publishCreate(createMsg(t, fmt.Sprintf("user3_%d", i), activity, 3, time.Minute))
		}
		// An expired reservation -> rejected with one compensation.
		s.publishCreate(createMsg(t, "expired", activity, 4, -time.Second))

		s.eventually(60*time.Second, "every message is processed", func() bool {
			return s.count(`SELECT count(*) FROM consumer_inbox WHERE status <> 'PROCESSING' AND consumer_group LIKE '%ORDER_CREATE_PG_V1'`) >= 1+5+5+1
		})
		s.eventually(30*time.Second, "the outbox drains", func() bool {
			return s.unpublishedOwed() == 0
		})
		if n := s.count(`SELECT count(*) FROM orders WHERE reservation_id = 'rsv_same'`); n != 1 {
			t.Fatalf("case 1: %d orders", n)
		}
		if n := s.count(`SELECT count(*) FROM inventory_ledger WHERE message_id = 'evt_same'`); n != 1 {
			t.Fatalf("case 1: %d ledger rows", n)
		}
		if n := s.count(`SELECT count(*) FROM orders WHERE reservation_id = 'rsv_rsv2'`); n != 1 {
			t.Fatalf("case 2: %d orders", n)
		}
		if n := s.count(`SELECT count(*) FROM orders WHERE user_id = 3 AND status <> 'CANCELED'`); n != 1 {
			t.Fatalf("case 3: %d valid orders", n)
		}
		if n := s.count(`SELECT count(*) FROM order_rejections WHERE user_id = 3 AND reason = 'DUPLICATE_VALID_ORDER'`); n != 4 {
			t.Fatalf("case 3: %d rejections", n)
		}
		if n := s.count(`SELECT count(*) FROM order_rejections WHERE reservation_id = 'rsv_expired' AND reason = 'RESERVATION_EXPIRED'`); n != 1 {
			t.Fatalf("expired: %d rejections", n)
		}
		if n := s.count(`SELECT count(*) FROM event_outbox WHERE message_id = 'evt_rsv_expired_release_1'`); n != 1 {
			t.Fatalf("expired: %d compensation rows", n)
		}
		// No final stock -> rejected.
		if _, err := s.db.Exec(ctx, `UPDATE sku_stock SET available = 0 WHERE activity_id = $1`, activity); err != nil {
			t.Fatal(err)
		}
		s.publishCreate(createMsg(t, "nostock", activity, 5, time.Minute))
		s.eventually(30*time.Second, "the no-stock message is rejected", func() bool {
			return s.count(`SELECT count(*) FROM order_rejections WHERE reservation_id = 'rsv_nostock' AND reason = 'NO_FINAL_STOCK'`) == 1
		})
		if n := s.count(`SELECT count(*) FROM orders WHERE reservation_id = 'rsv_nostock'`); n != 0 {
			t.Fatal("an order was created without final stock")
		}
	})
}

// TestPoisonMessagesAreQuarantinedAfterOneAttempt: malformed JSON and an
// unsupported schema are isolated after one attempt, acknowledged, and
// listed as dead letters with their class.
func TestPoisonMessagesAreQuarantinedAfterOneAttempt(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		s.publishRaw(ports.TopicOrderCreate, "evt_poison_json", []byte(`{"schema_version": 1, "event_type": `))
		s.publishRaw(ports.TopicOrderCreate, "evt_poison_schema",
			[]byte(`{"schema_version": 7, "event_type": "ORDER_CREATE_REQUESTED", "message_id": "evt_poison_schema"}`))
		s.eventually(30*time.Second, "both are quarantined", func() bool {
			return s.count(`SELECT count(*) FROM message_quarantine`) == 2
		})
		for class, n := range map[string]int64{"INVALID_JSON": 1, "UNSUPPORTED_SCHEMA": 1} {
			if got := s.count(`SELECT count(*) FROM message_quarantine WHERE error_class = $1 AND delivery_attempt = 1`, class); got != n {
				t.Fatalf("%s quarantined after one attempt: %d", class, got)
			}
			if got := s.count(`SELECT count(*) FROM dead_letters WHERE error_class = $1 AND status = 'OPEN'`, class); got != n {
				t.Fatalf("%s dead letters: %d", class, got)
			}
		}
		// Acknowledged: nothing is redelivered (a redelivery would be handled,
		// and counted, again; the quarantine keeps one row per message).
		time.Sleep(2 * invisibleDuration)
		if n := s.metric("mq_consume_total", "ORDER_CREATE", `result="quarantined"`); n != 2 {
			t.Fatalf("poison messages handled %v times, want 2 (no redelivery)", n)
		}
	})
}

// TestTerminatedBackendIsRetried: the PostgreSQL backend of the consumer
// is terminated inside the order transaction; the message is not
// acknowledged, is redelivered, and takes effect once.
func TestTerminatedBackendIsRetried(t *testing.T) {
	s := startSystem(t, options{configure: func(c *config.Config) { c.Failpoints = "consumer.in_tx=delay(3s)" }})
	s.activity(11, 10, time.Minute, time.Minute)
	s.publishCreate(createMsg(t, "killed", 11, 1, time.Minute))
	ctx := context.Background()
	var killed int64
	s.eventually(30*time.Second, "the consumer's transaction is open", func() bool {
		// Only the consumer's transaction writes both the inbox and orders:
		// the relay and the other workers also open short transactions that
		// must not be hit, and the event sequencer's reads orders (an
		// AccessShareLock on it).
		killed = s.count(`SELECT count(*) FROM (SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a
			WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.state = 'idle in transaction'
			AND a.pid IN (SELECT l.pid FROM pg_locks l WHERE l.relation = 'orders'::regclass AND l.mode = 'RowExclusiveLock')
			AND a.pid IN (SELECT l.pid FROM pg_locks l WHERE l.relation = 'consumer_inbox'::regclass AND l.mode = 'RowExclusiveLock')) k`)
		return killed > 0
	})
	s.app.Failpoints.Clear(ports.FailConsumerInTx)
	s.eventually(60*time.Second, "the redelivered message creates the order", func() bool {
		return s.count(`SELECT count(*) FROM orders WHERE reservation_id = 'rsv_killed'`) == 1
	})
	// The killed transaction cannot have committed: its delivery was
	// decided "transient" (not acknowledged) and a later delivery created
	// the order. The delivery count the broker reports is only logged:
	// RocketMQ has been seen to hand a message rescheduled by
	// ChangeInvisibleDuration back with its count unchanged.
	if n := s.metric("mq_consume_total", "ORDER_CREATE", `result="transient"`); n < 1 {
		t.Fatalf("%v transient decisions on order-create: the terminated transaction was not retried", n)
	}
	if n := s.metric("mq_consume_total", "ORDER_CREATE", `result="created"`); n != 1 {
		t.Fatalf("%v created decisions on order-create, want 1", n)
	}
	var attempt int64
	if err := s.db.QueryRow(ctx, `SELECT delivery_attempt FROM consumer_inbox WHERE message_id = 'evt_killed'`).Scan(&attempt); err != nil {
		t.Fatal(err)
	}
	t.Logf("the order was created on delivery %d (as the broker counts)", attempt)
	if n := s.count(`SELECT count(*) FROM inventory_ledger WHERE reservation_id = 'rsv_killed'`); n != 1 {
		t.Fatalf("ledger rows %d", n)
	}
}

// TestConsumerLoad: a few thousand messages with duplicates for one hot
// SKU; I1-I3 hold on the final state.
func TestConsumerLoad(t *testing.T) {
	s := startSystem(t, options{})
	const activity, stock, users = 12, 1500, 2000
	s.activity(activity, stock, time.Minute, 5*time.Minute)
	// 2,000 users, each message sent twice: 4,000 messages for 1,500 units.
	concurrently(users*2, 32, func(i int) {
		u := i / 2
		s.publishCreate(createMsg(t, fmt.Sprintf("load_%d", u), activity, int64(100+u), 5*time.Minute))
	})
	s.eventually(120*time.Second, "every reservation is decided", func() bool {
		return s.count(`SELECT count(*) FROM reservation_outcomes WHERE status <> 'PROCESSING'`) == users
	})
	orders := s.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, activity)
	rejected := s.count(`SELECT count(*) FROM order_rejections WHERE activity_id = $1 AND reason = 'NO_FINAL_STOCK'`, activity)
	if orders != stock || rejected != users-stock {
		t.Fatalf("orders %d (want %d), no-stock rejections %d (want %d)", orders, stock, rejected, users-stock)
	}
	if n := s.count(`SELECT sum(available) FROM sku_stock WHERE activity_id = $1`, activity); n != 0 {
		t.Fatalf("final stock %d", n)
	}
	if n := s.count(`SELECT count(*) FROM (SELECT message_id FROM inventory_ledger GROUP BY message_id HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("I3: %d doubled effects", n)
	}
	if n := s.count(`SELECT count(*) FROM (SELECT user_id FROM orders WHERE status <> 'CANCELED' GROUP BY user_id HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("I2: %d users with two orders", n)
	}
	t.Logf("4,000 deliveries of 2,000 messages: orders %d, no-stock rejections %d", orders, rejected)
}
