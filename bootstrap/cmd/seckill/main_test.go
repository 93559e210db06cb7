package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap"
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
		"SECKILL_AUTH_SECRET":       "cmd-test-secret-0123456789",
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

// TestReconcilePrintsTheReport runs `seckill reconcile` with two
// activities and decodes the JSON report it prints: one drift row per
// activity SKU, both balanced.
func TestReconcilePrintsTheReport(t *testing.T) {
	useStack(t)
	ctx := t.Context()
	now := time.Now()
	if err := withApp(ctx, func(app *bootstrap.App) error {
		for _, id := range []int64{7, 8} {
			if _, err := app.Admin.CreateActivity(ctx, ports.Activity{ActivityID: id, SKUID: 1, Stock: 5,
				StartsAt: now, EndsAt: now.Add(time.Hour), PaymentTimeout: time.Minute, ReservationTTL: time.Minute}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"reconcile"}, &out); err != nil {
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
	var out bytes.Buffer
	if err := run(t.Context(), []string{"projection", "rebuild"}, &out); err != nil {
		t.Fatalf("seckill projection rebuild: %v", err)
	}
	if got := out.String(); got != "views rebuilt: 0\n" {
		t.Fatalf("output %q", got)
	}
	if err := run(t.Context(), []string{"projection"}, &out); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Fatalf("missing subcommand: %v", err)
	}
}
