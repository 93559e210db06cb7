package redis

import (
	"context"
	"embed"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

//go:embed lua/*.lua
var luaFS embed.FS

// Script names, also the values of the script label of
// redis_script_duration_seconds.
const (
	scriptSeed           = "seed"
	scriptReserve        = "reserve"
	scriptMarkSent       = "mark_sent"
	scriptMarkSentMany   = "mark_sent_many"
	scriptScheduleRetry  = "schedule_retry"
	scriptRelease        = "release"
	scriptReleaseMany    = "release_many"
	scriptMarkOrdered    = "mark_ordered"
	scriptClaimDue       = "claim_due"
	scriptClaimRequest   = "claim_request"
	scriptForgetRequest  = "forget_request"
	scriptViewApply      = "view_apply"
	scriptInventory      = "inventory"
	scriptRebuild        = "rebuild"
	scriptFinishRecovery = "finish_recovery"
	scriptTransferOut    = "transfer_out"
	scriptTransferIn     = "transfer_in"
	scriptTransferDone   = "transfer_done"
	scriptFreezeLane     = "freeze_lane"
	scriptOpenLane       = "open_lane"
	scriptStockChange    = "stock_change"
	scriptHeartbeat      = "heartbeat"
)

// scriptNames lists every script; each is lua/<name>.lua.
func scriptNames() []string {
	return []string{
		scriptSeed, scriptReserve, scriptMarkSent, scriptMarkSentMany, scriptScheduleRetry, scriptRelease,
		scriptReleaseMany, scriptMarkOrdered, scriptClaimDue, scriptClaimRequest, scriptForgetRequest, scriptViewApply, scriptInventory,
		scriptRebuild, scriptFinishRecovery, scriptTransferOut, scriptTransferIn, scriptTransferDone,
		scriptFreezeLane, scriptOpenLane, scriptStockChange, scriptHeartbeat,
	}
}

// scripts holds the loaded Lua scripts of one Store.
type scripts struct {
	byName map[string]*goredis.Script
}

func loadScripts() (scripts, error) {
	names := scriptNames()
	s := scripts{byName: make(map[string]*goredis.Script, len(names))}
	for _, name := range names {
		src, err := luaFS.ReadFile("lua/" + name + ".lua")
		if err != nil {
			return scripts{}, fmt.Errorf("read script %s: %w", name, err)
		}
		s.byName[name] = goredis.NewScript(string(src))
	}
	return s, nil
}

// Bounds of run's own retries of a script refused during a slot migration.
const (
	// migrationRetries is how many times run calls a refused script again.
	migrationRetries = 20
	// migrationBackoffMax caps the pause before each of those calls, which
	// starts at 1ms and doubles: 20 retries wait about 1.5s in all.
	migrationBackoffMax = 100 * time.Millisecond
)

// run executes a script by SHA (EVALSHA) and falls back to EVAL when Redis
// answers NOSCRIPT (goredis.Script.Run), recording its duration.
//
// On Redis Cluster, while the hash slot of the script's keys migrates,
// Redis refuses a script whose keys are not all on one side (TRYAGAIN; a
// new reservation's hash is never present, so reserve is refused for the
// whole migration) and the client may run out of redirections (MOVED or
// ASK after goredis.ClusterOptions.MaxRedirects). A refused script did not
// run, so run calls it again, at most migrationRetries times with a
// doubling pause (1ms up to migrationBackoffMax), until ctx ends; the last
// refusal is returned (wrapErr marks it ports.ErrTransient). On a single
// node none of these errors occurs and run calls the script once.
func (s *Store) run(ctx context.Context, name string, keys []string, args ...any) *goredis.Cmd {
	cmd := s.runOnce(ctx, name, keys, args...)
	pause := time.Millisecond
	for range migrationRetries {
		if !refusedDuringMigration(cmd.Err()) {
			return cmd
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return cmd
		case <-t.C:
		}
		pause = min(2*pause, migrationBackoffMax)
		cmd = s.runOnce(ctx, name, keys, args...)
	}
	return cmd
}

// refusedDuringMigration reports whether err is Redis Cluster refusing a
// command for a slot in migration: TRYAGAIN, MOVED or ASK.
func refusedDuringMigration(err error) bool {
	if err == nil {
		return false
	}
	if goredis.IsTryAgainError(err) {
		return true
	}
	if _, ok := goredis.IsMovedError(err); ok {
		return true
	}
	_, ok := goredis.IsAskError(err)
	return ok
}

// runOnce is one goredis.Script.Run of the script, traced and timed.
func (s *Store) runOnce(ctx context.Context, name string, keys []string, args ...any) *goredis.Cmd {
	if s.tracer != nil {
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, "redis "+name, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", "EVALSHA"),
				attribute.String("seckill.script", name)))
		defer span.End()
	}
	start := time.Now()
	cmd := s.scripts.byName[name].Run(ctx, s.client, keys, args...)
	s.metrics.observeScript(name, time.Since(start))
	return cmd
}

// Preload loads every script into the script cache of the server(s) the
// client reaches, so that the first calls need no EVAL fallback. Optional:
// scripts are loaded on first use anyway.
func (s *Store) Preload(ctx context.Context) error {
	for _, name := range scriptNames() {
		if err := s.scripts.byName[name].Load(ctx, s.client).Err(); err != nil {
			return wrapErr("load script "+name, err)
		}
	}
	return nil
}
