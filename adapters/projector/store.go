package projector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// migrateLockKey is the advisory lock key serializing Migrate across
// processes: crc32("seckill-projector-migrate").
const migrateLockKey int64 = 1493375215

// schema is the kit's tables; every statement is idempotent.
const schema = `
CREATE TABLE IF NOT EXISTS projector_checkpoints (
	name       text        NOT NULL,
	version    integer     NOT NULL,
	position   bigint      NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (name, version)
);
CREATE TABLE IF NOT EXISTS projector_parked (
	name      text        NOT NULL,
	version   integer     NOT NULL,
	position  bigint      NOT NULL,
	order_id  text        NOT NULL,
	event     bytea       NOT NULL,
	error     text        NOT NULL,
	attempts  integer     NOT NULL,
	parked_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (name, version, position)
);
CREATE INDEX IF NOT EXISTS projector_parked_order ON projector_parked (name, version, order_id, position);
CREATE TABLE IF NOT EXISTS projector_active (
	name        text        PRIMARY KEY,
	version     integer     NOT NULL,
	switched_at timestamptz NOT NULL DEFAULT now()
);
`

// Store keeps checkpoints, parked events and the active version of each
// projection in the consumer's database. Safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns the Store over pool (the consumer's database, the one
// the Handler writes its view in).
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool}
}

// Migrate creates the kit's tables if they are missing:
// projector_checkpoints(name, version, position, updated_at),
// projector_parked(name, version, position, order_id, event (the event's
// proto.Marshal bytes), error, attempts, parked_at) and
// projector_active(name, version, switched_at). It is idempotent and safe
// to call from several processes at once (an advisory lock serializes it).
func (s *Store) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if _, err := tx.Exec(ctx, schema); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("projector: migrate: %w", err)
	}
	return nil
}

// Active returns the active version of projection name; ok is false when
// no version is active yet (the first version is still rebuilding).
func (s *Store) Active(ctx context.Context, name string) (version int, ok bool, err error) {
	version, ok, err = activeVersion(ctx, s.pool, name)
	if err != nil {
		return 0, false, fmt.Errorf("projector: active version of %q: %w", name, err)
	}
	return version, ok, nil
}

// Position returns the stored checkpoint of (name, version): the position
// of the last item committed, 0 when there is none.
func (s *Store) Position(ctx context.Context, name string, version int) (int64, error) {
	var pos int64
	err := s.pool.QueryRow(ctx, `SELECT position FROM projector_checkpoints WHERE name = $1 AND version = $2`,
		name, version).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("projector: checkpoint of %q v%d: %w", name, version, err)
	}
	return pos, nil
}

// Parked is one parked event of a view.
type Parked struct {
	// Position is the event's position in the log.
	Position int64
	// OrderID is the event's order.
	OrderID string
	// EventID and EventType identify the event ("<order_id>:<version>",
	// ORDER_CREATED, ...).
	EventID, EventType string
	// Error is the text of the last error: the handler's, or "behind
	// parked position N" for an event parked behind its order's earlier
	// parked event (never applied).
	Error string
	// Attempts is the number of Apply attempts made (0 for an event
	// parked behind another).
	Attempts int
	// ParkedAt is when the event was parked.
	ParkedAt time.Time
}

// Parked returns the parked events of (name, version) in position order.
func (s *Store) Parked(ctx context.Context, name string, version int) ([]Parked, error) {
	rows, err := s.pool.Query(ctx, `SELECT position, order_id, event, error, attempts, parked_at FROM projector_parked
		WHERE name = $1 AND version = $2 ORDER BY position`, name, version)
	if err != nil {
		return nil, fmt.Errorf("projector: parked events of %q v%d: %w", name, version, err)
	}
	var out []Parked
	for rows.Next() {
		var p Parked
		var raw []byte
		if err := rows.Scan(&p.Position, &p.OrderID, &raw, &p.Error, &p.Attempts, &p.ParkedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("projector: parked events of %q v%d: %w", name, version, err)
		}
		var e seckillv1.OrderEvent
		if err := proto.Unmarshal(raw, &e); err == nil {
			p.EventID, p.EventType = e.GetEventId(), e.GetEventType()
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("projector: parked events of %q v%d: %w", name, version, err)
	}
	return out, nil
}

// querier is what the store's reads need: a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// activeVersion reads projector_active for name.
func activeVersion(ctx context.Context, q querier, name string) (int, bool, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT version FROM projector_active WHERE name = $1`, name).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return v, true, nil
}
