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
	rsvPrefix                                                  string
}

func (k keys) slotID(activityID, skuID int64) string {
	return "a" + strconv.FormatInt(activityID, 10) + ":s" + strconv.FormatInt(skuID, 10)
}

func (k keys) slot(activityID, skuID int64) slotKeys {
	return k.slotByID(k.slotID(activityID, skuID))
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
		rsvPrefix:      p + "rsv:",
	}
}

func (s slotKeys) rsv(reservationID string) string { return s.rsvPrefix + reservationID }

// slots is the set of every seeded slot id.
func (k keys) slots() string { return k.ns + ":slots" }

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
