package pgtest

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// OwedOutbox counts the outbox rows the relay owes the broker now, the
// condition a test or a benchmark waits on to call the system settled:
// every unpublished row, except, when holdsDelayed (the broker has no
// delayed delivery, so the relay holds a delayed row in PostgreSQL until
// it is due), a row whose delivery time is still ahead.
func OwedOutbox(ctx context.Context, db *pgxpool.Pool, holdsDelayed bool) (int64, error) {
	q := `SELECT count(*) FROM event_outbox WHERE published_at IS NULL`
	if holdsDelayed {
		q += ` AND (deliver_at IS NULL OR deliver_at <= now())`
	}
	var n int64
	if err := db.QueryRow(ctx, q).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the outbox rows owed: %w", err)
	}
	return n, nil
}
