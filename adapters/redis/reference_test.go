package redis

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// TestScriptsFollowTheAggregate holds each reservation script to the
// reservation aggregate, the reference of the rules: from every status a
// reservation can be in, it runs one command through the script and the
// same command on the aggregate restored from the stored state, and
// requires the same answer and the same status, release reason, send
// attempt and version afterwards.
func TestScriptsFollowTheAggregate(t *testing.T) {
	type start struct {
		name  string
		setup func(f *fixture, r reservation.Snapshot)
	}
	starts := []start{
		{"PENDING", func(*fixture, reservation.Snapshot) {}},
		{"PENDING_claimed", func(f *fixture, r reservation.Snapshot) {
			if got, err := f.s.ClaimDue(ctxT(f.t), testBase, 10, "scanner-0", time.Millisecond); err != nil || len(got) != 1 {
				f.t.Fatalf("setup claim: %v %v", got, err)
			}
		}},
		{"SENT", func(f *fixture, r reservation.Snapshot) {
			if err := f.s.MarkSent(ctxT(f.t), ref(r)); err != nil {
				f.t.Fatal(err)
			}
		}},
		{"ORDERED", func(f *fixture, r reservation.Snapshot) {
			if err := f.s.MarkOrdered(ctxT(f.t), []ports.ReservationRef{ref(r)}); err != nil {
				f.t.Fatal(err)
			}
		}},
		{"RELEASED", func(f *fixture, r reservation.Snapshot) {
			if _, err := f.s.Release(ctxT(f.t), ref(r), reservation.ReasonSendFailed); err != nil {
				f.t.Fatal(err)
			}
		}},
	}
	// A command runs on the script (through the adapter) and on the
	// aggregate; each returns its answer: whether it changed anything
	// (true when the command answers nothing, as MarkSent's error-only
	// port does; the states are compared then).
	type command struct {
		name      string
		script    func(f *fixture, r reservation.Snapshot) (bool, error)
		aggregate func(a *reservation.Reservation) bool
	}
	noAnswer := func(err error) (bool, error) { return true, err }
	commands := []command{
		{"MarkSent",
			func(f *fixture, r reservation.Snapshot) (bool, error) {
				return noAnswer(f.s.MarkSent(ctxT(f.t), ref(r)))
			},
			func(a *reservation.Reservation) bool { a.MarkSent(); return true }},
		{"MarkSentBatch",
			func(f *fixture, r reservation.Snapshot) (bool, error) {
				return noAnswer(f.s.MarkSentBatch(ctxT(f.t), []ports.ReservationRef{ref(r)}))
			},
			func(a *reservation.Reservation) bool { a.MarkSent(); return true }},
		{"ScheduleRetry",
			func(f *fixture, r reservation.Snapshot) (bool, error) {
				return noAnswer(f.s.ScheduleRetry(ctxT(f.t), ref(r), "scanner-0", testBase.Add(time.Second)))
			},
			func(a *reservation.Reservation) bool { a.ScheduleRetry(); return true }},
		{"MarkOrdered",
			func(f *fixture, r reservation.Snapshot) (bool, error) {
				return noAnswer(f.s.MarkOrdered(ctxT(f.t), []ports.ReservationRef{ref(r)}))
			},
			func(a *reservation.Reservation) bool { a.MarkOrdered(); return true }},
		{"Release",
			func(f *fixture, r reservation.Snapshot) (bool, error) {
				return f.s.Release(ctxT(f.t), ref(r), reservation.ReasonOrderCanceled)
			},
			func(a *reservation.Reservation) bool {
				ok, err := a.Release(reservation.ReasonOrderCanceled)
				return ok && err == nil
			}},
		{"ReleaseMany",
			func(f *fixture, r reservation.Snapshot) (bool, error) {
				res := f.s.ReleaseMany(ctxT(f.t), []ports.ReleaseRequest{{Ref: ref(r), Reason: reservation.ReasonExpired}})
				return res[0].Released, res[0].Err
			},
			func(a *reservation.Reservation) bool {
				ok, err := a.Release(reservation.ReasonExpired)
				return ok && err == nil
			}},
		{"ClaimDue",
			func(f *fixture, r reservation.Snapshot) (bool, error) {
				got, err := f.s.ClaimDue(ctxT(f.t), testBase.Add(time.Minute), 10, "scanner-1", time.Minute)
				return len(got) == 1, err
			},
			(*reservation.Reservation).ClaimForResend},
	}
	for _, st := range starts {
		for _, cmd := range commands {
			t.Run(fmt.Sprintf("%s/%s", st.name, cmd.name), func(t *testing.T) {
				t.Parallel()
				f := newFixture(t)
				f.seed(1, 1, 5)
				r := f.reserve(1, 1, 7, testBase, testBase)
				st.setup(f, r)
				before, err := f.s.Get(ctxT(t), ref(r))
				if err != nil {
					t.Fatal(err)
				}
				agg := reservation.Restore(before)
				wantAnswer := cmd.aggregate(agg)
				gotAnswer, err := cmd.script(f, r)
				if err != nil {
					t.Fatalf("script: %v", err)
				}
				if gotAnswer != wantAnswer {
					t.Errorf("answer: script %v, aggregate %v", gotAnswer, wantAnswer)
				}
				got, err := f.s.Get(ctxT(t), ref(r))
				if err != nil {
					t.Fatal(err)
				}
				want := agg.Snapshot()
				if got.Status != want.Status || got.ReleaseReason != want.ReleaseReason ||
					got.SendAttempt != want.SendAttempt || got.Version != want.Version {
					t.Errorf("from %+v\nscript    %s %q attempt %d version %d\naggregate %s %q attempt %d version %d",
						before, got.Status, got.ReleaseReason, got.SendAttempt, got.Version,
						want.Status, want.ReleaseReason, want.SendAttempt, want.Version)
				}
			})
		}
	}
}
