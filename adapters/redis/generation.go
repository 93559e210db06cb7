package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
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
// RELEASED, over every lane of the activity SKU. When the activity SKU has
// several lanes and one of them is frozen by generation or lost, it first
// freezes every lane by generation (freeze_lane.lua), so that no lane sells
// between this read and the rebuild.
func (s *Store) InFlight(ctx context.Context, generation string, a ports.Activity) ([]reservation.Snapshot, error) {
	n := a.Lanes()
	s.rememberLanes(a)
	if n > 1 {
		affected, err := s.lanesAffected(ctx, generation, a, n)
		if err != nil {
			return nil, err
		}
		if affected {
			for k := range n {
				if err := s.run(ctx, scriptFreezeLane, []string{s.lane(a.ActivityID, a.SKUID, k, n).rules}, generation).Err(); err != nil {
					return nil, wrapErr("freeze lane", err)
				}
			}
		}
	}
	var out []reservation.Snapshot
	for k := range n {
		got, err := s.laneInFlight(ctx, a.ActivityID, a.SKUID, k, n)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// lanesAffected reports whether a lane of the activity SKU is frozen by
// generation or not seeded (lost).
func (s *Store) lanesAffected(ctx context.Context, generation string, a ports.Activity, n int) (bool, error) {
	pipe := s.client.Pipeline()
	cmds := make([]*goredis.SliceCmd, n)
	for k := range n {
		cmds[k] = pipe.HMGet(ctx, s.lane(a.ActivityID, a.SKUID, k, n).rules, "starts_ms", "frozen")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, wrapErr("lanes affected", err)
	}
	for _, c := range cmds {
		v := c.Val()
		if len(v) != 2 || v[0] == nil || v[1] == generation {
			return true, nil
		}
	}
	return false, nil
}

// laneInFlight is InFlight for lane lane of n.
func (s *Store) laneInFlight(ctx context.Context, activityID, skuID int64, lane, n int) ([]reservation.Snapshot, error) {
	sk := s.lane(activityID, skuID, lane, n)
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
		st, err := s.getIn(ctx, sk, id)
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

// Rebuild implements ports.StockBooks with rebuild.lua; the rules get
// r.Activity's EndsAt and Paused (the switch as PostgreSQL stores it) even
// when Redis kept them. An activity SKU
// with several lanes is rebuilt in two steps (rebuildLanes): every lane
// written and left frozen, then every lane opened.
func (s *Store) Rebuild(ctx context.Context, r ports.StockRebuild) (ports.RebuildResult, error) {
	a := r.Activity
	s.rememberLanes(a)
	if n := a.Lanes(); n > 1 {
		return s.rebuildLanes(ctx, r, n)
	}
	res, stale, err := s.rebuildLane(ctx, r, 0, 1, r.Base, r.Holders, "open")
	if err != nil {
		return ports.RebuildResult{}, err
	}
	if stale {
		return ports.RebuildResult{}, fmt.Errorf("redis rebuild activity %d sku %d: not frozen by generation %q: %w",
			a.ActivityID, a.SKUID, r.Generation, ports.ErrStockPaused)
	}
	if _, err := s.client.SAdd(ctx, s.keys.slots(), s.keys.slotID(a.ActivityID, a.SKUID)).Result(); err != nil {
		return ports.RebuildResult{}, wrapErr("rebuild: register slot", err)
	}
	return res, nil
}

// rebuildLane runs rebuild.lua on one lane with the lane's base and
// holders; stale reports a STALE answer (nothing written).
func (s *Store) rebuildLane(ctx context.Context, r ports.StockRebuild, lane, n int, base int64, holders []ports.Holder, mode string) (ports.RebuildResult, bool, error) {
	a := r.Activity
	sk := s.lane(a.ActivityID, a.SKUID, lane, n)
	ids := make([]string, 0, len(r.InFlight)+len(r.Ordered)+len(r.Released))
	ids = append(append(append(ids, r.InFlight...), r.Ordered...), r.Released...)
	keys := make([]string, 0, 6+len(ids))
	keys = append(keys, sk.rules, sk.stock, sk.holders, sk.pending, sk.unresolved, sk.pendingCreated)
	share := a.Stock / int64(n)
	if int64(lane) < a.Stock%int64(n) {
		share++
	}
	args := make([]any, 0, 16+len(ids)+2*len(holders))
	args = append(args, r.Generation, itoa(s.now().UnixMilli()), itoa(base),
		itoa(int64(len(r.InFlight))), itoa(int64(len(r.Ordered))), itoa(int64(len(r.Released))),
		itoa(share), itoa(ms(a.StartsAt)), itoa(ms(a.EndsAt)), itoa(a.ReservationTTL.Milliseconds()),
		itoa(a.PaymentTimeout.Milliseconds()), s.callToken(), mode, strconv.Itoa(n), strconv.Itoa(lane), flag(a.Paused))
	for _, id := range ids {
		keys = append(keys, sk.rsv(id))
		args = append(args, id)
	}
	for _, h := range holders {
		args = append(args, itoa(h.UserID), h.ReservationID)
	}
	reply, err := s.run(ctx, scriptRebuild, keys, args...).Slice()
	if err != nil {
		return ports.RebuildResult{}, false, wrapErr("rebuild", err)
	}
	if len(reply) == 1 {
		return ports.RebuildResult{}, true, nil
	}
	if len(reply) != 3 {
		return ports.RebuildResult{}, false, unexpected("rebuild", reply)
	}
	var v [3]int64
	for i, x := range reply {
		n, ok := x.(int64)
		if !ok {
			return ports.RebuildResult{}, false, unexpected("rebuild", reply)
		}
		v[i] = n
	}
	return ports.RebuildResult{Available: v[0], InFlight: v[1], Overdraft: v[2]}, false, nil
}

// rebuildLanes rebuilds an activity SKU with n lanes, which InFlight froze
// by the generation. Each lane keeps the units its in-flight reservations
// hold and an equal share of the rest (Base minus every in-flight unit);
// PostgreSQL's holders go to their users' lanes. First every lane is
// written and stays frozen (a STALE lane stops the rebuild: the SKU stays
// frozen and a later recovery reads the facts again), then the transfer
// logs are dropped (the rebuild counted their units), then every lane is
// opened (open_lane.lua).
func (s *Store) rebuildLanes(ctx context.Context, r ports.StockRebuild, n int) (ports.RebuildResult, error) {
	a := r.Activity
	held, err := s.heldByLane(ctx, a, n, r.InFlight)
	if err != nil {
		return ports.RebuildResult{}, err
	}
	rest := r.Base
	for _, h := range held {
		rest -= h
	}
	holders := make([][]ports.Holder, n)
	for _, h := range r.Holders {
		k := laneOf(h.UserID, n)
		holders[k] = append(holders[k], h)
	}
	stale := func() error {
		return fmt.Errorf("redis rebuild activity %d sku %d: a lane is not frozen by generation %q: %w",
			a.ActivityID, a.SKUID, r.Generation, ports.ErrStockPaused)
	}
	var total ports.RebuildResult
	for k := range n {
		base := held[k]
		switch {
		case rest < 0 && k == 0:
			base += rest
		case rest > 0:
			base += rest / int64(n)
			if int64(k) < rest%int64(n) {
				base++
			}
		}
		res, isStale, err := s.rebuildLane(ctx, r, k, n, base, holders[k], "keep")
		if err != nil {
			return ports.RebuildResult{}, err
		}
		if isStale {
			return ports.RebuildResult{}, stale()
		}
		total.Available += res.Available
		total.InFlight += res.InFlight
		total.Overdraft += res.Overdraft
	}
	pipe := s.client.Pipeline()
	for k := range n {
		sk := s.lane(a.ActivityID, a.SKUID, k, n)
		pipe.Del(ctx, sk.transfers, sk.received)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return ports.RebuildResult{}, wrapErr("rebuild: drop transfer logs", err)
	}
	for k := range n {
		opened, err := s.run(ctx, scriptOpenLane, []string{s.lane(a.ActivityID, a.SKUID, k, n).rules}, r.Generation).Int64()
		if err != nil {
			return ports.RebuildResult{}, wrapErr("rebuild: open lane", err)
		}
		if opened != 1 {
			return ports.RebuildResult{}, stale()
		}
	}
	members := make([]any, n)
	for k, id := range s.laneIDs(a.ActivityID, a.SKUID, n) {
		members[k] = id
	}
	if err := s.client.SAdd(ctx, s.keys.slots(), members...).Err(); err != nil {
		return ports.RebuildResult{}, wrapErr("rebuild: register slots", err)
	}
	return total, nil
}

// heldByLane counts, per lane, the ids of inFlight the lane stores and has
// not RELEASED (each holds one unit of that lane).
func (s *Store) heldByLane(ctx context.Context, a ports.Activity, n int, inFlight []string) ([]int64, error) {
	held := make([]int64, n)
	if len(inFlight) == 0 {
		return held, nil
	}
	pipe := s.client.Pipeline()
	cmds := make([][]*goredis.StringCmd, n)
	for k := range n {
		sk := s.lane(a.ActivityID, a.SKUID, k, n)
		cmds[k] = make([]*goredis.StringCmd, len(inFlight))
		for i, id := range inFlight {
			cmds[k][i] = pipe.HGet(ctx, sk.rsv(id), "status")
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, wrapErr("rebuild: count held", err)
	}
	for k := range n {
		for _, c := range cmds[k] {
			if v, err := c.Result(); err == nil && v != string(reservation.StatusReleased) {
				held[k]++
			}
		}
	}
	return held, nil
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

// paused reports whether reservations of the slot whose rules key is rules
// (an activity SKU's, or one lane's) wait for a
// recovery this process knows about (an unseeded activity SKU then answers
// ErrStockPaused, not ErrActivityNotFound: a Redis that lost everything has
// no rules yet). On a cluster only the SKUs of a pending master wait.
func (s *Store) paused(ctx context.Context, rules string) bool {
	if s.cfg.Guard == nil || !s.cfg.Guard.pending.Load() {
		return false
	}
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		return s.clusterPaused(ctx, cc, rules)
	}
	return true
}

var _ ports.StockBooks = (*Store)(nil)
