package reserveceiling

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/ports"
)

// TestReserveCeiling: Measure makes one successful Reserve
// per unit of the activity SKU it seeds, and refuses an activity SKU that
// exists already.
func TestReserveCeiling(t *testing.T) {
	t.Parallel()
	c, ns := redistest.New(t)
	store, err := redis.New(c, redis.Config{Namespace: ns}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	res, err := Measure(ctx, store, Options{ActivityID: 900, SKUID: 1, Reservations: 300, Clients: 8})
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 300 || res.Reserved != 300 || res.PerSecond <= 0 || res.P99 < res.P50 {
		t.Fatalf("result = %+v", res)
	}
	t.Logf("reserve ceiling (race detector on if -race): %s", res)
	inv, err := store.Inventory(ctx, 900, 1)
	if err != nil || inv.Available != 0 || len(inv.Held) != 300 {
		t.Fatalf("inventory after the run: %+v, %v", inv, err)
	}
	_, err = Measure(ctx, store, Options{ActivityID: 900, SKUID: 1, Reservations: 1, Clients: 1})
	if !errors.Is(err, ports.ErrAlreadyExists) {
		t.Fatalf("an existing activity SKU: %v", err)
	}
	if _, err := Measure(ctx, store, Options{ActivityID: 901, SKUID: 1}); err == nil {
		t.Fatal("no reservations: no error")
	}
}
