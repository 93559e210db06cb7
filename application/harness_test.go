package application_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// Consumer groups as the application sees them.
const (
	groupCreate     = "CG_SECKILL_ORDER_CREATE_PG_V1"
	groupTimeout    = "CG_SECKILL_ORDER_TIMEOUT_V1"
	groupCompensate = "CG_SECKILL_INVENTORY_COMPENSATE_V1"
	groupProjection = "CG_SECKILL_ORDER_QUERY_PROJECTION_V1"
)

var start = time.Date(2026, 6, 25, 17, 0, 0, 0, time.UTC)

// harness wires every use case over the in-memory adapters.
type harness struct {
	t       *testing.T
	clock   *memory.Clock
	store   *memory.Store
	redis   *memory.Redis
	broker  *memory.Broker
	fp      *memory.Failpoints
	metrics *memory.Metrics

	activities  *application.Activities
	gate        *application.BacklogGate
	queries     *application.Queries
	place       *application.PlaceOrder
	create      *application.CreateOrders
	life        *application.OrderLifecycle
	timeouts    *application.CancelExpiredOrders
	compensate  *application.CompensateReservations
	scanner     *application.ResendPending
	relay       *application.RelayOutbox
	admin       *application.Admin
	orders      *application.OrderService
	reconciler  *application.Reconciler
	deadLetters *application.DeadLetters
	projection  *application.ProjectOrderStates
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := &harness{t: t, clock: memory.NewClock(start), fp: memory.NewFailpoints(), metrics: memory.NewMetrics()}
	h.store = memory.NewStore(h.clock)
	h.redis = memory.NewRedis(memory.RedisConfig{Clock: h.clock, RateLimit: memory.RateLimit{Capacity: 100, RefillPerSecond: 100}})
	h.broker = memory.NewBroker(memory.BrokerConfig{Clock: h.clock})
	ids := memory.NewIDs()
	policy := application.CompensationPolicy{MaxAttempts: 5, Window: time.Hour}

	h.activities = application.NewActivities(h.store)
	h.gate = application.NewBacklogGate(h.redis, h.clock, h.metrics, log, 0.5, time.Second)
	h.queries = application.NewQueries(h.redis.OrderViews(), h.store, h.redis, h.redis)
	h.place = application.NewPlaceOrder(h.redis, h.redis, h.broker, h.activities, h.gate, h.queries,
		application.NewSentMarker(h.redis, log, 0), ids, h.clock,
		h.metrics, h.fp, log, application.PlaceOrderConfig{RequestClaimTTL: time.Hour, ScanGrace: time.Second})
	h.create = application.NewCreateOrders(h.store, h.redis, h.activities, h.fp, log, groupCreate, policy)
	h.life = application.NewOrderLifecycle(h.store, log, policy)
	h.timeouts = application.NewCancelExpiredOrders(h.life, h.store, h.metrics, log, groupTimeout)
	h.compensate = application.NewCompensateReservations(h.redis, h.store, h.clock, h.metrics, log, groupCompensate)
	h.scanner = application.NewResendPending(h.redis, h.broker, h.clock, h.metrics, log, "scanner-1",
		application.ResendConfig{Interval: time.Second, Batch: 100, Workers: 4, Lease: 5 * time.Second,
			BackoffBase: 200 * time.Millisecond, BackoffMax: 5 * time.Second})
	h.relay = application.NewRelayOutbox(h.store, h.broker, h.clock, h.fp, log,
		application.RelayConfig{Interval: time.Second, Batch: 500, Workers: 4, Retention: time.Hour,
			BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second})
	h.reconciler = application.NewReconciler(h.store, h.redis, h.activities, h.life, h.clock, h.metrics, log, policy,
		application.ReconcileConfig{Grace: time.Second, Batch: 100})
	h.deadLetters = application.NewDeadLetters(h.store, h.broker, h.redis, ids, h.metrics, log, application.DeadLetterConfig{
		ReplayCap: 3, CreateGroup: groupCreate, CompensateGroup: groupCompensate,
		Topics: map[string]ports.Topic{groupCreate: ports.TopicOrderCreate, groupTimeout: ports.TopicOrderTimeout,
			groupCompensate: ports.TopicInventoryCompensate, groupProjection: ports.TopicOrderStateFIFO}})
	h.projection = application.NewProjectOrderStates(h.redis.OrderViews(), h.store, h.redis, h.store, log, groupProjection)
	h.admin = application.NewAdmin(h.store, h.redis, h.activities, h.reconciler, h.deadLetters, log)
	h.orders = application.NewOrderService(h.place, h.queries, h.life)
	return h
}

// activity creates activity 1 / SKU 1 with stock units, open for a day.
func (h *harness) activity(id int64, stock int64, paymentTimeout, ttl time.Duration) ports.Activity {
	h.t.Helper()
	a, err := h.admin.CreateActivity(context.Background(), ports.UserActor(1), ports.Activity{
		ActivityID: id, SKUID: 1, Stock: stock, StartsAt: start.Add(-time.Minute), EndsAt: start.Add(24 * time.Hour),
		PaymentTimeout: paymentTimeout, ReservationTTL: ttl,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.measure()
	return a
}

// measure refreshes the backlog gate.
func (h *harness) measure() {
	h.t.Helper()
	if err := h.gate.Measure(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) placeOrder(user, activity int64, requestID string) (ports.PlaceOrderResult, error) {
	return h.orders.PlaceOrder(context.Background(), ports.PlaceOrderCommand{
		UserID: user, ActivityID: activity, SKUID: 1, RequestID: requestID})
}

// drain delivers every deliverable message of topic to h until none is
// left.
func (h *harness) drain(topic ports.Topic, group string, handler ports.BatchHandler, batch int) int {
	h.t.Helper()
	n, err := h.broker.Drain(context.Background(), topic, group, handler, batch)
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// settle runs relay and consumers until nothing moves.
func (h *harness) settle() {
	h.t.Helper()
	for i := 0; i < 20; i++ {
		moved := h.drain(ports.TopicOrderCreate, groupCreate, h.create, 32)
		n, err := h.relay.RelayOnce(context.Background())
		if err != nil {
			h.t.Fatal(err)
		}
		moved += n
		moved += h.drain(ports.TopicOrderTimeout, groupTimeout, h.timeouts, 16)
		moved += h.drain(ports.TopicInventoryCompensate, groupCompensate, h.compensate, 16)
		moved += h.drain(ports.TopicOrderStateFIFO, groupProjection, h.projection, 16)
		if moved == 0 {
			return
		}
	}
	h.t.Fatal("system did not settle")
}

// invariants checks I1-I6 on the state at rest for activity SKU (id, 1).
func (h *harness) invariants(activityID int64) {
	h.t.Helper()
	st := h.store.Snapshot()
	rs := h.redis.Snapshot()
	slot, ok := rs.Slots[memory.SKU{ActivityID: activityID, SKUID: 1}]
	if !ok {
		h.t.Fatalf("activity %d not seeded", activityID)
	}
	initial := slot.Activity.Stock
	live := 0
	perUser := map[int64]int{}
	for _, o := range st.Orders {
		if o.ActivityID != activityID || o.Status == order.StatusCanceled {
			continue
		}
		live++
		perUser[o.UserID]++
		if perUser[o.UserID] > 1 {
			h.t.Errorf("I2: user %d holds %d live orders", o.UserID, perUser[o.UserID])
		}
	}
	if int64(live) > initial {
		h.t.Errorf("I1: %d live orders > stock %d", live, initial)
	}
	if slot.Stock < 0 {
		h.t.Errorf("I1: Redis stock %d < 0", slot.Stock)
	}
	created := map[string]int{}
	for _, l := range st.Ledger {
		if l.Entry.Reason == ports.LedgerOrderCreated {
			created[l.Entry.MessageID]++
			if created[l.Entry.MessageID] > 1 {
				h.t.Errorf("I3: message %s has %d ledger effects", l.Entry.MessageID, created[l.Entry.MessageID])
			}
		}
	}
	for _, o := range st.Orders {
		events := st.Events[o.OrderID]
		paid := false
		for _, e := range events {
			if e.Type == order.EventPaid {
				paid = true
			}
			if e.Type == order.EventCanceled && paid {
				h.t.Errorf("I5: order %s canceled after payment", o.OrderID)
			}
		}
	}
	pending := 0
	for _, r := range slot.Reservations {
		if r.Snapshot.Status == reservation.StatusPending || r.Snapshot.Status == reservation.StatusSent {
			pending++
		}
	}
	if got := slot.Stock + int64(pending) + int64(live); got != initial {
		h.t.Errorf("I6: available %d + pending %d + live orders %d = %d, want %d",
			slot.Stock, pending, live, got, initial)
	}
	if final := st.Stock[memory.SKU{ActivityID: activityID, SKUID: 1}]; final+int64(live) != initial {
		h.t.Errorf("PostgreSQL books: final stock %d + live orders %d != %d", final, live, initial)
	}
}

func (h *harness) orderOf(orderID string) order.Snapshot {
	h.t.Helper()
	for _, o := range h.store.Snapshot().Orders {
		if o.OrderID == orderID {
			return o
		}
	}
	h.t.Fatalf("order %s not found", orderID)
	return order.Snapshot{}
}

func (h *harness) reservationOf(activityID int64, reservationID string) reservation.Snapshot {
	h.t.Helper()
	for _, r := range h.redis.Snapshot().Slots[memory.SKU{ActivityID: activityID, SKUID: 1}].Reservations {
		if r.Snapshot.ReservationID == reservationID {
			return r.Snapshot
		}
	}
	h.t.Fatalf("reservation %s not found", reservationID)
	return reservation.Snapshot{}
}

func req(i int) string { return fmt.Sprintf("req-%d", i) }
