package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// ClaimRequest runs claim_request in the user's slot: when
// (claim.UserID, claim.RequestID) is bound already it returns the bound ids
// with existing = true (no token taken), or ports.ErrRequestIDReused when
// the binding names another activity or SKU. Otherwise it takes a token
// from the user's bucket (ports.ErrRateLimited when empty), stores the
// claim and the order lookup key <ns>:{u<user>}:ord:<order_id>, both for
// ttl (Config.RequestClaimTTL when ttl <= 0), and returns claim.
func (s *Store) ClaimRequest(ctx context.Context, claim ports.RequestClaim, ttl time.Duration) (ports.RequestClaim, bool, error) {
	switch {
	case claim.UserID <= 0 || claim.ActivityID <= 0 || claim.SKUID <= 0:
		return ports.RequestClaim{}, false, fmt.Errorf("redis claim request: %w: user, activity and sku ids must be > 0", reservation.ErrInvalid)
	case claim.RequestID == "" || claim.ReservationID == "" || claim.OrderID == "" || claim.MessageID == "":
		return ports.RequestClaim{}, false, fmt.Errorf("redis claim request: %w: request, reservation, order and message ids are required", reservation.ErrInvalid)
	}
	if ttl <= 0 {
		ttl = s.cfg.RequestClaimTTL
	}
	var nowMS int64
	if s.cfg.Clock != nil {
		nowMS = ms(s.cfg.Clock())
	}
	capacity := s.cfg.RateLimit.Capacity
	if capacity < 0 {
		capacity = 0
	}
	keys := []string{
		s.keys.request(claim.UserID, claim.RequestID),
		s.keys.bucket(claim.UserID),
		s.keys.orderLookup(claim.UserID, claim.OrderID),
	}
	reply, err := s.run(ctx, scriptClaimRequest, keys,
		itoa(claim.ActivityID), itoa(claim.SKUID), claim.ReservationID, claim.OrderID, claim.MessageID,
		itoa(max(ttl.Milliseconds(), 1)), capacity,
		strconv.FormatFloat(s.cfg.RateLimit.RefillPerSecond/1000, 'g', -1, 64), itoa(nowMS),
	).Slice()
	if err != nil {
		return ports.RequestClaim{}, false, wrapErr("claim request", err)
	}
	if len(reply) == 0 {
		return ports.RequestClaim{}, false, unexpected("claim request", reply)
	}
	code, _ := reply[0].(string)
	switch code {
	case "CREATED":
		return claim, false, nil
	case "EXISTING":
		if len(reply) != 4 {
			return ports.RequestClaim{}, false, unexpected("claim request", reply)
		}
		bound := claim
		bound.ReservationID, _ = reply[1].(string)
		bound.OrderID, _ = reply[2].(string)
		bound.MessageID, _ = reply[3].(string)
		return bound, true, nil
	case "REUSED":
		return ports.RequestClaim{}, false, fmt.Errorf("claim request %q of user %d: %w", claim.RequestID, claim.UserID, ports.ErrRequestIDReused)
	case "LIMITED":
		return ports.RequestClaim{}, false, fmt.Errorf("claim request of user %d: %w", claim.UserID, ports.ErrRateLimited)
	}
	return ports.RequestClaim{}, false, unexpected("claim request", reply)
}

// ForgetRequest runs forget_request in the user's slot: when the claim of
// (userID, requestID) is still bound to reservationID, its claim and order
// lookup keys expire within ttl (never later than they would have).
func (s *Store) ForgetRequest(ctx context.Context, userID int64, requestID string, claim ports.RequestClaim, ttl time.Duration) error {
	keys := []string{s.keys.request(userID, requestID), s.keys.orderLookup(userID, claim.OrderID)}
	if err := s.run(ctx, scriptForgetRequest, keys, claim.ReservationID, itoa(max(ttl.Milliseconds(), 1))).Err(); err != nil {
		return wrapErr("forget request", err)
	}
	return nil
}

// BuyerState implements ports.Admission with one pipelined round trip: an
// EXISTS of the claim key and an HEXISTS in the holders of the user's lane
// of the SKU (two hash slots, so no script).
func (s *Store) BuyerState(ctx context.Context, userID int64, requestID string, activityID, skuID int64) (ports.BuyerState, error) {
	n, err := s.laneCount(ctx, activityID, skuID)
	if err != nil {
		return ports.BuyerState{}, err
	}
	holders := s.lane(activityID, skuID, laneOf(userID, n), n).holders
	var bound *goredis.IntCmd
	var holds *goredis.BoolCmd
	_, err = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		bound = p.Exists(ctx, s.keys.request(userID, requestID))
		holds = p.HExists(ctx, holders, itoa(userID))
		return nil
	})
	if err != nil {
		return ports.BuyerState{}, wrapErr("buyer state", err)
	}
	return ports.BuyerState{RequestBound: bound.Val() == 1, HoldsUnit: holds.Val()}, nil
}

// LookupOrder reads the order lookup key written by ClaimRequest and
// returns the reservation behind userID's order orderID;
// ports.ErrNotFound when there is none (never bound, expired, or another
// user's order).
func (s *Store) LookupOrder(ctx context.Context, userID int64, orderID string) (ports.ReservationRef, error) {
	v, err := s.client.Get(ctx, s.keys.orderLookup(userID, orderID)).Result()
	if errors.Is(err, goredis.Nil) {
		return ports.ReservationRef{}, fmt.Errorf("order %s of user %d: %w", orderID, userID, ports.ErrNotFound)
	}
	if err != nil {
		return ports.ReservationRef{}, wrapErr("lookup order", err)
	}
	parts := strings.SplitN(v, ":", 3)
	if len(parts) != 3 {
		return ports.ReservationRef{}, fmt.Errorf("redis lookup order %s: malformed value %q", orderID, v)
	}
	a, errA := strconv.ParseInt(parts[0], 10, 64)
	k, errK := strconv.ParseInt(parts[1], 10, 64)
	if err := errors.Join(errA, errK); err != nil {
		return ports.ReservationRef{}, fmt.Errorf("redis lookup order %s: malformed value %q: %w", orderID, v, err)
	}
	return ports.ReservationRef{ActivityID: a, SKUID: k, ReservationID: parts[2], UserID: userID}, nil
}
