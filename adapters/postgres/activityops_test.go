package postgres_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// GetActivity and GetActivityRecord return the operator state that
// ChangeActivity stores (ends_at, paused, closed_at, updated_at moved to
// the transaction's now); a closed sale may end before it started; an
// unknown activity is ErrNotFound for both.
func TestActivityRecordChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := ports.Activity{ActivityID: 1, SKUID: 1, Stock: 3, StartsAt: now.Add(time.Hour), EndsAt: now.Add(2 * time.Hour),
		PaymentTimeout: time.Minute, ReservationTTL: time.Minute}
	var created ports.ActivityRecord
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		if _, _, err := tx.CreateActivity(ctx, a); err != nil {
			return err
		}
		var err error
		created, err = tx.GetActivityRecord(ctx, 1, 1, true)
		return err
	})
	if created.Activity.Paused || !created.Activity.ClosedAt.IsZero() || created.UpdatedAt.IsZero() {
		t.Fatalf("created record = %+v, want not paused, not closed, an updated_at", created)
	}
	changed := created.Activity
	changed.Paused, changed.ClosedAt, changed.EndsAt = true, now, now // closed before its start
	changed.Stock = 999                                               // ignored
	var after ports.ActivityRecord
	var got ports.Activity
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if after, err = tx.ChangeActivity(ctx, changed); err != nil {
			return err
		}
		got, err = tx.GetActivity(ctx, 1, 1)
		return err
	})
	if !after.Activity.Paused || !after.Activity.ClosedAt.Equal(now) || !after.Activity.EndsAt.Equal(now) ||
		after.Activity.Stock != 3 || after.UpdatedAt.Before(created.UpdatedAt) {
		t.Fatalf("after ChangeActivity = %+v, want paused, closed and ended at %v, stock 3", after, now)
	}
	if got != after.Activity {
		t.Fatalf("GetActivity = %+v, want %+v", got, after.Activity)
	}
	reopened := after.Activity
	reopened.Paused, reopened.ClosedAt, reopened.EndsAt = false, time.Time{}, now.Add(3*time.Hour)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		after, err = tx.ChangeActivity(ctx, reopened)
		return err
	})
	if after.Activity.Paused || !after.Activity.ClosedAt.IsZero() || !after.Activity.EndsAt.Equal(now.Add(3*time.Hour)) {
		t.Fatalf("after reopening = %+v", after.Activity)
	}
	// Not closed, the window check of the table holds again.
	bad := after.Activity
	bad.EndsAt = bad.StartsAt
	if err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		_, err := tx.ChangeActivity(ctx, bad)
		return err
	}); err == nil {
		t.Fatal("an open sale ending at its start was stored")
	}
	for name, fn := range map[string]func(ctx context.Context, tx ports.Tx) error{
		"GetActivityRecord": func(ctx context.Context, tx ports.Tx) error {
			_, err := tx.GetActivityRecord(ctx, 9, 9, false)
			return err
		},
		"ChangeActivity": func(ctx context.Context, tx ports.Tx) error {
			_, err := tx.ChangeActivity(ctx, ports.Activity{ActivityID: 9, SKUID: 9, EndsAt: now})
			return err
		},
	} {
		if err := e.store.InTx(testCtx(t), fn); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("%s of an unknown activity = %v, want ErrNotFound", name, err)
		}
	}
}

// ListActivityRecords pages in (activity_id, sku_id) order and keeps the
// stored states asked for: ENDED (ends_at passed or closed), SCHEDULED,
// PAUSED, and ON_SALE / SOLD_OUT both as the started, open, unpaused ones.
func TestListActivityRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	base := ports.Activity{ActivityID: 1, Stock: 3, StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour),
		PaymentTimeout: time.Minute, ReservationTTL: time.Minute}
	mk := func(sku int64, f func(a *ports.Activity)) ports.Activity {
		a := base
		a.SKUID = sku
		f(&a)
		return a
	}
	onSale := mk(1, func(*ports.Activity) {})
	scheduled := mk(2, func(a *ports.Activity) { a.StartsAt, a.EndsAt = now.Add(time.Hour), now.Add(2*time.Hour) })
	paused := mk(3, func(*ports.Activity) {})
	expired := mk(4, func(a *ports.Activity) { a.StartsAt, a.EndsAt = now.Add(-2*time.Hour), now.Add(-time.Hour) })
	closed := mk(5, func(*ports.Activity) {})
	pausedEnded := mk(6, func(a *ports.Activity) { a.StartsAt, a.EndsAt = now.Add(-2*time.Hour), now.Add(-time.Hour) })
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		for _, a := range []ports.Activity{onSale, scheduled, paused, expired, closed, pausedEnded} {
			if _, _, err := tx.CreateActivity(ctx, a); err != nil {
				return err
			}
		}
		for _, a := range []ports.Activity{paused, pausedEnded} {
			a.Paused = true
			if _, err := tx.ChangeActivity(ctx, a); err != nil {
				return err
			}
		}
		closed.ClosedAt, closed.EndsAt = now, now.Add(time.Hour) // closed wins over a later ends_at
		_, err := tx.ChangeActivity(ctx, closed)
		return err
	})
	list := func(q ports.ActivityListQuery) []int64 {
		t.Helper()
		q.Now = now
		var recs []ports.ActivityRecord
		e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
			var err error
			recs, err = tx.ListActivityRecords(ctx, q)
			return err
		})
		var skus []int64
		for _, r := range recs {
			skus = append(skus, r.Activity.SKUID)
		}
		return skus
	}
	for _, c := range []struct {
		states []ports.ActivityState
		want   []int64
	}{
		{nil, []int64{1, 2, 3, 4, 5, 6}},
		{[]ports.ActivityState{ports.ActivityEnded}, []int64{4, 5, 6}},
		{[]ports.ActivityState{ports.ActivityScheduled}, []int64{2}},
		{[]ports.ActivityState{ports.ActivityPaused}, []int64{3}},
		{[]ports.ActivityState{ports.ActivityOnSale}, []int64{1}},
		{[]ports.ActivityState{ports.ActivitySoldOut}, []int64{1}},
		{[]ports.ActivityState{ports.ActivityScheduled, ports.ActivityPaused}, []int64{2, 3}},
	} {
		if got := list(ports.ActivityListQuery{Limit: 10, States: c.states}); !slices.Equal(got, c.want) {
			t.Errorf("states %v: skus %v, want %v", c.states, got, c.want)
		}
	}
	var pages [][]int64
	after := ports.ActivityKey{}
	for range 10 {
		page := list(ports.ActivityListQuery{Limit: 4, After: after})
		if len(page) == 0 {
			break
		}
		pages = append(pages, page)
		after = ports.ActivityKey{ActivityID: 1, SKUID: page[len(page)-1]}
	}
	if len(pages) != 2 || !slices.Equal(pages[0], []int64{1, 2, 3, 4}) || !slices.Equal(pages[1], []int64{5, 6}) {
		t.Fatalf("pages of 4 = %v, want [1 2 3 4] [5 6]", pages)
	}
	if err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		_, err := tx.ListActivityRecords(ctx, ports.ActivityListQuery{Limit: 1, States: []ports.ActivityState{"NOPE"}})
		return err
	}); err == nil {
		t.Fatal("an unknown state was accepted")
	}
}

// ListUserOrders returns only the user's orders, newest first by
// (created_at, order_id), in keyset pages that neither skip nor repeat one.
func TestListUserOrders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	var mine []string
	var snaps []order.Snapshot
	for i := range 5 {
		// Two orders share a creation time: order_id breaks the tie.
		at := now.Add(time.Duration(min(i, 3)) * time.Second)
		o := newOrder(t, 1, int64(i+1), 42, at)
		snaps = append(snaps, o.Snapshot())
		mine = append(mine, o.Snapshot().OrderID)
	}
	other := newOrder(t, 1, 1, 43, now.Add(time.Hour))
	snaps = append(snaps, other.Snapshot())
	insertOrders(t, e, snaps...)
	// Newest first: created_at descending, then order_id descending.
	want := slices.Clone(snaps[:5])
	slices.SortFunc(want, func(a, b order.Snapshot) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.OrderID, a.OrderID)
	})
	var got []ports.OrderView
	cursor := ports.OrderCursor{}
	for range 10 {
		page, err := e.store.ListUserOrders(testCtx(t), 42, cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("page of %d orders, limit 2", len(page))
		}
		got = append(got, page...)
		last := page[len(page)-1]
		cursor = ports.OrderCursor{CreatedAt: last.CreatedAt, OrderID: last.OrderID}
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d orders, want %d (%v)", len(got), len(want), mine)
	}
	for i, v := range got {
		if v.OrderID != want[i].OrderID || v.UserID != 42 || v.Status != ports.OrderCreated {
			t.Fatalf("order %d = %s user %d %s, want %s user 42 CREATED", i, v.OrderID, v.UserID, v.Status, want[i].OrderID)
		}
	}
	if none, err := e.store.ListUserOrders(testCtx(t), 44, ports.OrderCursor{}, 10); err != nil || len(none) != 0 {
		t.Fatalf("orders of a user without any = %v, %v", none, err)
	}
}
