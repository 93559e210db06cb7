package application

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// Negative caching of unknown activity SKUs: a miss is remembered for
// unknownTTL so that requests for an activity that does not exist do not
// each reach PostgreSQL; at most maxUnknown misses are kept (the table is
// emptied when full, so its memory stays bounded whatever ids callers
// send).
const (
	unknownTTL = 2 * time.Second
	maxUnknown = 10_000
)

// Activities caches activity rules read from PostgreSQL. The entry
// (PlaceOrder) reads only what is fixed at creation (ReservationTTL, for
// the backlog gate and the reservation's validity), so its entries never
// expire (Get). What operators change during a sale (EndsAt, Paused,
// ClosedAt, and Stock by stock operations) is not the entry's decision:
// the reservation script in Redis refuses a paused, ended or sold-out
// SKU, switched by ActivityOps before it answers. A change made through
// this process replaces the cached entry at once (put); another
// process's cache keeps the creation's values, which only feed the TTL
// and the gate. Reads that show the changed state use Fresh, which
// reloads an entry older than the age asked for. An unknown activity SKU
// is remembered as unknown for two seconds (it may be created later; one
// created through this process is known at once). Safe for concurrent
// use.
type Activities struct {
	uow     ports.UnitOfWork
	now     func() time.Time
	mu      sync.RWMutex
	m       map[[2]int64]cachedActivity
	unknown map[[2]int64]time.Time // key -> when the miss stops counting
}

// cachedActivity is an entry with the time it was read or written.
type cachedActivity struct {
	act ports.Activity
	at  time.Time
}

// NewActivities returns an empty cache over uow.
func NewActivities(uow ports.UnitOfWork) *Activities {
	return &Activities{uow: uow, now: time.Now, m: make(map[[2]int64]cachedActivity),
		unknown: make(map[[2]int64]time.Time)}
}

// Get returns the rules of an activity SKU, or an error matching
// ports.ErrNotFound. A cached entry is returned however old it is (see
// Activities for why the entry may).
func (a *Activities) Get(ctx context.Context, activityID, skuID int64) (ports.Activity, error) {
	return a.get(ctx, activityID, skuID, -1)
}

// Fresh is Get with entries read or written at most maxAge ago (an older
// one is read again from PostgreSQL): what a read showing the operator
// state (paused, ends_at) uses.
func (a *Activities) Fresh(ctx context.Context, activityID, skuID int64, maxAge time.Duration) (ports.Activity, error) {
	return a.get(ctx, activityID, skuID, maxAge)
}

// get serves Get (maxAge < 0: any age) and Fresh.
func (a *Activities) get(ctx context.Context, activityID, skuID int64, maxAge time.Duration) (ports.Activity, error) {
	key := [2]int64{activityID, skuID}
	a.mu.RLock()
	c, ok := a.m[key]
	until, miss := a.unknown[key]
	a.mu.RUnlock()
	now := a.now()
	if ok && (maxAge < 0 || now.Sub(c.at) <= maxAge) {
		return c.act, nil
	}
	if miss && now.Before(until) {
		return ports.Activity{}, fmt.Errorf("activity %d/%d (cached miss): %w", activityID, skuID, ports.ErrNotFound)
	}
	var act ports.Activity
	err := a.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		act, err = tx.GetActivity(ctx, activityID, skuID)
		return err
	})
	if errors.Is(err, ports.ErrNotFound) {
		a.mu.Lock()
		if len(a.unknown) >= maxUnknown {
			clear(a.unknown)
		}
		a.unknown[key] = a.now().Add(unknownTTL)
		a.mu.Unlock()
	}
	if err != nil {
		return ports.Activity{}, fmt.Errorf("load activity %d/%d: %w", activityID, skuID, err)
	}
	a.put(act)
	return act, nil
}

// put caches act (read or written now) and forgets a cached miss of it.
// Every change of an activity made through this process puts the stored
// result.
func (a *Activities) put(act ports.Activity) {
	key := [2]int64{act.ActivityID, act.SKUID}
	a.mu.Lock()
	a.m[key] = cachedActivity{act: act, at: a.now()}
	delete(a.unknown, key)
	a.mu.Unlock()
}
