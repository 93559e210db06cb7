package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/ports"
)

// TestListActivitiesCarriesTheOperatorState: ListActivities, which the
// stock recovery seeds a rebuilt Redis from, returns each activity's
// Paused and ClosedAt (and the moved ends_at) as stored, so a rebuild never
// reopens a paused or closed sale.
func TestListActivitiesCarriesTheOperatorState(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	open := ports.Activity{ActivityID: 1, SKUID: 1, Stock: 3, StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour),
		PaymentTimeout: time.Minute, ReservationTTL: time.Minute}
	paused, closed := open, open
	paused.ActivityID, closed.ActivityID = 2, 3
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		for _, a := range []ports.Activity{open, paused, closed} {
			if _, _, err := tx.CreateActivity(ctx, a); err != nil {
				return err
			}
		}
		paused.Paused = true
		if _, err := tx.ChangeActivity(ctx, paused); err != nil {
			return err
		}
		closed.ClosedAt, closed.EndsAt = now, now
		_, err := tx.ChangeActivity(ctx, closed)
		return err
	})
	var got []ports.Activity
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		got, err = tx.ListActivities(ctx)
		return err
	})
	if len(got) != 3 {
		t.Fatalf("ListActivities = %+v, want three", got)
	}
	if got[0].Paused || !got[0].ClosedAt.IsZero() {
		t.Fatalf("open activity listed as %+v", got[0])
	}
	if !got[1].Paused {
		t.Fatalf("paused activity listed as %+v: a rebuild would reopen it", got[1])
	}
	if !got[2].ClosedAt.Equal(now) || !got[2].EndsAt.Equal(now) {
		t.Fatalf("closed activity listed as %+v", got[2])
	}
}
