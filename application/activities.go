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

// Activities caches activity rules read from PostgreSQL. Activities are
// immutable once created, so entries never expire; an unknown activity SKU
// is remembered as unknown for two seconds (it may be created later; one
// created through this process is known at once). Safe for concurrent use.
type Activities struct {
	uow     ports.UnitOfWork
	now     func() time.Time
	mu      sync.RWMutex
	m       map[[2]int64]ports.Activity
	unknown map[[2]int64]time.Time // key -> when the miss stops counting
}

// NewActivities returns an empty cache over uow.
func NewActivities(uow ports.UnitOfWork) *Activities {
	return &Activities{uow: uow, now: time.Now, m: make(map[[2]int64]ports.Activity),
		unknown: make(map[[2]int64]time.Time)}
}

// Get returns the rules of an activity SKU, or an error matching
// ports.ErrNotFound.
func (a *Activities) Get(ctx context.Context, activityID, skuID int64) (ports.Activity, error) {
	key := [2]int64{activityID, skuID}
	a.mu.RLock()
	act, ok := a.m[key]
	until, miss := a.unknown[key]
	a.mu.RUnlock()
	if ok {
		return act, nil
	}
	if miss && a.now().Before(until) {
		return ports.Activity{}, fmt.Errorf("activity %d/%d (cached miss): %w", activityID, skuID, ports.ErrNotFound)
	}
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

// put caches act and forgets a cached miss of it.
func (a *Activities) put(act ports.Activity) {
	key := [2]int64{act.ActivityID, act.SKUID}
	a.mu.Lock()
	a.m[key] = act
	delete(a.unknown, key)
	a.mu.Unlock()
}
