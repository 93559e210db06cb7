package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/ports"
)

// Stock lanes (ports.Activity.StockLanes, docs/capacity.md "Stock lanes").
//
// One activity SKU's keys share one hash tag, so one Redis core serves
// every reservation of it. An activity created with n > 1 lanes splits
// its entry stock over n slots, each a complete slot of its own (rules,
// counter, holders, indexes, reservations): lane 0 is the SKU's slot
// ("a1:s2"), lane k the slot keys.laneID names ("a1:s2:l<k>[.<salt>]",
// spaced evenly over the hash slots). A user reserves in lane
// laneOf(user, n) only, so the lane's holders hash keeps the one unit per
// buyer rule in one script, and every later step of a reservation finds
// its lane from the user id (ports.ReservationRef.UserID; without it the
// lanes are probed). When a user's lane runs dry, Reserve moves up to half
// of the fullest lane's stock over (a transfer: transfer_out.lua takes the
// units and logs them on the giving lane, transfer_in.lua adds them to the
// receiving lane exactly once, transfer_done.lua removes the log entry);
// SOLD_OUT means a read of every lane found them all empty and nothing in
// transit, with no transfer step in between (refill). A transfer
// interrupted between its steps is finished by the next refill that finds
// no stock elsewhere (or dropped by
// a rebuild, which counts its units from PostgreSQL's facts). Units in
// transit count as available (Inventory), so the stock conservation
// invariant holds at every step.

// maxLaneAttempts bounds the reserve attempts of one Reserve in a lane
// that runs dry: each attempt after the first follows a refill, and other
// buyers may take what it moved in (or move it on to their own empty lane)
// before the reserve runs again; past the bound Reserve answers
// ports.ErrStockPaused (retry) instead of looping.
const maxLaneAttempts = 64

// laneCount returns the number of lanes of an activity SKU: the "lanes"
// field of lane 0's rules (cached for the life of the Store: fixed at
// creation), 1 for an activity SKU seeded without it, and 1 (not cached)
// when lane 0's rules are not there (not seeded, or lost by a restarted
// Redis: the scripts then answer as for an unknown activity SKU, and the
// recovery rebuilds every lane from PostgreSQL's activity).
func (s *Store) laneCount(ctx context.Context, activityID, skuID int64) (int, error) {
	key := [2]int64{activityID, skuID}
	if v, ok := s.laneCounts.Load(key); ok {
		n, _ := v.(int)
		return n, nil
	}
	r, err := s.client.HMGet(ctx, s.keys.slot(activityID, skuID).rules, "starts_ms", "lanes").Result()
	if err != nil {
		return 0, wrapErr("lane count", err)
	}
	if len(r) != 2 || r[0] == nil {
		return 1, nil
	}
	n := 1
	if v, ok := r[1].(string); ok {
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > ports.MaxStockLanes {
			return 0, fmt.Errorf("redis lane count of activity %d sku %d: malformed %q", activityID, skuID, v)
		}
	}
	s.laneCounts.Store(key, n)
	return n, nil
}

// rememberLanes caches the lane count of an activity read from
// PostgreSQL (SeedActivity, Rebuild).
func (s *Store) rememberLanes(a ports.Activity) {
	s.laneCounts.Store([2]int64{a.ActivityID, a.SKUID}, a.Lanes())
}

// laneID is keys.laneID, cached for the life of the Store (a lane's tag
// takes about clusterSlots / laneSlotSpread checksums to find).
func (s *Store) laneID(activityID, skuID int64, lane, n int) string {
	if lane == 0 || n <= 1 {
		return s.keys.slotID(activityID, skuID)
	}
	key := [4]int64{activityID, skuID, int64(lane), int64(n)}
	if v, ok := s.laneIDCache.Load(key); ok {
		id, _ := v.(string)
		return id
	}
	id := s.keys.laneID(activityID, skuID, lane, n)
	s.laneIDCache.Store(key, id)
	return id
}

// lane returns the keys of lane lane of an activity SKU with n lanes.
func (s *Store) lane(activityID, skuID int64, lane, n int) slotKeys {
	return s.keys.slotByID(s.laneID(activityID, skuID, lane, n))
}

// laneIDs returns the slot ids of every lane of an activity SKU.
func (s *Store) laneIDs(activityID, skuID int64, n int) []string {
	ids := make([]string, n)
	for k := range n {
		ids[k] = s.laneID(activityID, skuID, k, n)
	}
	return ids
}

// refLane returns the lane that holds ref's reservation and the activity
// SKU's lane count: the user's lane when ref carries the user, else the
// first lane that has it (probed with one pipelined EXISTS per lane), and
// false when no lane has it.
func (s *Store) refLane(ctx context.Context, ref ports.ReservationRef) (lane, n int, found bool, err error) {
	n, err = s.laneCount(ctx, ref.ActivityID, ref.SKUID)
	if err != nil {
		return 0, 0, false, err
	}
	if n == 1 {
		return 0, 1, true, nil
	}
	if ref.UserID > 0 {
		return laneOf(ref.UserID, n), n, true, nil
	}
	pipe := s.client.Pipeline()
	cmds := make([]*goredis.IntCmd, n)
	for k := range n {
		cmds[k] = pipe.Exists(ctx, s.lane(ref.ActivityID, ref.SKUID, k, n).rsv(ref.ReservationID))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, 0, false, wrapErr("find lane", err)
	}
	for k, c := range cmds {
		if c.Val() == 1 {
			return k, n, true, nil
		}
	}
	return 0, n, false, nil
}

// refKeys returns the keys of the lane holding ref's reservation; when no
// lane has it, those of lane 0 (whose scripts then answer "unknown").
func (s *Store) refKeys(ctx context.Context, ref ports.ReservationRef) (slotKeys, error) {
	lane, n, _, err := s.refLane(ctx, ref)
	if err != nil {
		return slotKeys{}, err
	}
	return s.lane(ref.ActivityID, ref.SKUID, lane, n), nil
}

// refill moves stock into lane to from the fullest other lane of an
// activity SKU with n lanes and returns the units that arrived. It reads
// every lane's counter, transfer counter and transfer log size in one
// pipeline; when no other lane has stock and no transfer is logged it reads
// the transfer counters again, and soldOut reports that none moved in
// between: the lanes were empty at one moment (a unit given back since is
// the same race as a release right after a sold-out answer on one slot).
// When transfers are logged it finishes them (settleTransfers).
func (s *Store) refill(ctx context.Context, activityID, skuID int64, n, to int) (arrived int64, soldOut bool, err error) {
	pipe := s.client.Pipeline()
	stocks := make([]*goredis.StringCmd, n)
	moves := make([]*goredis.StringCmd, n)
	logs := make([]*goredis.IntCmd, n)
	for k := range n {
		sk := s.lane(activityID, skuID, k, n)
		if k != to { // the reserve script just found lane to empty
			stocks[k] = pipe.Get(ctx, sk.stock)
		}
		moves[k] = pipe.HGet(ctx, sk.rules, "moves")
		logs[k] = pipe.HLen(ctx, sk.transfers)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return 0, false, wrapErr("refill: read lanes", err)
	}
	donor, most, logged := -1, int64(0), false
	for k := range n {
		logged = logged || logs[k].Val() > 0
		if k == to {
			continue
		}
		if v, err := stocks[k].Int64(); err == nil && v > most {
			donor, most = k, v
		}
	}
	switch {
	case donor >= 0:
		arrived, err = s.transfer(ctx, activityID, skuID, n, donor, to, (most+1)/2)
		return arrived, false, err
	case logged:
		arrived, err = s.settleTransfers(ctx, activityID, skuID, n)
		return arrived, false, err
	}
	pipe = s.client.Pipeline()
	again := make([]*goredis.StringCmd, n)
	for k := range n {
		again[k] = pipe.HGet(ctx, s.lane(activityID, skuID, k, n).rules, "moves")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return 0, false, wrapErr("refill: read transfer counters", err)
	}
	for k := range n {
		if again[k].Val() != moves[k].Val() {
			return 0, false, nil
		}
	}
	return 0, true, nil
}

// transfer moves up to want units from lane from to lane to and returns
// the units that arrived. A step that fails leaves the units logged in
// transit on lane from (settleTransfers finishes it).
func (s *Store) transfer(ctx context.Context, activityID, skuID int64, n, from, to int, want int64) (int64, error) {
	src := s.lane(activityID, skuID, from, n)
	id := s.callToken()
	reply, err := s.run(ctx, scriptTransferOut, []string{src.rules, src.stock, src.transfers},
		id, strconv.Itoa(to), itoa(want), itoa(s.now().UnixMilli())).Slice()
	if err != nil {
		return 0, wrapErr("transfer out", err)
	}
	if len(reply) != 2 {
		return 0, unexpected("transfer out", reply)
	}
	units, _ := reply[0].(int64)
	epoch, _ := reply[1].(string)
	if units <= 0 {
		return 0, nil
	}
	arrived, err := s.deliver(ctx, activityID, skuID, n, from, to, id, units, epoch)
	if err != nil {
		return 0, err
	}
	s.logger.DebugContext(ctx, "stock moved between lanes", "activity_id", activityID, "sku_id", skuID,
		"from_lane", from, "to_lane", to, "units", units, "arrived", arrived)
	return arrived, nil
}

// deliver runs the receiving and closing steps of a logged transfer and
// returns the units this call added to lane to (0 when they had arrived
// before, were dropped by a rebuild, or the receiving lane is frozen).
func (s *Store) deliver(ctx context.Context, activityID, skuID int64, n, from, to int, id string, units int64, epoch string) (int64, error) {
	src, dst := s.lane(activityID, skuID, from, n), s.lane(activityID, skuID, to, n)
	code, err := s.run(ctx, scriptTransferIn, []string{dst.rules, dst.stock, dst.received}, id, itoa(units), epoch).Int64()
	if err != nil {
		return 0, wrapErr("transfer in", err)
	}
	if code == -1 {
		return 0, nil
	}
	if err := s.run(ctx, scriptTransferDone, []string{src.rules, src.transfers}, id).Err(); err != nil {
		return 0, wrapErr("transfer done", err)
	}
	if code == 1 {
		return units, nil
	}
	return 0, nil
}

// transit is one logged transfer of a lane.
type transit struct {
	id       string
	from, to int
	units    int64
	epoch    string
}

// parseTransit parses a transfers log entry "<lane>:<units>:<ms>:<epoch>".
func parseTransit(id string, from int, v string) (transit, error) {
	f := strings.SplitN(v, ":", 4)
	if len(f) != 4 {
		return transit{}, fmt.Errorf("redis: malformed transfer %s %q", id, v)
	}
	to, errTo := strconv.Atoi(f[0])
	units, errN := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(errTo, errN); err != nil {
		return transit{}, fmt.Errorf("redis: malformed transfer %s %q: %w", id, v, err)
	}
	return transit{id: id, from: from, to: to, units: units, epoch: f[3]}, nil
}

// settleTransfers finishes every transfer logged on the lanes of an
// activity SKU (an earlier Reserve stopped between its steps) and returns
// the units that arrived.
func (s *Store) settleTransfers(ctx context.Context, activityID, skuID int64, n int) (int64, error) {
	pipe := s.client.Pipeline()
	logs := make([]*goredis.MapStringStringCmd, n)
	for k := range n {
		logs[k] = pipe.HGetAll(ctx, s.lane(activityID, skuID, k, n).transfers)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, wrapErr("settle transfers: read logs", err)
	}
	var arrived int64
	for k, c := range logs {
		for id, v := range c.Val() {
			t, err := parseTransit(id, k, v)
			if err != nil {
				return arrived, err
			}
			got, err := s.deliver(ctx, activityID, skuID, n, t.from, t.to, t.id, t.units, t.epoch)
			if err != nil {
				return arrived, err
			}
			arrived += got
		}
	}
	if arrived > 0 {
		s.logger.InfoContext(ctx, "interrupted stock transfers finished", "activity_id", activityID,
			"sku_id", skuID, "units", arrived)
	}
	return arrived, nil
}

// laneRead is what inventory.lua read from one lane.
type laneRead struct {
	stock    int64
	held     []string
	moves    string
	transits []transit
}

// readLane runs inventory.lua on lane lane of n; ok is false when the
// lane is not seeded.
func (s *Store) readLane(ctx context.Context, activityID, skuID int64, lane, n int) (laneRead, bool, error) {
	sk := s.lane(activityID, skuID, lane, n)
	reply, err := s.run(ctx, scriptInventory, []string{sk.rules, sk.stock, sk.holders, sk.transfers}).Slice()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return laneRead{}, false, wrapErr("inventory", err)
	}
	if len(reply) == 0 {
		return laneRead{}, false, nil
	}
	if len(reply) != 4 {
		return laneRead{}, false, unexpected("inventory", reply)
	}
	stockStr, _ := reply[0].(string)
	stock, err := strconv.ParseInt(stockStr, 10, 64)
	if err != nil {
		return laneRead{}, false, fmt.Errorf("redis inventory: stock %q: %w", stockStr, err)
	}
	r := laneRead{stock: stock}
	held, _ := reply[1].([]any)
	for _, h := range held {
		if id, ok := h.(string); ok {
			r.held = append(r.held, id)
		}
	}
	r.moves, _ = reply[2].(string)
	tr, _ := reply[3].([]any)
	for i := 0; i+1 < len(tr); i += 2 {
		id, _ := tr[i].(string)
		entry, _ := tr[i+1].(string)
		t, err := parseTransit(id, lane, entry)
		if err != nil {
			return laneRead{}, false, err
		}
		r.transits = append(r.transits, t)
	}
	return r, true, nil
}

// inventoryReads bounds how often Inventory reads the lanes of an activity
// SKU again because units moved between them while it read.
const inventoryReads = 5

// laneInventory is Inventory for an activity SKU with n > 1 lanes: the
// lanes' counters plus the units in transit between them, and the union
// of their holders. The lanes are read one after the other; a unit that
// moved between two reads would count twice or not at all, so the read is
// repeated (at most inventoryReads times) until no lane's transfer
// counter changed during it.
func (s *Store) laneInventory(ctx context.Context, activityID, skuID int64, n int) (ports.RedisInventory, error) {
	var inv ports.RedisInventory
	for range inventoryReads {
		inv = ports.RedisInventory{}
		moves := make([]string, n)
		var transits []transit
		seeded := false
		for k := range n {
			r, ok, err := s.readLane(ctx, activityID, skuID, k, n)
			if err != nil {
				return ports.RedisInventory{}, err
			}
			if !ok {
				continue
			}
			seeded = true
			inv.Available += r.stock
			inv.Held = append(inv.Held, r.held...)
			moves[k] = r.moves
			transits = append(transits, r.transits...)
		}
		if !seeded {
			return ports.RedisInventory{}, fmt.Errorf("inventory activity %d sku %d: %w", activityID, skuID, ports.ErrNotFound)
		}
		pipe := s.client.Pipeline()
		arrived := make([]*goredis.BoolCmd, len(transits))
		for i, t := range transits {
			arrived[i] = pipe.SIsMember(ctx, s.lane(activityID, skuID, t.to, n).received, t.id)
		}
		again := make([]*goredis.StringCmd, n)
		for k := range n {
			again[k] = pipe.HGet(ctx, s.lane(activityID, skuID, k, n).rules, "moves")
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
			return ports.RedisInventory{}, wrapErr("inventory: read transfers", err)
		}
		for i, t := range transits {
			if !arrived[i].Val() {
				inv.Available += t.units
			}
		}
		stable := true
		for k, c := range again {
			if v, _ := c.Result(); v != moves[k] && !(v == "" && moves[k] == "0") {
				stable = false
			}
		}
		if stable {
			return inv, nil
		}
	}
	s.logger.WarnContext(ctx, "inventory read while stock kept moving between lanes; units in transit may be miscounted",
		"activity_id", activityID, "sku_id", skuID)
	return inv, nil
}
