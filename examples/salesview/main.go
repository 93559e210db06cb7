// Command salesview is the example consumer of seckill's order events: it
// subscribes to seckill.v1.EventService/Subscribe through the consumer kit
// (adapters/projector), keeps the sales view of package view in its own
// PostgreSQL database and serves it as JSON. README.md is the tutorial.
//
// Flags (each with its environment variable):
//
//	--api      SALESVIEW_API      seckill's API (default http://127.0.0.1:7080; h2c for http://)
//	--token    SALESVIEW_TOKEN    a bearer token with the events scope (required)
//	--pg-dsn   SALESVIEW_PG_DSN   the view's database (default the local stack's server, database salesview;
//	                              created if missing, through the server's postgres database)
//	--version  SALESVIEW_VERSION  the view's version to build and serve (default 1)
//	--http     SALESVIEW_HTTP     the JSON listener (default 127.0.0.1:7090)
//
// SALESVIEW_FAILPOINT=before-checkpoint makes the first batch with an event
// print "salesview: failpoint before-checkpoint reached at position <P>" on
// stderr and block, inside its transaction, until the process is killed
// (crash tests). SIGINT and SIGTERM stop it gracefully; it also exits (0)
// when a newer version of the view has become active, and exits 1 with an
// error naming --token when the service refuses the token
// (Unauthenticated, PermissionDenied). Other stream errors are retried by
// the kit (backoff, resubscribe from the checkpoint).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckill-dev/seckill/adapters/projector"
	"github.com/seckill-dev/seckill/examples/salesview/view"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// Defaults of the flags.
const (
	defaultAPI   = "http://127.0.0.1:7080"
	defaultPGDSN = "postgres://seckill:seckill@127.0.0.1:55432/salesview?sslmode=disable"
	defaultHTTP  = "127.0.0.1:7090"
	// failpointBeforeCheckpoint is the one SALESVIEW_FAILPOINT value.
	failpointBeforeCheckpoint = "before-checkpoint"
	// defaultHistory is the number of orders /buyers/{id}/orders returns
	// without ?limit.
	defaultHistory = 50
	// setupTimeout bounds creating the database and connecting to it.
	setupTimeout = 30 * time.Second
	// requestTimeout bounds one HTTP request's queries.
	requestTimeout = 10 * time.Second
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

// config is the parsed command line.
type config struct {
	api, token, dsn, http, failpoint string
	version                          int
}

// parseConfig reads the flags, with the environment as their defaults.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var c config
	fs := flag.NewFlagSet("salesview", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.api, "api", env("SALESVIEW_API", defaultAPI), "seckill's API base URL (SALESVIEW_API)")
	fs.StringVar(&c.token, "token", getenv("SALESVIEW_TOKEN"), "bearer token with the events scope (SALESVIEW_TOKEN; required)")
	fs.StringVar(&c.dsn, "pg-dsn", env("SALESVIEW_PG_DSN", defaultPGDSN), "the view's PostgreSQL database (SALESVIEW_PG_DSN)")
	fs.StringVar(&c.http, "http", env("SALESVIEW_HTTP", defaultHTTP), "listen address of the JSON API (SALESVIEW_HTTP)")
	version := env("SALESVIEW_VERSION", "1")
	fs.StringVar(&version, "version", version, "the view's version to build and serve, >= 1 (SALESVIEW_VERSION)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.version, err = strconv.Atoi(version); err != nil || c.version < 1 {
		return c, fmt.Errorf("--version %q: must be an integer >= 1", version)
	}
	if c.token == "" {
		return c, errors.New("--token (SALESVIEW_TOKEN) is required: mint one with `seckill token --events --user N`")
	}
	u, err := url.Parse(c.api)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, fmt.Errorf("--api %q: must be an http:// or https:// URL", c.api)
	}
	if _, err := pgx.ParseConfig(c.dsn); err != nil {
		return c, fmt.Errorf("--pg-dsn: %w", err)
	}
	switch c.failpoint = getenv("SALESVIEW_FAILPOINT"); c.failpoint {
	case "", failpointBeforeCheckpoint:
	default:
		return c, fmt.Errorf("SALESVIEW_FAILPOINT %q: the only failpoint is %q", c.failpoint, failpointBeforeCheckpoint)
	}
	return c, nil
}

// run is the program; it returns the exit code.
func run(args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "salesview: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tr := &http.Transport{Protocols: protocols(cfg.api)}
	defer tr.CloseIdleConnections()
	token := cfg.token
	src := &projector.Subscription{
		Client: seckillv1connect.NewEventServiceClient(&http.Client{Transport: tr}, cfg.api),
		Token:  func(context.Context) (string, error) { return token, nil },
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.http)
	if err != nil {
		log.Error("salesview: --http", "addr", cfg.http, "error", err)
		return 1
	}
	if err := serve(ctx, cfg, src, ln, log, stderr); err != nil {
		log.Error("salesview: stopped", "error", err)
		return 1
	}
	return 0
}

// serve projects src into the view and serves its JSON API on ln until ctx
// ends or a newer version becomes active (both nil); it closes ln.
func serve(ctx context.Context, cfg config, src projector.Source, ln net.Listener, log *slog.Logger, stderr io.Writer) error {
	defer func() { _ = ln.Close() }()
	setupCtx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if err := ensureDatabase(setupCtx, cfg.dsn); err != nil {
		return err
	}
	pool, err := pgxpool.New(setupCtx, cfg.dsn)
	if err != nil {
		return fmt.Errorf("open the view's database: %w", err)
	}
	defer pool.Close()
	store := projector.NewStore(pool)
	if err := store.Migrate(setupCtx); err != nil {
		return fmt.Errorf("migrate the kit's tables: %w", err)
	}

	h := &handler{Handler: view.Handler{OnPaid: func(_ context.Context, v projector.View, e *seckillv1.OrderEvent) {
		// The example's side effect: where a real consumer would mail a
		// receipt. Never called while the version is rebuilding.
		log.Debug("salesview: order paid", "version", v.Version, "order_id", e.GetOrderId(), "user_id", e.GetUserId())
	}}}
	opt := projector.Options{Name: view.Name, Version: cfg.version, Logger: log}
	if cfg.failpoint == failpointBeforeCheckpoint {
		opt.BeforeCheckpoint = h.failpoint(stderr)
	}
	retry := func(ctx context.Context, orderID string) (int, error) {
		return projector.RetryParked(ctx, h, store, opt, orderID)
	}
	srv := &http.Server{
		Handler:           routes(pool, store, cfg.version, log, retry),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("salesview: http listener failed", "error", err)
		}
	})
	defer func() {
		shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutCtx); err != nil {
			_ = srv.Close()
		}
		wg.Wait()
	}()
	log.Info("salesview: serving", "version", cfg.version, "http", ln.Addr().String(), "api", cfg.api)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	live := &liveLog{src: src, log: log, version: cfg.version, refused: stopRun}
	err = projector.Run(runCtx, live, h, store, opt)
	if refused := live.refusal(); refused != nil && ctx.Err() == nil {
		return fmt.Errorf("seckill refused the subscription (check --token: a token with the events scope, not expired): %w", refused)
	}
	switch {
	case errors.Is(err, projector.ErrSuperseded):
		active, _, aerr := store.Active(context.WithoutCancel(ctx), view.Name)
		log.Info("salesview: a newer version is active; exiting", "version", cfg.version, "active", active, "active_error", aerr)
		return nil
	case err != nil:
		return fmt.Errorf("projection version %d: %w", cfg.version, err)
	}
	log.Info("salesview: stopping", "version", cfg.version)
	return nil
}

// protocols is HTTP/2 cleartext (h2c, prior knowledge) for an http:// API,
// as seckill's own clients use it, and HTTP/2 or 1.1 over TLS for https://.
func protocols(api string) *http.Protocols {
	p := new(http.Protocols)
	if u, err := url.Parse(api); err == nil && u.Scheme == "https" {
		p.SetHTTP1(true)
		p.SetHTTP2(true)
		return p
	}
	p.SetUnencryptedHTTP2(true)
	return p
}

// ensureDatabase creates the database of dsn when it does not exist, by
// connecting to the same server's postgres database. A database created at
// the same moment by another process (version 2 started beside 1) is fine.
func ensureDatabase(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("--pg-dsn: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name: no such database
		return fmt.Errorf("connect to database %s on %s: %w", cfg.Database, cfg.Host, err)
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to database postgres on %s to create %s: %w", cfg.Host, cfg.Database, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize())
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: created meanwhile
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s on %s: %w", cfg.Database, cfg.Host, err)
	}
	return nil
}

// handler is the view's Handler with the crash-test failpoint: it counts
// the events applied since the last checkpoint.
type handler struct {
	view.Handler
	applied atomic.Int64
	fired   atomic.Bool
}

// Apply counts e and applies it.
func (h *handler) Apply(ctx context.Context, tx pgx.Tx, v projector.View, e *seckillv1.OrderEvent) error {
	h.applied.Add(1)
	return h.Handler.Apply(ctx, tx, v, e)
}

// failpoint returns the BeforeCheckpoint of SALESVIEW_FAILPOINT=before-checkpoint:
// the first batch with at least one event applied prints the failpoint's
// line and blocks until ctx ends (the process is killed or stopped), so
// its transaction never commits.
func (h *handler) failpoint(stderr io.Writer) func(ctx context.Context, position int64) error {
	return func(ctx context.Context, position int64) error {
		if h.applied.Swap(0) == 0 || h.fired.Swap(true) {
			return nil
		}
		fmt.Fprintf(stderr, "salesview: failpoint before-checkpoint reached at position %d\n", position)
		<-ctx.Done()
		return ctx.Err()
	}
}

// liveLog is a Source that logs once when the subscription first reaches
// the log's head (its first live checkpoint), and stops the program when
// the service refuses the token: the kit resubscribes after any stream
// error, but no retry fixes a missing, expired or under-scoped token.
type liveLog struct {
	src     projector.Source
	log     *slog.Logger
	version int
	refused context.CancelFunc // ends Run
	live    atomic.Bool
	mu      sync.Mutex
	err     error // the refusal, once
}

// Stream streams src and logs the first live checkpoint. An Unauthenticated
// or PermissionDenied stream error is recorded and ends Run.
func (l *liveLog) Stream(ctx context.Context, from int64, fn func(context.Context, projector.Item) error) error {
	err := l.src.Stream(ctx, from, func(ctx context.Context, it projector.Item) error {
		if it.Event == nil && it.Live && !l.live.Swap(true) {
			l.log.Info("salesview: live: caught up with the log's head",
				"version", l.version, "position", it.Position)
		}
		return fn(ctx, it)
	})
	if c := connect.CodeOf(err); err != nil && (c == connect.CodeUnauthenticated || c == connect.CodePermissionDenied) {
		l.mu.Lock()
		if l.err == nil {
			l.err = err
		}
		l.mu.Unlock()
		l.refused()
	}
	return err
}

// refusal is the token's refusal that ended Run, nil when none.
func (l *liveLog) refusal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// routes is the JSON API over the active version of the view (and this
// process's version for /parked).
func routes(pool *pgxpool.Pool, store *projector.Store, version int, log *slog.Logger,
	retry func(ctx context.Context, orderID string) (int, error)) http.Handler {
	mux := http.NewServeMux()
	active := func(w http.ResponseWriter, r *http.Request) (context.Context, context.CancelFunc, projector.View, bool) {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		v, err := view.ActiveView(ctx, store, view.Name)
		if err != nil {
			fail(w, log, err)
			cancel()
			return nil, nil, v, false
		}
		return ctx, cancel, v, true
	}
	mux.HandleFunc("GET /activities", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel, v, ok := active(w, r)
		if !ok {
			return
		}
		defer cancel()
		totals, err := view.Totals(ctx, pool, v)
		if err != nil {
			fail(w, log, err)
			return
		}
		list := make([]view.Total, 0, len(totals))
		for _, t := range totals {
			list = append(list, t)
		}
		slices.SortFunc(list, func(a, b view.Total) int { return cmp.Compare(a.ActivityID, b.ActivityID) })
		writeJSON(w, http.StatusOK, map[string]any{"version": v.Version, "activities": list})
	})
	mux.HandleFunc("GET /activities/{id}/minutes", func(w http.ResponseWriter, r *http.Request) {
		id, ok := positiveID(w, r)
		if !ok {
			return
		}
		ctx, cancel, v, ok := active(w, r)
		if !ok {
			return
		}
		defer cancel()
		minutes, err := view.Minutes(ctx, pool, v, id)
		if err != nil {
			fail(w, log, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"version": v.Version, "activity_id": id, "minutes": nonNil(minutes)})
	})
	mux.HandleFunc("GET /buyers/{id}/orders", func(w http.ResponseWriter, r *http.Request) {
		id, ok := positiveID(w, r)
		if !ok {
			return
		}
		limit := defaultHistory
		if s := r.URL.Query().Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > view.MaxHistory {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("limit: must be an integer between 1 and %d", view.MaxHistory))
				return
			}
			limit = n
		}
		ctx, cancel, v, ok := active(w, r)
		if !ok {
			return
		}
		defer cancel()
		orders, err := view.History(ctx, pool, v, id, limit)
		if err != nil {
			fail(w, log, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"version": v.Version, "user_id": id, "orders": nonNil(orders)})
	})
	mux.HandleFunc("GET /parked", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		parked, err := store.Parked(ctx, view.Name, version)
		if err != nil {
			fail(w, log, err)
			return
		}
		type row struct {
			Position  int64     `json:"position"`
			OrderID   string    `json:"order_id"`
			EventID   string    `json:"event_id"`
			EventType string    `json:"event_type"`
			Error     string    `json:"error"`
			Attempts  int       `json:"attempts"`
			ParkedAt  time.Time `json:"parked_at"`
		}
		rows := make([]row, 0, len(parked))
		for _, p := range parked {
			rows = append(rows, row{p.Position, p.OrderID, p.EventID, p.EventType, p.Error, p.Attempts, p.ParkedAt.UTC()})
		}
		writeJSON(w, http.StatusOK, map[string]any{"version": version, "parked": rows})
	})
	mux.HandleFunc("POST /parked/{order}/retry", func(w http.ResponseWriter, r *http.Request) {
		order := r.PathValue("order")
		if order == "" || len(order) > 64 {
			writeError(w, http.StatusBadRequest, "order: must be an order id (ord_...)")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		n, err := retry(ctx, order)
		if err != nil {
			fail(w, log, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"version": version, "order_id": order, "applied": n})
	})
	return mux
}

// positiveID reads the path's {id}, answering 400 when it is not a positive
// integer.
func positiveID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		writeError(w, http.StatusBadRequest, "id: must be a positive integer")
		return 0, false
	}
	return id, true
}

// fail answers an error: 503 while no version is active, 409 for a retry of
// a superseded version, 500 (logged, not shown) otherwise.
func fail(w http.ResponseWriter, log *slog.Logger, err error) {
	switch {
	case errors.Is(err, view.ErrNoActiveView):
		writeError(w, http.StatusServiceUnavailable, view.ErrNoActiveView.Error())
		return
	case errors.Is(err, projector.ErrSuperseded):
		writeError(w, http.StatusConflict, "a newer version of the view is active: retry its parked events there")
		return
	}
	log.Error("salesview: request failed", "error", err)
	writeError(w, http.StatusInternalServerError, "internal error")
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
