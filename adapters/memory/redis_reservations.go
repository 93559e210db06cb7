package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// SeedActivity creates the activity SKU's stock counter and rules if
// absent (paused when a.Paused); seeding again changes nothing, whatever
// a holds. Invalid
// settings fail with a *ports.FieldError.
func (r *Redis) SeedActivity(ctx context.Context, a ports.Activity) error {
	if err := a.ValidateSlot(); err != nil {
		return err
	}
	after, err := r.enter(ctx, "SeedActivity")
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	k := SKU{a.ActivityID, a.SKUID}
	if _, ok := r.slots[k]; !ok {
		a.StartsAt, a.EndsAt = msTime(a.StartsAt), msTime(a.EndsAt)
		r.slots[k] = &rslot{
			activity: a, stock: a.Stock,
			holders:    map[int64]string{},
			rsv:        map[string]*rsvEntry{},
			pending:    map[string]struct{}{},
			unresolved: map[string]struct{}{},
		}
	}
	return after
}

// Reserve returns the stored reservation unchanged when one with r's id
// exists in the activity SKU. Otherwise it answers, checked in this order
// (as the Redis script does), ports.ErrActivityNotFound for an unseeded
// activity SKU, ports.ErrActivityEnded when snap.CreatedAt is at or after
// ends_at, a *ports.NotStartedError before starts_at,
// ports.ErrActivityPaused while SetPaused paused the sale, a
// *ports.HolderError (ports.ErrAlreadyPurchased) naming the user's holding
// reservation and ports.ErrSoldOut without stock; then it takes
// one unit, records the user as holder and stores snap as PENDING, due for
// its first send at firstAttemptAt, with times at millisecond precision.
// snap must be a new PENDING reservation with all ids and times set;
// otherwise the error matches reservation.ErrInvalid.
func (r *Redis) Reserve(ctx context.Context, snap reservation.Snapshot, firstAttemptAt time.Time) (reservation.Snapshot, error) {
	if err := snap.ValidateNew(); err != nil {
		return reservation.Snapshot{}, fmt.Errorf("memory redis Reserve: %w", err)
	}
	after, err := r.enter(ctx, "Reserve")
	if err != nil {
		return reservation.Snapshot{}, err
	}
	defer r.mu.Unlock()
	s := r.slots[SKU{snap.ActivityID, snap.SKUID}]
	if s != nil {
		if e, ok := s.rsv[snap.ReservationID]; ok {
			if after != nil {
				return reservation.Snapshot{}, after
			}
			return e.snap, nil
		}
	}
	created := msTime(snap.CreatedAt)
	switch {
	case s == nil:
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", snap.ActivityID, snap.SKUID, ports.ErrActivityNotFound)
	case !created.Before(s.activity.EndsAt):
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", snap.ActivityID, snap.SKUID, ports.ErrActivityEnded)
	case created.Before(s.activity.StartsAt):
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", snap.ActivityID, snap.SKUID,
			&ports.NotStartedError{StartsAt: s.activity.StartsAt})
	case s.activity.Paused:
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", snap.ActivityID, snap.SKUID, ports.ErrActivityPaused)
	case s.holders[snap.UserID] != "":
		h := &ports.HolderError{ReservationID: s.holders[snap.UserID]}
		if e, ok := s.rsv[h.ReservationID]; ok {
			h.OrderID = e.snap.OrderID
		}
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d user %d: %w", snap.ActivityID, snap.SKUID, snap.UserID, h)
	case s.stock <= 0:
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", snap.ActivityID, snap.SKUID, ports.ErrSoldOut)
	}
	if snap.Version == 0 {
		snap.Version = 1
	}
	snap.CreatedAt, snap.ValidUntil = created, msTime(snap.ValidUntil)
	s.stock--
	s.holders[snap.UserID] = snap.ReservationID
	s.rsv[snap.ReservationID] = &rsvEntry{snap: snap, nextAt: msTime(firstAttemptAt)}
	s.pending[snap.ReservationID] = struct{}{}
	s.unresolved[snap.ReservationID] = struct{}{}
	if after != nil {
		return reservation.Snapshot{}, after
	}
	return snap, nil
}

// SetPaused implements ports.ActivitySwitch: while paused, Reserve of the
// activity SKU answers ports.ErrActivityPaused. Idempotent;
// ports.ErrNotFound when the SKU is not seeded.
func (r *Redis) SetPaused(ctx context.Context, a ports.Activity, paused bool) error {
	return r.setSwitch(ctx, "SetPaused", a, func(act *ports.Activity) { act.Paused = paused })
}

// SetEndsAt implements ports.ActivitySwitch: Reserve answers
// ports.ErrActivityEnded for a reservation created at or after endsAt
// (kept at millisecond precision). Idempotent; ports.ErrNotFound when the
// SKU is not seeded; a zero endsAt is a *ports.FieldError on "ends_at".
func (r *Redis) SetEndsAt(ctx context.Context, a ports.Activity, endsAt time.Time) error {
	if endsAt.IsZero() {
		return ports.InvalidField("ends_at", "must be set")
	}
	return r.setSwitch(ctx, "SetEndsAt", a, func(act *ports.Activity) { act.EndsAt = msTime(endsAt) })
}

// setSwitch applies set to the seeded activity of a.
func (r *Redis) setSwitch(ctx context.Context, method string, a ports.Activity, set func(*ports.Activity)) error {
	after, err := r.enter(ctx, method)
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	s := r.slots[SKU{a.ActivityID, a.SKUID}]
	if s == nil {
		return fmt.Errorf("activity switch of activity %d sku %d: not seeded: %w", a.ActivityID, a.SKUID, ports.ErrNotFound)
	}
	set(&s.activity)
	return after
}

var _ ports.ActivitySwitch = (*Redis)(nil)

// entry returns the stored reservation of ref or ports.ErrNotFound. The
// caller holds r.mu.
func (r *Redis) entry(ref ports.ReservationRef) (*rslot, *rsvEntry, error) {
	if s := r.slots[SKU{ref.ActivityID, ref.SKUID}]; s != nil {
		if e, ok := s.rsv[ref.ReservationID]; ok {
			return s, e, nil
		}
	}
	return nil, nil, fmt.Errorf("reservation %s: %w", ref.ReservationID, ports.ErrNotFound)
}

// Get returns a stored reservation or ports.ErrNotFound.
func (r *Redis) Get(ctx context.Context, ref ports.ReservationRef) (reservation.Snapshot, error) {
	after, err := r.enter(ctx, "Get")
	if err != nil {
		return reservation.Snapshot{}, err
	}
	defer r.mu.Unlock()
	if after != nil {
		return reservation.Snapshot{}, after
	}
	_, e, err := r.entry(ref)
	if err != nil {
		return reservation.Snapshot{}, err
	}
	return e.snap, nil
}

// apply runs cmd, a command of the reservation aggregate, on e's stored
// state and keeps the result when cmd reports a change; a change drops any
// lease, as the scripts do. It reports cmd's answer. The caller holds r.mu.
func apply(e *rsvEntry, cmd func(*reservation.Reservation) bool) bool {
	agg := reservation.Restore(e.snap)
	if !cmd(agg) {
		return false
	}
	e.snap = agg.Snapshot()
	e.leaseOwner, e.leaseUntil = "", time.Time{}
	return true
}

// MarkSent moves a PENDING reservation to SENT and out of the pending
// index; a no-op in any later status. ports.ErrNotFound when unknown.
func (r *Redis) MarkSent(ctx context.Context, ref ports.ReservationRef) error {
	after, err := r.enter(ctx, "MarkSent")
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	s, e, err := r.entry(ref)
	if err != nil {
		return err
	}
	if apply(e, (*reservation.Reservation).MarkSent) {
		delete(s.pending, ref.ReservationID)
	}
	return after
}

// MarkSentBatch moves each PENDING reservation of refs to SENT; unknown
// ones are skipped.
func (r *Redis) MarkSentBatch(ctx context.Context, refs []ports.ReservationRef) error {
	after, err := r.enter(ctx, "MarkSentBatch")
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	for _, ref := range refs {
		s, e, err := r.entry(ref)
		if err != nil {
			continue
		}
		if apply(e, (*reservation.Reservation).MarkSent) {
			delete(s.pending, ref.ReservationID)
		}
	}
	return after
}

// ScheduleRetry keeps a PENDING reservation PENDING and makes it due at
// next; its lease is dropped when held by owner (or nobody), while another
// owner's lease keeps it not due before that lease ends. The send attempt
// count is not changed (ClaimDue counts attempts). A no-op when not
// PENDING; ports.ErrNotFound when unknown.
func (r *Redis) ScheduleRetry(ctx context.Context, ref ports.ReservationRef, owner string, next time.Time) error {
	after, err := r.enter(ctx, "ScheduleRetry")
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	_, e, err := r.entry(ref)
	if err != nil {
		return err
	}
	leaseOwner, leaseUntil := e.leaseOwner, e.leaseUntil
	if !apply(e, (*reservation.Reservation).ScheduleRetry) {
		return after
	}
	next = msTime(next)
	if leaseOwner != "" && leaseOwner != owner {
		// Another owner's lease stays: not due before it ends.
		e.leaseOwner, e.leaseUntil = leaseOwner, leaseUntil
		if leaseUntil.After(next) {
			next = leaseUntil
		}
	}
	e.nextAt = next
	return after
}

// Release gives the reservation's unit back exactly once: stock + 1, the
// user's holder entry removed when it still names this reservation, status
// RELEASED with reason, out of every index; it reports whether this call
// released it (false when RELEASED already). ports.ErrNotFound when
// unknown; an unknown reason matches reservation.ErrInvalid.
func (r *Redis) Release(ctx context.Context, ref ports.ReservationRef, reason reservation.ReleaseReason) (bool, error) {
	if !reservation.ValidReleaseReason(reason) {
		return false, fmt.Errorf("memory redis Release: %w: unknown release reason %q", reservation.ErrInvalid, reason)
	}
	after, err := r.enter(ctx, "Release")
	if err != nil {
		return false, err
	}
	defer r.mu.Unlock()
	s, e, err := r.entry(ref)
	if err != nil {
		return false, err
	}
	released := release(s, e, reason)
	if after != nil {
		return false, after
	}
	return released, nil
}

// release gives e's unit back unless it is RELEASED already: stock + 1,
// the user's holder entry removed when it still names e, status RELEASED
// with reason, out of every index. It reports whether it released e. The
// caller holds r.mu.
func release(s *rslot, e *rsvEntry, reason reservation.ReleaseReason) bool {
	released := apply(e, func(agg *reservation.Reservation) bool {
		ok, err := agg.Release(reason)
		return ok && err == nil
	})
	if !released {
		return false
	}
	id := e.snap.ReservationID
	s.stock++
	if s.holders[e.snap.UserID] == id {
		delete(s.holders, e.snap.UserID)
	}
	delete(s.pending, id)
	delete(s.unresolved, id)
	return true
}

// ReleaseMany releases each requested reservation as Release does, in
// input order and atomically as a whole (the real adapter is atomic per
// activity SKU), and returns one result per request: Released true when
// this call released it, false when it was RELEASED already (also by an
// earlier request of the same call); ports.ErrNotFound for an unknown
// reservation and reservation.ErrInvalid for an unknown reason, without
// affecting the other requests. An injected fault fails every request:
// before taking effect, or after it (AfterEffect: a lost reply).
func (r *Redis) ReleaseMany(ctx context.Context, reqs []ports.ReleaseRequest) []ports.ReleaseResult {
	out := make([]ports.ReleaseResult, len(reqs))
	after, err := r.enter(ctx, "ReleaseMany")
	if err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	defer r.mu.Unlock()
	for i, req := range reqs {
		if !reservation.ValidReleaseReason(req.Reason) {
			out[i].Err = fmt.Errorf("memory redis ReleaseMany: %w: unknown release reason %q", reservation.ErrInvalid, req.Reason)
			continue
		}
		s, e, err := r.entry(req.Ref)
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Released = release(s, e, req.Reason)
	}
	if after != nil {
		for i := range out {
			if !errors.Is(out[i].Err, reservation.ErrInvalid) {
				out[i] = ports.ReleaseResult{Err: after}
			}
		}
	}
	return out
}

// MarkOrdered moves each PENDING or SENT reservation of refs to ORDERED
// and out of the pending and unresolved indexes; unknown, ORDERED and
// RELEASED ones are skipped.
func (r *Redis) MarkOrdered(ctx context.Context, refs []ports.ReservationRef) error {
	after, err := r.enter(ctx, "MarkOrdered")
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	for _, ref := range refs {
		s, e, err := r.entry(ref)
		if err != nil {
			continue
		}
		if apply(e, (*reservation.Reservation).MarkOrdered) {
			delete(s.pending, ref.ReservationID)
			delete(s.unresolved, ref.ReservationID)
		}
	}
	return after
}

// ClaimDue leases up to limit PENDING reservations, across all seeded
// activity SKUs, whose next attempt is due at now and whose lease (if any)
// ended by now, the earliest due first: lease_owner = owner, lease_until =
// now + lease, send_attempt + 1, and the next attempt moves to
// lease_until. Times are compared at millisecond precision. limit <= 0
// claims nothing; an empty owner or lease <= 0 matches
// reservation.ErrInvalid.
func (r *Redis) ClaimDue(ctx context.Context, now time.Time, limit int, owner string, lease time.Duration) ([]reservation.Snapshot, error) {
	if limit <= 0 {
		return nil, nil
	}
	if owner == "" || lease <= 0 {
		return nil, fmt.Errorf("memory redis ClaimDue: %w: owner and lease > 0 are required", reservation.ErrInvalid)
	}
	after, err := r.enter(ctx, "ClaimDue")
	if err != nil {
		return nil, err
	}
	defer r.mu.Unlock()
	now = msTime(now)
	var due []*rsvEntry
	for _, s := range r.slots {
		for id := range s.pending {
			e := s.rsv[id]
			if e.snap.Status == reservation.StatusPending && !e.nextAt.After(now) && !e.leaseUntil.After(now) {
				due = append(due, e)
			}
		}
	}
	slices.SortFunc(due, func(a, b *rsvEntry) int {
		return cmp.Or(a.nextAt.Compare(b.nextAt), a.snap.CreatedAt.Compare(b.snap.CreatedAt),
			cmp.Compare(a.snap.ReservationID, b.snap.ReservationID))
	})
	due = due[:min(limit, len(due))]
	out := make([]reservation.Snapshot, 0, len(due))
	until := msTime(now.Add(lease))
	for _, e := range due {
		agg := reservation.Restore(e.snap)
		agg.ClaimForResend() // due holds PENDING reservations only
		e.snap = agg.Snapshot()
		e.leaseOwner, e.leaseUntil, e.nextAt = owner, until, until
		out = append(out, e.snap)
	}
	if after != nil {
		return nil, after
	}
	return out, nil
}

// Inventory returns the stock counter and the reservations holding a unit
// (sorted) of one activity SKU; ports.ErrNotFound when not seeded.
func (r *Redis) Inventory(ctx context.Context, activityID, skuID int64) (ports.RedisInventory, error) {
	after, err := r.enter(ctx, "Inventory")
	if err != nil {
		return ports.RedisInventory{}, err
	}
	defer r.mu.Unlock()
	if after != nil {
		return ports.RedisInventory{}, after
	}
	s := r.slots[SKU{activityID, skuID}]
	if s == nil {
		return ports.RedisInventory{}, fmt.Errorf("inventory activity %d sku %d: %w", activityID, skuID, ports.ErrNotFound)
	}
	held := make([]string, 0, len(s.holders))
	for _, id := range s.holders {
		held = append(held, id)
	}
	slices.Sort(held)
	return ports.RedisInventory{Available: s.stock, Held: held}, nil
}

// Stats counts, across all seeded activity SKUs, the unresolved (PENDING
// or SENT) and the pending-send (PENDING) reservations with the creation
// time of the oldest of each.
func (r *Redis) Stats(ctx context.Context) (ports.BacklogStats, error) {
	after, err := r.enter(ctx, "Stats")
	if err != nil {
		return ports.BacklogStats{}, err
	}
	defer r.mu.Unlock()
	if after != nil {
		return ports.BacklogStats{}, after
	}
	var st ports.BacklogStats
	oldest := func(cur, t time.Time) time.Time {
		if cur.IsZero() || t.Before(cur) {
			return t
		}
		return cur
	}
	for _, s := range r.slots {
		for id := range s.unresolved {
			st.Unresolved++
			st.OldestUnresolvedAt = oldest(st.OldestUnresolvedAt, s.rsv[id].snap.CreatedAt)
		}
		if ttl := s.activity.ReservationTTL; len(s.unresolved) > 0 && (st.ShortestUnresolvedTTL == 0 || ttl < st.ShortestUnresolvedTTL) {
			st.ShortestUnresolvedTTL = ttl
		}
		for id := range s.pending {
			st.PendingSend++
			st.OldestPendingSendAt = oldest(st.OldestPendingSendAt, s.rsv[id].snap.CreatedAt)
		}
	}
	return st, nil
}

// Unresolved returns up to limit unresolved (PENDING or SENT) reservations
// created before createdBefore, across all seeded activity SKUs, oldest
// first (ties by id).
func (r *Redis) Unresolved(ctx context.Context, createdBefore time.Time, limit int) ([]reservation.Snapshot, error) {
	after, err := r.enter(ctx, "Unresolved")
	if err != nil {
		return nil, err
	}
	defer r.mu.Unlock()
	if after != nil {
		return nil, after
	}
	var out []reservation.Snapshot
	for _, s := range r.slots {
		for id := range s.unresolved {
			if snap := s.rsv[id].snap; snap.CreatedAt.Before(createdBefore) {
				out = append(out, snap)
			}
		}
	}
	slices.SortFunc(out, func(a, b reservation.Snapshot) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ReservationID, b.ReservationID)
	})
	if limit >= 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
