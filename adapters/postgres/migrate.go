package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/seckill-dev/seckill/migrations"
)

// migrationLockID is the PostgreSQL advisory lock key that serialises
// migrators of one database: crc32("seckill-migrations"), distinct from
// goose's default key.
const migrationLockID int64 = 339873612

// Migrator applies the embedded migrations (package migrations) with a
// goose Provider. Up and Status hold a session-level advisory lock for
// their duration, so several processes may run Up at once: one applies,
// the others wait and then find nothing pending. Close it when done.
type Migrator struct {
	provider *goose.Provider
}

// MigrationState is one migration's state, as listed by Status.
type MigrationState struct {
	Version   int64
	Name      string
	Applied   bool
	AppliedAt time.Time // zero when pending
}

// String formats the state as one line: "applied 2025-01-02T03:04:05Z 00001_activities.sql"
// or "pending 00002_sku_stock.sql".
func (s MigrationState) String() string {
	if !s.Applied {
		return fmt.Sprintf("pending %-20s %s", "", s.Name)
	}
	return fmt.Sprintf("applied %-20s %s", s.AppliedAt.UTC().Format(time.RFC3339), s.Name)
}

// NewMigrator opens a dedicated connection pool (database/sql over pgx) to
// dsn. Lock waits poll every second for up to five minutes.
func NewMigrator(dsn string, logger *slog.Logger) (*Migrator, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: migrator: parse DSN: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(migrationLockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("postgres: migrator: session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS(),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(logger))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("postgres: migrator: goose provider: %w", err)
	}
	return &Migrator{provider: p}, nil
}

// Up applies every pending migration in version order, each in its own
// transaction, and returns the names of those it applied (none when the
// schema is current).
func (m *Migrator) Up(ctx context.Context) ([]string, error) {
	results, err := m.provider.Up(ctx)
	var applied []string
	for _, r := range results {
		if r.Error == nil {
			applied = append(applied, path.Base(r.Source.Path))
		}
	}
	if err != nil {
		return applied, fmt.Errorf("postgres: migrate up: %w", err)
	}
	return applied, nil
}

// Status lists every known migration in version order with its state.
func (m *Migrator) Status(ctx context.Context) ([]MigrationState, error) {
	st, err := m.provider.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: migration status: %w", err)
	}
	out := make([]MigrationState, 0, len(st))
	for _, s := range st {
		out = append(out, MigrationState{
			Version:   s.Source.Version,
			Name:      path.Base(s.Source.Path),
			Applied:   s.State == goose.StateApplied,
			AppliedAt: s.AppliedAt.UTC(),
		})
	}
	return out, nil
}

// Down rolls back the most recently applied migration (its Down section,
// which may drop data) and returns its name.
func (m *Migrator) Down(ctx context.Context) (string, error) {
	res, err := m.provider.Down(ctx)
	if err != nil {
		return "", fmt.Errorf("postgres: migrate down: %w", err)
	}
	return path.Base(res.Source.Path), nil
}

// Redo rolls back the most recently applied migration and applies the
// same one again; it returns its name.
func (m *Migrator) Redo(ctx context.Context) (string, error) {
	res, err := m.provider.Down(ctx)
	if err != nil {
		return "", fmt.Errorf("postgres: migrate redo: roll back: %w", err)
	}
	if _, err := m.provider.ApplyVersion(ctx, res.Source.Version, true); err != nil {
		return "", fmt.Errorf("postgres: migrate redo: apply version %d again: %w", res.Source.Version, err)
	}
	return path.Base(res.Source.Path), nil
}

// Version returns the database's version: the newest applied migration
// (0 when none is).
func (m *Migrator) Version(ctx context.Context) (int64, error) {
	v, err := m.provider.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("postgres: read the database version: %w", err)
	}
	return v, nil
}

// Close closes the migrator's connections.
func (m *Migrator) Close() error {
	if err := m.provider.Close(); err != nil {
		return fmt.Errorf("postgres: close migrator: %w", err)
	}
	return nil
}
