package scenarios_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/adapters/testkit/redismem"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// Consumer groups as the application sees them (no environment prefix).
const (
	groupCreate     = string(ports.GroupOrderCreate)
	groupTimeout    = string(ports.GroupOrderTimeout)
	groupCompensate = string(ports.GroupInventoryCompensate)
	groupProjection = string(ports.GroupOrderProjection)
)

var start = time.Date(2026, 6, 25, 17, 0, 0, 0, time.UTC)

// harness wires every use case over the PostgreSQL adapter, on a clone
// of the migrated schema of its own, the Redis adapter on an in-process
// miniredis of its own (adapters/testkit/redismem) and the in-memory
// doubles of the broker, the clock, the ids, the failpoints and the
// metrics.
type harness struct {
	t       *testing.T
	clock   *memory.Clock
	pg      *postgres.Store
	store   *faultyStore // pg with the faults a test injects
	db      *pgxpool.Pool
	redis   *redismem.Redis
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

// newHarness marks t parallel (every harness has a database of its own)
// and wires the use cases.
func newHarness(t *testing.T) *harness {
	t.Helper()
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := &harness{t: t, clock: memory.NewClock(start), fp: memory.NewFailpoints(), metrics: memory.NewMetrics()}
	dsn := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pg, err := postgres.Open(ctx, postgres.Config{DSN: dsn, MaxConns: 8, Clock: h.clock},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open the PostgreSQL store: %v", err)
	}
	t.Cleanup(pg.Close)
	h.pg, h.store, h.db = pg, &faultyStore{UnitOfWork: pg}, pgtest.Pool(t, dsn)
	h.redis = redismem.New(t, h.clock, redis.Config{RateLimit: redis.RateLimit{Capacity: 100, RefillPerSecond: 100}})
	h.broker = memory.NewBroker(memory.BrokerConfig{Clock: h.clock})
	ids := memory.NewIDs()
	policy := application.CompensationPolicy{MaxAttempts: 5, Window: time.Hour}

	h.activities = application.NewActivities(h.store)
	h.gate = application.NewBacklogGate(h.redis, h.clock, h.metrics, log, 0.5, time.Second)
	h.queries = application.NewQueries(h.redis.OrderViews(), h.pg, h.redis, h.redis)
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
	h.projection = application.NewProjectOrderStates(h.redis.OrderViews(), h.pg, h.redis, h.store, log, groupProjection)
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
		n, err := h.relayOnce()
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

// relayOnce runs one relay pass once every committed outbox row can be
// claimed. The relay's fence (rows only of transactions older than every
// one in flight) is global to the PostgreSQL instance, which other tests
// share, so a pass could otherwise find nothing for a moment.
func (h *harness) relayOnce() (int, error) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for h.count(`SELECT count(*) FROM event_outbox
		WHERE published_at IS NULL AND txid >= pg_snapshot_xmin(pg_current_snapshot())`) > 0 {
		if time.Now().After(deadline) {
			h.t.Fatal("the outbox fence did not pass: a transaction elsewhere in the instance stays open")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return h.relay.RelayOnce(context.Background())
}

// invariants checks I1-I6 on the state at rest for activity SKU (id, 1),
// reading the clone's orders, ledger, events and final stock and the
// Redis snapshot.
func (h *harness) invariants(activityID int64) {
	h.t.Helper()
	rs := h.redis.Snapshot()
	slot, ok := rs.Slots[redismem.SKU{ActivityID: activityID, SKUID: 1}]
	if !ok {
		h.t.Fatalf("activity %d not seeded", activityID)
	}
	initial := slot.Activity.Stock
	live := 0
	perUser := map[int64]int{}
	orders := h.allOrders()
	for _, o := range orders {
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
	for _, l := range h.ledger() {
		if l.Reason == ports.LedgerOrderCreated {
			created[l.MessageID]++
			if created[l.MessageID] > 1 {
				h.t.Errorf("I3: message %s has %d ledger effects", l.MessageID, created[l.MessageID])
			}
		}
	}
	events := h.eventTypes()
	for _, o := range orders {
		paid := false
		for _, e := range events[o.OrderID] {
			if e == order.EventPaid {
				paid = true
			}
			if e == order.EventCanceled && paid {
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
	final := h.count(`SELECT coalesce(sum(available), 0) FROM sku_stock WHERE activity_id = $1 AND sku_id = 1`, activityID)
	if final+int64(live) != initial {
		h.t.Errorf("PostgreSQL books: final stock %d + live orders %d != %d", final, live, initial)
	}
}

// ctx returns a context that bounds one query, so that a hang fails the
// test instead of the whole run.
func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h.t.Cleanup(cancel)
	return ctx
}

// count runs a query returning one number on the clone.
func (h *harness) count(sql string, args ...any) int64 {
	h.t.Helper()
	var n int64
	if err := h.db.QueryRow(h.ctx(), sql, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// strings runs a query returning one text column on the clone.
func (h *harness) strings(sql string, args ...any) []string {
	h.t.Helper()
	rows, err := h.db.Query(h.ctx(), sql, args...)
	if err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// orderCount is the number of orders stored.
func (h *harness) orderCount() int {
	h.t.Helper()
	return int(h.count(`SELECT count(*) FROM orders`))
}

// allOrders returns every order's projection row, by order id.
func (h *harness) allOrders() []order.Snapshot {
	h.t.Helper()
	rows, err := h.db.Query(h.ctx(), `
		SELECT order_id, reservation_id, activity_id, sku_id, user_id, quantity, status,
		       coalesce(cancel_reason, ''), coalesce(payment_id, ''), aggregate_version,
		       created_at, updated_at, expires_at, paid_at, canceled_at
		FROM orders ORDER BY order_id`)
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (order.Snapshot, error) {
		var (
			o              order.Snapshot
			paid, canceled pgtype.Timestamptz
		)
		err := r.Scan(&o.OrderID, &o.ReservationID, &o.ActivityID, &o.SKUID, &o.UserID, &o.Quantity, &o.Status,
			&o.CancelReason, &o.PaymentID, &o.Version, &o.CreatedAt, &o.UpdatedAt, &o.ExpiresAt, &paid, &canceled)
		o.CreatedAt, o.UpdatedAt, o.ExpiresAt = o.CreatedAt.UTC(), o.UpdatedAt.UTC(), o.ExpiresAt.UTC()
		if paid.Valid {
			o.PaidAt = paid.Time.UTC()
		}
		if canceled.Valid {
			o.CanceledAt = canceled.Time.UTC()
		}
		return o, err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// ledger returns the inventory ledger, oldest entry first.
func (h *harness) ledger() []ports.LedgerEntry {
	h.t.Helper()
	rows, err := h.db.Query(h.ctx(), `
		SELECT activity_id, sku_id, delta, reason, order_id, reservation_id, coalesce(message_id, '')
		FROM inventory_ledger ORDER BY id`)
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ports.LedgerEntry, error) {
		var l ports.LedgerEntry
		err := r.Scan(&l.ActivityID, &l.SKUID, &l.Delta, &l.Reason, &l.OrderID, &l.ReservationID, &l.MessageID)
		return l, err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// eventTypes returns every order's event types, oldest first, by order id.
func (h *harness) eventTypes() map[string][]order.EventType {
	h.t.Helper()
	rows, err := h.db.Query(h.ctx(), `
		SELECT aggregate_id, event_type FROM order_events ORDER BY aggregate_id, aggregate_version`)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string][]order.EventType{}
	var id, typ string
	if _, err := pgx.ForEachRow(rows, []any{&id, &typ}, func() error {
		out[id] = append(out[id], order.EventType(typ))
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// activityRows returns the stored activities as the store's
// ListActivities reads them.
func (h *harness) activityRows() []ports.Activity {
	h.t.Helper()
	var acts []ports.Activity
	if err := h.pg.InTx(h.ctx(), func(ctx context.Context, tx ports.Tx) error {
		var err error
		acts, err = tx.ListActivities(ctx)
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	return acts
}

func (h *harness) orderOf(orderID string) order.Snapshot {
	h.t.Helper()
	for _, o := range h.allOrders() {
		if o.OrderID == orderID {
			return o
		}
	}
	h.t.Fatalf("order %s not found", orderID)
	return order.Snapshot{}
}

func (h *harness) reservationOf(activityID int64, reservationID string) reservation.Snapshot {
	h.t.Helper()
	for _, r := range h.redis.Snapshot().Slots[redismem.SKU{ActivityID: activityID, SKUID: 1}].Reservations {
		if r.Snapshot.ReservationID == reservationID {
			return r.Snapshot
		}
	}
	h.t.Fatalf("reservation %s not found", reservationID)
	return reservation.Snapshot{}
}

func req(i int) string { return fmt.Sprintf("req-%d", i) }
