package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
	"github.com/seckill-dev/seckill/ports"
)

// useStack points the commands' configuration (the SECKILL_* environment)
// at a fresh database, Redis namespace and broker namespace of the real
// stack.
func useStack(t *testing.T) {
	t.Helper()
	mq := mqtest.NewEnv(t)
	rc, ns := redistest.New(t)
	for k, v := range map[string]string{
		"SECKILL_HTTP_ADDR":         "127.0.0.1:0",
		"SECKILL_OPS_ADDR":          "127.0.0.1:0",
		"SECKILL_AUTH_SECRET":       secret,
		"SECKILL_LOCAL_STACK":       "true",
		"SECKILL_PG_DSN":            pgtest.NewDatabase(t),
		"SECKILL_REDIS_ADDR":        os.Getenv("SECKILL_REDIS_ADDR"),
		"SECKILL_REDIS_NAMESPACE":   ns,
		"SECKILL_REDIS_DB":          strconv.Itoa(rc.Options().DB),
		"SECKILL_ROCKETMQ_ENDPOINT": mq.Config.Endpoint,
		"SECKILL_TOPIC_PREFIX":      mq.Prefix,
		"SECKILL_ROCKETMQ_LOG_DIR":  mq.Config.ClientLogDir,
		"SECKILL_LOG_LEVEL":         "warn",
	} {
		t.Setenv(k, v)
	}
}

// secret is SECKILL_AUTH_SECRET of useStack.
const secret = "cmd-test-secret-0123456789"

// mint returns a token of user signed with key (admin scope when
// admin).
func mint(t *testing.T, key string, user int64, admin bool) string {
	t.Helper()
	tok, err := api.MintToken([]byte(key), user, admin, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// auditRow is one row of admin_audit.
type auditRow struct {
	Actor, Action, Target, Outcome string
	Params                         map[string]any
}

// auditLog reads admin_audit of the stack's database, oldest first.
func auditLog(t *testing.T) []auditRow {
	t.Helper()
	db := pgtest.Pool(t, os.Getenv("SECKILL_PG_DSN"))
	rows, err := db.Query(t.Context(), `SELECT actor, action, target, outcome, params FROM admin_audit ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (auditRow, error) {
		var a auditRow
		err := r.Scan(&a.Actor, &a.Action, &a.Target, &a.Outcome, &a.Params)
		return a, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReconcilePrintsTheReport runs `seckill reconcile` with two
// activities, created with settings finer than a microsecond (each
// creation repeated: idempotent), and decodes the JSON report it prints:
// one drift row per activity SKU, both balanced.
func TestReconcilePrintsTheReport(t *testing.T) {
	useStack(t)
	ctx := t.Context()
	now := time.Now()
	if err := withApp(ctx, func(app *bootstrap.App) error {
		for _, id := range []int64{7, 8} {
			act := ports.Activity{ActivityID: id, SKUID: 1, Stock: 5, StartsAt: now, EndsAt: now.Add(time.Hour),
				PaymentTimeout: 1500 * time.Nanosecond, ReservationTTL: time.Minute + 500*time.Nanosecond}
			for range 2 {
				if _, err := app.Admin.CreateActivity(ctx, ports.UserActor(3), act); err != nil {
					return err
				}
			}
			if r, err := app.Admin.GetStockReport(ctx, id, 1); err != nil || r.RedisAvailable != 5 {
				return fmt.Errorf("activity %d not seeded: %+v, %v", id, r, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"reconcile", "--token", mint(t, secret, 4, true)}, &out); err != nil {
		t.Fatalf("seckill reconcile: %v", err)
	}
	var rep application.ReconcileReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out.String())
	}
	slices.SortFunc(rep.Drift, func(a, b application.SKUDrift) int { return int(a.ActivityID - b.ActivityID) })
	want := []application.SKUDrift{{ActivityID: 7, SKUID: 1}, {ActivityID: 8, SKUID: 1}}
	if !slices.Equal(rep.Drift, want) || rep.Examined != 0 {
		t.Fatalf("report %+v, want drift rows %+v and nothing examined", rep, want)
	}
}

// TestProjectionRebuildCommand runs `seckill projection rebuild` on an
// empty order history and rejects a missing subcommand.
func TestProjectionRebuildCommand(t *testing.T) {
	useStack(t)
	t.Setenv("SECKILL_OPERATOR_TOKEN", mint(t, secret, 4, true))
	var out bytes.Buffer
	if err := run(t.Context(), []string{"projection", "rebuild"}, &out); err != nil {
		t.Fatalf("seckill projection rebuild: %v", err)
	}
	if got := out.String(); got != "views rebuilt: 0\n" {
		t.Fatalf("output %q", got)
	}
	if err := run(t.Context(), []string{"projection"}, &out); clikit.ExitCode(err) != 2 || !strings.Contains(err.Error(), "needs a command: rebuild") {
		t.Fatalf("missing subcommand: %v", err)
	}
}

// stateChanging are the commands that must run as an admin operator; the
// dlq replay would reach no API (nothing listens on port 1).
var stateChanging = [][]string{
	{"reconcile"},
	{"projection", "rebuild"},
	{"dlq", "replay", "--addr", "127.0.0.1:1", "--id", "1", "--reason", "fixed"},
	{"activity", "pause", "--addr", "127.0.0.1:1", "--activity", "1"},
	{"activity", "resume", "--addr", "127.0.0.1:1", "--activity", "1"},
	{"activity", "close", "--addr", "127.0.0.1:1", "--activity", "1"},
	{"activity", "update", "--addr", "127.0.0.1:1", "--activity", "1", "--ends-at", "now+1h"},
	{"activity", "add-stock", "--addr", "127.0.0.1:1", "--activity", "1", "--quantity", "1", "--request-id", "r"},
	{"activity", "remove-stock", "--addr", "127.0.0.1:1", "--activity", "1", "--quantity", "1", "--request-id", "r"},
	{"activity", "create", "--addr", "127.0.0.1:1", "--activity", "1", "--stock", "1", "--starts-at", "now", "--ends-at", "now+1h"},
}

// TestStateChangingCommandsRefuseWithoutAnAdminToken: without a token, with
// a buyer's token, an expired one or one signed with another secret, each
// state-changing command refuses with a message naming the problem, and
// nothing is audited.
func TestStateChangingCommandsRefuseWithoutAnAdminToken(t *testing.T) {
	useStack(t)
	t.Setenv("SECKILL_OPERATOR_TOKEN", "")
	expired, err := api.MintToken([]byte(secret), 4, true, time.Minute, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, token, want string
	}{
		{"no token", "", "SECKILL_OPERATOR_TOKEN"},
		{"buyer token", mint(t, secret, 4, false), "admin scope is required"},
		{"expired token", expired, "operator token refused"},
		{"foreign secret", mint(t, "another-secret-0123456789", 4, true), "operator token refused"},
	}
	for _, c := range cases {
		for _, args := range stateChanging {
			args := slices.Clone(args)
			if c.token != "" {
				args = append(args, "--token", c.token)
			}
			var out bytes.Buffer
			err := run(t.Context(), args, &out)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s: seckill %s = %v, want a refusal mentioning %q", c.name, strings.Join(args, " "), err, c.want)
			}
			if out.Len() != 0 {
				t.Fatalf("%s: seckill %s printed %q", c.name, strings.Join(args, " "), out.String())
			}
		}
	}
	// The environment variable is refused alike.
	t.Setenv("SECKILL_OPERATOR_TOKEN", mint(t, secret, 4, false))
	if err := run(t.Context(), []string{"reconcile"}, io.Discard); err == nil || !strings.Contains(err.Error(), "admin scope") {
		t.Fatalf("reconcile with a buyer token in the environment: %v", err)
	}
	if rows := auditLog(t); len(rows) != 0 {
		t.Fatalf("refused commands audited %+v", rows)
	}
}

// serveAPI serves the API (no workers) of the stack's configuration and
// returns its address.
func serveAPI(t *testing.T) string {
	t.Helper()
	cfg, log, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	app, cleanup, err := bootstrap.NewApp(ctx, cfg, log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	app.Workers = nil
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, func(a net.Addr) { addrc <- a }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("API server: %v", err)
		}
		cleanup()
	})
	select {
	case a := <-addrc:
		return a.String()
	case err := <-done:
		t.Fatalf("API server stopped: %v", err)
		return ""
	}
}

// TestCommandsAuditTheOperator: with an admin token (flag or environment)
// each state-changing command runs and writes exactly one audit row under
// the token's user: a reconcile pass, a projection rebuild, and a dlq
// replay through the API (of an unknown dead letter: NOT_FOUND).
func TestCommandsAuditTheOperator(t *testing.T) {
	useStack(t)
	t.Setenv("SECKILL_OPERATOR_TOKEN", "")
	tok := mint(t, secret, 42, true)
	if err := run(t.Context(), []string{"reconcile", "--token", tok}, io.Discard); err != nil {
		t.Fatalf("seckill reconcile: %v", err)
	}
	t.Setenv("SECKILL_OPERATOR_TOKEN", tok)
	if err := run(t.Context(), []string{"projection", "rebuild"}, io.Discard); err != nil {
		t.Fatalf("seckill projection rebuild: %v", err)
	}
	addr := serveAPI(t)
	err := run(t.Context(), []string{"dlq", "replay", "--addr", addr, "--id", "424242", "--reason", "operator test"}, io.Discard)
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("seckill dlq replay of an unknown id: %v, want NotFound", err)
	}
	if err := run(t.Context(), []string{"dlq", "list", "--addr", addr}, io.Discard); err != nil {
		t.Fatalf("seckill dlq list: %v", err)
	}
	want := []auditRow{
		{Actor: "user:42", Action: ports.AuditReconcile, Outcome: ports.AuditOK},
		{Actor: "user:42", Action: ports.AuditProjectionRebuild, Outcome: ports.AuditOK},
		{Actor: "user:42", Action: ports.AuditDLQReplay, Target: "dead_letter:424242", Outcome: ports.AuditNotFound},
	}
	got := auditLog(t)
	if len(got) != len(want) {
		t.Fatalf("audit rows %+v, want %+v", got, want)
	}
	for i, w := range want {
		g := got[i]
		if g.Actor != w.Actor || g.Action != w.Action || g.Target != w.Target || g.Outcome != w.Outcome {
			t.Fatalf("audit row %d = %+v, want %+v", i, g, w)
		}
	}
	if got[1].Params["views"] != float64(0) || got[2].Params["reason"] != "operator test" {
		t.Fatalf("audited params %v, %v", got[1].Params, got[2].Params)
	}
}
