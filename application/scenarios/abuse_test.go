package scenarios_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

var errDatabaseDown = errors.New("database down")

// TestRateLimitRunsBeforeAnyDatabaseWork: with every activity lookup
// failing, a user's requests fail with the lookup's error until the user's
// bucket (100 tokens in the harness) is empty; from then on they are
// RATE_LIMITED, so a user beyond its budget costs the database nothing.
func TestRateLimitRunsBeforeAnyDatabaseWork(t *testing.T) {
	h := newHarness(t)
	h.store.FailGetActivity(errDatabaseDown)
	for i := range 100 {
		if _, err := h.placeOrder(5, 777, fmt.Sprintf("r-%d", i)); !errors.Is(err, errDatabaseDown) {
			t.Fatalf("request %d within the budget: %v, want the lookup's error", i, err)
		}
	}
	if _, err := h.placeOrder(5, 777, "r-over"); !errors.Is(err, ports.ErrRateLimited) {
		t.Fatalf("request beyond the budget: %v, want ErrRateLimited before any lookup", err)
	}
}

// TestUnknownActivitiesAreCachedNegatively: once an activity SKU is known
// not to exist, further requests for it are answered ACTIVITY_NOT_FOUND
// without reaching the database (which now fails every lookup); an
// activity created through the admin use case is sellable at once.
func TestUnknownActivitiesAreCachedNegatively(t *testing.T) {
	h := newHarness(t)
	if _, err := h.placeOrder(6, 778, "first"); !errors.Is(err, ports.ErrActivityNotFound) {
		t.Fatalf("unknown activity: %v, want ErrActivityNotFound", err)
	}
	h.store.FailGetActivity(errDatabaseDown)
	for user := int64(7); user < 10; user++ {
		if _, err := h.placeOrder(user, 778, "again"); !errors.Is(err, ports.ErrActivityNotFound) {
			t.Fatalf("unknown activity, cached: %v, want ErrActivityNotFound without a lookup", err)
		}
	}
	h.store.FailGetActivity(nil)
	h.activity(778, 5, time.Minute, time.Minute)
	if _, err := h.placeOrder(10, 778, "now-open"); err != nil {
		t.Fatalf("an activity created after a cached miss: %v", err)
	}
}
