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
)

// scriptNames lists every script; each is lua/<name>.lua.
func scriptNames() []string {
	return []string{
		scriptSeed, scriptReserve, scriptMarkSent, scriptMarkSentMany, scriptScheduleRetry, scriptRelease,
		scriptReleaseMany, scriptMarkOrdered, scriptClaimDue, scriptClaimRequest, scriptForgetRequest, scriptViewApply, scriptInventory,
		scriptRebuild, scriptFinishRecovery,
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

// run executes a script by SHA (EVALSHA) and falls back to EVAL when Redis
// answers NOSCRIPT (goredis.Script.Run), recording its duration.
func (s *Store) run(ctx context.Context, name string, keys []string, args ...any) *goredis.Cmd {
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
