package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// TestEntryErrorMapping: each answer of the entry reaches the client with
// its code, ErrorInfo reason and metadata, and the RetryInfo of a release
// in flight, through the wire (wrapped as the application wraps them).
func TestEntryErrorMapping(t *testing.T) {
	e := start(t)
	orders := seckillv1connect.NewOrderServiceClient(e.client, e.base)
	tok := token(t, 5, false)
	starts := time.Date(2026, 12, 24, 18, 30, 0, 123_000_000, time.FixedZone("CET", 3600))
	inFlight := &ports.RetryAfterError{
		Err:   fmt.Errorf("reserve: order o1 is CANCELED: %w: %w", ports.ErrReleaseInFlight, ports.ErrAlreadyPurchased),
		After: 2 * time.Second,
	}
	cases := []struct {
		name   string
		err    error
		code   connect.Code
		reason string
		meta   map[string]string
		retry  time.Duration
	}{
		{"unknown activity", fmt.Errorf("activity 1/2: %w", ports.ErrActivityNotFound),
			connect.CodeFailedPrecondition, api.ReasonActivityNotFound, nil, 0},
		{"not started", fmt.Errorf("reserve: %w", &ports.NotStartedError{StartsAt: starts}),
			connect.CodeFailedPrecondition, api.ReasonActivityNotStarted,
			map[string]string{api.MetadataStartsAt: "2026-12-24T17:30:00.123Z"}, 0},
		{"ended", fmt.Errorf("reserve: %w", ports.ErrActivityEnded),
			connect.CodeFailedPrecondition, api.ReasonActivityEnded, nil, 0},
		{"paused", fmt.Errorf("reserve: %w", ports.ErrActivityPaused),
			connect.CodeFailedPrecondition, api.ReasonActivityPaused, nil, 0},
		{"activity state", fmt.Errorf("pause: %w", ports.ErrActivityState),
			connect.CodeFailedPrecondition, api.ReasonActivityState, nil, 0},
		{"sold out", fmt.Errorf("reserve: %w", ports.ErrSoldOut),
			connect.CodeFailedPrecondition, api.ReasonSoldOut, nil, 0},
		{"already purchased", fmt.Errorf("reserve: %w", &ports.HolderError{ReservationID: "r1", OrderID: "o1"}),
			connect.CodeAlreadyExists, api.ReasonAlreadyPurchased, nil, 0},
		{"settings conflict", fmt.Errorf("activity 1/1: %w", &ports.SettingsConflictError{Fields: []ports.SettingDiff{
			{Field: "stock", Stored: "100", Wanted: "120"}, {Field: "ends_at", Stored: "a", Wanted: "b"}}}),
			connect.CodeAlreadyExists, api.ReasonActivityExists, map[string]string{"fields": "stock,ends_at"}, 0},
		{"release in flight", fmt.Errorf("place: %w", inFlight),
			connect.CodeAlreadyExists, api.ReasonAlreadyPurchased,
			map[string]string{api.MetadataReleaseInFlight: "true", api.MetadataRetryAfter: "2s"}, 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.orders.err = c.err
			_, err := orders.PlaceOrder(context.Background(),
				withToken(&seckillv1.PlaceOrderRequest{ActivityId: 1, SkuId: 2, RequestId: "r"}, tok))
			ce := connectErr(t, err, c.code)
			if c.reason == api.ReasonActivityExists && !strings.Contains(ce.Message(), "stock: stored 100, asked 120") {
				t.Fatalf("message %q does not name the differing stock", ce.Message())
			}
			info, retry := entryDetails(t, ce)
			if info.GetReason() != c.reason || info.GetDomain() != api.ErrorDomain {
				t.Fatalf("ErrorInfo %v, want reason %s in %s", info, c.reason, api.ErrorDomain)
			}
			if len(info.GetMetadata()) != len(c.meta) {
				t.Fatalf("metadata %v, want %v", info.GetMetadata(), c.meta)
			}
			for k, v := range c.meta {
				if info.GetMetadata()[k] != v {
					t.Fatalf("metadata %v, want %s = %q", info.GetMetadata(), k, v)
				}
			}
			if (retry == nil) != (c.retry == 0) || (retry != nil && retry.GetRetryDelay().AsDuration() != c.retry) {
				t.Fatalf("RetryInfo %v, want a delay of %s", retry, c.retry)
			}
		})
	}
}

// entryDetails returns the ErrorInfo and RetryInfo details of ce (nil
// RetryInfo when absent); it fails without an ErrorInfo.
func entryDetails(t *testing.T, ce *connect.Error) (*errdetails.ErrorInfo, *errdetails.RetryInfo) {
	t.Helper()
	var (
		info  *errdetails.ErrorInfo
		retry *errdetails.RetryInfo
	)
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Fatal(err)
		}
		switch m := v.(type) {
		case *errdetails.ErrorInfo:
			info = m
		case *errdetails.RetryInfo:
			retry = m
		}
	}
	if info == nil {
		t.Fatalf("no ErrorInfo in %v", ce)
	}
	return info, retry
}
