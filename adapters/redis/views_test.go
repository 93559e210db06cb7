package redis

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

func view(orderID string, version int64) ports.OrderView {
	created := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
	v := ports.OrderView{
		OrderID: orderID, ReservationID: "rsv_1", ActivityID: 1, SKUID: 2, UserID: 3,
		Status: ports.OrderCreated, AggregateVersion: version,
		CreatedAt: created, UpdatedAt: created.Add(time.Duration(version) * time.Second),
		ExpiresAt: created.Add(15 * time.Minute),
	}
	if version >= 2 {
		v.Status, v.PaymentID, v.PaidAt = ports.OrderPaid, "pay_1", v.UpdatedAt
	}
	return v
}

func TestOrderViewsApplyNewerOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	views := f.s.OrderViews()
	_, err := views.Get(ctx, "ord_1")
	wantErr(t, err, ports.ErrNotFound)

	apply := func(v ports.OrderView, want bool) {
		t.Helper()
		got, err := views.Apply(ctx, v)
		if err != nil || got != want {
			t.Fatalf("Apply v%d = %v, %v; want %v", v.AggregateVersion, got, err, want)
		}
	}
	apply(view("ord_1", 1), true)
	if got, err := views.Get(ctx, "ord_1"); err != nil || got != view("ord_1", 1) {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, view("ord_1", 1))
	}
	apply(view("ord_1", 1), false)
	apply(view("ord_1", 3), true)
	apply(view("ord_1", 2), false)
	if got, err := views.Get(ctx, "ord_1"); err != nil || got != view("ord_1", 3) {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, view("ord_1", 3))
	}
	if ttl := f.c.PTTL(ctx, f.s.keys.view("ord_1")).Val(); ttl != -1 {
		t.Fatalf("view ttl = %v, want none", ttl)
	}
}

func TestOrderViewsConcurrentOutOfOrderApply(t *testing.T) {
	t.Parallel()
	f := newFixture(t, with(func(c *Config) { c.OrderViewTTL = time.Hour }))
	ctx := ctxT(t)
	views := f.s.OrderViews()
	const n = 50
	order := rand.Perm(n)
	var wg sync.WaitGroup
	for _, i := range order {
		wg.Go(func() {
			if _, err := views.Apply(ctx, view("ord_c", int64(i)+1)); err != nil {
				t.Errorf("Apply: %v", err)
			}
		})
	}
	wg.Wait()
	got, err := views.Get(ctx, "ord_c")
	if err != nil || got.AggregateVersion != n || got != view("ord_c", n) {
		t.Fatalf("final view = %+v, %v; want version %d", got, err, n)
	}
	if ttl := f.c.PTTL(ctx, f.s.keys.view("ord_c")).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("view ttl = %v, want (0, 1h]", ttl)
	}
	if _, err := views.Apply(ctx, ports.OrderView{}); err == nil {
		t.Fatal("view without order id accepted")
	}
}
