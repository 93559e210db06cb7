package application

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// Page sizes of ListMyOrders.
const (
	defaultOrderPage = 20
	maxOrderPage     = 100
)

// BuyerReadAge bounds how old what a buyer's GetActivity shows may be:
// the activity's operator state (paused, ends_at, closed) read from
// PostgreSQL and the sold-out flag read from Redis are each reused for at
// most this long per process (a change made through the same process is
// visible at once). A buyer's count-down polls GetActivity; the age keeps
// those polls from each costing a PostgreSQL transaction and a Redis
// read.
const BuyerReadAge = time.Second

// maxSoldOutMarks bounds the sold-out flags BuyerQueries keeps (the table
// is emptied when full).
const maxSoldOutMarks = 10_000

// BuyerQueries implements ports.BuyerQueries: an activity SKU as a buyer
// may see it (its state, window, price and the server's clock, never the
// stock) and the buyer's own orders, newest first. Safe for concurrent
// use.
type BuyerQueries struct {
	activities   *Activities
	reservations ports.Reservations
	orders       ports.OrderQueries
	clock        ports.Clock

	mu      sync.Mutex
	soldOut map[[2]int64]soldOutRead
}

type soldOutRead struct {
	out bool
	at  time.Time
}

// NewBuyerQueries wires the buyer's reads.
func NewBuyerQueries(activities *Activities, reservations ports.Reservations, orders ports.OrderQueries,
	clock ports.Clock) *BuyerQueries {
	return &BuyerQueries{activities: activities, reservations: reservations, orders: orders, clock: clock,
		soldOut: make(map[[2]int64]soldOutRead)}
}

var _ ports.BuyerQueries = (*BuyerQueries)(nil)

// GetActivity implements ports.BuyerQueries; see BuyerReadAge. SoldOut is
// asked of Redis only while the sale is open, started and not paused (the
// only state it decides). ErrNotFound for an unknown activity SKU
// (the code of a read; ports.ErrActivityNotFound is PlaceOrder's).
func (q *BuyerQueries) GetActivity(ctx context.Context, activityID, skuID int64) (ports.BuyerActivity, error) {
	a, err := q.activities.Fresh(ctx, activityID, skuID, BuyerReadAge)
	if err != nil {
		return ports.BuyerActivity{}, fmt.Errorf("buyer activity %d/%d: %w", activityID, skuID, err)
	}
	now := q.clock.Now()
	out := false
	if selling(a, now) {
		if out, err = q.soldOutAt(ctx, activityID, skuID, now); err != nil {
			return ports.BuyerActivity{}, fmt.Errorf("buyer activity %d/%d: %w", activityID, skuID, err)
		}
	}
	return ports.BuyerActivity{
		ActivityID: a.ActivityID, SKUID: a.SKUID, State: a.StateAt(now, out),
		StartsAt: a.StartsAt, EndsAt: a.EndsAt, SoldOut: out, ServerTime: now,
		UnitPrice: a.UnitPrice, Currency: a.Currency,
	}, nil
}

// soldOutAt returns the SKU's sold-out flag, read from Redis at most
// BuyerReadAge ago.
func (q *BuyerQueries) soldOutAt(ctx context.Context, activityID, skuID int64, now time.Time) (bool, error) {
	key := [2]int64{activityID, skuID}
	q.mu.Lock()
	r, ok := q.soldOut[key]
	q.mu.Unlock()
	if ok && now.Sub(r.at) <= BuyerReadAge && !now.Before(r.at) {
		return r.out, nil
	}
	out, err := soldOut(ctx, q.reservations, activityID, skuID)
	if err != nil {
		return false, err
	}
	q.mu.Lock()
	if len(q.soldOut) >= maxSoldOutMarks {
		clear(q.soldOut)
	}
	q.soldOut[key] = soldOutRead{out: out, at: now}
	q.mu.Unlock()
	return out, nil
}

// ListMyOrders implements ports.BuyerQueries over the orders projection
// in PostgreSQL (orders that exist: a reservation still queuing or
// rejected is read with GetOrder). The page token is opaque (the place
// of the page's last order).
func (q *BuyerQueries) ListMyOrders(ctx context.Context, userID int64, pageSize int, pageToken string) (ports.OrderPage, error) {
	switch {
	case pageSize == 0:
		pageSize = defaultOrderPage
	case pageSize < 0 || pageSize > maxOrderPage:
		return ports.OrderPage{}, ports.InvalidField("page_size", "must be between 1 and %d (0 means %d)",
			maxOrderPage, defaultOrderPage)
	}
	after, err := parseOrderToken(pageToken)
	if err != nil {
		return ports.OrderPage{}, err
	}
	views, err := q.orders.ListUserOrders(ctx, userID, after, pageSize+1)
	if err != nil {
		return ports.OrderPage{}, fmt.Errorf("list orders of user %d: %w", userID, err)
	}
	var page ports.OrderPage
	if len(views) > pageSize {
		views = views[:pageSize]
		last := views[len(views)-1]
		page.NextToken = orderToken(ports.OrderCursor{CreatedAt: last.CreatedAt, OrderID: last.OrderID})
	}
	page.Orders = views
	return page, nil
}

// orderToken encodes a cursor as base64url("<unix microseconds>:<order id>").
func orderToken(c ports.OrderCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + ":" + c.OrderID))
}

func parseOrderToken(s string) (ports.OrderCursor, error) {
	if s == "" {
		return ports.OrderCursor{}, nil
	}
	bad := ports.InvalidField("page_token", "is not a token returned by this method")
	if len(s) > 256 {
		return ports.OrderCursor{}, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return ports.OrderCursor{}, bad
	}
	at, id, ok := strings.Cut(string(raw), ":")
	if !ok || id == "" {
		return ports.OrderCursor{}, bad
	}
	us, err := strconv.ParseInt(at, 10, 64)
	if err != nil || us <= 0 {
		return ports.OrderCursor{}, bad
	}
	return ports.OrderCursor{CreatedAt: time.UnixMicro(us).UTC(), OrderID: id}, nil
}
