package salekit

import (
	"context"
	"net/http"
	"time"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// CreateSaleActivity creates activity id (SKU 1, stock units, selling from
// a minute ago for an hour, reservations kept 10 minutes) through the
// admin API at base.
func CreateSaleActivity(ctx context.Context, httpc *http.Client, base string, secret []byte, id, stock int64, paymentTimeout time.Duration, lanes int) error {
	return CreateActivityFor(ctx, httpc, base, secret, id, stock, paymentTimeout, lanes, time.Hour)
}

// CreateActivityFor is createSaleActivity for an activity selling for
// window from now.
func CreateActivityFor(ctx context.Context, httpc *http.Client, base string, secret []byte, id, stock int64, paymentTimeout time.Duration,
	lanes int, window time.Duration) error {
	tok, err := api.MintToken(secret, 1, true, time.Hour, time.Now())
	if err != nil {
		return err
	}
	admin := seckillv1connect.NewAdminServiceClient(httpc, base)
	now := time.Now()
	req := connect.NewRequest(&seckillv1.CreateActivityRequest{ActivityId: id, SkuId: 1, Stock: stock,
		StartsAt: timestamppb.New(now.Add(-time.Minute)), EndsAt: timestamppb.New(now.Add(window)),
		PaymentTimeout: durationpb.New(paymentTimeout), ReservationTtl: durationpb.New(10 * time.Minute),
		StockLanes: int32(lanes)}) //nolint:gosec // a flag bounded by the API (1..16)
	req.Header().Set("Authorization", "Bearer "+tok)
	_, err = admin.CreateActivity(ctx, req)
	return err
}

// BenchActivityID returns an activity id no earlier run used.
func BenchActivityID() int64 { return time.Now().UnixNano() / 1000 }
