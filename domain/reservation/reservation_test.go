package reservation_test

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/seckill-dev/seckill/domain/reservation"
)

var t0 = time.Date(2026, 6, 25, 17, 0, 0, 0, time.UTC)

func valid() reservation.NewReservation {
	return reservation.NewReservation{ReservationID: "rsv_1", OrderID: "ord_1", MessageID: "evt_1",
		RequestID: "req_1", ActivityID: 1, SKUID: 2, UserID: 3, TTL: 5 * time.Minute}
}

func TestNewValidates(t *testing.T) {
	bad := []func(*reservation.NewReservation){
		func(n *reservation.NewReservation) { n.ReservationID = "" },
		func(n *reservation.NewReservation) { n.MessageID = "" },
		func(n *reservation.NewReservation) { n.RequestID = "" },
		func(n *reservation.NewReservation) { n.RequestID = string(make([]byte, 129)) },
		func(n *reservation.NewReservation) { n.UserID = 0 },
		func(n *reservation.NewReservation) { n.TTL = 0 },
	}
	for i, mutate := range bad {
		n := valid()
		mutate(&n)
		if _, err := reservation.New(n, t0); !errors.Is(err, reservation.ErrInvalid) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	r, err := reservation.New(valid(), t0)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Snapshot()
	if s.Status != reservation.StatusPending || !s.ValidUntil.Equal(t0.Add(5*time.Minute)) || s.Version != 1 {
		t.Fatalf("snapshot %+v", s)
	}
	if r.Expired(t0.Add(5*time.Minute-time.Millisecond)) || !r.Expired(t0.Add(5*time.Minute)) {
		t.Fatal("expiry boundary wrong")
	}
}

// TestPropertyTransitionsAreLegal applies random commands and checks every
// status change against CanTransition, that the version grows by exactly
// one with each change and only then, and that stock goes back at most
// once (I4).
func TestPropertyTransitionsAreLegal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r, err := reservation.New(valid(), t0)
		if err != nil {
			t.Fatal(err)
		}
		releases := 0
		for i := rapid.IntRange(1, 25).Draw(t, "steps"); i > 0; i-- {
			before := r.Snapshot()
			changed := false
			switch rapid.IntRange(0, 4).Draw(t, "cmd") {
			case 0:
				changed = r.MarkSent()
			case 1:
				changed = r.ScheduleRetry()
			case 2:
				changed = r.MarkOrdered()
			case 3:
				released, err := r.Release(rapid.SampledFrom([]reservation.ReleaseReason{
					reservation.ReasonExpired, reservation.ReasonOrderCanceled, reservation.ReasonSendFailed,
				}).Draw(t, "reason"))
				if err != nil {
					t.Fatal(err)
				}
				if released {
					releases++
				}
				changed = released
			case 4:
				if r.ClaimForResend() {
					if after := r.Snapshot(); after.SendAttempt != before.SendAttempt+1 || after.Version != before.Version {
						t.Fatalf("claim: %+v -> %+v", before, after)
					}
				}
				continue
			}
			after := r.Snapshot()
			if after.Status != before.Status && !reservation.CanTransition(before.Status, after.Status) {
				t.Fatalf("illegal transition %s -> %s", before.Status, after.Status)
			}
			if want := before.Version + map[bool]int64{true: 1, false: 0}[changed]; after.Version != want {
				t.Fatalf("changed=%v: version %d -> %d", changed, before.Version, after.Version)
			}
		}
		if releases > 1 {
			t.Fatalf("released %d times", releases)
		}
	})
}

func TestReleasedIsTerminal(t *testing.T) {
	r, _ := reservation.New(valid(), t0)
	if ok, err := r.Release(reservation.ReasonExpired); !ok || err != nil {
		t.Fatalf("first release: %v %v", ok, err)
	}
	if ok, _ := r.Release(reservation.ReasonExpired); ok {
		t.Fatal("second release applied")
	}
	if r.MarkOrdered() || r.MarkSent() || r.ScheduleRetry() || r.ClaimForResend() {
		t.Fatal("a command changed a RELEASED reservation")
	}
	if s := r.Snapshot(); s.Status != reservation.StatusReleased || s.ReleaseReason != reservation.ReasonExpired || s.Version != 2 {
		t.Fatalf("snapshot %+v", s)
	}
	if _, err := reservation.Restore(r.Snapshot()).Release("BOGUS"); !errors.Is(err, reservation.ErrInvalid) {
		t.Fatalf("bogus reason: %v", err)
	}
	for _, to := range []reservation.Status{reservation.StatusPending, reservation.StatusSent, reservation.StatusOrdered} {
		if reservation.CanTransition(reservation.StatusReleased, to) {
			t.Fatalf("RELEASED -> %s allowed", to)
		}
	}
}

// TestExpiredBoundary: a reservation is valid strictly before its
// valid-until instant.
func TestExpiredBoundary(t *testing.T) {
	until := t0.Add(5 * time.Minute)
	cases := []struct {
		now  time.Time
		want bool
	}{
		{until.Add(-time.Nanosecond), false},
		{until.Add(-time.Millisecond), false},
		{until, true},
		{until.Add(time.Nanosecond), true},
		{t0, false},
	}
	for _, c := range cases {
		if got := reservation.Expired(until, c.now); got != c.want {
			t.Errorf("Expired(%v, %v) = %v, want %v", until, c.now, got, c.want)
		}
	}
}

// TestValidateNew: New's result is a valid new reservation; each missing
// or wrong field is refused with ErrInvalid.
func TestValidateNew(t *testing.T) {
	r, err := reservation.New(valid(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Snapshot().ValidateNew(); err != nil {
		t.Fatalf("New's snapshot: %v", err)
	}
	bad := []func(*reservation.Snapshot){
		func(s *reservation.Snapshot) { s.OrderID = "" },
		func(s *reservation.Snapshot) { s.RequestID = "" },
		func(s *reservation.Snapshot) { s.SKUID = 0 },
		func(s *reservation.Snapshot) { s.Status = reservation.StatusSent },
		func(s *reservation.Snapshot) { s.ValidUntil = time.Time{} },
	}
	for i, mutate := range bad {
		s := r.Snapshot()
		mutate(&s)
		if err := s.ValidateNew(); !errors.Is(err, reservation.ErrInvalid) {
			t.Errorf("case %d: %v", i, err)
		}
	}
}
