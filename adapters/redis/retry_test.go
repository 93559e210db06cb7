package redis

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// twiceHook runs every EVALSHA and EVAL twice and keeps the second reply:
// what the client does when the first reply was lost (a read timeout or a
// dropped connection, retried by goredis per Options.MaxRetries and, on a
// cluster, ClusterOptions.MaxRedirects).
type twiceHook struct{ runs *atomic.Int64 }

func (h twiceHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h twiceHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		switch strings.ToLower(cmd.Name()) {
		case "evalsha", "eval":
			h.runs.Add(1)
			_ = next(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

func (h twiceHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestEveryScriptToleratesARetriedCall runs each state-changing script of
// the adapter twice per call with the same KEYS and ARGV (twiceHook) and
// requires the effect of one run and the answer of one run:
//
//	seed            EXISTS rules: no-op, the counter is never reset
//	claim_request   bound to this call's ids: CREATED again, no second token
//	reserve         the reservation exists: EXISTS with the stored one
//	claim_due       leased to this owner until this lease_until: returned again, send_attempt + 1 once
//	schedule_retry  already at this next time without the caller's lease: no-op, version + 1 once
//	mark_sent(_many) past PENDING: no-op
//	mark_ordered    ORDERED: skipped
//	release(_many)  RELEASED with this call's token: 1 again, stock + 1 once
//	forget_request  PEXPIRE ... LT: only ever shortens
//	view_apply      same version with this call's token: 1 again
//	rebuild         rebuilt by this generation with this call's token: the stored result
//	finish_recovery verified with this call's token: 1 again
//
// guard.lua (a second run answers PENDING, which marks the recovery
// pending as FROZEN does) and inventory.lua (read-only) need no case.
func TestEveryScriptToleratesARetriedCall(t *testing.T) {
	f := newFixture(t, withClock)
	var runs atomic.Int64
	f.c.AddHook(twiceHook{runs: &runs})
	ctx := ctxT(t)
	s := f.s
	twice := func(t *testing.T, op string, fn func()) {
		t.Helper()
		before := runs.Load()
		fn()
		if runs.Load() == before {
			t.Fatalf("%s ran no script twice", op)
		}
	}
	stock := func() int64 { return f.inventory(1, 1).Available }
	version := func(r reservation.Snapshot) int64 { return f.get(r).Version }

	twice(t, "seed", func() { f.seed(1, 1, 10) })
	twice(t, "seed again", func() { f.seed(1, 1, 99) })
	if got := stock(); got != 10 {
		t.Fatalf("stock after seeding twice = %d, want 10", got)
	}

	claim := ports.RequestClaim{UserID: 7, RequestID: "req-retry", ActivityID: 1, SKUID: 1,
		ReservationID: "rsv_retry", OrderID: "ord_retry", MessageID: "evt_retry"}
	twice(t, "claim_request", func() {
		got, existing, err := s.ClaimRequest(ctx, claim, time.Hour)
		if err != nil || existing || got != claim {
			t.Fatalf("ClaimRequest = %+v, %v, %v; want the claim, not existing", got, existing, err)
		}
	})
	if tokens, _ := f.c.HGet(ctx, s.keys.bucket(7), "tokens").Float64(); tokens != DefaultRateCapacity-1 {
		t.Fatalf("bucket holds %v tokens, want %d (one taken)", tokens, DefaultRateCapacity-1)
	}

	rs := make([]reservation.Snapshot, 4)
	for i := range rs {
		r := f.newRsv(1, 1, int64(10+i), testBase)
		twice(t, "reserve", func() {
			got, err := s.Reserve(ctx, r, testBase)
			if err != nil || got.ReservationID != r.ReservationID || got.Status != reservation.StatusPending || got.Version != 1 {
				t.Fatalf("Reserve = %+v, %v", got, err)
			}
		})
		rs[i] = r
	}
	if got := stock(); got != 6 {
		t.Fatalf("stock after 4 reservations = %d, want 6", got)
	}

	twice(t, "claim_due", func() {
		got, err := s.ClaimDue(ctx, testBase, 1, "scanner-0", time.Minute)
		if err != nil || len(got) != 1 || got[0].SendAttempt != 1 {
			t.Fatalf("ClaimDue = %+v, %v; want one reservation at send attempt 1", got, err)
		}
	})

	r0 := rs[0]
	v := version(r0)
	twice(t, "schedule_retry", func() {
		if err := s.ScheduleRetry(ctx, ref(r0), "scanner-0", testBase.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
	})
	if got := version(r0); got != v+1 {
		t.Fatalf("version after ScheduleRetry = %d, want %d", got, v+1)
	}

	twice(t, "mark_sent", func() {
		if err := s.MarkSent(ctx, ref(r0)); err != nil {
			t.Fatal(err)
		}
	})
	twice(t, "mark_sent_many", func() {
		if err := s.MarkSentBatch(ctx, []ports.ReservationRef{ref(rs[1])}); err != nil {
			t.Fatal(err)
		}
	})
	twice(t, "mark_ordered", func() {
		if err := s.MarkOrdered(ctx, []ports.ReservationRef{ref(r0)}); err != nil {
			t.Fatal(err)
		}
	})
	if st := f.get(r0); st.Status != reservation.StatusOrdered || st.Version != v+3 {
		t.Fatalf("after sent and ordered: %s version %d, want ORDERED version %d", st.Status, st.Version, v+3)
	}
	if st := f.get(rs[1]); st.Status != reservation.StatusSent || st.Version != 2 {
		t.Fatalf("after MarkSentBatch: %s version %d, want SENT version 2", st.Status, st.Version)
	}

	twice(t, "release", func() {
		ok, err := s.Release(ctx, ref(rs[1]), reservation.ReasonOrderCanceled)
		if err != nil || !ok {
			t.Fatalf("Release = %v, %v; want released by this call", ok, err)
		}
	})
	twice(t, "release_many", func() {
		res := s.ReleaseMany(ctx, []ports.ReleaseRequest{
			{Ref: ref(rs[2]), Reason: reservation.ReasonExpired},
			{Ref: ref(rs[2]), Reason: reservation.ReasonExpired},
		})
		if res[0].Err != nil || !res[0].Released || res[1].Err != nil || res[1].Released {
			t.Fatalf("ReleaseMany = %+v; want released by the first entry only", res)
		}
	})
	if got := stock(); got != 8 {
		t.Fatalf("stock after two releases = %d, want 8", got)
	}
	if ok, err := s.Release(ctx, ref(rs[1]), reservation.ReasonOrderCanceled); err != nil || ok {
		t.Fatalf("a second Release call = %v, %v; want released already", ok, err)
	}

	twice(t, "forget_request", func() {
		if err := s.ForgetRequest(ctx, 7, claim.RequestID, claim, time.Second); err != nil {
			t.Fatal(err)
		}
	})
	if ttl := f.c.PTTL(ctx, s.keys.request(7, claim.RequestID)).Val(); ttl <= 0 || ttl > time.Second {
		t.Fatalf("claim ttl after ForgetRequest = %s, want (0, 1s]", ttl)
	}

	views := s.OrderViews()
	view := ports.OrderView{OrderID: "ord_view", ReservationID: "rsv_view", ActivityID: 1, SKUID: 1, UserID: 7,
		Status: "CREATED", AggregateVersion: 3, CreatedAt: testBase}
	twice(t, "view_apply", func() {
		if ok, err := views.Apply(ctx, view); err != nil || !ok {
			t.Fatalf("Apply = %v, %v; want applied", ok, err)
		}
	})
	if ok, err := views.Apply(ctx, view); err != nil || ok {
		t.Fatalf("a second Apply call = %v, %v; want not applied", ok, err)
	}

	const gen = "gen-retry"
	if err := f.c.HSet(ctx, s.keys.slot(1, 1).rules, "frozen", gen).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.c.HSet(ctx, s.keys.generation(), "pending", gen).Err(); err != nil {
		t.Fatal(err)
	}
	act := ports.Activity{ActivityID: 1, SKUID: 1, Stock: 10, StartsAt: testBase.Add(-time.Hour),
		EndsAt: testBase.Add(time.Hour), ReservationTTL: 30 * time.Second, PaymentTimeout: 15 * time.Minute}
	twice(t, "rebuild", func() {
		res, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: act, Base: 9,
			InFlight: []string{rs[3].ReservationID}, Ordered: []string{r0.ReservationID},
			Holders: []ports.Holder{{UserID: r0.UserID, ReservationID: r0.ReservationID}}})
		if err != nil || res != (ports.RebuildResult{Available: 8, InFlight: 1}) {
			t.Fatalf("Rebuild = %+v, %v; want 8 available, 1 in flight", res, err)
		}
	})
	if _, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: act, Base: 9}); !errors.Is(err, ports.ErrStockPaused) {
		t.Fatalf("a second Rebuild call = %v; want ErrStockPaused", err)
	}
	twice(t, "finish_recovery", func() {
		if ok, err := s.FinishRecovery(ctx, gen); err != nil || !ok {
			t.Fatalf("FinishRecovery = %v, %v; want finished by this call", ok, err)
		}
	})
	if ok, err := s.FinishRecovery(ctx, gen); err != nil || ok {
		t.Fatalf("a second FinishRecovery call = %v, %v; want false", ok, err)
	}
}

// TestLaneScriptsTolerateARetriedCall runs the stock lane scripts twice per
// call (twiceHook):
//
//	transfer_out   logged already: the stored units, counter taken once
//	transfer_in    received already: 0, units added once
//	transfer_done  gone already: 0
//	freeze_lane    frozen by this generation again
//	rebuild (keep) frozen by this generation: rewritten from the same facts
//	open_lane      open for this generation: 1 again
//
// and requires a sale that moves stock between lanes and a rebuild of
// every lane to leave the counters as one run would.
func TestLaneScriptsTolerateARetriedCall(t *testing.T) {
	f := newFixture(t, withClock)
	var runs atomic.Int64
	f.c.AddHook(twiceHook{runs: &runs})
	ctx := ctxT(t)
	s := f.s
	a := f.seedLanes(1, 1, 6, 3)
	var sold []reservation.Snapshot
	for _, user := range []int64{3, 6, 9, 12} { // lane 0: two of them through transfers
		sold = append(sold, f.reserve(1, 1, user, testBase, testBase))
	}
	if got := f.laneStocks(a); got[0]+got[1]+got[2] != 2 {
		t.Fatalf("lanes after 4 of 6 units sold = %v, want 2 left in all", got)
	}
	if inv := f.inventory(1, 1); inv.Available != 2 || len(inv.Held) != 4 {
		t.Fatalf("Inventory = %d available, %d held; want 2 and 4", inv.Available, len(inv.Held))
	}
	if runs.Load() == 0 {
		t.Fatal("no script ran twice")
	}

	const gen = "gen-lanes-retry"
	if err := f.c.HSet(ctx, s.lane(1, 1, 1, 3).rules, "frozen", gen).Err(); err != nil {
		t.Fatal(err)
	}
	inflight, err := s.InFlight(ctx, gen, a)
	if err != nil || len(inflight) != 4 {
		t.Fatalf("InFlight = %d, %v; want 4", len(inflight), err)
	}
	ids := make([]string, 0, len(inflight))
	for _, r := range inflight {
		ids = append(ids, r.ReservationID)
	}
	res, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: a, Base: 6, InFlight: ids})
	if err != nil || res != (ports.RebuildResult{Available: 2, InFlight: 4}) {
		t.Fatalf("Rebuild = %+v, %v; want 2 available, 4 in flight", res, err)
	}
	if got := f.laneStocks(a); got[0]+got[1]+got[2] != 2 {
		t.Fatalf("lanes after the rebuild = %v, want 2 in all", got)
	}
	for _, user := range []int64{15, 18} {
		f.reserve(1, 1, user, testBase, testBase)
	}
	_, err = s.Reserve(ctx, f.newRsv(1, 1, 21, testBase), testBase)
	wantErr(t, err, ports.ErrSoldOut)
	if _, err := s.Reserve(ctx, f.newRsv(1, 1, sold[0].UserID, testBase), testBase); !errors.Is(err, ports.ErrAlreadyPurchased) {
		t.Fatalf("user %d again: %v, want ErrAlreadyPurchased", sold[0].UserID, err)
	}
}
