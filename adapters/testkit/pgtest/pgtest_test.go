package pgtest_test

import (
	"context"
	"testing"

	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
)

func TestWithDatabase(t *testing.T) {
	cases := map[string]string{
		"postgres://u:p@127.0.0.1:5432/base?sslmode=disable": "postgres://u:p@127.0.0.1:5432/other?sslmode=disable",
		"host=127.0.0.1 user=u dbname=base":                  "host=127.0.0.1 user=u dbname=base dbname=other",
	}
	for in, want := range cases {
		got, err := pgtest.WithDatabase(in, "other")
		if err != nil || got != want {
			t.Errorf("WithDatabase(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// Each NewDatabase is a separate, migrated database.
func TestNewDatabaseIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.Pool(t, pgtest.NewDatabase(t)), pgtest.Pool(t, pgtest.NewDatabase(t))
	if _, err := a.Exec(ctx, `INSERT INTO consumer_inbox (consumer_group, message_id, topic, status, delivery_attempt)
		VALUES ('g', 'm', 't', 'PROCESSING', 1)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, `SELECT count(*) FROM consumer_inbox`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("second database sees %d rows (%v), want 0", n, err)
	}
	var name1, name2 string
	_ = a.QueryRow(ctx, `SELECT current_database()`).Scan(&name1)
	_ = b.QueryRow(ctx, `SELECT current_database()`).Scan(&name2)
	if name1 == name2 {
		t.Fatalf("both pools on %s", name1)
	}
}
