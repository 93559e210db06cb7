package bootstrap_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/seckill-dev/seckill/adapters/api"
	redisadapter "github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// TestEntryAnswers (both brokers): PlaceOrder tells the buyer why no order
// was placed, each answer with its ErrorInfo reason: an unknown activity
// (ACTIVITY_NOT_FOUND), a scheduled one (ACTIVITY_NOT_STARTED, metadata
// starts_at the activity's start), an ended one (ACTIVITY_ENDED), one an
// operator paused through the Redis switch (ACTIVITY_PAUSED, and selling
// again after the resume), a sold-out one (SOLD_OUT), and a buyer whose
// canceled order's unit is still being given back (ALREADY_PURCHASED with
// release_in_flight, retry_after and a RetryInfo: the system runs without
// the compensation consumer, so the release stays in flight).
func TestEntryAnswers(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker,
			withoutWorkers: []string{"consumer " + string(ports.GroupInventoryCompensate)}})
		ctx := context.Background()
		now := time.Now().UTC()
		create := func(id, stock int64, starts, ends time.Time) {
			t.Helper()
			if _, err := s.admin.CreateActivity(ctx, authed(&seckillv1.CreateActivityRequest{
				ActivityId: id, SkuId: 1, Stock: stock, StartsAt: tsOf(starts), EndsAt: tsOf(ends),
				PaymentTimeout: durOf(15 * time.Minute), ReservationTtl: durOf(time.Minute),
			}, s.token(1, true))); err != nil {
				t.Fatalf("create activity %d: %v", id, err)
			}
		}
		answer := func(user, activity int64, requestID string) (*errdetails.ErrorInfo, *errdetails.RetryInfo, error) {
			t.Helper()
			_, err := s.place(ctx, user, activity, requestID)
			var ce *connect.Error
			if !errors.As(err, &ce) {
				return nil, nil, err
			}
			var (
				info  *errdetails.ErrorInfo
				retry *errdetails.RetryInfo
			)
			for _, d := range ce.Details() {
				switch v, _ := d.Value(); m := v.(type) {
				case *errdetails.ErrorInfo:
					info = m
				case *errdetails.RetryInfo:
					retry = m
				}
			}
			return info, retry, err
		}
		want := func(what string, user, activity int64, reason string) *errdetails.ErrorInfo {
			t.Helper()
			info, _, err := answer(user, activity, "req-"+what)
			if info.GetReason() != reason {
				t.Fatalf("%s: PlaceOrder = %v (reason %q), want %s", what, err, info.GetReason(), reason)
			}
			return info
		}

		want("unknown", 10, 9_999, api.ReasonActivityNotFound)

		starts := now.Add(time.Hour).Truncate(time.Millisecond)
		create(2, 5, starts, starts.Add(time.Hour))
		info := want("scheduled", 11, 2, api.ReasonActivityNotStarted)
		got, err := time.Parse(time.RFC3339Nano, info.GetMetadata()[api.MetadataStartsAt])
		if err != nil || !got.Equal(starts) || got.Location() != time.UTC {
			t.Fatalf("starts_at %q (%v), want %s in UTC", info.GetMetadata()[api.MetadataStartsAt], err, starts.Format(time.RFC3339Nano))
		}

		create(3, 5, now.Add(-2*time.Hour), now.Add(-time.Hour))
		want("ended", 12, 3, api.ReasonActivityEnded)

		create(4, 5, now.Add(-time.Minute), now.Add(time.Hour))
		sw, err := redisadapter.New(s.redis, redisadapter.Config{Namespace: s.ns}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		act := ports.Activity{ActivityID: 4, SKUID: 1}
		if err := sw.SetPaused(ctx, act, true); err != nil {
			t.Fatalf("SetPaused: %v", err)
		}
		want("paused", 13, 4, api.ReasonActivityPaused)
		if err := sw.SetPaused(ctx, act, false); err != nil {
			t.Fatalf("SetPaused false: %v", err)
		}
		if _, err := s.place(ctx, 13, 4, "req-resumed"); err != nil {
			t.Fatalf("PlaceOrder after the resume: %v", err)
		}

		create(5, 1, now.Add(-time.Minute), now.Add(time.Hour))
		res, err := s.place(ctx, 20, 5, "req-first")
		if err != nil {
			t.Fatalf("PlaceOrder of the last unit: %v", err)
		}
		want("sold-out", 21, 5, api.ReasonSoldOut)
		want("holder", 20, 5, api.ReasonAlreadyPurchased)

		// The buyer cancels; with no compensation consumer the unit stays
		// held in Redis: the release is in flight.
		s.eventually(30*time.Second, "order created", func() bool {
			o, err := s.getOrder(20, res.GetOrderId())
			return err == nil && o.GetStatus() == seckillv1.OrderStatus_ORDER_STATUS_CREATED
		})
		if _, err := s.orders.CancelOrder(ctx, authed(&seckillv1.CancelOrderRequest{OrderId: res.GetOrderId()}, s.token(20, false))); err != nil {
			t.Fatalf("CancelOrder: %v", err)
		}
		var last string
		s.eventually(30*time.Second, "ALREADY_PURCHASED with the release in flight", func() bool {
			info, retry, err := answer(20, 5, "req-again")
			ok := info.GetReason() == api.ReasonAlreadyPurchased && info.GetMetadata()[api.MetadataReleaseInFlight] == "true" &&
				info.GetMetadata()[api.MetadataRetryAfter] == "2s" && retry.GetRetryDelay().AsDuration() == 2*time.Second
			if !ok && fmt.Sprint(err, info) != last {
				last = fmt.Sprint(err, info)
				t.Logf("not yet: %s", last)
			}
			return ok
		})
	})
}
