// Package redismem is the Redis of the application tests: the real Redis
// adapter (adapters/redis, whose Lua scripts are the one home of the
// reservation rules) on miniredis, an in-process Redis that runs those
// scripts in gopher-lua. Before every command a go-redis hook moves
// miniredis' clock (TIME and key expiry) to the test's clock, so request
// claims, order lookups and token buckets follow the fake clock of the
// test, never the wall clock.
//
// On top of the adapter it adds the test facilities the application tests
// use: failures injected into chosen methods (Redis.Inject, Redis.FailOn,
// Redis.ClearFaults) and a snapshot of the books (Redis.Snapshot). It is a
// test kit: production code never imports it (bootstrap/deps_test.go).
package redismem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// The method names Inject and FailOn accept: the methods Redis and its
// OrderViews override to apply an injected fault before delegating to the
// adapter.
const (
	MethodClaimRequest = "ClaimRequest"
	MethodSeedActivity = "SeedActivity"
	MethodInventory    = "Inventory"
	MethodMarkOrdered  = "MarkOrdered"
	MethodReleaseMany  = "ReleaseMany"
	MethodViewApply    = "ViewApply"
)

// methods returns the method names Inject and FailOn accept.
func methods() []string {
	return []string{MethodClaimRequest, MethodSeedActivity, MethodInventory, MethodMarkOrdered, MethodReleaseMany,
		MethodViewApply}
}

// Redis is the real Redis adapter on a private miniredis. It embeds the
// adapter's *redis.Store, so it implements every port the store does
// (ports.Admission, ports.Reservations, ports.Backlog,
// ports.ActivitySwitch, ...) with the store's own code and scripts; the
// methods named by the Method constants are overridden only to apply an
// injected fault first. Safe for concurrent use.
type Redis struct {
	*redis.Store

	tb     testing.TB
	server *miniredis.Miniredis
	faults *faults
}

// New starts a miniredis for tb (closed by tb's cleanup), connects a
// go-redis client to it whose hook moves miniredis' clock to clock before
// every command, and returns the adapter built on that client with cfg
// (redis.New; cfg.Clock is replaced by clock.Now, so the token bucket
// reads the same clock). A nil clock or an invalid cfg fails tb.
func New(tb testing.TB, clock ports.Clock, cfg redis.Config) *Redis {
	tb.Helper()
	if clock == nil {
		tb.Fatal("redismem.New: nil clock")
	}
	m := miniredis.RunT(tb)
	c := goredis.NewClient(&goredis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { _ = c.Close() })
	c.AddHook(newClockSync(m, clock.Now))
	cfg.Clock = clock.Now
	s, err := redis.New(c, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatalf("redismem.New: %v", err)
	}
	return &Redis{Store: s, tb: tb, server: m, faults: &faults{armed: map[string]Fault{}}}
}

// Fault is an error injected into a method of Redis (a test facility).
// Injected errors are returned wrapped with the method's name, so tests
// inject for example fmt.Errorf("%w: boom", ports.ErrTransient) and the
// code under test matches it with errors.Is.
type Fault struct {
	// Err is the error the method returns.
	Err error
	// AfterEffect makes the method run first and then answer Err instead
	// of its reply: a lost reply, after which the caller cannot know what
	// happened. Without it the method fails before reaching Redis.
	AfterEffect bool
	// Times is how many calls the fault applies to; 0 means until cleared.
	Times int
}

// Inject arms f on method, one of the Method constants (test facility). A
// Fault with a nil Err disarms the method. An unknown name fails the test,
// so that a typo cannot silently disable a fault.
func (r *Redis) Inject(method string, f Fault) {
	r.tb.Helper()
	if err := r.faults.set(method, f); err != nil {
		r.tb.Fatal(err)
	}
}

// FailOn makes every call of method fail with err before reaching Redis,
// until cleared (test facility). A nil err clears it.
func (r *Redis) FailOn(method string, err error) { r.Inject(method, Fault{Err: err}) }

// ClearFaults disarms every injected fault (test facility).
func (r *Redis) ClearFaults() { r.faults.clear() }

// ClaimRequest is redis.Store.ClaimRequest behind the fault of
// MethodClaimRequest.
func (r *Redis) ClaimRequest(ctx context.Context, claim ports.RequestClaim, ttl time.Duration) (ports.RequestClaim, bool, error) {
	before, after := r.faults.hit(MethodClaimRequest)
	if before != nil {
		return ports.RequestClaim{}, false, before
	}
	bound, existing, err := r.Store.ClaimRequest(ctx, claim, ttl)
	if after != nil {
		return ports.RequestClaim{}, false, after
	}
	return bound, existing, err
}

// SeedActivity is redis.Store.SeedActivity behind the fault of
// MethodSeedActivity.
func (r *Redis) SeedActivity(ctx context.Context, a ports.Activity) error {
	before, after := r.faults.hit(MethodSeedActivity)
	if before != nil {
		return before
	}
	if err := r.Store.SeedActivity(ctx, a); after == nil {
		return err
	}
	return after
}

// Inventory is redis.Store.Inventory behind the fault of MethodInventory.
func (r *Redis) Inventory(ctx context.Context, activityID, skuID int64) (ports.RedisInventory, error) {
	before, after := r.faults.hit(MethodInventory)
	if before != nil {
		return ports.RedisInventory{}, before
	}
	inv, err := r.Store.Inventory(ctx, activityID, skuID)
	if after != nil {
		return ports.RedisInventory{}, after
	}
	return inv, err
}

// MarkOrdered is redis.Store.MarkOrdered behind the fault of
// MethodMarkOrdered.
func (r *Redis) MarkOrdered(ctx context.Context, refs []ports.ReservationRef) error {
	before, after := r.faults.hit(MethodMarkOrdered)
	if before != nil {
		return before
	}
	if err := r.Store.MarkOrdered(ctx, refs); after == nil {
		return err
	}
	return after
}

// ReleaseMany is redis.Store.ReleaseMany behind the fault of
// MethodReleaseMany: a fault armed before the effect fails every request;
// one armed after it (a lost reply) replaces every result but those of
// requests with an unknown release reason, which the adapter refuses
// without sending them.
func (r *Redis) ReleaseMany(ctx context.Context, reqs []ports.ReleaseRequest) []ports.ReleaseResult {
	before, after := r.faults.hit(MethodReleaseMany)
	if before != nil {
		out := make([]ports.ReleaseResult, len(reqs))
		for i := range out {
			out[i].Err = before
		}
		return out
	}
	out := r.Store.ReleaseMany(ctx, reqs)
	if after != nil {
		for i := range out {
			if !errors.Is(out[i].Err, reservation.ErrInvalid) {
				out[i] = ports.ReleaseResult{Err: after}
			}
		}
	}
	return out
}

// OrderViews is the adapter's order view store (redis.OrderViews) with
// Apply behind the fault of MethodViewApply; it implements
// ports.OrderViews.
type OrderViews struct {
	*redis.OrderViews

	faults *faults
}

var _ ports.OrderViews = (*OrderViews)(nil)

// OrderViews returns the order view store sharing r's miniredis and
// faults.
func (r *Redis) OrderViews() *OrderViews {
	return &OrderViews{OrderViews: r.Store.OrderViews(), faults: r.faults}
}

// Apply is redis.OrderViews.Apply behind the fault of MethodViewApply.
func (o *OrderViews) Apply(ctx context.Context, v ports.OrderView) (bool, error) {
	before, after := o.faults.hit(MethodViewApply)
	if before != nil {
		return false, before
	}
	applied, err := o.OrderViews.Apply(ctx, v)
	if after != nil {
		return false, after
	}
	return applied, err
}

// faults holds the armed faults of one Redis, by method name.
type faults struct {
	mu    sync.Mutex
	armed map[string]Fault
}

// set arms method with f, or disarms it when f.Err is nil. An unknown
// method name is an error.
func (fs *faults) set(method string, f Fault) error {
	if !slices.Contains(methods(), method) {
		return fmt.Errorf("redismem: no method %q to inject a fault into (known: %v)", method, methods())
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.Err == nil {
		delete(fs.armed, method)
		return nil
	}
	fs.armed[method] = f
	return nil
}

func (fs *faults) clear() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	clear(fs.armed)
}

// hit consumes one application of method's fault and returns the error to
// answer before the call reaches Redis or the one to answer after it (at
// most one of them is non-nil).
func (fs *faults) hit(method string) (before, after error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, ok := fs.armed[method]
	if !ok {
		return nil, nil
	}
	switch {
	case f.Times == 1:
		delete(fs.armed, method)
	case f.Times > 1:
		f.Times--
		fs.armed[method] = f
	}
	err := fmt.Errorf("redismem %s (injected fault): %w", method, f.Err)
	if f.AfterEffect {
		return nil, err
	}
	return err, nil
}

// SKU names one activity SKU.
type SKU struct {
	ActivityID int64
	SKUID      int64
}

// ReservationState is a stored reservation with its scanner fields.
type ReservationState struct {
	Snapshot reservation.Snapshot
	// NextAttemptAt is the due time of the reservation's next send
	// attempt (meaningful while PENDING).
	NextAttemptAt time.Time
	LeaseOwner    string
	LeaseUntil    time.Time
}

// SlotState is the state of one seeded activity SKU, all its stock lanes
// together.
type SlotState struct {
	// Activity is the activity as the rules hashes hold it: ids, Stock
	// (the initial stock, the lanes' shares summed), window, reservation
	// TTL, payment timeout, StockLanes and Paused. Price, currency and
	// ClosedAt are not kept in Redis and stay zero.
	Activity ports.Activity
	// Stock is the available stock as Inventory reports it: the lanes'
	// counters plus the units in transit between lanes.
	Stock int64
	// Holders maps user ids to the reservation holding their unit.
	Holders map[int64]string
	// Reservations are sorted by creation time, then id.
	Reservations []ReservationState
}

// Snapshot is a copy of the books of a Redis, for test assertions.
type Snapshot struct {
	Slots map[SKU]SlotState
	// Views are the order views, by order id.
	Views map[string]ports.OrderView
}

// Snapshot returns a copy of every seeded activity SKU and every order
// view (test facility), read with no fault applied: the activity, holders
// and scanner fields from the raw keys (docs/architecture.md, "Redis key
// layout"), the stock, the reservations and the views through the
// adapter's own reads (Inventory, Get, OrderViews.Get). It is not atomic
// across keys: call it at rest. A read that fails fails the test, so call
// it from the goroutine of the test that made r.
func (r *Redis) Snapshot() Snapshot {
	r.tb.Helper()
	snap, err := r.snapshot(r.tb.Context())
	if err != nil {
		r.tb.Fatalf("redismem snapshot: %v", err)
	}
	return snap
}

func (r *Redis) snapshot(ctx context.Context) (Snapshot, error) {
	ns := r.Store.Namespace()
	keys := r.server.Keys()
	out := Snapshot{Slots: map[SKU]SlotState{}, Views: map[string]ports.OrderView{}}
	var lanes []string
	if slotsKey := ns + ":slots"; r.server.Exists(slotsKey) {
		var err error
		if lanes, err = r.server.SMembers(slotsKey); err != nil {
			return Snapshot{}, fmt.Errorf("read %s: %w", slotsKey, err)
		}
	}
	bySKU := map[SKU][]string{}
	for _, id := range lanes {
		k, err := parseSlotID(id)
		if err != nil {
			return Snapshot{}, err
		}
		bySKU[k] = append(bySKU[k], id)
	}
	for k, ids := range bySKU {
		st, err := r.slotState(ctx, ns, keys, k, ids)
		if err != nil {
			return Snapshot{}, fmt.Errorf("activity %d sku %d: %w", k.ActivityID, k.SKUID, err)
		}
		out.Slots[k] = st
	}
	views := r.Store.OrderViews()
	viewPrefix := ns + ":view:{"
	for _, key := range keys {
		if !strings.HasPrefix(key, viewPrefix) || !strings.HasSuffix(key, "}") {
			continue
		}
		orderID := strings.TrimSuffix(strings.TrimPrefix(key, viewPrefix), "}")
		v, err := views.Get(ctx, orderID)
		if err != nil {
			return Snapshot{}, err
		}
		out.Views[orderID] = v
	}
	return out, nil
}

// slotState reads one activity SKU whose lanes have the slot ids ids;
// keys are every key of the miniredis.
func (r *Redis) slotState(ctx context.Context, ns string, keys []string, k SKU, ids []string) (SlotState, error) {
	st := SlotState{Holders: map[int64]string{}}
	st.Activity.ActivityID, st.Activity.SKUID = k.ActivityID, k.SKUID
	for _, id := range ids {
		prefix := ns + ":{" + id + "}:"
		rules := prefix + "rules"
		initial, err := r.intField(rules, "initial")
		if err != nil {
			return SlotState{}, err
		}
		st.Activity.Stock += initial
		if lane, err := r.intField(rules, "lane"); err != nil {
			return SlotState{}, err
		} else if lane == 0 {
			if err := r.readRules(rules, &st.Activity); err != nil {
				return SlotState{}, err
			}
		}
		if err := r.readHolders(prefix+"holders", st.Holders); err != nil {
			return SlotState{}, err
		}
		rsvPrefix := prefix + "rsv:"
		for _, key := range keys {
			if !strings.HasPrefix(key, rsvPrefix) {
				continue
			}
			rs, err := r.reservationState(ctx, k, key, prefix+"pending", strings.TrimPrefix(key, rsvPrefix))
			if err != nil {
				return SlotState{}, err
			}
			st.Reservations = append(st.Reservations, rs)
		}
	}
	inv, err := r.Store.Inventory(ctx, k.ActivityID, k.SKUID)
	if err != nil {
		return SlotState{}, err
	}
	st.Stock = inv.Available
	slices.SortFunc(st.Reservations, func(a, b ReservationState) int {
		return cmp.Or(a.Snapshot.CreatedAt.Compare(b.Snapshot.CreatedAt),
			cmp.Compare(a.Snapshot.ReservationID, b.Snapshot.ReservationID))
	})
	return st, nil
}

// readRules fills a's window, reservation TTL, payment timeout, lanes and
// paused flag from the rules hash of lane 0.
func (r *Redis) readRules(rules string, a *ports.Activity) error {
	fields := []string{"starts_ms", "ends_ms", "reservation_ttl_ms", "payment_timeout_ms", "lanes"}
	v := make([]int64, len(fields))
	for i, f := range fields {
		var err error
		if v[i], err = r.intField(rules, f); err != nil {
			return err
		}
	}
	a.StartsAt, a.EndsAt = fromMS(v[0]), fromMS(v[1])
	a.ReservationTTL, a.PaymentTimeout = time.Duration(v[2])*time.Millisecond, time.Duration(v[3])*time.Millisecond
	a.StockLanes = int(max(v[4], 1))
	a.Paused = r.server.HGet(rules, "paused") == "1"
	return nil
}

// readHolders adds the user -> reservation entries of a holders hash to
// into.
func (r *Redis) readHolders(key string, into map[int64]string) error {
	if !r.server.Exists(key) {
		return nil
	}
	users, err := r.server.HKeys(key)
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	for _, u := range users {
		id, err := strconv.ParseInt(u, 10, 64)
		if err != nil {
			return fmt.Errorf("holder %q of %s: %w", u, key, err)
		}
		into[id] = r.server.HGet(key, u)
	}
	return nil
}

// reservationState reads reservation id of activity SKU k, stored in the
// hash key: the snapshot through the adapter's Get, the lease from the
// hash and the next attempt from the lane's pending index (its score, which
// ClaimDue moves to the lease's end), or from the hash's next_retry_at once
// the reservation left the index.
func (r *Redis) reservationState(ctx context.Context, k SKU, key, pending, id string) (ReservationState, error) {
	user, err := r.intField(key, "user_id")
	if err != nil {
		return ReservationState{}, err
	}
	snap, err := r.Store.Get(ctx, ports.ReservationRef{ActivityID: k.ActivityID, SKUID: k.SKUID, ReservationID: id, UserID: user})
	if err != nil {
		return ReservationState{}, err
	}
	next, err := r.intField(key, "next_retry_at")
	if err != nil {
		return ReservationState{}, err
	}
	if score, err := r.server.ZScore(pending, id); err == nil {
		next = int64(score)
	}
	until, err := r.intField(key, "lease_until")
	if err != nil {
		return ReservationState{}, err
	}
	return ReservationState{Snapshot: snap, NextAttemptAt: fromMS(next), LeaseOwner: r.server.HGet(key, "lease_owner"),
		LeaseUntil: fromMS(until)}, nil
}

// intField reads an integer field of a hash; a missing or empty field
// reads as 0.
func (r *Redis) intField(key, field string) (int64, error) {
	v := r.server.HGet(key, field)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("field %s of %s: %w", field, key, err)
	}
	return n, nil
}

// fromMS is the UTC time of a Unix millisecond count; 0 is the zero time,
// as the adapter stores it.
func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// parseSlotID returns the activity SKU of a slot id of <ns>:slots:
// "a<activity>:s<sku>", with ":l<lane>[.<salt>]" after it for lane k > 0.
func parseSlotID(id string) (SKU, error) {
	parts := strings.SplitN(id, ":", 3)
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "a") || !strings.HasPrefix(parts[1], "s") {
		return SKU{}, fmt.Errorf("slot id %q: not a<activity>:s<sku>", id)
	}
	a, err := strconv.ParseInt(parts[0][1:], 10, 64)
	if err != nil {
		return SKU{}, fmt.Errorf("slot id %q: %w", id, err)
	}
	s, err := strconv.ParseInt(parts[1][1:], 10, 64)
	if err != nil {
		return SKU{}, fmt.Errorf("slot id %q: %w", id, err)
	}
	return SKU{ActivityID: a, SKUID: s}, nil
}

// clockSync is a go-redis hook that, before every command, moves
// miniredis' clock (TIME and key expiry) forward to the test's clock. The
// clock never moves back: a test clock set back leaves miniredis' where it
// was until the test clock passes it again.
type clockSync struct {
	m    *miniredis.Miniredis
	now  func() time.Time
	mu   sync.Mutex
	last time.Time
}

func newClockSync(m *miniredis.Miniredis, now func() time.Time) *clockSync {
	c := &clockSync{m: m, now: now, last: now()}
	m.SetTime(c.last)
	return c
}

// sync moves miniredis' clock to the test's, when that is later.
func (c *clockSync) sync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if d := now.Sub(c.last); d > 0 {
		c.m.FastForward(d)
		c.last = now
	}
	c.m.SetTime(c.last)
}

// DialHook implements goredis.Hook; it adds nothing.
func (c *clockSync) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook: it syncs the clock before the
// command.
func (c *clockSync) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error { c.sync(); return next(ctx, cmd) }
}

// ProcessPipelineHook implements goredis.Hook: it syncs the clock before
// the pipeline.
func (c *clockSync) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error { c.sync(); return next(ctx, cmds) }
}
