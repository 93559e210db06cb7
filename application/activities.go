package application

import (
	"context"
	"fmt"
	"sync"

	"github.com/seckill-dev/seckill/ports"
)

// Activities caches activity rules read from PostgreSQL. Activities are
// immutable once created, so entries never expire; unknown activities are
// not cached (an activity may be created later). Safe for concurrent use.
type Activities struct {
	uow ports.UnitOfWork
	mu  sync.RWMutex
	m   map[[2]int64]ports.Activity
}

// NewActivities returns an empty cache over uow.
func NewActivities(uow ports.UnitOfWork) *Activities {
	return &Activities{uow: uow, m: make(map[[2]int64]ports.Activity)}
}

// Get returns the rules of an activity SKU, or an error matching
// ports.ErrNotFound.
func (a *Activities) Get(ctx context.Context, activityID, skuID int64) (ports.Activity, error) {
	key := [2]int64{activityID, skuID}
	a.mu.RLock()
	act, ok := a.m[key]
	a.mu.RUnlock()
	if ok {
		return act, nil
	}
	err := a.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		act, err = tx.GetActivity(ctx, activityID, skuID)
		return err
	})
	if err != nil {
		return ports.Activity{}, fmt.Errorf("load activity %d/%d: %w", activityID, skuID, err)
	}
	a.put(act)
	return act, nil
}

func (a *Activities) put(act ports.Activity) {
	a.mu.Lock()
	a.m[[2]int64{act.ActivityID, act.SKUID}] = act
	a.mu.Unlock()
}
