package redis

import (
	"strconv"
)

// keys builds the key names of one namespace (docs/architecture.md).
type keys struct {
	ns string
}

// slotKeys are the keys of one activity SKU; they share the hash tag
// {a<activity>:s<sku>}.
type slotKeys struct {
	stock, rules, holders, pending, unresolved, pendingCreated string
	// transfers logs the stock this lane gave to another lane and that
	// may not have arrived yet; received lists the transfers this lane
	// took in (docs/capacity.md "Stock lanes").
	transfers, received string
	rsvPrefix           string
}

func (k keys) slotID(activityID, skuID int64) string {
	return "a" + strconv.FormatInt(activityID, 10) + ":s" + strconv.FormatInt(skuID, 10)
}

func (k keys) slot(activityID, skuID int64) slotKeys {
	return k.slotByID(k.slotID(activityID, skuID))
}

// laneID is the slot id of lane lane of an activity SKU whose stock is
// split over n lanes: lane 0 is the SKU's own slot ("a1:s2"), lane k > 0
// a hash tag of its own ("a1:s2:l3", with a ".<salt>" suffix when needed)
// whose Redis Cluster hash slot lies within laneSlotSpread after
// slot0 + k x 16384 / n, where slot0 is lane 0's: the lanes are spaced
// evenly over the slot space, so n lanes on n masters that own equal slot
// ranges (the usual layout) land one per master, and every process derives
// the same ids.
func (k keys) laneID(activityID, skuID int64, lane, n int) string {
	id := k.slotID(activityID, skuID)
	if lane == 0 || n <= 1 {
		return id
	}
	target := (keySlot(id) + lane*clusterSlots/n) % clusterSlots
	base := id + ":l" + strconv.Itoa(lane)
	for salt := 0; ; salt++ {
		tag := base
		if salt > 0 {
			tag += "." + strconv.Itoa(salt)
		}
		if (keySlot(tag)-target+clusterSlots)%clusterSlots < laneSlotSpread || salt == maxLaneSalt {
			return tag
		}
	}
}

// Placement of lane tags (laneID): the width of the hash slot range a
// lane's tag is searched in, and the bound of that search (about
// clusterSlots / laneSlotSpread tries are needed).
const (
	laneSlotSpread = 32
	maxLaneSalt    = 16384
)

// laneOf is the lane a user reserves in among n lanes: every reservation
// of one user for one activity SKU lives in one lane, so the lane's
// holders hash keeps the one-unit-per-buyer rule in one script.
func laneOf(userID int64, n int) int {
	if n <= 1 {
		return 0
	}
	return int(uint64(userID) % uint64(n)) //nolint:gosec // a remainder below n
}

// slotByID returns the keys of a slot as stored in the slots set ("a1:s2").
func (k keys) slotByID(id string) slotKeys {
	p := k.ns + ":{" + id + "}:"
	return slotKeys{
		stock:          p + "stock",
		rules:          p + "rules",
		holders:        p + "holders",
		pending:        p + "pending",
		unresolved:     p + "unresolved",
		pendingCreated: p + "pending_created",
		transfers:      p + "transfers",
		received:       p + "received",
		rsvPrefix:      p + "rsv:",
	}
}

func (s slotKeys) rsv(reservationID string) string { return s.rsvPrefix + reservationID }

// slots is the set of every seeded slot id.
func (k keys) slots() string { return k.ns + ":slots" }

// consumerInstances is the sorted set of live consumer instances
// (heartbeat.lua).
func (k keys) consumerInstances() string { return k.ns + ":consumer-instances" }

func (k keys) userPrefix(userID int64) string {
	return k.ns + ":{u" + strconv.FormatInt(userID, 10) + "}:"
}

func (k keys) request(userID int64, requestID string) string {
	return k.userPrefix(userID) + "req:" + requestID
}

func (k keys) orderLookup(userID int64, orderID string) string {
	return k.userPrefix(userID) + "ord:" + orderID
}

func (k keys) bucket(userID int64) string { return k.userPrefix(userID) + "bucket" }

func (k keys) view(orderID string) string { return k.ns + ":view:{" + orderID + "}" }
