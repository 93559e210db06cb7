package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// ClaimRequest binds (claim.UserID, claim.RequestID) to claim for ttl
// (RedisConfig.RequestClaimTTL when ttl <= 0) and returns it, or returns
// the unexpired claim bound earlier with existing = true and without
// taking a token. A request_id bound to another activity or SKU fails with
// ports.ErrRequestIDReused. A fresh claim first takes a token from the
// user's bucket (ports.ErrRateLimited when empty; refilled continuously at
// RefillPerSecond on the injected clock, in whole milliseconds like the
// real adapter) and also binds the order id for LookupOrder. Missing ids
// or ids <= 0 fail with an error matching reservation.ErrInvalid.
func (r *Redis) ClaimRequest(ctx context.Context, claim ports.RequestClaim, ttl time.Duration) (ports.RequestClaim, bool, error) {
	switch {
	case claim.UserID <= 0 || claim.ActivityID <= 0 || claim.SKUID <= 0:
		return ports.RequestClaim{}, false, fmt.Errorf("memory redis ClaimRequest: %w: user, activity and sku ids must be > 0", reservation.ErrInvalid)
	case claim.RequestID == "" || claim.ReservationID == "" || claim.OrderID == "" || claim.MessageID == "":
		return ports.RequestClaim{}, false, fmt.Errorf("memory redis ClaimRequest: %w: request, reservation, order and message ids are required", reservation.ErrInvalid)
	}
	after, err := r.enter(ctx, "ClaimRequest")
	if err != nil {
		return ports.RequestClaim{}, false, err
	}
	defer r.mu.Unlock()
	if ttl <= 0 {
		ttl = r.cfg.RequestClaimTTL
	}
	now := r.cfg.Clock.Now()
	key := requestKey{claim.UserID, claim.RequestID}
	if cur, ok := r.claims[key]; ok && cur.expiresAt.After(now) {
		if cur.claim.ActivityID != claim.ActivityID || cur.claim.SKUID != claim.SKUID {
			return ports.RequestClaim{}, false, fmt.Errorf("claim request %q of user %d: %w", claim.RequestID, claim.UserID, ports.ErrRequestIDReused)
		}
		if after != nil {
			return ports.RequestClaim{}, false, after
		}
		return cur.claim, true, nil
	}
	if !r.takeToken(claim.UserID, now.UnixMilli()) {
		return ports.RequestClaim{}, false, fmt.Errorf("claim request of user %d: %w", claim.UserID, ports.ErrRateLimited)
	}
	exp := now.Add(ttl)
	r.claims[key] = claimEntry{claim: claim, expiresAt: exp}
	r.lookups[lookupKey{claim.UserID, claim.OrderID}] = lookupEntry{
		ref: ports.ReservationRef{ActivityID: claim.ActivityID, SKUID: claim.SKUID, ReservationID: claim.ReservationID,
			UserID: claim.UserID},
		expiresAt: exp,
	}
	if after != nil {
		return ports.RequestClaim{}, false, after
	}
	return claim, false, nil
}

// takeToken refills the user's bucket up to nowMS and takes one token; it
// reports false when fewer than one token is left. The caller holds r.mu.
func (r *Redis) takeToken(userID, nowMS int64) bool {
	capacity := float64(r.cfg.RateLimit.Capacity)
	if capacity <= 0 {
		return true
	}
	b, ok := r.buckets[userID]
	if !ok {
		b = bucket{tokens: capacity, ms: nowMS}
	}
	if nowMS > b.ms {
		b.tokens = min(capacity, b.tokens+float64(nowMS-b.ms)*r.cfg.RateLimit.RefillPerSecond/1000)
		b.ms = nowMS
	}
	ok = b.tokens >= 1
	if ok {
		b.tokens--
	}
	r.buckets[userID] = b
	return ok
}

// ForgetRequest makes the claim of (userID, requestID) and its order
// lookup expire within ttl on the injected clock (never later than they
// would have) when the claim is still bound to claim.ReservationID.
func (r *Redis) ForgetRequest(ctx context.Context, userID int64, requestID string, claim ports.RequestClaim, ttl time.Duration) error {
	after, err := r.enter(ctx, "ForgetRequest")
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	key := requestKey{userID, requestID}
	cur, ok := r.claims[key]
	if !ok || cur.claim.ReservationID != claim.ReservationID {
		return after
	}
	exp := r.cfg.Clock.Now().Add(max(ttl, time.Millisecond))
	if exp.Before(cur.expiresAt) {
		cur.expiresAt = exp
		r.claims[key] = cur
	}
	lk := lookupKey{userID, cur.claim.OrderID}
	if e, ok := r.lookups[lk]; ok && exp.Before(e.expiresAt) {
		e.expiresAt = exp
		r.lookups[lk] = e
	}
	return after
}

// BuyerState reports whether (userID, requestID) has an unexpired claim
// and whether the user holds a unit of the SKU; read-only.
func (r *Redis) BuyerState(ctx context.Context, userID int64, requestID string, activityID, skuID int64) (ports.BuyerState, error) {
	after, err := r.enter(ctx, "BuyerState")
	if err != nil {
		return ports.BuyerState{}, err
	}
	defer r.mu.Unlock()
	if after != nil {
		return ports.BuyerState{}, after
	}
	cur, ok := r.claims[requestKey{userID, requestID}]
	st := ports.BuyerState{RequestBound: ok && cur.expiresAt.After(r.cfg.Clock.Now())}
	if s := r.slots[SKU{activityID, skuID}]; s != nil {
		st.HoldsUnit = s.holders[userID] != ""
	}
	return st, nil
}

// LookupOrder returns the reservation behind one of userID's order ids
// bound by ClaimRequest; ports.ErrNotFound when there is none or it
// expired.
func (r *Redis) LookupOrder(ctx context.Context, userID int64, orderID string) (ports.ReservationRef, error) {
	after, err := r.enter(ctx, "LookupOrder")
	if err != nil {
		return ports.ReservationRef{}, err
	}
	defer r.mu.Unlock()
	if after != nil {
		return ports.ReservationRef{}, after
	}
	e, ok := r.lookups[lookupKey{userID, orderID}]
	if !ok || !e.expiresAt.After(r.cfg.Clock.Now()) {
		return ports.ReservationRef{}, fmt.Errorf("order %s of user %d: %w", orderID, userID, ports.ErrNotFound)
	}
	return e.ref, nil
}
