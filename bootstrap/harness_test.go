package bootstrap_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/brokers"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/faultproxy"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// system is one running service on the real stack, isolated from every
// other test: its own database, Redis namespace and broker topics/groups.
type system struct {
	t   *testing.T
	cfg config.Config
	app *bootstrap.App
	// broker is the system's broker namespace (the peer's for a peer).
	broker brokerplug.Namespace
	db     *pgxpool.Pool
	redis  goredis.UniversalClient
	ns     string
	base   string
	http   *http.Client
	orders seckillv1connect.OrderServiceClient
	admin  seckillv1connect.AdminServiceClient
	cancel context.CancelFunc
	done   chan error
}

// options adjust a system before it starts.
type options struct {
	configure  func(*config.Config)
	beforeRun  func(*system)
	noConsumer bool
	// logger is the service's logger (newTestLogger(t, cfg.LogLevel) when
	// nil: every line checked strictly, those at the level shown).
	logger *slog.Logger
	// withoutWorkers names workers not to run (for example
	// "consumer CG_SECKILL_ORDER_TIMEOUT_V1").
	withoutWorkers []string
	// broker is the broker plug's name (the registry's default when empty).
	broker string
	// redisCluster runs the system on the stack's Redis Cluster
	// (SECKILL_REDIS_CLUSTER_ADDRS) instead of the single Redis.
	redisCluster bool
	// peer, when set, makes the system a second instance of peer's
	// service: the same database, Redis namespace and broker namespace,
	// its own listeners and instance id.
	peer *system
}

// startSystem starts the whole service (API, consumers, relay, scanner)
// in-process against the real PostgreSQL, Redis and RocketMQ.
func startSystem(t *testing.T, opt options) *system {
	t.Helper()
	s := &system{t: t}
	var dsn string
	if opt.broker == "" {
		opt.broker = brokers.Default()
	}
	if p := opt.peer; p != nil {
		s.broker, dsn, s.db, s.redis, s.ns = p.broker, string(p.cfg.Postgres.DSN), p.db, p.redis, p.ns
		opt.broker = p.cfg.Broker.Name
	} else {
		s.broker = newBrokerNamespace(t, opt.broker)
		dsn = pgtest.NewDatabase(t)
		s.db = pgtest.Pool(t, dsn)
		if opt.redisCluster {
			s.redis, s.ns = redistest.NewCluster(t)
		} else {
			s.redis, s.ns = redistest.New(t)
		}
	}
	redisAddr, redisDB := os.Getenv("SECKILL_REDIS_ADDR"), 0
	if c, ok := s.redis.(*goredis.Client); ok {
		redisDB = c.Options().DB
	} else {
		redisAddr = os.Getenv("SECKILL_REDIS_CLUSTER_ADDRS")
	}
	prefix := s.broker.Prefix()
	env := map[string]string{
		"SECKILL_HTTP_ADDR":           "127.0.0.1:0",
		"SECKILL_OPS_ADDR":            "127.0.0.1:0",
		"SECKILL_AUTH_SECRET":         "e2e-secret-0123456789",
		"SECKILL_LOCAL_STACK":         "true", // the ops listener asks no token; the secret stays the tests' own
		"SECKILL_PG_DSN":              dsn,
		"SECKILL_PG_MAX_CONNS":        "16",
		"SECKILL_REDIS_ADDR":          redisAddr,
		"SECKILL_REDIS_NAMESPACE":     s.ns,
		"SECKILL_REDIS_DB":            strconv.Itoa(redisDB),
		"SECKILL_RATE_BURST":          "1000",
		"SECKILL_RATE_PER_SECOND":     "1000",
		"SECKILL_READ_BURST":          "1000",
		"SECKILL_READ_RATE":           "1000",
		"SECKILL_CLIENT_RATE":         "0", // the load tests send thousands of calls a second from 127.0.0.1
		"SECKILL_SEND_TIMEOUT":        "500ms",
		"SECKILL_SCANNER_INTERVAL":    "100ms",
		"SECKILL_SCANNER_LEASE":       "2s",
		"SECKILL_RELAY_INTERVAL":      "20ms",
		"SECKILL_INVISIBLE_DURATION":  invisibleDuration.String(),
		"SECKILL_RECONCILE_INTERVAL":  "0s",
		"SECKILL_INSTANCE_ID":         "e2e-" + strings.Trim(prefix, ".") + "-" + strconv.FormatInt(instanceSeq.Add(1), 10),
		"SECKILL_LOG_LEVEL":           "warn",
		"SECKILL_BACKLOG_CLOSE_RATIO": "1",
	}
	for _, kv := range s.broker.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if opt.configure != nil {
		opt.configure(&cfg)
	}
	s.cfg = cfg
	if opt.beforeRun != nil {
		opt.beforeRun(s)
	}
	log := opt.logger
	if log == nil {
		log = newTestLogger(t, cfg.LogLevel)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	app, cleanup, err := bootstrap.NewApp(ctx, cfg, log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s.app = app
	if opt.noConsumer {
		app.Workers = without(app.Workers, "consumer "+"CG_SECKILL_ORDER_CREATE_PG_V1")
	}
	for _, name := range opt.withoutWorkers {
		app.Workers = without(app.Workers, name)
	}
	addrc := make(chan net.Addr, 1)
	s.done = make(chan error, 1)
	go func() { s.done <- app.Run(ctx, func(a net.Addr) { addrc <- a }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-s.done:
			if err != nil {
				t.Errorf("service stopped with: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("service did not stop within 60s")
		}
		cleanup()
	})
	select {
	case a := <-addrc:
		if a == nil { // the workers role serves no API
			return s
		}
		s.base = "http://" + a.String()
	case err := <-s.done:
		t.Fatalf("service did not start: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("service did not start within 60s")
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p, MaxConnsPerHost: 8}
	s.http = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	s.orders = seckillv1connect.NewOrderServiceClient(s.http, s.base, connect.WithGRPC())
	s.admin = seckillv1connect.NewAdminServiceClient(s.http, s.base, connect.WithGRPC())
	return s
}

// forEachBroker runs test once per broker adapter, as a subtest named
// after it: the end-to-end behaviour the ports promise holds on every
// broker of the registry.
func forEachBroker(t *testing.T, test func(t *testing.T, broker string)) {
	for _, b := range brokers.Names() {
		t.Run(b, func(t *testing.T) { test(t, b) })
	}
}

// invisibleDuration is how long a received RocketMQ message of the
// harness's services stays hidden before it is delivered again; a test
// that shows nothing was redelivered waits twice as long.
const invisibleDuration = 3 * time.Second

// newBrokerNamespace creates a namespace on the stack's broker of plug
// name (its settings read from the test process's environment, as the
// test command exports them) with three redeliveries before a dead
// letter, and deletes it when the test ends.
func newBrokerNamespace(t *testing.T, name string) brokerplug.Namespace {
	t.Helper()
	plug, err := brokers.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(func(k string) (string, bool) {
		switch k {
		case "SECKILL_BROKER":
			return name, true
		case "SECKILL_LOCAL_STACK":
			return "true", true
		}
		return os.LookupEnv(k)
	})
	if err != nil {
		t.Fatalf("the broker settings of the test environment: %v", err)
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := plug.NewNamespace(ctx, cfg.Broker.Settings, brokerplug.NamespaceOptions{Prefix: "T" + hex.EncodeToString(b) + "_", Redeliveries: 3})
	if err != nil {
		t.Fatalf("%v (is the stack up? run `make test` or eval \"$(deploy/local/stack.sh env)\")", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ns.Close(ctx); err != nil {
			t.Logf("delete the broker namespace %s: %v", ns.Prefix(), err)
		}
	})
	return ns
}

// instanceSeq numbers the instances the tests start, for unique instance ids.
var instanceSeq atomic.Int64

func without(ws []bootstrap.Worker, name string) []bootstrap.Worker {
	var out []bootstrap.Worker
	for _, w := range ws {
		if w.Name != name {
			out = append(out, w)
		}
	}
	return out
}

// testWriter sends service logs to the test log (shown on failure).
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

var _ io.Writer = testWriter{}

func (s *system) token(user int64, admin bool) string {
	s.t.Helper()
	tok, err := api.MintToken([]byte(s.cfg.AuthSecret), user, admin, time.Hour, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// brokerThroughProxy is a beforeRun hook that starts a fault proxy in
// front of the broker, stores it in *p (closed when the test ends) and
// routes the system's broker connections through it.
func brokerThroughProxy(t *testing.T, p **faultproxy.Proxy) func(*system) {
	return func(s *system) {
		endpoint := s.broker.Settings().(rocketmq.Settings).Endpoint
		proxy, err := faultproxy.New(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = proxy.Close() })
		restore, err := rocketmq.RedirectDials(endpoint, proxy.Addr())
		if err != nil {
			t.Fatalf("redirect rocketmq dials: %v", err)
		}
		t.Cleanup(restore)
		*p = proxy
	}
}

// paymentToken is a token of the payment side (scope "payment"), the only
// non-admin caller PayOrder accepts.
func (s *system) paymentToken() string {
	s.t.Helper()
	tok, err := api.MintScopedToken([]byte(s.cfg.AuthSecret), 900_000_001, []string{api.ScopePayment}, time.Hour, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

func authed[T any](msg *T, tok string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	r.Header().Set("Authorization", "Bearer "+tok)
	return r
}

// activity creates an activity through the API.
func (s *system) activity(id, stock int64, paymentTimeout, ttl time.Duration) {
	s.t.Helper()
	now := time.Now()
	_, err := s.admin.CreateActivity(context.Background(), authed(&seckillv1.CreateActivityRequest{
		ActivityId: id, SkuId: 1, Stock: stock,
		StartsAt: tsOf(now.Add(-time.Minute)), EndsAt: tsOf(now.Add(time.Hour)),
		PaymentTimeout: durOf(paymentTimeout), ReservationTtl: durOf(ttl),
	}, s.token(1, true)))
	if err != nil {
		s.t.Fatal(err)
	}
}

func (s *system) place(ctx context.Context, user, activity int64, requestID string) (*seckillv1.PlaceOrderResponse, error) {
	res, err := s.orders.PlaceOrder(ctx, authed(&seckillv1.PlaceOrderRequest{
		ActivityId: activity, SkuId: 1, RequestId: requestID}, s.token(user, false)))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func (s *system) getOrder(user int64, orderID string) (*seckillv1.Order, error) {
	res, err := s.orders.GetOrder(context.Background(), authed(&seckillv1.GetOrderRequest{OrderId: orderID}, s.token(user, false)))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetOrder(), nil
}

func (s *system) report(activity int64) *seckillv1.StockReport {
	s.t.Helper()
	res, err := s.admin.GetStockReport(context.Background(), authed(&seckillv1.GetStockReportRequest{
		ActivityId: activity, SkuId: 1}, s.token(1, true)))
	if err != nil {
		s.t.Fatal(err)
	}
	return res.Msg.GetReport()
}

// count runs a counting query.
func (s *system) count(query string, args ...any) int64 {
	s.t.Helper()
	var n int64
	if err := s.db.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		s.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// eventually polls cond every 100ms until it holds or the deadline passes
// (a bound on waiting, not a timing assertion: the failure message says
// what never happened).
func (s *system) eventually(within time.Duration, what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("never happened within %s: %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unpublishedOwed counts the outbox rows the relay owes the broker now
// (pgtest.OwedOutbox).
func (s *system) unpublishedOwed() int64 {
	s.t.Helper()
	plug, err := brokers.Lookup(s.cfg.Broker.Name)
	if err != nil {
		s.t.Fatal(err)
	}
	n, err := pgtest.OwedOutbox(context.Background(), s.db, !plug.Features().DelayedDelivery)
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// settled waits until activity's books balance at rest: no unresolved
// reservation, nothing owed from the outbox (unpublishedOwed), and drift
// 0.
func (s *system) settled(activity int64, within time.Duration) *seckillv1.StockReport {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		rep := s.report(activity)
		unpublished := s.unpublishedOwed()
		if rep.GetPendingReservations() == 0 && rep.GetReleasesInFlight() == 0 && rep.GetDrift() == 0 && unpublished == 0 {
			return rep
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("activity %d did not settle within %s: report %v, unpublished outbox rows %d",
				activity, within, rep, unpublished)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// invariants checks I1-I7 for activity on the state at rest.
func (s *system) invariants(activity int64) {
	s.t.Helper()
	rep := s.settled(activity, 90*time.Second)
	initial := rep.GetInitialStock()
	live := s.count(`SELECT count(*) FROM orders WHERE activity_id = $1 AND status <> 'CANCELED'`, activity)
	if live > initial {
		s.t.Errorf("I1: %d live orders > stock %d", live, initial)
	}
	if rep.GetRedisAvailable() < 0 || rep.GetPgFinalStock() < 0 {
		s.t.Errorf("I1: negative stock: redis %d pg %d", rep.GetRedisAvailable(), rep.GetPgFinalStock())
	}
	if n := s.count(`SELECT count(*) FROM (SELECT user_id FROM orders WHERE activity_id = $1 AND status <> 'CANCELED'
		GROUP BY user_id HAVING count(*) > 1) d`, activity); n != 0 {
		s.t.Errorf("I2: %d users hold more than one live order", n)
	}
	if n := s.count(`SELECT count(*) FROM (SELECT message_id FROM inventory_ledger WHERE activity_id = $1
		AND reason = 'ORDER_CREATED' GROUP BY message_id HAVING count(*) > 1) d`, activity); n != 0 {
		s.t.Errorf("I3: %d messages with more than one effect", n)
	}
	if n := s.count(`SELECT count(*) FROM (SELECT reservation_id FROM inventory_ledger WHERE activity_id = $1
		GROUP BY reservation_id, reason HAVING count(*) > 1) d`, activity); n != 0 {
		s.t.Errorf("I4: %d reservations with doubled ledger effects", n)
	}
	if n := s.count(`SELECT count(*) FROM order_events p JOIN order_events c ON c.aggregate_id = p.aggregate_id
		WHERE p.event_type = 'ORDER_PAID' AND c.event_type = 'ORDER_CANCELED'`); n != 0 {
		s.t.Errorf("I5: %d paid orders canceled", n)
	}
	if rep.GetDrift() != 0 || rep.GetRedisAvailable()+live != initial {
		s.t.Errorf("I6: initial %d != redis available %d + live orders %d (report %v)", initial, rep.GetRedisAvailable(), live, rep)
	}
	if pg := rep.GetPgFinalStock(); pg+live != initial {
		s.t.Errorf("PostgreSQL books: final stock %d + live orders %d != %d", pg, live, initial)
	}
	// I7: nothing acknowledged is left undecided.
	if n := s.count(`SELECT count(*) FROM reservation_outcomes WHERE status = 'PROCESSING'`); n != 0 {
		s.t.Errorf("I7: %d reservations stuck PROCESSING", n)
	}
}

// metric sums the samples of /metrics whose line starts with name and
// contains every one of the label fragments (for example
// `result="stale"`).
func (s *system) metric(name string, fragments ...string) float64 {
	s.t.Helper()
	res, err := s.http.Get("http://" + s.app.OpsAddr().String() + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	var sum float64
lines:
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, f := range fragments {
			if !strings.Contains(line, f) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			s.t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// concurrently runs f(i) for i in [0, n) on workers goroutines.
func concurrently(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

func tsOf(t time.Time) *timestamppb.Timestamp    { return timestamppb.New(t) }
func durOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

var _ = ports.ErrNotFound
