package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// SeedActivity creates the stock counter and rules hash of each of the
// activity SKU's lanes if absent (one script per lane, each with its share
// of the stock; an existing counter is never reset and existing rules are
// kept even when a differs; a new lane starts paused when a.Paused) and then adds the lanes' slots to <ns>:slots.
// It fails with a *ports.FieldError for invalid settings.
func (s *Store) SeedActivity(ctx context.Context, a ports.Activity) error {
	if err := a.ValidateSlot(); err != nil {
		return err
	}
	n := a.Lanes()
	ids := s.laneIDs(a.ActivityID, a.SKUID, n)
	created := int64(0)
	for k, id := range ids {
		share := a.Stock / int64(n)
		if int64(k) < a.Stock%int64(n) {
			share++
		}
		sk := s.keys.slotByID(id)
		c, err := s.run(ctx, scriptSeed, []string{sk.rules, sk.stock},
			share, ms(a.StartsAt), ms(a.EndsAt), a.ReservationTTL.Milliseconds(), a.PaymentTimeout.Milliseconds(), n, k, flag(a.Paused),
		).Int64()
		if err != nil {
			return wrapErr("seed activity", err)
		}
		if c < 0 {
			return fmt.Errorf("seed activity %d sku %d lane %d: seeded before with another number of lanes than %d: %w",
				a.ActivityID, a.SKUID, k, n, ports.ErrAlreadyExists)
		}
		created += c
	}
	// The slots set lives in another hash slot, so it is written by a
	// separate command after the seed; a failure here is repaired by
	// seeding again.
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id
	}
	if err := s.client.SAdd(ctx, s.keys.slots(), members...).Err(); err != nil {
		return wrapErr("register slot", err)
	}
	for _, id := range ids {
		s.addCachedSlot(id)
	}
	s.rememberLanes(a)
	s.logger.DebugContext(ctx, "activity seeded", "activity_id", a.ActivityID, "sku_id", a.SKUID,
		"created", created > 0, "stock", a.Stock, "lanes", n)
	return nil
}

// Reserve runs the reserve script: when r's reservation exists it returns
// the stored one unchanged; otherwise it answers, checked in this order,
// ports.ErrActivityNotFound for an activity SKU without rules (or
// ports.ErrStockPaused while a recovery this process knows of is pending:
// a Redis that lost its data has no rules yet), ports.ErrStockPaused for a
// slot frozen for verification, ports.ErrActivityEnded when r.CreatedAt
// is at or after ends_at, a *ports.NotStartedError before starts_at,
// ports.ErrActivityPaused while an operator paused the sale (switch.go),
// a *ports.HolderError (ports.ErrAlreadyPurchased) when the user holds a
// unit and ports.ErrSoldOut without stock; then it decrements the stock,
// records the user as holder,
// stores r (status PENDING, send_attempt, next_retry_at = firstAttemptAt, no
// lease) and adds it to the pending (score firstAttemptAt), unresolved and
// pending_created (score CreatedAt) indexes. r must be a new PENDING
// reservation (reservation.New(...).Snapshot()); otherwise the error wraps
// reservation.ErrInvalid. With several stock lanes it reserves in the
// user's lane (every lane carries the same rules) and, when that lane is
// empty, moves stock over from the
// fullest other lane first (lanes.go); ports.ErrSoldOut then means every
// lane was empty at one moment, nothing in transit. When other buyers of the lane
// keep taking the stock moved in (maxLaneAttempts times) it answers
// ports.ErrStockPaused: retry.
func (s *Store) Reserve(ctx context.Context, r reservation.Snapshot, firstAttemptAt time.Time) (reservation.Snapshot, error) {
	if err := r.ValidateNew(); err != nil {
		return reservation.Snapshot{}, fmt.Errorf("redis reserve: %w", err)
	}
	if r.Version == 0 {
		r.Version = 1
	}
	n, err := s.laneCount(ctx, r.ActivityID, r.SKUID)
	if err != nil {
		return reservation.Snapshot{}, err
	}
	sk := s.lane(r.ActivityID, r.SKUID, laneOf(r.UserID, n), n)
	keys := []string{sk.rsv(r.ReservationID), sk.rules, sk.holders, sk.stock, sk.pending, sk.unresolved, sk.pendingCreated}
	args := make([]any, 0, 4+32)
	args = append(args, itoa(r.UserID), itoa(ms(r.CreatedAt)), itoa(ms(firstAttemptAt)), r.ReservationID)
	args = append(args, reservationFields(r, firstAttemptAt)...)
	lane := laneOf(r.UserID, n)
	for attempt := 1; ; attempt++ {
		reply, err := s.run(ctx, scriptReserve, keys, args...).Slice()
		if err != nil {
			return reservation.Snapshot{}, wrapErr("reserve", err)
		}
		if len(reply) == 0 {
			return reservation.Snapshot{}, unexpected("reserve", reply)
		}
		code, _ := reply[0].(string)
		if code != "SOLD_OUT" || n == 1 {
			return s.reserveAnswer(ctx, r, sk, code, reply)
		}
		// The user's lane is empty: move stock over from another lane,
		// and answer sold out only when every lane was empty at once.
		moved, soldOut, err := s.refill(ctx, r.ActivityID, r.SKUID, n, lane)
		if err != nil {
			return reservation.Snapshot{}, err
		}
		if soldOut {
			return s.reserveAnswer(ctx, r, sk, code, reply)
		}
		if attempt == maxLaneAttempts {
			return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: lane %d still empty after %d refills (moved %d last): %w",
				r.ActivityID, r.SKUID, lane, attempt, moved, ports.ErrStockPaused)
		}
	}
}

// reserveAnswer maps the reserve script's reply for r in the lane sk.
func (s *Store) reserveAnswer(ctx context.Context, r reservation.Snapshot, sk slotKeys, code string, reply []any) (reservation.Snapshot, error) {
	switch code {
	case "CREATED":
		r.CreatedAt = fromMS(ms(r.CreatedAt))
		r.ValidUntil = fromMS(ms(r.ValidUntil))
		return r, nil
	case "EXISTS":
		if len(reply) != 2 {
			return reservation.Snapshot{}, unexpected("reserve", reply)
		}
		stored, err := decodeReservationReply(reply[1])
		if err != nil {
			return reservation.Snapshot{}, fmt.Errorf("redis reserve: %w", err)
		}
		return stored.Snapshot, nil
	case "NOT_FOUND":
		if s.paused(ctx, sk.rules) {
			return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", r.ActivityID, r.SKUID, ports.ErrStockPaused)
		}
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", r.ActivityID, r.SKUID, ports.ErrActivityNotFound)
	case "PAUSED":
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", r.ActivityID, r.SKUID, ports.ErrStockPaused)
	case "ENDED":
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", r.ActivityID, r.SKUID, ports.ErrActivityEnded)
	case "NOT_STARTED":
		starts, err := replyInt(reply, 1)
		if err != nil {
			return reservation.Snapshot{}, unexpected("reserve", reply)
		}
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", r.ActivityID, r.SKUID,
			&ports.NotStartedError{StartsAt: fromMS(starts)})
	case "HALTED":
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", r.ActivityID, r.SKUID, ports.ErrActivityPaused)
	case "HOLDER":
		h := &ports.HolderError{}
		if len(reply) == 4 {
			h.ReservationID, _ = reply[1].(string)
			h.OrderID, _ = reply[3].(string)
		}
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d user %d: %w", r.ActivityID, r.SKUID, r.UserID, h)
	case "SOLD_OUT":
		return reservation.Snapshot{}, fmt.Errorf("reserve activity %d sku %d: %w", r.ActivityID, r.SKUID, ports.ErrSoldOut)
	}
	return reservation.Snapshot{}, unexpected("reserve", reply)
}

// replyInt reads element i of a script reply as an integer (Redis returns
// a Lua string as a bulk string).
func replyInt(reply []any, i int) (int64, error) {
	if i >= len(reply) {
		return 0, fmt.Errorf("redis: reply has no element %d", i)
	}
	switch v := reply[i].(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("redis: reply element %d is %T", i, reply[i])
}

// Get returns a stored reservation or ports.ErrNotFound.
func (s *Store) Get(ctx context.Context, ref ports.ReservationRef) (reservation.Snapshot, error) {
	st, err := s.get(ctx, ref)
	if err != nil {
		return reservation.Snapshot{}, err
	}
	return st.Snapshot, nil
}

func (s *Store) get(ctx context.Context, ref ports.ReservationRef) (storedReservation, error) {
	sk, err := s.refKeys(ctx, ref)
	if err != nil {
		return storedReservation{}, err
	}
	return s.getIn(ctx, sk, ref.ReservationID)
}

// getIn reads reservation id from the slot (lane) sk; ports.ErrNotFound
// when the slot has no such reservation.
func (s *Store) getIn(ctx context.Context, sk slotKeys, id string) (storedReservation, error) {
	m, err := s.client.HGetAll(ctx, sk.rsv(id)).Result()
	if err != nil {
		return storedReservation{}, wrapErr("get reservation", err)
	}
	if len(m) == 0 {
		return storedReservation{}, fmt.Errorf("reservation %s: %w", id, ports.ErrNotFound)
	}
	st, err := decodeReservation(m)
	if err != nil {
		return storedReservation{}, fmt.Errorf("redis get reservation %s: %w", id, err)
	}
	return st, nil
}

// MarkSent moves a PENDING reservation to SENT and out of the pending
// indexes; a no-op in any later status; ports.ErrNotFound when unknown.
func (s *Store) MarkSent(ctx context.Context, ref ports.ReservationRef) error {
	sk, err := s.refKeys(ctx, ref)
	if err != nil {
		return err
	}
	n, err := s.run(ctx, scriptMarkSent, []string{sk.rsv(ref.ReservationID), sk.pending, sk.pendingCreated},
		ref.ReservationID).Int64()
	if err != nil {
		return wrapErr("mark sent", err)
	}
	if n < 0 {
		return fmt.Errorf("mark sent %s: %w", ref.ReservationID, ports.ErrNotFound)
	}
	return nil
}

// ScheduleRetry keeps a PENDING reservation PENDING, drops its lease when
// held by owner (or by nobody) and makes it due at next (or when another
// owner's lease ends, whichever is later). A no-op when not PENDING;
// ports.ErrNotFound when unknown.
func (s *Store) ScheduleRetry(ctx context.Context, ref ports.ReservationRef, owner string, next time.Time) error {
	sk, err := s.refKeys(ctx, ref)
	if err != nil {
		return err
	}
	n, err := s.run(ctx, scriptScheduleRetry, []string{sk.rsv(ref.ReservationID), sk.pending},
		ref.ReservationID, owner, itoa(ms(next))).Int64()
	if err != nil {
		return wrapErr("schedule retry", err)
	}
	if n < 0 {
		return fmt.Errorf("schedule retry %s: %w", ref.ReservationID, ports.ErrNotFound)
	}
	return nil
}

// Release gives the reservation's unit back exactly once (stock + 1, the
// user's holder entry removed only if it still names this reservation,
// status RELEASED with reason, out of every index) and reports whether this
// call did it. ports.ErrNotFound when unknown; an unknown reason wraps
// reservation.ErrInvalid.
func (s *Store) Release(ctx context.Context, ref ports.ReservationRef, reason reservation.ReleaseReason) (bool, error) {
	if !reservation.ValidReleaseReason(reason) {
		return false, fmt.Errorf("redis release: %w: unknown release reason %q", reservation.ErrInvalid, reason)
	}
	sk, err := s.refKeys(ctx, ref)
	if err != nil {
		return false, err
	}
	n, err := s.run(ctx, scriptRelease,
		[]string{sk.rsv(ref.ReservationID), sk.stock, sk.holders, sk.pending, sk.unresolved, sk.pendingCreated},
		ref.ReservationID, string(reason), s.callToken(), s.retentionMS()).Int64()
	if err != nil {
		return false, wrapErr("release", err)
	}
	switch n {
	case -1:
		return false, fmt.Errorf("release %s: %w", ref.ReservationID, ports.ErrNotFound)
	case 1:
		// DEBUG: the caller logs the release with the business ids.
		s.logger.DebugContext(ctx, "reservation released", "reservation_id", ref.ReservationID,
			"activity_id", ref.ActivityID, "sku_id", ref.SKUID, "reason", string(reason))
		return true, nil
	}
	return false, nil
}

// ReleaseMany releases a batch of reservations with one release_many
// script call per activity SKU (the guard of Release, applied in input
// order inside the script, so each reservation is released at most once)
// and returns one result per request: Released true when this call
// released it, false when it was RELEASED already; ports.ErrNotFound for
// an unknown reservation and reservation.ErrInvalid for an unknown reason
// (such a request is not sent). When an activity SKU's call fails, every
// request of that SKU carries the error and its outcome is unknown.
func (s *Store) ReleaseMany(ctx context.Context, reqs []ports.ReleaseRequest) []ports.ReleaseResult {
	out := make([]ports.ReleaseResult, len(reqs))
	type slotReqs struct {
		id  string
		idx []int
	}
	var slots []*slotReqs
	index := map[string]*slotReqs{}
	for i, r := range reqs {
		if !reservation.ValidReleaseReason(r.Reason) {
			out[i].Err = fmt.Errorf("redis release %s: %w: unknown release reason %q", r.Ref.ReservationID, reservation.ErrInvalid, r.Reason)
			continue
		}
		lane, n, _, err := s.refLane(ctx, r.Ref)
		if err != nil {
			out[i].Err = err
			continue
		}
		id := s.laneID(r.Ref.ActivityID, r.Ref.SKUID, lane, n)
		g, ok := index[id]
		if !ok {
			g = &slotReqs{id: id}
			index[id] = g
			slots = append(slots, g)
		}
		g.idx = append(g.idx, i)
	}
	for _, g := range slots {
		sk := s.keys.slotByID(g.id)
		keys := make([]string, 0, 5+len(g.idx))
		keys = append(keys, sk.stock, sk.holders, sk.pending, sk.unresolved, sk.pendingCreated)
		args := make([]any, 0, 1+2*len(g.idx))
		args = append(args, s.callToken())
		for _, i := range g.idx {
			keys = append(keys, sk.rsv(reqs[i].Ref.ReservationID))
			args = append(args, reqs[i].Ref.ReservationID, string(reqs[i].Reason))
		}
		args = append(args, s.retentionMS())
		codes, err := s.run(ctx, scriptReleaseMany, keys, args...).Int64Slice()
		switch {
		case err != nil:
			err = wrapErr("release many "+g.id, err)
		case len(codes) != len(g.idx):
			err = unexpected("release many "+g.id, codes)
		}
		if err != nil {
			for _, i := range g.idx {
				out[i].Err = err
			}
			continue
		}
		released := 0
		for k, i := range g.idx {
			switch codes[k] {
			case 1:
				out[i].Released = true
				released++
			case -1:
				out[i].Err = fmt.Errorf("release %s: %w", reqs[i].Ref.ReservationID, ports.ErrNotFound)
			}
		}
		s.logger.DebugContext(ctx, "reservations released", "slot", g.id, "requested", len(g.idx), "released", released)
	}
	return out
}

// MarkSentBatch moves each PENDING reservation of refs to SENT and out of
// the pending indexes, with one script call per activity SKU; unknown
// reservations and those past PENDING are skipped.
func (s *Store) MarkSentBatch(ctx context.Context, refs []ports.ReservationRef) error {
	batches, errs := s.byLane(ctx, refs)
	for _, g := range batches {
		keys := make([]string, 0, 2+len(g.ids))
		keys = append(keys, g.sk.pending, g.sk.pendingCreated)
		args := make([]any, 0, len(g.ids))
		for _, rid := range g.ids {
			keys = append(keys, g.sk.rsv(rid))
			args = append(args, rid)
		}
		if err := s.run(ctx, scriptMarkSentMany, keys, args...).Err(); err != nil {
			errs = append(errs, wrapErr("mark sent "+g.id, err))
		}
	}
	return errors.Join(errs...)
}

// slotBatch is the reservations of one activity SKU.
type slotBatch struct {
	id                string
	activityID, skuID int64
	sk                slotKeys
	ids               []string
}

// byLane groups refs by the lane that holds them (the activity SKU's only
// one unless it has lanes), in first-seen order. A ref whose lane could
// not be determined is left out with its error.
func (s *Store) byLane(ctx context.Context, refs []ports.ReservationRef) ([]*slotBatch, []error) {
	var (
		out  []*slotBatch
		errs []error
	)
	index := map[string]*slotBatch{}
	for _, ref := range refs {
		lane, n, _, err := s.refLane(ctx, ref)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		id := s.laneID(ref.ActivityID, ref.SKUID, lane, n)
		g, ok := index[id]
		if !ok {
			g = &slotBatch{id: id, activityID: ref.ActivityID, skuID: ref.SKUID, sk: s.keys.slotByID(id)}
			index[id] = g
			out = append(out, g)
		}
		g.ids = append(g.ids, ref.ReservationID)
	}
	return out, errs
}

// MarkOrdered moves each PENDING or SENT reservation of refs to ORDERED and
// out of the pending and unresolved indexes, with one script call per
// activity SKU; ORDERED and RELEASED ones are skipped, and so are unknown
// ones unless the books were rebuilt and the ref carries the user: then
// the order is adopted (ports.StockBooks).
func (s *Store) MarkOrdered(ctx context.Context, refs []ports.ReservationRef) error {
	users := make(map[string]int64, len(refs))
	for _, r := range refs {
		if r.UserID > 0 {
			users[r.ReservationID] = r.UserID
		}
	}
	batches, errs := s.byLane(ctx, refs)
	for _, g := range batches {
		keys := make([]string, 0, 6+len(g.ids))
		keys = append(keys, g.sk.pending, g.sk.unresolved, g.sk.pendingCreated, g.sk.rules, g.sk.stock, g.sk.holders)
		args := make([]any, 0, 2+2*len(g.ids))
		args = append(args, itoa(g.activityID), itoa(g.skuID))
		for _, rid := range g.ids {
			keys = append(keys, g.sk.rsv(rid))
			args = append(args, rid, itoa(users[rid]))
		}
		args = append(args, s.retentionMS())
		if err := s.run(ctx, scriptMarkOrdered, keys, args...).Err(); err != nil {
			errs = append(errs, wrapErr("mark ordered "+g.id, err))
		}
	}
	return errors.Join(errs...)
}

// Inventory returns the stock counter and the held reservations of one
// activity SKU, read atomically; ports.ErrNotFound when it is not seeded.
// With several lanes it sums the lanes' counters and the units in transit
// between them and joins their holders (laneInventory).
func (s *Store) Inventory(ctx context.Context, activityID, skuID int64) (ports.RedisInventory, error) {
	n, err := s.laneCount(ctx, activityID, skuID)
	if err != nil {
		return ports.RedisInventory{}, err
	}
	if n > 1 {
		return s.laneInventory(ctx, activityID, skuID, n)
	}
	r, ok, err := s.readLane(ctx, activityID, skuID, 0, 1)
	if err != nil {
		return ports.RedisInventory{}, err
	}
	if !ok {
		return ports.RedisInventory{}, fmt.Errorf("inventory activity %d sku %d: %w", activityID, skuID, ports.ErrNotFound)
	}
	held := r.held
	if held == nil {
		held = []string{}
	}
	return ports.RedisInventory{Available: r.stock, Held: held}, nil
}

// retentionMS is Config.ReservationRetention in milliseconds, as the
// release and mark_ordered scripts take it ("0": kept for good).
func (s *Store) retentionMS() string { return itoa(s.cfg.ReservationRetention.Milliseconds()) }
