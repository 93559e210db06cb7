package projector_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckill-dev/seckill/adapters/projector"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// fakeSource is an in-memory Source over a growing slice of events. Each
// subscription sends the events after its start, then a live checkpoint
// at the head (as the service does once it reaches the head), then waits
// for appended events (each followed by a live checkpoint) until its
// context ends.
type fakeSource struct {
	mu      sync.Mutex
	events  []*seckillv1.OrderEvent // positions strictly increasing
	changed chan struct{}           // closed and replaced by append
	froms   []int64                 // the from of each subscription
	// failAfter, when > 0, fails each of the first failSubs
	// subscriptions after it sent failAfter items.
	failAfter, failSubs int
	// redeliver, when > 0, starts every subscription after the first
	// redeliver positions below its from (duplicates after a reconnect).
	redeliver int64
}

func newFakeSource(events ...*seckillv1.OrderEvent) *fakeSource {
	return &fakeSource{events: events, changed: make(chan struct{})}
}

// append adds events after the head and wakes the subscriptions.
func (s *fakeSource) append(events ...*seckillv1.OrderEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, events...)
	close(s.changed)
	s.changed = make(chan struct{})
}

// subscriptions returns the from of each subscription so far.
func (s *fakeSource) subscriptions() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.froms...)
}

func (s *fakeSource) Stream(ctx context.Context, from int64, fn func(context.Context, projector.Item) error) error {
	s.mu.Lock()
	n := len(s.froms)
	s.froms = append(s.froms, from)
	failing := s.failAfter > 0 && n < s.failSubs
	if n > 0 && s.redeliver > 0 {
		from = max(0, from-s.redeliver)
	}
	s.mu.Unlock()
	sent := 0
	send := func(it projector.Item) error {
		if failing && sent >= s.failAfter {
			return errors.New("fake stream cut")
		}
		sent++
		return fn(ctx, it)
	}
	next := 0
	for range 100000 {
		s.mu.Lock()
		events, changed := s.events, s.changed
		s.mu.Unlock()
		for ; next < len(events); next++ {
			if e := events[next]; e.GetPosition() > from {
				if err := send(projector.Item{Event: e, Position: e.GetPosition()}); err != nil {
					return err
				}
			}
		}
		head := int64(0)
		if len(events) > 0 {
			head = events[len(events)-1].GetPosition()
		}
		if err := send(projector.Item{Position: max(head, from), Live: true}); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
	return errors.New("fake source: too many rounds")
}

// ev is an event of order at its version and position.
func ev(pos int64, orderID string, version int64) *seckillv1.OrderEvent {
	return &seckillv1.OrderEvent{Position: pos, EventId: fmt.Sprintf("%s:%d", orderID, version), OrderId: orderID,
		AggregateVersion: version, EventType: "ORDER_CREATED", SchemaVersion: 2}
}

// events returns n events of orders round robin, from position first.
func events(first int64, n int, orders ...string) []*seckillv1.OrderEvent {
	out := make([]*seckillv1.OrderEvent, 0, n)
	for i := range n {
		out = append(out, ev(first+int64(i), orders[i%len(orders)], int64(i/len(orders)+1)))
	}
	return out
}

// counter is a test Handler: it records each application of an event in
// the view's "applied" table (no unique key, so a doubled effect shows)
// and counts per order in "counts". Its failures are set per event id.
type counter struct {
	mu        sync.Mutex
	transient map[string]int  // event id -> failures left
	permanent map[string]bool // event id -> fails with ErrPermanent
	calls     map[string]int  // event id -> Apply calls
	after     []string        // "v<version>:<event id>" of each AfterCommit
	setups    []projector.View
}

func newCounter() *counter {
	return &counter{transient: map[string]int{}, permanent: map[string]bool{}, calls: map[string]int{}}
}

func (c *counter) Setup(ctx context.Context, tx pgx.Tx, v projector.View) error {
	c.mu.Lock()
	c.setups = append(c.setups, v)
	c.mu.Unlock()
	_, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (seq bigserial PRIMARY KEY, event_id text NOT NULL,
		order_id text NOT NULL, version bigint NOT NULL, position bigint NOT NULL);
		CREATE TABLE IF NOT EXISTS %s (order_id text PRIMARY KEY, n bigint NOT NULL)`, v.Table("applied"), v.Table("counts")))
	return err
}

func (c *counter) Apply(ctx context.Context, tx pgx.Tx, v projector.View, e *seckillv1.OrderEvent) error {
	// The writes come first, so that a failure after them shows whether
	// the savepoint rolled them back.
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_id, order_id, version, position) VALUES ($1, $2, $3, $4)`,
		v.Table("applied")), e.GetEventId(), e.GetOrderId(), e.GetAggregateVersion(), e.GetPosition()); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (order_id, n) VALUES ($1, 1)
		ON CONFLICT (order_id) DO UPDATE SET n = %[1]s.n + 1`, v.Table("counts")), e.GetOrderId()); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[e.GetEventId()]++
	if c.permanent[e.GetEventId()] {
		return fmt.Errorf("event %s cannot be applied: %w", e.GetEventId(), projector.ErrPermanent)
	}
	if c.transient[e.GetEventId()] > 0 {
		c.transient[e.GetEventId()]--
		return fmt.Errorf("event %s: transient failure", e.GetEventId())
	}
	return nil
}

func (c *counter) AfterCommit(_ context.Context, v projector.View, e *seckillv1.OrderEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v.Rebuilding {
		panic("AfterCommit while rebuilding")
	}
	c.after = append(c.after, fmt.Sprintf("v%d:%s", v.Version, e.GetEventId()))
}

func (c *counter) set(f func(c *counter)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func (c *counter) afterCommits() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.after...)
}

func (c *counter) callsOf(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}

// newStore opens a fresh empty database (the consumer's own, without
// seckill's migrations) and the kit's Store on it, migrated.
func newStore(t *testing.T) (*pgxpool.Pool, *projector.Store) {
	t.Helper()
	pool := pgtest.Pool(t, pgtest.NewEmptyDatabase(t))
	store := projector.NewStore(pool)
	// Run migrates too; migrating first lets the test read the tables at
	// once (and shows Migrate is idempotent).
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return pool, store
}

// options are fast test options for (name, version).
func options(name string, version int) projector.Options {
	return projector.Options{Name: name, Version: version, Batch: 4, Retries: 3,
		BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond, RetryParkedEvery: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// running is a Run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

// start runs Run until stop (or the test's end).
func start(t *testing.T, src projector.Source, h projector.Handler, store *projector.Store, opt projector.Options) *running {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- projector.Run(ctx, src, h, store, opt) }()
	t.Cleanup(func() { _ = r.stop(t) })
	return r
}

// stop ends the Run and returns its error.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // a second stop sees it too
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its context's end")
		return nil
	}
}

// wait returns the Run's error once it returns on its own.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s")
		return nil
	}
}

// eventually polls cond (every 10ms, at most 30s) and fails with what
// otherwise.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 3000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("not reached within 30s: %s", what)
}

// position returns the stored checkpoint of (name, version).
func position(t *testing.T, store *projector.Store, name string, version int) int64 {
	t.Helper()
	pos, err := store.Position(context.Background(), name, version)
	if err != nil {
		t.Fatal(err)
	}
	return pos
}

// appliedIDs returns the event ids of v's applied table in application
// order.
func appliedIDs(t *testing.T, pool *pgxpool.Pool, v projector.View) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), fmt.Sprintf(`SELECT event_id FROM %s ORDER BY seq`, v.Table("applied")))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// counts returns v's count per order.
func counts(t *testing.T, pool *pgxpool.Pool, v projector.View) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), fmt.Sprintf(`SELECT order_id, n FROM %s`, v.Table("counts")))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	var id string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { out[id] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// onceEach fails unless ids holds each id of want exactly once (in any
// order) and nothing else.
func onceEach(t *testing.T, ids []string, want []*seckillv1.OrderEvent) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	for _, e := range want {
		if seen[e.GetEventId()] != 1 {
			t.Errorf("event %s applied %d times, want once", e.GetEventId(), seen[e.GetEventId()])
		}
		delete(seen, e.GetEventId())
	}
	for id, n := range seen {
		t.Errorf("unexpected event %s applied %d times", id, n)
	}
}
