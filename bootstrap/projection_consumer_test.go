package bootstrap_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/projector"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/examples/salesview/view"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// eventsToken mints a projection consumer's token (scope events only).
func (s *system) eventsToken() string {
	s.t.Helper()
	tok, err := api.MintScopedToken([]byte(s.cfg.AuthSecret), 900_000_003, []string{api.ScopeEvents}, time.Hour, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// eventSubscription is the consumer kit's Source on this service's
// EventService, over gRPC.
func (s *system) eventSubscription() *projector.Subscription {
	tok := s.eventsToken()
	return &projector.Subscription{
		Client: seckillv1connect.NewEventServiceClient(s.http, s.base, connect.WithGRPC()),
		Token:  func(context.Context) (string, error) { return tok, nil },
	}
}

// books is the service's own truth: per activity, per status, the
// number of orders.
func (s *system) books() map[int64]map[string]int64 {
	s.t.Helper()
	return booksOf(s.t, s.db, `SELECT activity_id, status, count(*) FROM orders GROUP BY 1, 2`)
}

func booksOf(t *testing.T, db *pgxpool.Pool, query string) map[int64]map[string]int64 {
	t.Helper()
	rows, err := db.Query(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]map[string]int64{}
	for rows.Next() {
		var (
			act    int64
			status string
			n      int64
		)
		if err := rows.Scan(&act, &status, &n); err != nil {
			t.Fatal(err)
		}
		if out[act] == nil {
			out[act] = map[string]int64{}
		}
		out[act][status] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func equalBooks(a, b map[int64]map[string]int64) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]int64) bool { return maps.Equal(x, y) })
}

// projectorRun is one projector.Run in a goroutine the test owns (ended
// and awaited at cleanup at the latest).
type projectorRun struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startProjector(t *testing.T, src projector.Source, h projector.Handler, store *projector.Store, opt projector.Options) *projectorRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	p := &projectorRun{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- projector.Run(ctx, src, h, store, opt) }()
	t.Cleanup(func() { _ = p.stop(t) })
	return p
}

// stop ends the run and returns what Run returned.
func (p *projectorRun) stop(t *testing.T) error {
	p.once.Do(func() {
		p.cancel()
		select {
		case p.err = <-p.done:
		case <-time.After(60 * time.Second):
			t.Errorf("projector did not stop within 60s")
		}
	})
	return p.err
}

// countingHandler is the example's handler that also counts, in the same
// transaction, how many times each event was applied (the proof of
// exactly-once view updates that the view's own defences could hide),
// and records its side effects per version.
type countingHandler struct {
	view.Handler
	effects *sideEffects
}

// sideEffects records AfterCommit calls per version and event.
type sideEffects struct {
	mu   sync.Mutex
	seen map[int]map[string]int
}

func (se *sideEffects) count(version int) (events, maxPerEvent int) {
	se.mu.Lock()
	defer se.mu.Unlock()
	for _, n := range se.seen[version] {
		events, maxPerEvent = events+1, max(maxPerEvent, n)
	}
	return events, maxPerEvent
}

// AfterCommit implements projector.SideEffects.
func (h countingHandler) AfterCommit(_ context.Context, v projector.View, e *seckillv1.OrderEvent) {
	h.effects.mu.Lock()
	defer h.effects.mu.Unlock()
	if h.effects.seen[v.Version] == nil {
		h.effects.seen[v.Version] = map[string]int{}
	}
	h.effects.seen[v.Version][e.GetEventId()]++
}

func (h countingHandler) Setup(ctx context.Context, tx pgx.Tx, v projector.View) error {
	if err := h.Handler.Setup(ctx, tx, v); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+v.Table("applied")+` (event_id text PRIMARY KEY, n int NOT NULL)`)
	return err
}

func (h countingHandler) Apply(ctx context.Context, tx pgx.Tx, v projector.View, e *seckillv1.OrderEvent) error {
	if err := h.Handler.Apply(ctx, tx, v, e); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+v.Table("applied")+` (event_id, n) VALUES ($1, 1)
		ON CONFLICT (event_id) DO UPDATE SET n = `+v.Table("applied")+`.n + 1`, e.GetEventId())
	return err
}

// appliedOnce checks that every stored event was applied to version v
// exactly once.
func appliedOnce(t *testing.T, s *system, db *pgxpool.Pool, v projector.View) {
	t.Helper()
	want := s.storedEvents()
	rows, err := db.Query(context.Background(), `SELECT event_id, n FROM `+v.Table("applied"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 || !want[id] {
			t.Fatalf("version %d: %s applied %d times (stored: %v)", v.Version, id, n, want[id])
		}
		got++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got != len(want) {
		t.Fatalf("version %d applied %d events, the store holds %d", v.Version, got, len(want))
	}
}

// priced creates an activity with a unit price through the API.
func (s *system) priced(id, stock, price int64, paymentTimeout time.Duration) {
	s.t.Helper()
	now := time.Now()
	if _, err := s.admin.CreateActivity(context.Background(), authed(&seckillv1.CreateActivityRequest{
		ActivityId: id, SkuId: 1, Stock: stock,
		StartsAt: tsOf(now.Add(-time.Minute)), EndsAt: tsOf(now.Add(time.Hour)),
		PaymentTimeout: durOf(paymentTimeout), ReservationTtl: durOf(10 * time.Minute),
		UnitPrice: price, Currency: "EUR",
	}, s.token(1, true))); err != nil {
		s.t.Fatal(err)
	}
}

// saleWithEverything runs a sale on activities act (stock 40) and act+1
// (one order through a dead-letter replay): buyers place, some pay, some
// cancel, the rest time out; mid is called once after the first orders
// exist. It returns when every order is settled (PAID or CANCELED).
func (s *system) saleWithEverything(act int64, mid func()) {
	t := s.t
	t.Helper()
	s.priced(act, 40, 1999, 3*time.Second)
	// The dead-letter path: an order-create for an activity that does not
	// exist yet is dead-lettered; created, then replayed, it becomes an
	// order of act+1.
	// (26 digits: the id looks like a ULID, so PayOrder takes the order id.)
	poison := createMsg(t, fmt.Sprintf("%026d", 9000+act), act+1, 77, 10*time.Minute)
	s.publishCreate(poison)

	ids := make([]string, 30)
	concurrently(30, 10, func(i int) {
		res, err := s.place(context.Background(), int64(100+i), act, fmt.Sprintf("view-%d-%d", act, i))
		if err != nil {
			t.Errorf("place %d: %v", i, err)
			return
		}
		ids[i] = res.GetOrderId()
	})
	if t.Failed() {
		t.FailNow()
	}
	s.eventually(60*time.Second, "the first orders exist", func() bool {
		return s.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, act) == 30
	})
	mid()
	pay := s.paymentToken()
	concurrently(12, 6, func(i int) { // buyers 100..111 pay
		if _, err := s.orders.PayOrder(context.Background(), authed(&seckillv1.PayOrderRequest{OrderId: ids[i],
			PaymentId: fmt.Sprintf("pay-view-%d", i)}, pay)); err != nil {
			t.Errorf("pay %s: %v", ids[i], err)
		}
	})
	concurrently(8, 4, func(i int) { // buyers 112..119 cancel; 120..129 time out
		if _, err := s.orders.CancelOrder(context.Background(), authed(&seckillv1.CancelOrderRequest{OrderId: ids[12+i]},
			s.token(int64(112+i), false))); err != nil {
			t.Errorf("cancel %s: %v", ids[12+i], err)
		}
	})
	var dl *seckillv1.DeadLetter
	s.eventually(60*time.Second, "the order-create of the missing activity is a dead letter", func() bool {
		for _, d := range s.deadLetters("") {
			if d.GetMessageId() == poison.MessageID {
				dl = d
				return true
			}
		}
		return false
	})
	s.priced(act+1, 5, 500, time.Minute)
	if _, err := s.replay(dl.GetDeadLetterId(), "the activity exists now"); err != nil {
		t.Fatalf("replay: %v", err)
	}
	s.eventually(60*time.Second, "the replayed order exists", func() bool {
		return s.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, act+1) == 1
	})
	if _, err := s.orders.PayOrder(context.Background(), authed(&seckillv1.PayOrderRequest{OrderId: poison.OrderID,
		PaymentId: "pay-view-dlq"}, pay)); err != nil {
		t.Fatalf("pay the replayed order: %v", err)
	}
	s.eventually(60*time.Second, "every order is settled (paid, canceled or timed out)", func() bool {
		return s.count(`SELECT count(*) FROM orders WHERE status NOT IN ('PAID', 'CANCELED')`) == 0
	})
	b := s.books()
	if b[act]["PAID"] != 12 || b[act]["CANCELED"] != 18 || b[act+1]["PAID"] != 1 {
		t.Fatalf("the service's books %v, want 12 paid and 18 canceled in %d, 1 paid in %d", b, act, act+1)
	}
}

// TestProjectionConsumerViewEqualsTheBooks (both brokers): the example
// consumer's view, built live through the consumer kit while a sale runs
// (payments, buyer cancels, payment timeouts, a dead-letter replay) and
// with its projector stopped mid-sale and started again, equals the
// service's own books; a rebuild into version 2 from position 0 while
// version 1 serves equals them too, switches when it is live and ends
// version 1's run with ErrSuperseded; every event was applied exactly
// once to each version, and side effects ran for version 1 only after it
// went live, for version 2 only after the switch.
func TestProjectionConsumerViewEqualsTheBooks(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		vdb := pgtest.Pool(t, pgtest.NewEmptyDatabase(t))
		store := projector.NewStore(vdb)
		effects := &sideEffects{seen: map[int]map[string]int{}}
		h := countingHandler{Handler: view.Handler{}, effects: effects}
		opt := func(version int) projector.Options {
			return projector.Options{Name: view.Name, Version: version, BackoffBase: 50 * time.Millisecond, BackoffMax: time.Second}
		}
		v1 := startProjector(t, s.eventSubscription(), h, store, opt(1))
		s.saleWithEverything(61, func() {
			// The subscriber killed mid-stream: the run ends, another
			// resumes from its checkpoint.
			if err := v1.stop(t); err != nil {
				t.Fatalf("first run of version 1 ended with %v", err)
			}
			v1 = startProjector(t, s.eventSubscription(), h, store, opt(1))
		})
		want := s.books()
		s.eventually(60*time.Second, "the live view equals the books", func() bool {
			got, err := view.Books(context.Background(), vdb, projector.View{Name: view.Name, Version: 1})
			return err == nil && equalBooks(got, want)
		})
		appliedOnce(t, s, vdb, projector.View{Name: view.Name, Version: 1})
		if active, ok, err := store.Active(context.Background(), view.Name); err != nil || !ok || active != 1 {
			t.Fatalf("active version %d (%v, %v), want 1", active, ok, err)
		}

		// The rebuild: version 2 from position 0 beside version 1.
		v2 := startProjector(t, s.eventSubscription(), h, store, opt(2))
		s.eventually(60*time.Second, "version 2 is live and active", func() bool {
			active, ok, err := store.Active(context.Background(), view.Name)
			return err == nil && ok && active == 2
		})
		select {
		case err := <-v1.done:
			if !errors.Is(err, projector.ErrSuperseded) {
				t.Fatalf("version 1 ended with %v, want ErrSuperseded", err)
			}
			v1.once.Do(func() { v1.cancel() })
		case <-time.After(60 * time.Second):
			t.Fatal("version 1 still runs after version 2 became active")
		}
		rebuilt, err := view.Books(context.Background(), vdb, projector.View{Name: view.Name, Version: 2})
		if err != nil || !equalBooks(rebuilt, want) {
			t.Fatalf("rebuilt view %v (%v), books %v", rebuilt, err, want)
		}
		appliedOnce(t, s, vdb, projector.View{Name: view.Name, Version: 2})
		t1, err1 := view.Totals(context.Background(), vdb, projector.View{Name: view.Name, Version: 1})
		t2, err2 := view.Totals(context.Background(), vdb, projector.View{Name: view.Name, Version: 2})
		if err1 != nil || err2 != nil || !reflect.DeepEqual(t1, t2) {
			t.Fatalf("totals of version 1 %v (%v) and 2 %v (%v) differ", t1, err1, t2, err2)
		}
		if got := t2[61]; got.Accepted != 30 || got.Paid != 12 || got.Canceled != 18 || got.Revenue["EUR"] != 12*1999 {
			t.Fatalf("activity 61 totals %+v, want 30 accepted, 12 paid, 18 canceled, revenue %d", got, 12*1999)
		}
		if got := t2[62]; got.Accepted != 1 || got.Paid != 1 || got.Revenue["EUR"] != 500 {
			t.Fatalf("activity 62 totals %+v, want the replayed order paid at 500", got)
		}
		if err := v2.stop(t); err != nil {
			t.Fatalf("version 2 ended with %v", err)
		}
		// Version 1 was live from the start: side effects, each at most
		// once. Version 2 replayed history only: none.
		if n, most := effects.count(1); n == 0 || most != 1 {
			t.Fatalf("version 1: side effects of %d events, at most %d per event; want some, once each", n, most)
		}
		if n, _ := effects.count(2); n != 0 {
			t.Fatalf("version 2 ran side effects for %d events of its rebuild", n)
		}
	})
}

// buildSalesview builds the example consumer's binary into a temporary
// directory.
func buildSalesview(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "salesview")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/seckill-dev/seckill/examples/salesview").CombinedOutput(); err != nil {
		t.Fatalf("build the example: %v\n%s", err, out)
	}
	return bin
}

// salesviewProcess is one run of the example's binary, stopped by PID at
// cleanup at the latest; its stderr lines go to a channel.
type salesviewProcess struct {
	cmd    *exec.Cmd
	lines  chan string
	done   chan error
	killed sync.Once
}

func startSalesview(t *testing.T, bin string, env ...string) *salesviewProcess {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &salesviewProcess{cmd: cmd, lines: make(chan string, 1024), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default: // nobody reads: drop
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// kill sends SIGKILL to the process (by its PID) and waits for it.
func (p *salesviewProcess) kill(t *testing.T) {
	p.killed.Do(func() {
		_ = p.cmd.Process.Kill()
		select {
		case err := <-p.done:
			_ = err // killed: the exit status is the signal
		case <-time.After(30 * time.Second):
			t.Errorf("salesview %d did not end after SIGKILL", p.cmd.Process.Pid)
		}
	})
}

// waitLine returns the first stderr line containing want (bounded).
func (p *salesviewProcess) waitLine(t *testing.T, want string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, want) {
				return l
			}
		case err := <-p.done:
			p.done <- err
			t.Fatalf("salesview ended (%v) before printing %q", err, want)
		case <-deadline:
			t.Fatalf("salesview printed no %q within %s", want, within)
		}
	}
}

// TestSalesviewKilledBetweenWriteAndCheckpoint (both brokers): the
// example consumer's process, stopped by a failpoint after its view
// writes and before its checkpoint and then killed with SIGKILL, has
// committed nothing of that batch; started again, it resumes from its
// checkpoint and its view equals the service's books, with no event
// missed and none counted twice (totals against the orders).
func TestSalesviewKilledBetweenWriteAndCheckpoint(t *testing.T) {
	bin := buildSalesview(t)
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		vdsn := pgtest.NewEmptyDatabase(t)
		vdb := pgtest.Pool(t, vdsn)
		env := []string{"SALESVIEW_API=" + s.base, "SALESVIEW_TOKEN=" + s.eventsToken(), "SALESVIEW_PG_DSN=" + vdsn,
			"SALESVIEW_HTTP=127.0.0.1:0"}
		s.priced(71, 20, 250, time.Minute)
		for u := int64(1); u <= 6; u++ {
			s.buy(u, 71, fmt.Sprintf("kill-before-%d", u))
		}
		first := startSalesview(t, bin, append(env, "SALESVIEW_FAILPOINT=before-checkpoint")...)
		line := first.waitLine(t, "failpoint before-checkpoint reached at position", 60*time.Second)
		first.kill(t) // SIGKILL in the middle of the batch's transaction
		store := projector.NewStore(vdb)
		if pos, err := store.Position(context.Background(), view.Name, 1); err != nil || pos != 0 {
			t.Fatalf("after the kill (%s) the checkpoint is %d (%v), want 0: the batch must not have committed", line, pos, err)
		}
		if b, err := view.Books(context.Background(), vdb, projector.View{Name: view.Name, Version: 1}); err != nil || len(b) != 0 {
			t.Fatalf("after the kill the view holds %v (%v), want nothing", b, err)
		}
		// More of the sale while the consumer is down.
		var ids []string
		for u := int64(7); u <= 10; u++ {
			ids = append(ids, s.buy(u, 71, fmt.Sprintf("kill-after-%d", u)))
		}
		if _, err := s.orders.PayOrder(context.Background(), authed(&seckillv1.PayOrderRequest{OrderId: ids[0],
			PaymentId: "pay-kill"}, s.paymentToken())); err != nil {
			t.Fatal(err)
		}
		if _, err := s.orders.CancelOrder(context.Background(), authed(&seckillv1.CancelOrderRequest{OrderId: ids[1]},
			s.token(8, false))); err != nil {
			t.Fatal(err)
		}
		startSalesview(t, bin, env...)
		want := s.books()
		s.eventually(60*time.Second, "the restarted consumer's view equals the books", func() bool {
			got, err := view.Books(context.Background(), vdb, projector.View{Name: view.Name, Version: 1})
			return err == nil && equalBooks(got, want)
		})
		tot, err := view.Totals(context.Background(), vdb, projector.View{Name: view.Name, Version: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := tot[71]; got.Accepted != 10 || got.Paid != 1 || got.Canceled != 1 || got.Revenue["EUR"] != 250 {
			t.Fatalf("totals %+v, want 10 accepted, 1 paid, 1 canceled, revenue 250 (nothing counted twice)", got)
		}
		s.eventually(30*time.Second, "the checkpoint reaches the log's head", func() bool {
			pos, err := store.Position(context.Background(), view.Name, 1)
			return err == nil && pos == s.count(`SELECT coalesce(max(position), 0) FROM event_log`)
		})
	})
}
