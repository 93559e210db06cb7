package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/ports"
)

// CreateActivity stores the unit price and currency and GetActivity
// returns them; an activity created again with another price keeps the
// stored one; the table refuses a price the rule forbids even when written
// by hand.
func TestActivityUnitPrice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	priced := ports.Activity{ActivityID: 1, SKUID: 1, Stock: 3, StartsAt: now, EndsAt: now.Add(time.Hour),
		PaymentTimeout: time.Minute, ReservationTTL: time.Minute, UnitPrice: 1999, Currency: "EUR"}
	unpriced := priced
	unpriced.SKUID, unpriced.UnitPrice, unpriced.Currency = 2, 0, ""
	for _, a := range []ports.Activity{priced, unpriced} {
		var stored, got ports.Activity
		e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
			var err error
			if stored, _, err = tx.CreateActivity(ctx, a); err != nil {
				return err
			}
			got, err = tx.GetActivity(ctx, a.ActivityID, a.SKUID)
			return err
		})
		if stored.UnitPrice != a.UnitPrice || stored.Currency != a.Currency ||
			got.UnitPrice != a.UnitPrice || got.Currency != a.Currency {
			t.Fatalf("sku %d: stored %d %q, read %d %q; want %d %q", a.SKUID, stored.UnitPrice, stored.Currency,
				got.UnitPrice, got.Currency, a.UnitPrice, a.Currency)
		}
	}
	other := priced
	other.UnitPrice, other.Currency = 2500, "USD"
	var again ports.Activity
	var created bool
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		again, created, err = tx.CreateActivity(ctx, other)
		return err
	})
	if created || again.UnitPrice != 1999 || again.Currency != "EUR" {
		t.Fatalf("CreateActivity with another price = %d %q created %v, want the stored 1999 EUR, false",
			again.UnitPrice, again.Currency, created)
	}
	for _, bad := range []string{
		`INSERT INTO activities (activity_id, sku_id, stock, starts_at, ends_at, payment_timeout, reservation_ttl,
		     unit_price, currency) VALUES (2, 1, 1, now(), now() + interval '1h', interval '1m', interval '1m', -1, '')`,
		`INSERT INTO activities (activity_id, sku_id, stock, starts_at, ends_at, payment_timeout, reservation_ttl,
		     unit_price, currency) VALUES (2, 2, 1, now(), now() + interval '1h', interval '1m', interval '1m', 5, '')`,
		`INSERT INTO activities (activity_id, sku_id, stock, starts_at, ends_at, payment_timeout, reservation_ttl,
		     unit_price, currency) VALUES (2, 3, 1, now(), now() + interval '1h', interval '1m', interval '1m', 5, 'eur')`,
		`INSERT INTO activities (activity_id, sku_id, stock, starts_at, ends_at, payment_timeout, reservation_ttl,
		     unit_price, currency) VALUES (2, 4, 1, now(), now() + interval '1h', interval '1m', interval '1m', 0, 'EUR')`,
	} {
		if _, err := e.db.Exec(testCtx(t), bad); err == nil {
			t.Errorf("the table accepted %s", bad)
		}
	}
}
