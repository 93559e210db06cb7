package scenarios_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/ports"
)

// TestSoldOutMarkAnswersWithoutReserving: once the stock gate answered
// SOLD_OUT, new requests for the SKU are answered SOLD_OUT without the
// claim script (here it fails if called) for the mark's TTL; a retry of a
// request accepted before still gets its order; after the TTL the full
// path runs again.
func TestSoldOutMarkAnswersWithoutReserving(t *testing.T) {
	h := newHarness(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const ttl = 250 * time.Millisecond
	place := application.NewPlaceOrder(h.redis, h.redis, h.broker, h.activities, h.gate, h.queries,
		application.NewSentMarker(h.redis, log, 0), memory.NewIDs(), h.clock, h.metrics, h.fp, log,
		application.PlaceOrderConfig{RequestClaimTTL: time.Hour, ScanGrace: time.Second, SoldOutTTL: ttl})
	orders := application.NewOrderService(place, h.queries, h.life)
	buy := func(user int64, requestID string) (ports.PlaceOrderResult, error) {
		return orders.PlaceOrder(context.Background(), ports.PlaceOrderCommand{
			UserID: user, ActivityID: 1, SKUID: 1, RequestID: requestID})
	}
	h.activity(1, 1, time.Hour, time.Hour)

	first, err := buy(1, "r-1")
	if err != nil || first.Status != ports.OrderQueuing {
		t.Fatalf("the last unit: %+v %v", first, err)
	}
	if _, err := buy(2, "r-2"); !errors.Is(err, ports.ErrSoldOut) {
		t.Fatalf("after the last unit: %v, want SOLD_OUT", err)
	}
	claimBroken := errors.New("the claim script ran")
	h.redis.FailOn("ClaimRequest", claimBroken)
	for user := int64(3); user < 13; user++ {
		if _, err := buy(user, "r-new"); !errors.Is(err, ports.ErrSoldOut) {
			t.Fatalf("user %d while marked: %v, want SOLD_OUT without the claim script", user, err)
		}
	}
	if got := h.metrics.Snapshot().AdmissionRejected["SOLD_OUT_MARK"]; got != 10 {
		t.Fatalf("SOLD_OUT_MARK answers = %d, want 10", got)
	}
	// The holder asking again with a new request_id takes the full path
	// (ALREADY_PURCHASED, not SOLD_OUT).
	if _, err := buy(1, "r-1-again"); !errors.Is(err, claimBroken) {
		t.Fatalf("the holder's new request while marked: %v, want the full path (claim)", err)
	}
	// A retry of the accepted request takes the full path.
	if _, err := buy(1, "r-1"); !errors.Is(err, claimBroken) {
		t.Fatalf("retry of an accepted request while marked: %v, want the full path (claim)", err)
	}
	h.redis.FailOn("ClaimRequest", nil)
	again, err := buy(1, "r-1")
	if err != nil || again.OrderID != first.OrderID {
		t.Fatalf("retry of the accepted request: %+v %v, want its order %s", again, err, first.OrderID)
	}
	// After the TTL the stock gate is asked again.
	h.clock.Advance(ttl)
	h.redis.FailOn("ClaimRequest", claimBroken)
	if _, err := buy(20, "r-20"); !errors.Is(err, claimBroken) {
		t.Fatalf("after the mark's TTL: %v, want the full path", err)
	}
}
