package pgtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// RefusingEffects is a table of effects (one row per message id) whose
// COMMIT refuses one message's row a given number of times: a deferred
// constraint trigger raises at COMMIT, after the statement succeeded. The
// "acknowledged only after commit" tests of the broker adapters use it to
// make one commit of a batch fail while the others succeed.
type RefusingEffects struct {
	pool *pgxpool.Pool
}

// NewRefusingEffects creates the table in pool's database; the COMMIT that
// writes refusedID's effect fails the first refusals times.
func NewRefusingEffects(tb testing.TB, ctx context.Context, pool *pgxpool.Pool, refusedID string, refusals int) *RefusingEffects {
	tb.Helper()
	for _, stmt := range []string{
		`CREATE TABLE effects (message_id text PRIMARY KEY)`,
		`CREATE SEQUENCE refused_commits`,
		fmt.Sprintf(`CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.message_id = %s AND nextval('refused_commits') <= %d THEN
				RAISE EXCEPTION 'commit refused for %%', NEW.message_id;
			END IF;
			RETURN NEW;
		END $$`, quoteLiteral(refusedID), refusals),
		`CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT ON effects
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_commit()`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			tb.Fatalf("create the refusing effects table: %v", err)
		}
	}
	return &RefusingEffects{pool: pool}
}

// Commit writes id's effect in a transaction of its own (a second write
// of the same id is a no-op); nil means it committed.
func (e *RefusingEffects) Commit(ctx context.Context, id string) error {
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effects (message_id) VALUES ($1) ON CONFLICT DO NOTHING`, id); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

// Count returns how many effects are committed.
func (e *RefusingEffects) Count(ctx context.Context) (int, error) {
	var n int
	err := e.pool.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&n)
	return n, err
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := range len(s) {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
