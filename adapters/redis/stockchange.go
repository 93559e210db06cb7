package redis

import (
	"context"
	"fmt"
	"strings"

	"github.com/seckill-dev/seckill/ports"
)

// Stock changes (ports.StockChanger, docs/architecture.md "Stock
// changes"). Each lane of an activity SKU keeps, next to its counter, the
// hash "<slot>:stock_changes" of the request ids whose part it applied,
// with the books epoch it applied them in and the units
// ("<epoch>:<units>"); stock_change.lua changes the counter and writes the
// entry in one step, so a lane applies its part of a request at most once
// per epoch. A rebuild from PostgreSQL starts a new epoch (rebuild.lua),
// which makes the entries of older epochs count as not applied: the
// rebuilt counter holds exactly the APPLIED changes, and a change still
// PENDING is applied once more by whoever finishes it.

// stockChanges is the applied-changes hash of a lane.
func (s slotKeys) stockChanges() string {
	return strings.TrimSuffix(s.stock, "stock") + "stock_changes"
}

// laneChange is one run of stock_change.lua on one lane.
type laneChange struct {
	status string // APPLIED, DONE, UNDONE, SHORT
	units  int64
	stock  int64
}

// changeLane runs stock_change.lua with op on lane lane of n.
func (s *Store) changeLane(ctx context.Context, a ports.Activity, lane, n int, requestID, op string, units int64) (laneChange, error) {
	sk := s.lane(a.ActivityID, a.SKUID, lane, n)
	reply, err := s.run(ctx, scriptStockChange, []string{sk.rules, sk.stock, sk.stockChanges()},
		requestID, op, itoa(units)).Slice()
	if err != nil {
		return laneChange{}, wrapErr("stock change", err)
	}
	status, _ := reply[0].(string)
	switch {
	case status == "UNKNOWN" && s.paused(ctx, sk.rules):
		return laneChange{}, fmt.Errorf("stock change of activity %d sku %d: lane %d lost, recovery pending: %w",
			a.ActivityID, a.SKUID, lane, ports.ErrStockPaused)
	case status == "UNKNOWN":
		return laneChange{}, fmt.Errorf("stock change of activity %d sku %d lane %d: %w", a.ActivityID, a.SKUID, lane, ports.ErrNotFound)
	case status == "PAUSED":
		return laneChange{}, fmt.Errorf("stock change of activity %d sku %d: lane %d frozen for verification: %w",
			a.ActivityID, a.SKUID, lane, ports.ErrStockPaused)
	case status == "SHORT" && len(reply) == 2:
		v, _ := reply[1].(int64)
		return laneChange{status: status, stock: v}, nil
	case len(reply) == 3:
		u, ok1 := reply[1].(int64)
		v, ok2 := reply[2].(int64)
		if ok1 && ok2 {
			return laneChange{status: status, units: u, stock: v}, nil
		}
	}
	return laneChange{}, unexpected("stock change", reply)
}

// ChangeStock implements ports.StockChanger. An addition runs one script
// per lane with the lane's share. A removal from one lane is one script
// (all or none); from several lanes it first finishes the transfers
// between lanes (their units become removable), then takes what each lane
// has, in lane order, until -delta units are taken; when the lanes hold
// fewer it gives back what this request took in every lane (undo) and
// reports Refused with the units it found. Interrupted anywhere, a call
// with the same arguments continues from the entries already written.
func (s *Store) ChangeStock(ctx context.Context, a ports.Activity, requestID string, delta int64) (ports.RedisStockChange, error) {
	if requestID == "" || delta == 0 {
		return ports.RedisStockChange{}, fmt.Errorf("redis stock change: a request id and a non-zero delta are required")
	}
	n := a.Lanes()
	s.rememberLanes(a)
	switch {
	case delta > 0:
		return s.addStock(ctx, a, n, requestID, delta)
	case n == 1:
		c, err := s.changeLane(ctx, a, 0, 1, requestID, "take", -delta)
		if err != nil {
			return ports.RedisStockChange{}, err
		}
		if c.status == "SHORT" {
			return ports.RedisStockChange{Refused: true, Available: max(c.stock, 0)}, nil
		}
		return ports.RedisStockChange{Fresh: c.status == "APPLIED", Available: c.stock}, nil
	}
	return s.removeFromLanes(ctx, a, n, requestID, -delta)
}

// addStock gives every lane its share of units: units / n, the first
// units % n lanes one more.
func (s *Store) addStock(ctx context.Context, a ports.Activity, n int, requestID string, units int64) (ports.RedisStockChange, error) {
	var out ports.RedisStockChange
	for k := range n {
		share := units / int64(n)
		if int64(k) < units%int64(n) {
			share++
		}
		if share == 0 {
			continue
		}
		c, err := s.changeLane(ctx, a, k, n, requestID, "add", share)
		if err != nil {
			return ports.RedisStockChange{}, err
		}
		out.Fresh = out.Fresh || c.status == "APPLIED"
		out.Available += c.stock
	}
	if n > 1 {
		return out, s.laneAvailable(ctx, a, n, &out)
	}
	return out, nil
}

// removeFromLanes is a removal of units from an activity SKU with n > 1
// lanes.
func (s *Store) removeFromLanes(ctx context.Context, a ports.Activity, n int, requestID string, units int64) (ports.RedisStockChange, error) {
	if _, err := s.settleTransfers(ctx, a.ActivityID, a.SKUID, n); err != nil {
		return ports.RedisStockChange{}, err
	}
	var taken int64
	var fresh bool
	for k := range n {
		c, err := s.changeLane(ctx, a, k, n, requestID, "upto", units-taken)
		if err != nil {
			return ports.RedisStockChange{}, err
		}
		taken += c.units
		fresh = fresh || (c.status == "APPLIED" && c.units > 0)
	}
	if taken < units {
		for k := range n {
			if _, err := s.changeLane(ctx, a, k, n, requestID, "undo", 0); err != nil {
				return ports.RedisStockChange{}, err
			}
		}
		return ports.RedisStockChange{Refused: true, Available: taken}, nil
	}
	out := ports.RedisStockChange{Fresh: fresh}
	return out, s.laneAvailable(ctx, a, n, &out)
}

// laneAvailable sets out.Available to the unreserved stock of every lane
// with the units in transit (Inventory).
func (s *Store) laneAvailable(ctx context.Context, a ports.Activity, n int, out *ports.RedisStockChange) error {
	inv, err := s.laneInventory(ctx, a.ActivityID, a.SKUID, n)
	if err != nil {
		return err
	}
	out.Available = inv.Available
	return nil
}

var _ ports.StockChanger = (*Store)(nil)
