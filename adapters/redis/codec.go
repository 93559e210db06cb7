package redis

import (
	"fmt"
	"strconv"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
)

// Field names of the reservation hash.
const (
	fReservationID = "reservation_id"
	fOrderID       = "order_id"
	fMessageID     = "message_id"
	fRequestID     = "request_id"
	fActivityID    = "activity_id"
	fSKUID         = "sku_id"
	fUserID        = "user_id"
	fStatus        = "status"
	fCreatedAt     = "created_at"
	fValidUntil    = "valid_until"
	fSendAttempt   = "send_attempt"
	fReleaseReason = "release_reason"
	fVersion       = "version"
	fNextRetryAt   = "next_retry_at"
	fLeaseOwner    = "lease_owner"
	fLeaseUntil    = "lease_until"
)

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// reservationFields encodes a new reservation as the field/value pairs of
// its hash, including the scanner fields.
func reservationFields(r reservation.Snapshot, firstAttemptAt time.Time) []any {
	return []any{
		fReservationID, r.ReservationID,
		fOrderID, r.OrderID,
		fMessageID, r.MessageID,
		fRequestID, r.RequestID,
		fActivityID, itoa(r.ActivityID),
		fSKUID, itoa(r.SKUID),
		fUserID, itoa(r.UserID),
		fStatus, string(r.Status),
		fCreatedAt, itoa(ms(r.CreatedAt)),
		fValidUntil, itoa(ms(r.ValidUntil)),
		fSendAttempt, strconv.Itoa(r.SendAttempt),
		fReleaseReason, string(r.ReleaseReason),
		fVersion, itoa(r.Version),
		fNextRetryAt, itoa(ms(firstAttemptAt)),
		fLeaseOwner, "",
		fLeaseUntil, "0",
	}
}

// storedReservation is a decoded reservation hash: the snapshot and the
// scanner fields.
type storedReservation struct {
	reservation.Snapshot
	NextRetryAt time.Time
	LeaseOwner  string
	LeaseUntil  time.Time
}

// pairsToMap turns a HGETALL reply (flat field/value list) into a map.
func pairsToMap(reply any) (map[string]string, error) {
	list, ok := reply.([]any)
	if !ok || len(list)%2 != 0 {
		return nil, fmt.Errorf("HGETALL reply of type %T", reply)
	}
	m := make(map[string]string, len(list)/2)
	for i := 0; i < len(list); i += 2 {
		k, ok1 := list[i].(string)
		v, ok2 := list[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("HGETALL entry of types %T/%T", list[i], list[i+1])
		}
		m[k] = v
	}
	return m, nil
}

// decodeReservation decodes a reservation hash.
func decodeReservation(m map[string]string) (storedReservation, error) {
	var (
		r    storedReservation
		err  error
		ints = map[string]*int64{}
	)
	var created, valid, next, lease, attempt int64
	ints[fActivityID] = &r.ActivityID
	ints[fSKUID] = &r.SKUID
	ints[fUserID] = &r.UserID
	ints[fVersion] = &r.Version
	ints[fCreatedAt] = &created
	ints[fValidUntil] = &valid
	ints[fNextRetryAt] = &next
	ints[fLeaseUntil] = &lease
	ints[fSendAttempt] = &attempt
	for f, p := range ints {
		v, ok := m[f]
		if !ok || v == "" {
			continue
		}
		if *p, err = strconv.ParseInt(v, 10, 64); err != nil {
			return storedReservation{}, fmt.Errorf("reservation field %s: %w", f, err)
		}
	}
	if m[fReservationID] == "" {
		return storedReservation{}, fmt.Errorf("reservation hash without %s", fReservationID)
	}
	r.ReservationID = m[fReservationID]
	r.OrderID = m[fOrderID]
	r.MessageID = m[fMessageID]
	r.RequestID = m[fRequestID]
	r.Status = reservation.Status(m[fStatus])
	r.ReleaseReason = reservation.ReleaseReason(m[fReleaseReason])
	r.CreatedAt = fromMS(created)
	r.ValidUntil = fromMS(valid)
	r.SendAttempt = int(attempt)
	r.NextRetryAt = fromMS(next)
	r.LeaseOwner = m[fLeaseOwner]
	r.LeaseUntil = fromMS(lease)
	return r, nil
}

// decodeReservationReply decodes a HGETALL reply of a reservation hash.
func decodeReservationReply(reply any) (storedReservation, error) {
	m, err := pairsToMap(reply)
	if err != nil {
		return storedReservation{}, err
	}
	return decodeReservation(m)
}
