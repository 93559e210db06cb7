package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// priceRequest is a valid CreateActivityRequest with the given price.
func priceRequest(price int64, currency string) *seckillv1.CreateActivityRequest {
	now := time.Now()
	return &seckillv1.CreateActivityRequest{
		ActivityId: 7, SkuId: 70, Stock: 5,
		StartsAt: timestamppb.New(now), EndsAt: timestamppb.New(now.Add(time.Hour)),
		PaymentTimeout: durationpb.New(time.Minute), ReservationTtl: durationpb.New(time.Minute),
		UnitPrice: price, Currency: currency,
	}
}

// CreateActivity takes the unit price and currency to the application and
// returns them; an unpriced activity has 0 and "".
func TestCreateActivityCarriesThePrice(t *testing.T) {
	e := start(t)
	admin := seckillv1connect.NewAdminServiceClient(e.client, e.base)
	tok := token(t, 9, true)
	for _, c := range []struct {
		price    int64
		currency string
	}{{1999, "EUR"}, {0, ""}} {
		out, err := admin.CreateActivity(context.Background(), withToken(priceRequest(c.price, c.currency), tok))
		if err != nil {
			t.Fatalf("price %d %q: %v", c.price, c.currency, err)
		}
		got := e.admin.created[len(e.admin.created)-1]
		if got.UnitPrice != c.price || got.Currency != c.currency {
			t.Fatalf("application got %d %q, want %d %q", got.UnitPrice, got.Currency, c.price, c.currency)
		}
		if a := out.Msg.GetActivity(); a.GetUnitPrice() != c.price || a.GetCurrency() != c.currency {
			t.Fatalf("returned activity %v, want price %d %q", a, c.price, c.currency)
		}
	}
}

// A bad price is InvalidArgument naming unit_price or currency, and never
// reaches the application.
func TestCreateActivityPriceValidation(t *testing.T) {
	e := start(t)
	admin := seckillv1connect.NewAdminServiceClient(e.client, e.base, connect.WithGRPC())
	tok := token(t, 9, true)
	cases := []struct {
		name     string
		price    int64
		currency string
		field    string
	}{
		{"negative price", -1, "EUR", "unit_price"},
		{"price without currency", 1999, "", "currency"},
		{"lower-case currency", 1999, "eur", "currency"},
		{"four letters", 1999, "EURO", "currency"},
		{"digits", 1999, "E1R", "currency"},
		{"currency without price", 0, "EUR", "currency"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := admin.CreateActivity(context.Background(), withToken(priceRequest(c.price, c.currency), tok))
			ce := connectErr(t, err, connect.CodeInvalidArgument)
			if got := fieldOf(t, ce); got != c.field {
				t.Fatalf("field = %q, want %q (message %q)", got, c.field, ce.Message())
			}
			if !strings.Contains(ce.Message(), c.field) {
				t.Fatalf("message %q does not name %q", ce.Message(), c.field)
			}
		})
	}
	if len(e.admin.created) != 0 {
		t.Fatalf("invalid prices reached the application: %+v", e.admin.created)
	}
}
