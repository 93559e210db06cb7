package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// Guard detects a Redis process that is not the verified one before any
// command runs on it (ports.StockBooks). Install Guard.OnConnect as the
// client's OnConnect hook (goredis.Options.OnConnect): after a restart, a
// restore or a failover every connection is new, so the check runs before
// the first reservation on the new process. The generation of a process is
// its run_id (INFO server), which is new at every start.
//
// On a new generation the hook freezes every activity SKU (guard.lua),
// records the generation as pending and lets the connection be used:
// releases, write-backs and resends go on while the books are rebuilt
// (application.StockRecovery). A Guard is safe for concurrent use.
//
// On Redis Cluster install Guard.OnClusterConnect instead (NewClient does):
// the generation is kept per master and only the SKUs of a master that is
// a new process are frozen (clusterguard.go).
type Guard struct {
	keys       keys
	script     *goredis.Script
	skuScript  *goredis.Script
	nodeScript *goredis.Script
	logger     *slog.Logger
	pending    atomic.Bool
	cluster    clusterPending
	wake       chan struct{}
}

// NewGuard returns the guard of namespace ("" means DefaultNamespace).
// logger nil means slog.Default().
func NewGuard(namespace string, logger *slog.Logger) (*Guard, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	if logger == nil {
		logger = slog.Default()
	}
	var src [3]string
	for i, name := range []string{"guard", "guard_sku", "guard_node"} {
		b, err := luaFS.ReadFile("lua/" + name + ".lua")
		if err != nil {
			return nil, fmt.Errorf("read script %s: %w", name, err)
		}
		src[i] = string(b)
	}
	return &Guard{keys: keys{ns: namespace}, script: goredis.NewScript(src[0]),
		skuScript: goredis.NewScript(src[1]), nodeScript: goredis.NewScript(src[2]),
		logger: logger.With("component", "redis-guard"), wake: make(chan struct{}, 1)}, nil
}

// processRunID reads the run_id of the Redis process behind cn (INFO
// server): the process's generation.
func processRunID(ctx context.Context, cn *goredis.Conn) (string, error) {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redis guard: info server: %w", err)
	}
	run := runID(info)
	if run == "" {
		return "", errors.New("redis guard: INFO server has no run_id")
	}
	return run, nil
}

// OnConnect checks the process behind a new connection. It fails the
// connection only when the check itself fails (the command then fails as
// for any connection error); a new generation freezes the stock books and
// succeeds.
func (g *Guard) OnConnect(ctx context.Context, cn *goredis.Conn) error {
	run, err := processRunID(ctx, cn)
	if err != nil {
		return err
	}
	res, err := g.script.Run(ctx, cn, []string{g.keys.generation(), g.keys.slots()},
		run, itoa(time.Now().UnixMilli()), g.keys.ns+":").Text()
	if err != nil {
		return fmt.Errorf("redis guard: %w", err)
	}
	switch res {
	case "OK":
		return nil
	case "FROZEN":
		g.logger.WarnContext(ctx, "redis is a new process: stock books frozen until rebuilt", "generation", run)
	}
	g.markPending()
	return nil
}

func (g *Guard) markPending() {
	g.pending.Store(true)
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Wake is signaled when a connection found a new generation.
func (g *Guard) Wake() <-chan struct{} { return g.wake }

// runID returns the run_id line of an INFO server reply.
func runID(info string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// generation is the hash of the verified and pending Redis generations.
func (k keys) generation() string { return k.ns + ":generation" }

// RecoveryPending implements ports.StockBooks. On a cluster it returns the
// pending generation of one master (the first by node id); the others
// follow in later calls.
func (s *Store) RecoveryPending(ctx context.Context) (string, error) {
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		return s.clusterRecoveryPending(ctx, cc)
	}
	v, err := s.client.HGet(ctx, s.keys.generation(), "pending").Result()
	if errors.Is(err, goredis.Nil) {
		if s.cfg.Guard != nil {
			s.cfg.Guard.pending.Store(false)
		}
		return "", nil
	}
	if err != nil {
		return "", wrapErr("recovery pending", err)
	}
	return v, nil
}

// InFlight implements ports.StockBooks: the reservations of the pending,
// unresolved and pending_created indexes that are neither ORDERED nor
// RELEASED.
func (s *Store) InFlight(ctx context.Context, activityID, skuID int64) ([]reservation.Snapshot, error) {
	sk := s.keys.slot(activityID, skuID)
	seen := map[string]bool{}
	var ids []string
	for _, idx := range []string{sk.unresolved, sk.pending, sk.pendingCreated} {
		got, err := s.client.ZRange(ctx, idx, 0, -1).Result()
		if err != nil {
			return nil, wrapErr("in flight", err)
		}
		for _, id := range got {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	var out []reservation.Snapshot
	for _, id := range ids {
		st, err := s.get(ctx, ports.ReservationRef{ActivityID: activityID, SKUID: skuID, ReservationID: id})
		if errors.Is(err, ports.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if st.Status == reservation.StatusPending || st.Status == reservation.StatusSent {
			out = append(out, st.Snapshot)
		}
	}
	return out, nil
}

// Rebuild implements ports.StockBooks with rebuild.lua.
func (s *Store) Rebuild(ctx context.Context, r ports.StockRebuild) (ports.RebuildResult, error) {
	a := r.Activity
	sk := s.keys.slot(a.ActivityID, a.SKUID)
	ids := make([]string, 0, len(r.InFlight)+len(r.Ordered)+len(r.Released))
	ids = append(append(append(ids, r.InFlight...), r.Ordered...), r.Released...)
	keys := make([]string, 0, 6+len(ids))
	keys = append(keys, sk.rules, sk.stock, sk.holders, sk.pending, sk.unresolved, sk.pendingCreated)
	args := make([]any, 0, 12+len(ids)+2*len(r.Holders))
	args = append(args, r.Generation, itoa(s.now().UnixMilli()), itoa(r.Base),
		itoa(int64(len(r.InFlight))), itoa(int64(len(r.Ordered))), itoa(int64(len(r.Released))),
		itoa(a.Stock), itoa(ms(a.StartsAt)), itoa(ms(a.EndsAt)), itoa(a.ReservationTTL.Milliseconds()),
		itoa(a.PaymentTimeout.Milliseconds()), s.callToken())
	for _, id := range ids {
		keys = append(keys, sk.rsv(id))
		args = append(args, id)
	}
	for _, h := range r.Holders {
		args = append(args, itoa(h.UserID), h.ReservationID)
	}
	reply, err := s.run(ctx, scriptRebuild, keys, args...).Slice()
	if err != nil {
		return ports.RebuildResult{}, wrapErr("rebuild", err)
	}
	if len(reply) == 1 {
		return ports.RebuildResult{}, fmt.Errorf("redis rebuild activity %d sku %d: not frozen by generation %q: %w",
			a.ActivityID, a.SKUID, r.Generation, ports.ErrStockPaused)
	}
	if len(reply) != 3 {
		return ports.RebuildResult{}, unexpected("rebuild", reply)
	}
	n := make([]int64, 3)
	for i, v := range reply {
		x, ok := v.(int64)
		if !ok {
			return ports.RebuildResult{}, unexpected("rebuild", reply)
		}
		n[i] = x
	}
	if _, err := s.client.SAdd(ctx, s.keys.slots(), s.keys.slotID(a.ActivityID, a.SKUID)).Result(); err != nil {
		return ports.RebuildResult{}, wrapErr("rebuild: register slot", err)
	}
	return ports.RebuildResult{Available: n[0], InFlight: n[1], Overdraft: n[2]}, nil
}

// FinishRecovery implements ports.StockBooks. On a cluster generation is
// one master's pending process.
func (s *Store) FinishRecovery(ctx context.Context, generation string) (bool, error) {
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		return s.clusterFinishRecovery(ctx, cc, generation)
	}
	n, err := s.run(ctx, scriptFinishRecovery, []string{s.keys.generation()}, generation, itoa(s.now().UnixMilli()), s.callToken()).Int()
	if err != nil {
		return false, wrapErr("finish recovery", err)
	}
	if n == 1 && s.cfg.Guard != nil {
		s.cfg.Guard.pending.Store(false)
	}
	return n == 1, nil
}

// paused reports whether reservations of the activity SKU wait for a
// recovery this process knows about (an unseeded activity SKU then answers
// ErrStockPaused, not ErrActivityClosed: a Redis that lost everything has
// no rules yet). On a cluster only the SKUs of a pending master wait.
func (s *Store) paused(ctx context.Context, activityID, skuID int64) bool {
	if s.cfg.Guard == nil || !s.cfg.Guard.pending.Load() {
		return false
	}
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		return s.clusterPaused(ctx, cc, s.keys.slot(activityID, skuID).rules)
	}
	return true
}

var _ ports.StockBooks = (*Store)(nil)
