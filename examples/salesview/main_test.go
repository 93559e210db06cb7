package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/adapters/projector"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/examples/salesview/view"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// waitBound bounds every wait of these tests (a failure guard, not a speed
// assertion).
const waitBound = 60 * time.Second

func TestParseConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := parseConfig(nil, env(map[string]string{"SALESVIEW_TOKEN": "tok"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (config{api: defaultAPI, token: "tok", dsn: defaultPGDSN, http: defaultHTTP, version: 1}); c != want {
		t.Errorf("defaults = %+v, want %+v", c, want)
	}
	c, err = parseConfig([]string{"--version", "2", "--http", "127.0.0.1:1"}, env(map[string]string{
		"SALESVIEW_TOKEN": "tok", "SALESVIEW_API": "http://127.0.0.1:9", "SALESVIEW_VERSION": "3",
		"SALESVIEW_HTTP": "127.0.0.1:2", "SALESVIEW_PG_DSN": "postgres://u@127.0.0.1:1/x",
		"SALESVIEW_FAILPOINT": "before-checkpoint",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (config{api: "http://127.0.0.1:9", token: "tok", dsn: "postgres://u@127.0.0.1:1/x", http: "127.0.0.1:1",
		version: 2, failpoint: failpointBeforeCheckpoint}); c != want {
		t.Errorf("flags over environment = %+v, want %+v", c, want)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "--token"},
		{[]string{"--version", "0"}, map[string]string{"SALESVIEW_TOKEN": "t"}, "--version"},
		{[]string{"--version", "x"}, map[string]string{"SALESVIEW_TOKEN": "t"}, "--version"},
		{[]string{"--api", "127.0.0.1:7080"}, map[string]string{"SALESVIEW_TOKEN": "t"}, "--api"},
		{[]string{"--pg-dsn", "postgres://%zz"}, map[string]string{"SALESVIEW_TOKEN": "t"}, "--pg-dsn"},
		{nil, map[string]string{"SALESVIEW_TOKEN": "t", "SALESVIEW_FAILPOINT": "after"}, "SALESVIEW_FAILPOINT"},
		{[]string{"extra"}, map[string]string{"SALESVIEW_TOKEN": "t"}, "unexpected argument"},
	} {
		if _, err := parseConfig(tc.args, env(tc.env), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%v, %v) = %v, want an error naming %s", tc.args, tc.env, err, tc.want)
		}
	}
}

// fakeSource serves events then a live checkpoint, then nothing until the
// context ends.
type fakeSource struct{ events []*seckillv1.OrderEvent }

func (s fakeSource) Stream(ctx context.Context, from int64, fn func(context.Context, projector.Item) error) error {
	var last int64
	for _, e := range s.events {
		last = e.GetPosition()
		if last <= from {
			continue
		}
		if err := fn(ctx, projector.Item{Event: e, Position: last}); err != nil {
			return err
		}
	}
	if err := fn(ctx, projector.Item{Position: last + 1, Live: true}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// events: user 101 buys two units of activity 7 at 19.99 EUR and pays, and
// creates a second order that times out.
func events() []*seckillv1.OrderEvent {
	t0 := time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC)
	ev := func(pos int64, order string, version int64, typ string, at time.Time) *seckillv1.OrderEvent {
		return &seckillv1.OrderEvent{Position: pos, EventId: fmt.Sprintf("%s:%d", order, version), OrderId: order,
			ActivityId: 7, SkuId: 70, UserId: 101, AggregateVersion: version, EventType: typ, SchemaVersion: 2,
			OccurredAt: timestamppb.New(at)}
	}
	a1 := ev(1, "ord_a", 1, view.EventCreated, t0)
	a1.Payload = &seckillv1.OrderEvent_Created{Created: &seckillv1.OrderCreated{Quantity: 2, UnitPrice: 1999, Currency: "EUR"}}
	b1 := ev(2, "ord_b", 1, view.EventCreated, t0.Add(time.Second))
	b1.Payload = &seckillv1.OrderEvent_Created{Created: &seckillv1.OrderCreated{Quantity: 1, UnitPrice: 1999, Currency: "EUR"}}
	a2 := ev(4, "ord_a", 2, view.EventPaymentStarted, t0.Add(time.Minute))
	a3 := ev(5, "ord_a", 3, view.EventPaid, t0.Add(time.Minute))
	b2 := ev(7, "ord_b", 2, view.EventCanceled, t0.Add(15*time.Minute))
	b2.Payload = &seckillv1.OrderEvent_Canceled{Canceled: &seckillv1.OrderCanceled{Reason: "PAYMENT_TIMEOUT"}}
	// ord_c's ORDER_CREATED has no payload: the view refuses it
	// (permanent), the kit parks it and its ORDER_PAID behind it.
	c1 := ev(3, "ord_c", 1, view.EventCreated, t0.Add(2*time.Second))
	c3 := ev(6, "ord_c", 3, view.EventPaid, t0.Add(time.Minute))
	return []*seckillv1.OrderEvent{a1, b1, c1, a2, a3, c3, b2}
}

// newDatabaseName returns a database name that does not exist on the
// stack's server (serve creates it) and drops it when the test ends.
func newDatabaseName(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "salesview_test_" + hex.EncodeToString(b)
	base := pgtest.BaseDSN(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	dsn, err := pgtest.WithDatabase(base, name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// syncBuffer is a bytes.Buffer safe for the writers of serve and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// instance is one serve running in the test.
type instance struct {
	base   string
	stderr *syncBuffer
	done   chan error
	stop   context.CancelFunc
}

func start(t *testing.T, cfg config, src projector.Source) *instance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{base: "http://" + ln.Addr().String(), stderr: &syncBuffer{}, done: make(chan error, 1), stop: cancel}
	log := slog.New(slog.NewTextHandler(in.stderr, nil))
	go func() { in.done <- serve(ctx, cfg, src, ln, log, in.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-in.done:
			if err != nil {
				t.Logf("serve ended with %v", err) // the tests that care check it with end
			}
		case <-time.After(waitBound):
			t.Error("serve does not end with its context")
		}
	})
	return in
}

// end stops the instance and returns serve's result.
func (in *instance) end(t *testing.T) error {
	t.Helper()
	in.stop()
	select {
	case err := <-in.done:
		in.done <- err // for the cleanup
		return err
	case <-time.After(waitBound):
		t.Fatal("serve does not end with its context")
		return nil
	}
}

// get returns the status and decoded JSON body of GET path.
func (in *instance) get(t *testing.T, path string, body any) int {
	t.Helper()
	resp, err := http.Get(in.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if body != nil {
		if err := json.NewDecoder(resp.Body).Decode(body); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	return resp.StatusCode
}

type activitiesBody struct {
	Version    int          `json:"version"`
	Activities []view.Total `json:"activities"`
}

// waitActive polls /activities (bounded) until it answers with version.
func (in *instance) waitActive(t *testing.T, version int) activitiesBody {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		var b activitiesBody
		status := in.get(t, "/activities", &b)
		if status == http.StatusOK && b.Version == version {
			return b
		}
		if status != http.StatusOK && status != http.StatusServiceUnavailable {
			t.Fatalf("GET /activities = %d", status)
		}
		select {
		case err := <-in.done:
			t.Fatalf("serve ended: %v\n%s", err, in.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("/activities does not serve version %d (last %d, %+v)\n%s", version, status, b, in.stderr.String())
		}
	}
}

// TestServe runs the program on a database it creates: the JSON API over
// the active version, its bad-input answers, a rebuild into version 2 and
// version 1 exiting once 2 is active.
func TestServe(t *testing.T) {
	dsn := newDatabaseName(t)
	cfg := config{dsn: dsn, version: 1, token: "unused"}
	in := start(t, cfg, fakeSource{events: events()})
	got := in.waitActive(t, 1)
	want := []view.Total{{ActivityID: 7, Accepted: 2, Paid: 1, Canceled: 1, Revenue: map[string]int64{"EUR": 2 * 1999}}}
	if fmt.Sprint(got.Activities) != fmt.Sprint(want) {
		t.Errorf("/activities = %+v, want %+v", got.Activities, want)
	}
	if !strings.Contains(in.stderr.String(), "salesview: live") {
		t.Errorf("no live line in the log:\n%s", in.stderr.String())
	}

	var minutes struct {
		Version    int           `json:"version"`
		ActivityID int64         `json:"activity_id"`
		Minutes    []view.Minute `json:"minutes"`
	}
	if s := in.get(t, "/activities/7/minutes", &minutes); s != http.StatusOK || minutes.ActivityID != 7 || len(minutes.Minutes) != 3 ||
		minutes.Minutes[1].Paid != 1 || minutes.Minutes[1].Revenue != 2*1999 || minutes.Minutes[2].Canceled != 1 {
		t.Errorf("/activities/7/minutes = %d %+v, want 3 minutes (created, paid 39.98, canceled)", s, minutes)
	}
	var orders struct {
		Orders []view.Order `json:"orders"`
	}
	if s := in.get(t, "/buyers/101/orders?limit=1", &orders); s != http.StatusOK || len(orders.Orders) != 1 ||
		orders.Orders[0].OrderID != "ord_b" || orders.Orders[0].CancelReason != "PAYMENT_TIMEOUT" {
		t.Errorf("/buyers/101/orders?limit=1 = %d %+v, want ord_b canceled by timeout", s, orders)
	}
	if s := in.get(t, "/buyers/101/orders", &orders); s != http.StatusOK || len(orders.Orders) != 2 || orders.Orders[1].Status != view.StatusPaid {
		t.Errorf("/buyers/101/orders = %d %+v, want ord_b then ord_a paid", s, orders)
	}
	var parked struct {
		Version int `json:"version"`
		Parked  []struct {
			Position  int64  `json:"position"`
			OrderID   string `json:"order_id"`
			EventType string `json:"event_type"`
			Error     string `json:"error"`
		} `json:"parked"`
	}
	if s := in.get(t, "/parked", &parked); s != http.StatusOK || parked.Version != 1 || len(parked.Parked) != 2 ||
		parked.Parked[0].Position != 3 || parked.Parked[0].OrderID != "ord_c" || !strings.Contains(parked.Parked[0].Error, "payload") ||
		parked.Parked[1].Position != 6 || parked.Parked[1].EventType != view.EventPaid {
		t.Errorf("/parked = %d %+v, want ord_c's two events (3, the refused one, and 6 behind it)", s, parked)
	}
	resp, err := http.Post(in.base+"/parked/ord_c/retry", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var retried struct {
		Applied *int `json:"applied"`
	}
	err = json.NewDecoder(resp.Body).Decode(&retried)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || retried.Applied == nil || *retried.Applied != 0 {
		t.Errorf("POST /parked/ord_c/retry = %d %v %+v, want 200 with applied 0 (still refused)", resp.StatusCode, err, retried)
	}
	if s := in.get(t, "/parked", &parked); s != http.StatusOK || len(parked.Parked) != 2 {
		t.Errorf("/parked after a failed retry = %d %+v, want both events still parked", s, parked)
	}
	for path, field := range map[string]string{
		"/buyers/abc/orders":         "id:",
		"/buyers/0/orders":           "id:",
		"/activities/-1/minutes":     "id:",
		"/buyers/101/orders?limit=0": "limit:",
		"/buyers/101/orders?limit=x": "limit:",
	} {
		var e struct {
			Error string `json:"error"`
		}
		if s := in.get(t, path, &e); s != http.StatusBadRequest || !strings.HasPrefix(e.Error, field) {
			t.Errorf("GET %s = %d %q, want 400 naming %s", path, s, e.Error, field)
		}
	}
	if err := in.end(t); err != nil {
		t.Fatalf("serve after stop = %v, want nil", err)
	}

	// Version 2 rebuilds from position 0 into its own tables and takes over.
	cfg.version = 2
	in2 := start(t, cfg, fakeSource{events: events()})
	got = in2.waitActive(t, 2)
	if fmt.Sprint(got.Activities) != fmt.Sprint(want) {
		t.Errorf("/activities of version 2 = %+v, want %+v", got.Activities, want)
	}
	// Version 1 started again exits at once: a newer version is active.
	cfg.version = 1
	in1 := start(t, cfg, fakeSource{events: events()})
	select {
	case err := <-in1.done:
		in1.done <- err
		if err != nil {
			t.Errorf("version 1 beside active version 2 = %v, want nil (exit)", err)
		}
		if !strings.Contains(in1.stderr.String(), "a newer version is active") {
			t.Errorf("version 1 does not say why it exits:\n%s", in1.stderr.String())
		}
	case <-time.After(waitBound):
		t.Fatal("version 1 keeps running beside active version 2")
	}
	if err := in2.end(t); err != nil {
		t.Fatalf("version 2 after stop = %v, want nil", err)
	}
}

// TestFailpoint: SALESVIEW_FAILPOINT=before-checkpoint prints its line and
// blocks inside the batch's transaction (nothing committed) until the
// process stops; a restart applies every event exactly once.
func TestFailpoint(t *testing.T) {
	dsn := newDatabaseName(t)
	cfg := config{dsn: dsn, version: 1, token: "unused", failpoint: failpointBeforeCheckpoint}
	in := start(t, cfg, fakeSource{events: events()})
	line := regexp.MustCompile(`(?m)^salesview: failpoint before-checkpoint reached at position (\d+)$`)
	deadline := time.Now().Add(waitBound)
	var m []string
	for m == nil {
		if m = line.FindStringSubmatch(in.stderr.String()); m != nil {
			break
		}
		select {
		case err := <-in.done:
			t.Fatalf("serve ended before the failpoint: %v\n%s", err, in.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failpoint line:\n%s", in.stderr.String())
		}
	}
	if p, _ := strconv.ParseInt(m[1], 10, 64); p < 1 || p > 8 {
		t.Errorf("failpoint at position %d, want one of the items' (1..8)", p)
	}
	pool := pgtest.Pool(t, dsn)
	store := projector.NewStore(pool)
	if pos, err := store.Position(t.Context(), view.Name, 1); err != nil || pos != 0 {
		t.Errorf("position while blocked at the failpoint = %d, %v; want 0 (nothing committed)", pos, err)
	}
	if err := in.end(t); err != nil {
		t.Fatalf("serve stopped at the failpoint = %v, want nil", err)
	}
	if c := strings.Count(in.stderr.String(), "salesview: failpoint"); c != 1 {
		t.Errorf("failpoint line %d times, want once", c)
	}

	cfg.failpoint = ""
	in = start(t, cfg, fakeSource{events: events()})
	in.waitActive(t, 1)
	checkOnce(t, pool)
}

// checkOnce asserts every event of events() applied exactly once.
func checkOnce(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	v := projector.View{Name: view.Name, Version: 1}
	totals, err := view.Totals(t.Context(), pool, v)
	if err != nil {
		t.Fatal(err)
	}
	want := view.Total{ActivityID: 7, Accepted: 2, Paid: 1, Canceled: 1, Revenue: map[string]int64{"EUR": 2 * 1999}}
	if fmt.Sprint(totals[7]) != fmt.Sprint(want) || len(totals) != 1 {
		t.Errorf("Totals after the restart = %+v, want {7: %+v}", totals, want)
	}
	if _, err := view.ActiveView(t.Context(), projector.NewStore(pool), view.Name); errors.Is(err, view.ErrNoActiveView) {
		t.Error("no active version after the restart went live")
	}
}

// refusingSource fails every stream with code.
type refusingSource struct{ code connect.Code }

func (s refusingSource) Stream(context.Context, int64, func(context.Context, projector.Item) error) error {
	return fmt.Errorf("projector: subscription: %w", connect.NewError(s.code, errors.New("invalid token")))
}

// TestRefusedToken: a token the service refuses ends the program with an
// error naming --token, instead of resubscribing forever.
func TestRefusedToken(t *testing.T) {
	dsn := newDatabaseName(t)
	for _, code := range []connect.Code{connect.CodeUnauthenticated, connect.CodePermissionDenied} {
		in := start(t, config{dsn: dsn, version: 1, token: "bad"}, refusingSource{code: code})
		select {
		case err := <-in.done:
			in.done <- err
			if err == nil || !strings.Contains(err.Error(), "--token") || connect.CodeOf(err) != code {
				t.Errorf("serve with a refused token (%v) = %v, want an error naming --token with code %v", code, err, code)
			}
		case <-time.After(waitBound):
			t.Fatalf("serve keeps running with a refused token (%v)", code)
		}
	}
}
