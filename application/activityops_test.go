package application

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// Activity.StateAt follows ports.ActivityState's precedence: ENDED, then
// SCHEDULED, then PAUSED, then SOLD_OUT, else ON_SALE.
func TestActivityStatePrecedence(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	open := ports.Activity{StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour)}
	with := func(f func(a *ports.Activity)) ports.Activity { a := open; f(&a); return a }
	for _, c := range []struct {
		name    string
		a       ports.Activity
		soldOut bool
		want    ports.ActivityState
	}{
		{"open", open, false, ports.ActivityOnSale},
		{"sold out", open, true, ports.ActivitySoldOut},
		{"paused and sold out", with(func(a *ports.Activity) { a.Paused = true }), true, ports.ActivityPaused},
		{"scheduled and paused", with(func(a *ports.Activity) { a.StartsAt, a.Paused = now.Add(time.Minute), true }), true,
			ports.ActivityScheduled},
		{"ends now", with(func(a *ports.Activity) { a.EndsAt = now }), false, ports.ActivityEnded},
		{"closed before its start", with(func(a *ports.Activity) {
			a.StartsAt, a.EndsAt, a.ClosedAt, a.Paused = now.Add(time.Hour), now.Add(-time.Minute), now.Add(-time.Minute), true
		}), true, ports.ActivityEnded},
		{"closed, ends_at later", with(func(a *ports.Activity) { a.ClosedAt = now.Add(-time.Minute) }), false, ports.ActivityEnded},
	} {
		if got := c.a.StateAt(now, c.soldOut); got != c.want {
			t.Errorf("%s: state %s, want %s", c.name, got, c.want)
		}
	}
}

// Page tokens round-trip; anything else is a *FieldError on page_token.
func TestPageTokens(t *testing.T) {
	t.Parallel()
	k := ports.ActivityKey{ActivityID: 12, SKUID: 7}
	if got, err := parseActivityToken(activityToken(k)); err != nil || got != k {
		t.Fatalf("activity token round trip = %v, %v", got, err)
	}
	c := ports.OrderCursor{CreatedAt: time.Date(2026, 1, 1, 12, 0, 0, 123000, time.UTC), OrderID: "ord_1:x"}
	if got, err := parseOrderToken(orderToken(c)); err != nil || !got.CreatedAt.Equal(c.CreatedAt) || got.OrderID != c.OrderID {
		t.Fatalf("order token round trip = %v, %v", got, err)
	}
	for _, bad := range []string{"x", "1", "1.", "0.1", "-1.2", "a.b"} {
		var fe *ports.FieldError
		if _, err := parseActivityToken(bad); !errors.As(err, &fe) || fe.Field != "page_token" {
			t.Errorf("activity token %q: %v, want a FieldError on page_token", bad, err)
		}
	}
	for _, bad := range []string{"!!", "eA", "MTIz", "LTE6eA"} {
		var fe *ports.FieldError
		if _, err := parseOrderToken(bad); !errors.As(err, &fe) || fe.Field != "page_token" {
			t.Errorf("order token %q: %v, want a FieldError on page_token", bad, err)
		}
	}
}
