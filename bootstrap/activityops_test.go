package bootstrap_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/seckill-dev/seckill/adapters/api"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// createWindow creates activity id (SKU 1) selling from starts to ends.
func (s *system) createWindow(id, stock int64, starts, ends time.Time) {
	s.t.Helper()
	_, err := s.admin.CreateActivity(context.Background(), authed(&seckillv1.CreateActivityRequest{
		ActivityId: id, SkuId: 1, Stock: stock, StartsAt: tsOf(starts), EndsAt: tsOf(ends),
		PaymentTimeout: durOf(time.Hour), ReservationTtl: durOf(time.Minute), UnitPrice: 1999, Currency: "EUR",
	}, s.token(1, true)))
	if err != nil {
		s.t.Fatal(err)
	}
}

// listStates lists every activity in states (all pages of size 2) and
// returns their ids.
func (s *system) listStates(states ...seckillv1.ActivityState) []int64 {
	s.t.Helper()
	var ids []int64
	token := ""
	for range 20 {
		res, err := s.admin.ListActivities(context.Background(), authed(&seckillv1.ListActivitiesRequest{
			PageSize: 2, PageToken: token, States: states}, s.token(1, true)))
		if err != nil {
			s.t.Fatal(err)
		}
		for _, a := range res.Msg.GetActivities() {
			if len(states) > 0 && !slices.Contains(states, a.GetState()) {
				s.t.Errorf("activity %d in state %v listed for %v", a.GetActivity().GetActivityId(), a.GetState(), states)
			}
			ids = append(ids, a.GetActivity().GetActivityId())
		}
		if token = res.Msg.GetNextPageToken(); token == "" {
			return ids
		}
	}
	s.t.Fatal("ListActivities never ended")
	return nil
}

// placement is the outcome of one PlaceOrder of a load.
type placement struct {
	started  time.Time
	accepted bool
	reason   string
}

// underLoad places one order for each of n users (from firstUser) on 16
// workers while op runs once at least 10 were accepted; it returns the
// outcomes and when op answered.
func (s *system) underLoad(activity, firstUser int64, n int, op func()) ([]placement, time.Time) {
	s.t.Helper()
	out := make([]placement, n)
	var accepted atomic.Int64
	var answered time.Time
	var once sync.Once
	opDone := make(chan struct{})
	go func() {
		defer close(opDone)
		for range 600 { // at most 60 s
			if accepted.Load() >= 10 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		op()
		once.Do(func() { answered = time.Now() })
	}()
	concurrently(n, 16, func(i int) {
		if i >= n/2 {
			<-opDone // half of the buyers come after the operator's answer
		}
		p := placement{started: time.Now()}
		_, err := s.place(context.Background(), firstUser+int64(i), activity, fmt.Sprintf("load-%d-%d", activity, i))
		p.accepted, p.reason = err == nil, api.ErrorReason(err)
		if err != nil && p.reason == "" {
			s.t.Errorf("place %d: %v", i, err)
		}
		if p.accepted {
			accepted.Add(1)
		}
		out[i] = p
	})
	<-opDone
	return out, answered
}

// checkLoad asserts that no PlaceOrder started after the operator's answer
// was accepted (each got reason), that some were accepted before, and
// that every accepted one became an order; it returns the accepted count.
func (s *system) checkLoad(activity int64, out []placement, answered time.Time, reason string) int64 {
	s.t.Helper()
	var ok, after, refused int64
	for _, p := range out {
		if p.accepted {
			ok++
		}
		if p.started.After(answered) {
			after++
			if p.accepted {
				s.t.Errorf("activity %d: a PlaceOrder started after the answer was accepted", activity)
			} else if p.reason == reason {
				refused++
			}
		}
	}
	if ok == 0 || after == 0 || refused != after {
		s.t.Fatalf("activity %d: %d accepted, %d started after the answer, %d of them refused %s", activity, ok, after, refused, reason)
	}
	s.eventually(60*time.Second, "every accepted reservation became an order", func() bool {
		return s.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, activity) == ok
	})
	return ok
}

// TestActivityOpsEndToEnd runs a sale the way operators and buyers see it
// (issue 27), on both brokers: ListActivities by state (scheduled, on
// sale, paused, ended) and in pages; GetActivity with the books;
// UpdateActivity of ends_at, a refused field and a past end; a pause under
// load (no PlaceOrder started after PauseActivity answered is accepted,
// every accepted one becomes an order, I1-I7), the resume; a close under
// load (the same, unsold reported, I1-I7); the buyers' GetActivity and
// ListMyOrders (own orders only, newest first, in pages); every new
// operator call refused for buyer and payment tokens; unknown activities
// and a close of an ended sale answered with clear errors; the audit.
func TestActivityOpsEndToEnd(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		ctx := context.Background()
		adm := s.token(1, true)
		now := time.Now()
		const (
			onSale, scheduled, paused, ended, closing, mine = 1, 2, 3, 4, 5, 6
			stock                                           = 1000
		)
		s.createWindow(onSale, stock, now.Add(-time.Minute), now.Add(time.Hour))
		s.createWindow(scheduled, 10, now.Add(time.Hour), now.Add(2*time.Hour))
		s.createWindow(paused, 10, now.Add(-time.Minute), now.Add(time.Hour))
		s.createWindow(ended, 10, now.Add(-2*time.Hour), now.Add(-time.Hour))
		s.createWindow(closing, stock, now.Add(-time.Minute), now.Add(time.Hour))
		s.createWindow(mine, 10, now.Add(-time.Minute), now.Add(time.Hour))
		if _, err := s.admin.PauseActivity(ctx, authed(&seckillv1.PauseActivityRequest{ActivityId: paused, SkuId: 1}, adm)); err != nil {
			t.Fatal(err)
		}

		// Listing by state, in pages of 2.
		for _, c := range []struct {
			states []seckillv1.ActivityState
			want   []int64
		}{
			{nil, []int64{1, 2, 3, 4, 5, 6}},
			{[]seckillv1.ActivityState{seckillv1.ActivityState_ACTIVITY_STATE_ON_SALE}, []int64{1, 5, 6}},
			{[]seckillv1.ActivityState{seckillv1.ActivityState_ACTIVITY_STATE_SCHEDULED}, []int64{2}},
			{[]seckillv1.ActivityState{seckillv1.ActivityState_ACTIVITY_STATE_PAUSED}, []int64{3}},
			{[]seckillv1.ActivityState{seckillv1.ActivityState_ACTIVITY_STATE_ENDED}, []int64{4}},
			{[]seckillv1.ActivityState{seckillv1.ActivityState_ACTIVITY_STATE_SOLD_OUT}, nil},
			{[]seckillv1.ActivityState{seckillv1.ActivityState_ACTIVITY_STATE_SCHEDULED, seckillv1.ActivityState_ACTIVITY_STATE_ENDED},
				[]int64{2, 4}},
		} {
			if got := s.listStates(c.states...); !slices.Equal(got, c.want) {
				t.Errorf("ListActivities %v = %v, want %v", c.states, got, c.want)
			}
		}

		// A sale closed before it started has ended.
		const early = 7
		s.createWindow(early, 10, now.Add(time.Hour), now.Add(2*time.Hour))
		closed, err := s.admin.CloseActivity(ctx, authed(&seckillv1.CloseActivityRequest{ActivityId: early, SkuId: 1}, adm))
		if err != nil || closed.Msg.GetActivity().GetState() != seckillv1.ActivityState_ACTIVITY_STATE_ENDED ||
			closed.Msg.GetUnsold() != 10 {
			t.Fatalf("CloseActivity of a scheduled sale = %v, %v", closed, err)
		}
		if _, err := s.place(ctx, 50_000, early, "early"); api.ErrorReason(err) != api.ReasonActivityEnded {
			t.Errorf("PlaceOrder of a sale closed before its start: %v, want %s", err, api.ReasonActivityEnded)
		}

		// GetActivity with the books.
		got, err := s.admin.GetActivity(ctx, authed(&seckillv1.GetActivityRequest{ActivityId: onSale, SkuId: 1}, adm))
		if err != nil {
			t.Fatal(err)
		}
		if b := got.Msg.GetBooks(); b.GetInitialStock() != stock || b.GetRedisAvailable() != stock || b.GetDrift() != 0 ||
			got.Msg.GetActivity().GetState() != seckillv1.ActivityState_ACTIVITY_STATE_ON_SALE {
			t.Fatalf("GetActivity = %v", got.Msg)
		}

		// UpdateActivity: ends_at moves; another field or a past end is refused.
		later := now.Add(2 * time.Hour).UTC().Truncate(time.Microsecond)
		up, err := s.admin.UpdateActivity(ctx, authed(&seckillv1.UpdateActivityRequest{ActivityId: onSale, SkuId: 1,
			EndsAt: tsOf(later), UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"ends_at"}}}, adm))
		if err != nil {
			t.Fatal(err)
		}
		if !up.Msg.GetActivity().GetActivity().GetEndsAt().AsTime().Equal(later) {
			t.Fatalf("UpdateActivity ends_at = %v, want %v", up.Msg.GetActivity().GetActivity().GetEndsAt().AsTime(), later)
		}
		for field, req := range map[string]*seckillv1.UpdateActivityRequest{
			"update_mask": {ActivityId: onSale, SkuId: 1, EndsAt: tsOf(later),
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"stock"}}},
			"ends_at": {ActivityId: onSale, SkuId: 1, EndsAt: tsOf(now.Add(-time.Minute))},
		} {
			_, err := s.admin.UpdateActivity(ctx, authed(req, adm))
			if field2 := badField(err); connect.CodeOf(err) != connect.CodeInvalidArgument || field2 != field {
				t.Errorf("UpdateActivity %v: %v (field %q), want InvalidArgument on %s", req, err, field2, field)
			}
		}

		// A pause under load, then the resume.
		out, answered := s.underLoad(onSale, 10_000, 300, func() {
			res, err := s.admin.PauseActivity(ctx, authed(&seckillv1.PauseActivityRequest{ActivityId: onSale, SkuId: 1}, adm))
			if err != nil || res.Msg.GetActivity().GetState() != seckillv1.ActivityState_ACTIVITY_STATE_PAUSED {
				t.Errorf("PauseActivity = %v, %v", res, err)
			}
		})
		s.checkLoad(onSale, out, answered, api.ReasonActivityPaused)
		s.invariants(onSale)
		res, err := s.admin.ResumeActivity(ctx, authed(&seckillv1.ResumeActivityRequest{ActivityId: onSale, SkuId: 1}, adm))
		if err != nil || res.Msg.GetActivity().GetState() != seckillv1.ActivityState_ACTIVITY_STATE_ON_SALE {
			t.Fatalf("ResumeActivity = %v, %v", res, err)
		}
		if _, err := s.place(ctx, 20_000, onSale, "after-resume"); err != nil {
			t.Fatalf("PlaceOrder after the resume: %v", err)
		}
		_, err = s.admin.ResumeActivity(ctx, authed(&seckillv1.ResumeActivityRequest{ActivityId: onSale, SkuId: 1}, adm))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || api.ErrorReason(err) != api.ReasonActivityState {
			t.Errorf("ResumeActivity of a sale not paused: %v, want FailedPrecondition %s", err, api.ReasonActivityState)
		}

		// A close under load: unsold reported, then ended for good.
		var unsold int64
		out, answered = s.underLoad(closing, 30_000, 300, func() {
			res, err := s.admin.CloseActivity(ctx, authed(&seckillv1.CloseActivityRequest{ActivityId: closing, SkuId: 1}, adm))
			if err != nil || res.Msg.GetActivity().GetState() != seckillv1.ActivityState_ACTIVITY_STATE_ENDED ||
				res.Msg.GetActivity().GetClosedAt() == nil {
				t.Errorf("CloseActivity = %v, %v", res, err)
				return
			}
			unsold = res.Msg.GetUnsold()
		})
		sold := s.checkLoad(closing, out, answered, api.ReasonActivityEnded)
		s.invariants(closing)
		if unsold != stock-sold || s.report(closing).GetRedisAvailable() != unsold {
			t.Errorf("unsold %d, want %d - %d sold, the Redis available %d", unsold, stock, sold, s.report(closing).GetRedisAvailable())
		}
		_, err = s.admin.CloseActivity(ctx, authed(&seckillv1.CloseActivityRequest{ActivityId: closing, SkuId: 1}, adm))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || api.ErrorReason(err) != api.ReasonActivityEnded {
			t.Errorf("CloseActivity of a closed sale: %v, want FailedPrecondition %s", err, api.ReasonActivityEnded)
		}
		_, err = s.admin.CloseActivity(ctx, authed(&seckillv1.CloseActivityRequest{ActivityId: ended, SkuId: 1}, adm))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || api.ErrorReason(err) != api.ReasonActivityEnded {
			t.Errorf("CloseActivity of an ended sale: %v, want FailedPrecondition %s", err, api.ReasonActivityEnded)
		}

		// The buyers' view.
		buyer := s.token(40_000, false)
		for id, want := range map[int64]seckillv1.ActivityState{
			onSale: seckillv1.ActivityState_ACTIVITY_STATE_ON_SALE, scheduled: seckillv1.ActivityState_ACTIVITY_STATE_SCHEDULED,
			paused: seckillv1.ActivityState_ACTIVITY_STATE_PAUSED, ended: seckillv1.ActivityState_ACTIVITY_STATE_ENDED,
			closing: seckillv1.ActivityState_ACTIVITY_STATE_ENDED,
		} {
			res, err := s.orders.GetActivity(ctx, authed(&seckillv1.OrderServiceGetActivityRequest{ActivityId: id, SkuId: 1}, buyer))
			if err != nil {
				t.Fatal(err)
			}
			m := res.Msg
			if m.GetState() != want || m.GetServerTime() == nil || m.GetStartsAt() == nil || m.GetUnitPrice() != 1999 ||
				m.GetCurrency() != "EUR" {
				t.Errorf("buyer GetActivity %d = %v, want state %v", id, m, want)
			}
		}
		// Orders of two buyers; each lists only his own, newest first.
		// The first order exists before the second is placed: newest
		// first is then the order of placing.
		if _, err := s.place(ctx, 40_000, onSale, "mine-0"); err != nil {
			t.Fatal(err)
		}
		s.eventually(60*time.Second, "the buyer's first order exists", func() bool {
			return s.count(`SELECT count(*) FROM orders WHERE user_id = 40000`) == 1
		})
		if _, err := s.place(ctx, 40_000, mine, "mine-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.place(ctx, 40_001, mine, "theirs"); err != nil {
			t.Fatal(err)
		}
		s.eventually(60*time.Second, "the buyers' orders exist", func() bool {
			return s.count(`SELECT count(*) FROM orders WHERE user_id IN (40000, 40001)`) == 3
		})
		var listed []*seckillv1.Order
		token := ""
		for range 10 {
			res, err := s.orders.ListMyOrders(ctx, authed(&seckillv1.ListMyOrdersRequest{PageSize: 1, PageToken: token}, buyer))
			if err != nil {
				t.Fatal(err)
			}
			listed = append(listed, res.Msg.GetOrders()...)
			if token = res.Msg.GetNextPageToken(); token == "" {
				break
			}
		}
		if len(listed) != 2 || listed[0].GetActivityId() != mine || listed[1].GetActivityId() != onSale ||
			listed[0].GetUserId() != 40_000 || listed[1].GetUserId() != 40_000 ||
			listed[0].GetCreatedAt().AsTime().Before(listed[1].GetCreatedAt().AsTime()) {
			t.Errorf("ListMyOrders = %v, want the buyer's order of activity %d then of %d", listed, mine, onSale)
		}
		_, err = s.orders.ListMyOrders(ctx, authed(&seckillv1.ListMyOrdersRequest{PageToken: "not-a-token"}, buyer))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || badField(err) != "page_token" {
			t.Errorf("ListMyOrders with a bad token: %v, want InvalidArgument on page_token", err)
		}

		// Every new operator call is refused for buyer and payment tokens.
		for name, tok := range map[string]string{"buyer": buyer, "payment": s.paymentToken()} {
			for call, err := range operatorCalls(ctx, s.admin, tok) {
				if connect.CodeOf(err) != connect.CodePermissionDenied {
					t.Errorf("%s token, %s: %v, want PermissionDenied", name, call, err)
				}
			}
		}
		// Unknown activities.
		for call, err := range operatorCalls(ctx, s.admin, adm) {
			if call == "AddStock" || call == "RemoveStock" {
				continue // served by the stock operations
			}
			if connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("%s of an unknown activity: %v, want NotFound", call, err)
			}
		}
		_, err = s.orders.GetActivity(ctx, authed(&seckillv1.OrderServiceGetActivityRequest{ActivityId: 999, SkuId: 1}, buyer))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("buyer GetActivity of an unknown activity: %v, want NotFound", err)
		}

		// The audit: every change and refusal.
		for _, c := range []struct {
			action, outcome string
			want            int64
		}{
			{"PAUSE_ACTIVITY", "OK", 2}, {"RESUME_ACTIVITY", "OK", 1}, {"RESUME_ACTIVITY", "REFUSED", 1},
			{"UPDATE_ACTIVITY", "OK", 1}, {"UPDATE_ACTIVITY", "REFUSED", 1}, {"CLOSE_ACTIVITY", "OK", 2},
			{"CLOSE_ACTIVITY", "REFUSED", 2}, {"PAUSE_ACTIVITY", "NOT_FOUND", 1},
		} {
			if n := s.count(`SELECT count(*) FROM admin_audit WHERE action = $1 AND outcome = $2 AND actor = 'user:1'`,
				c.action, c.outcome); n != c.want {
				t.Errorf("%d audit rows %s %s, want %d", n, c.action, c.outcome, c.want)
			}
		}
		if n := s.count(`SELECT count(*) FROM admin_audit WHERE action = 'PAUSE_ACTIVITY' AND outcome = 'OK'
			AND params->'before'->>'paused' = 'false' AND params->'after'->>'paused' = 'true'`); n != 2 {
			t.Errorf("%d pause audit rows with paused before false and after true, want 2", n)
		}
	})
}

// badField returns the field a Connect error's BadRequest detail names.
func badField(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if br, ok := v.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
				return br.GetFieldViolations()[0].GetField()
			}
		}
	}
	return ""
}

// operatorCalls calls every new operator call on activity 999 with tok.
func operatorCalls(ctx context.Context, admin interface {
	ListActivities(context.Context, *connect.Request[seckillv1.ListActivitiesRequest]) (*connect.Response[seckillv1.ListActivitiesResponse], error)
	GetActivity(context.Context, *connect.Request[seckillv1.GetActivityRequest]) (*connect.Response[seckillv1.GetActivityResponse], error)
	UpdateActivity(context.Context, *connect.Request[seckillv1.UpdateActivityRequest]) (*connect.Response[seckillv1.UpdateActivityResponse], error)
	PauseActivity(context.Context, *connect.Request[seckillv1.PauseActivityRequest]) (*connect.Response[seckillv1.PauseActivityResponse], error)
	ResumeActivity(context.Context, *connect.Request[seckillv1.ResumeActivityRequest]) (*connect.Response[seckillv1.ResumeActivityResponse], error)
	CloseActivity(context.Context, *connect.Request[seckillv1.CloseActivityRequest]) (*connect.Response[seckillv1.CloseActivityResponse], error)
	AddStock(context.Context, *connect.Request[seckillv1.AddStockRequest]) (*connect.Response[seckillv1.AddStockResponse], error)
	RemoveStock(context.Context, *connect.Request[seckillv1.RemoveStockRequest]) (*connect.Response[seckillv1.RemoveStockResponse], error)
}, tok string) map[string]error {
	const a, k = 999, 1
	out := map[string]error{}
	_, out["GetActivity"] = admin.GetActivity(ctx, authed(&seckillv1.GetActivityRequest{ActivityId: a, SkuId: k}, tok))
	_, out["UpdateActivity"] = admin.UpdateActivity(ctx, authed(&seckillv1.UpdateActivityRequest{ActivityId: a, SkuId: k,
		EndsAt: tsOf(time.Now().Add(time.Hour))}, tok))
	_, out["PauseActivity"] = admin.PauseActivity(ctx, authed(&seckillv1.PauseActivityRequest{ActivityId: a, SkuId: k}, tok))
	_, out["ResumeActivity"] = admin.ResumeActivity(ctx, authed(&seckillv1.ResumeActivityRequest{ActivityId: a, SkuId: k}, tok))
	_, out["CloseActivity"] = admin.CloseActivity(ctx, authed(&seckillv1.CloseActivityRequest{ActivityId: a, SkuId: k}, tok))
	_, out["AddStock"] = admin.AddStock(ctx, authed(&seckillv1.AddStockRequest{ActivityId: a, SkuId: k, Quantity: 1, RequestId: "r1"}, tok))
	_, out["RemoveStock"] = admin.RemoveStock(ctx, authed(&seckillv1.RemoveStockRequest{ActivityId: a, SkuId: k, Quantity: 1,
		RequestId: "r2"}, tok))
	if _, err := admin.ListActivities(ctx, authed(&seckillv1.ListActivitiesRequest{}, tok)); err != nil {
		out["ListActivities"] = err
	}
	return out
}
