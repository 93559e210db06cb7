package redis

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// propModel is the expected state of one activity SKU.
type propModel struct {
	activity, initial, stock int64
	ids                      []string
	snaps                    map[string]reservation.Snapshot
	status                   map[string]reservation.Status
	observed                 map[string]reservation.Status
	holder                   map[int64]string
}

// TestReservationsPropertyAgainstCanTransition drives random sequences of
// the adapter's operations against real Redis. After every step it checks
// that each observed status change is allowed by reservation.CanTransition
// and matches a simple model, that the stock counter is never negative, and
// that stock + held units == initial stock (Redis-side conservation).
func TestReservationsPropertyAgainstCanTransition(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	var activities atomic.Int64
	reasons := []reservation.ReleaseReason{
		reservation.ReasonSendFailed, reservation.ReasonExpired, reservation.ReasonNoFinalStock,
		reservation.ReasonDuplicateOrder, reservation.ReasonOrderCanceled, reservation.ReasonReconciledExpired,
	}

	rapid.Check(t, func(rt *rapid.T) {
		m := &propModel{
			activity: activities.Add(1),
			initial:  int64(rapid.IntRange(0, 4).Draw(rt, "stock")),
			snaps:    map[string]reservation.Snapshot{},
			status:   map[string]reservation.Status{},
			observed: map[string]reservation.Status{},
			holder:   map[int64]string{},
		}
		m.stock = m.initial
		f.seed(m.activity, 1, m.initial)
		now := testBase
		// pick draws an existing reservation; with none yet, the action
		// is a no-op (false).
		pick := func(rt *rapid.T) (string, bool) {
			if len(m.ids) == 0 {
				return "", false
			}
			return rapid.SampledFrom(m.ids).Draw(rt, "id"), true
		}
		refOf := func(id string) ports.ReservationRef {
			return ports.ReservationRef{ActivityID: m.activity, SKUID: 1, ReservationID: id}
		}

		rt.Repeat(map[string]func(*rapid.T){
			"reserve": func(rt *rapid.T) {
				user := int64(rapid.IntRange(1, 4).Draw(rt, "user"))
				snap := f.newRsv(m.activity, 1, user, now)
				got, err := f.s.Reserve(ctx, snap, now.Add(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "delay_ms"))*time.Millisecond))
				switch {
				case m.holder[user] != "":
					if !errors.Is(err, ports.ErrAlreadyPurchased) {
						rt.Fatalf("user %d holds %s; Reserve = %v, want already purchased", user, m.holder[user], err)
					}
				case m.stock == 0:
					if !errors.Is(err, ports.ErrSoldOut) {
						rt.Fatalf("no stock; Reserve = %v, want sold out", err)
					}
				default:
					if err != nil || got != snap {
						rt.Fatalf("Reserve = %+v, %v", got, err)
					}
					m.stock--
					m.holder[user] = snap.ReservationID
					m.ids = append(m.ids, snap.ReservationID)
					m.snaps[snap.ReservationID] = snap
					m.status[snap.ReservationID] = reservation.StatusPending
				}
			},
			"reserveAgain": func(rt *rapid.T) {
				id, ok := pick(rt)
				if !ok {
					return
				}
				got, err := f.s.Reserve(ctx, m.snaps[id], now)
				if err != nil || got.ReservationID != id || got.Status != m.status[id] {
					rt.Fatalf("repeated Reserve of %s = %+v, %v; want status %s", id, got, err, m.status[id])
				}
			},
			"markSent": func(rt *rapid.T) {
				id, ok := pick(rt)
				if !ok {
					return
				}
				if err := f.s.MarkSent(ctx, refOf(id)); err != nil {
					rt.Fatal(err)
				}
				if m.status[id] == reservation.StatusPending {
					m.status[id] = reservation.StatusSent
				}
			},
			"scheduleRetry": func(rt *rapid.T) {
				id, ok := pick(rt)
				if !ok {
					return
				}
				owner := rapid.SampledFrom([]string{"", "A", "B"}).Draw(rt, "owner")
				next := now.Add(time.Duration(rapid.IntRange(0, 5000).Draw(rt, "next_ms")) * time.Millisecond)
				if err := f.s.ScheduleRetry(ctx, refOf(id), owner, next); err != nil {
					rt.Fatal(err)
				}
			},
			"release": func(rt *rapid.T) {
				id, ok := pick(rt)
				if !ok {
					return
				}
				reason := rapid.SampledFrom(reasons).Draw(rt, "reason")
				released, err := f.s.Release(ctx, refOf(id), reason)
				if err != nil {
					rt.Fatal(err)
				}
				want := m.status[id] != reservation.StatusReleased
				if released != want {
					rt.Fatalf("Release(%s) in %s = %v, want %v", id, m.status[id], released, want)
				}
				if released {
					m.status[id] = reservation.StatusReleased
					m.stock++
					if user := m.snaps[id].UserID; m.holder[user] == id {
						delete(m.holder, user)
					}
				}
			},
			"markOrdered": func(rt *rapid.T) {
				n := rapid.IntRange(1, 3).Draw(rt, "n")
				var refs []ports.ReservationRef
				for range n {
					id, ok := pick(rt)
					if !ok {
						return
					}
					refs = append(refs, refOf(id))
					if s := m.status[id]; s == reservation.StatusPending || s == reservation.StatusSent {
						m.status[id] = reservation.StatusOrdered
					}
				}
				if err := f.s.MarkOrdered(ctx, refs); err != nil {
					rt.Fatal(err)
				}
			},
			"claimDue": func(rt *rapid.T) {
				now = now.Add(time.Duration(rapid.IntRange(0, 4000).Draw(rt, "advance_ms")) * time.Millisecond)
				owner := rapid.SampledFrom([]string{"A", "B"}).Draw(rt, "owner")
				got, err := f.s.ClaimDue(ctx, now, rapid.IntRange(1, 5).Draw(rt, "limit"), owner, 2*time.Second)
				if err != nil {
					rt.Fatal(err)
				}
				for _, r := range got {
					if r.ActivityID != m.activity {
						continue // another slot of the namespace (earlier runs)
					}
					if m.status[r.ReservationID] != reservation.StatusPending {
						rt.Fatalf("claimed %s in status %s", r.ReservationID, m.status[r.ReservationID])
					}
				}
			},
			"": func(rt *rapid.T) {
				for _, id := range m.ids {
					st, err := f.s.Get(ctx, refOf(id))
					if err != nil {
						rt.Fatal(err)
					}
					if prev, ok := m.observed[id]; ok && prev != st.Status && !reservation.CanTransition(prev, st.Status) {
						rt.Fatalf("%s moved %s -> %s, not allowed by CanTransition", id, prev, st.Status)
					}
					m.observed[id] = st.Status
					if st.Status != m.status[id] {
						rt.Fatalf("%s is %s, model says %s", id, st.Status, m.status[id])
					}
				}
				inv, err := f.s.Inventory(ctx, m.activity, 1)
				if err != nil {
					rt.Fatal(err)
				}
				if inv.Available < 0 {
					rt.Fatalf("stock %d < 0", inv.Available)
				}
				if inv.Available+int64(len(inv.Held)) != m.initial {
					rt.Fatalf("stock %d + held %d != initial %d", inv.Available, len(inv.Held), m.initial)
				}
				var wantHeld []string
				for _, id := range m.holder {
					wantHeld = append(wantHeld, id)
				}
				slices.Sort(wantHeld)
				held := slices.Sorted(slices.Values(inv.Held))
				if inv.Available != m.stock || !slices.Equal(held, wantHeld) {
					rt.Fatalf("inventory %d %v, model %d %v", inv.Available, held, m.stock, wantHeld)
				}
			},
		})
	})
}
