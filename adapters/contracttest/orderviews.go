package contracttest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// OrderViewsFactory builds a fresh, empty, isolated order view store. It
// is called once per subtest and registers its own cleanup with t.
type OrderViewsFactory func(t *testing.T) ports.OrderViews

// OrderViews runs the contract suite of ports.OrderViews: Get of an
// unknown order, Apply storing only newer versions (same or older ones are
// refused and change nothing), every field read back (zero times stay
// zero), and concurrent applies of shuffled versions ending at the newest.
func OrderViews(t *testing.T, factory OrderViewsFactory) {
	t.Run("ApplyNewerOnly", func(t *testing.T) { testViewsNewerOnly(t, factory(t)) })
	t.Run("ApplyConcurrent", func(t *testing.T) { testViewsConcurrent(t, factory(t)) })
}

// viewAt returns a view of orderID at version v.
func viewAt(orderID string, v int64, status ports.OrderStatus) ports.OrderView {
	created := baseTime.Add(123456 * time.Microsecond)
	view := ports.OrderView{
		OrderID: orderID, ReservationID: "rsv_" + orderID, ActivityID: 11, SKUID: 12, UserID: 13,
		Status: status, AggregateVersion: v,
		CreatedAt: created, UpdatedAt: created.Add(time.Duration(v) * time.Second), ExpiresAt: created.Add(15 * time.Minute),
	}
	switch status {
	case ports.OrderPaid:
		view.PaymentID, view.PaidAt = "pay-1", view.UpdatedAt
	case ports.OrderCanceled:
		view.Reason, view.CanceledAt = "BUYER_CANCELED", view.UpdatedAt
	}
	return view
}

func sameView(a, b ports.OrderView) bool {
	return a.OrderID == b.OrderID && a.ReservationID == b.ReservationID && a.ActivityID == b.ActivityID &&
		a.SKUID == b.SKUID && a.UserID == b.UserID && a.Status == b.Status && a.Reason == b.Reason &&
		a.AggregateVersion == b.AggregateVersion && a.PaymentID == b.PaymentID &&
		a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.PaidAt.Equal(b.PaidAt) && a.CanceledAt.Equal(b.CanceledAt)
}

func testViewsNewerOnly(t *testing.T, views ports.OrderViews) {
	ctx := t.Context()
	id := "ord_" + uniq()
	_, err := views.Get(ctx, id)
	wantErr(t, "Get of an unknown view", err, ports.ErrNotFound)

	apply := func(v ports.OrderView, want bool) {
		t.Helper()
		got, err := views.Apply(ctx, v)
		noErr(t, "Apply", err)
		if got != want {
			t.Fatalf("Apply of version %d (%s) = %v, want %v", v.AggregateVersion, v.Status, got, want)
		}
	}
	wantStored := func(want ports.OrderView) {
		t.Helper()
		got, err := views.Get(ctx, id)
		noErr(t, "Get", err)
		if !sameView(got, want) {
			t.Fatalf("stored view %+v, want %+v", got, want)
		}
	}
	v1 := viewAt(id, 1, ports.OrderCreated)
	apply(v1, true)
	wantStored(v1)
	apply(v1, false)
	same := viewAt(id, 1, ports.OrderCanceled)
	apply(same, false)
	wantStored(v1)
	v3 := viewAt(id, 3, ports.OrderPaid)
	apply(v3, true)
	wantStored(v3)
	apply(viewAt(id, 2, ports.OrderCanceled), false)
	wantStored(v3)
}

func testViewsConcurrent(t *testing.T, views ports.OrderViews) {
	id := "ord_" + uniq()
	const n = 20
	perm := rand.Perm(n)
	errs := make([]error, n)
	applied := make([]bool, n)
	parallel(n, func(i int) {
		v := int64(perm[i] + 1)
		applied[i], errs[i] = views.Apply(t.Context(), viewAt(id, v, ports.OrderCreated))
	})
	for i, err := range errs {
		noErr(t, fmt.Sprintf("concurrent Apply of version %d", perm[i]+1), err)
	}
	for i := range n {
		if perm[i] == n-1 && !applied[i] {
			t.Fatalf("Apply of the newest version %d returned false", n)
		}
	}
	got, err := views.Get(t.Context(), id)
	noErr(t, "Get", err)
	if !sameView(got, viewAt(id, n, ports.OrderCreated)) {
		t.Fatalf("view after concurrent applies = %+v, want version %d", got, n)
	}
}
