package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/migrations"
)

// migrationLockID is the PostgreSQL advisory lock key that serialises the
// migrators of one database. It must equal migrationLockID of
// adapters/postgres/migrate.go (crc32("seckill-migrations")), so a down
// or redo here never runs beside an up of postgres.Migrator.
const migrationLockID int64 = 339873612

// migrateCmd holds up, down, redo and status of the embedded migrations
// (package migrations) on SECKILL_PG_DSN.
func (c *cli) migrateCmd() *cobra.Command {
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		Long: `Apply every pending migration in version order, each in its own transaction, and list
those applied. Several processes may run it at once: one applies, the others wait on the
migration lock and then find nothing pending.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMigrator(func(m *postgres.Migrator, _ *goose.Provider) error {
				applied, err := m.Up(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "migrations applied: %d\n", len(applied))
				for _, a := range applied {
					fmt.Fprintln(c.stdout, "  "+a)
				}
				return nil
			})
		},
	}
	down := &cobra.Command{
		Use:   "down",
		Short: "Roll back the most recently applied migration",
		Long: `Roll back the most recently applied migration (its "goose Down" section) and print it.
A Down section may drop tables and the data in them: this is for development and for
backing out a release, not for routine use.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMigrator(func(_ *postgres.Migrator, p *goose.Provider) error {
				res, err := p.Down(cmd.Context())
				if err != nil {
					return fmt.Errorf("migrate down: %w", err)
				}
				fmt.Fprintln(c.stdout, res.String())
				return printVersion(cmd.Context(), c.stdout, p)
			})
		},
	}
	redo := &cobra.Command{
		Use:   "redo",
		Short: "Roll back the most recently applied migration and apply it again",
		Long: `Roll back the most recently applied migration and apply the same migration again (its
Down, then its Up section), printing both. Like down, its Down section may drop data.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMigrator(func(_ *postgres.Migrator, p *goose.Provider) error {
				ctx := cmd.Context()
				res, err := p.Down(ctx)
				if err != nil {
					return fmt.Errorf("migrate redo: roll back: %w", err)
				}
				fmt.Fprintln(c.stdout, res.String())
				again, err := p.ApplyVersion(ctx, res.Source.Version, true)
				if err != nil {
					return fmt.Errorf("migrate redo: apply version %d again: %w", res.Source.Version, err)
				}
				fmt.Fprintln(c.stdout, again.String())
				return printVersion(ctx, c.stdout, p)
			})
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List every migration, applied or pending, and the database's version",
		Long: `List every embedded migration in version order with its state ("applied <time> <file>" or
"pending <file>"), then the database's version (the newest applied migration).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMigrator(func(m *postgres.Migrator, p *goose.Provider) error {
				states, err := m.Status(cmd.Context())
				if err != nil {
					return err
				}
				for _, s := range states {
					fmt.Fprintln(c.stdout, s.String())
				}
				return printVersion(cmd.Context(), c.stdout, p)
			})
		},
	}
	return groupCmd("migrate", "Apply, roll back or list the database migrations",
		`Apply, roll back or list the goose migrations embedded in the binary (migrations/*.sql) on
the database of SECKILL_PG_DSN.`, up, down, redo, status)
}

// withMigrator runs fn with the migrator of the configuration's database
// (up and status) and a goose provider on it (down, redo and the
// version), and closes both afterwards.
func withMigrator(fn func(m *postgres.Migrator, p *goose.Provider) error) error {
	cfg, log, err := loadConfig()
	if err != nil {
		return err
	}
	m, err := postgres.NewMigrator(string(cfg.Postgres.DSN), log)
	if err != nil {
		return err
	}
	defer func() { _ = m.Close() }()
	p, err := newGooseProvider(string(cfg.Postgres.DSN), log)
	if err != nil {
		return err
	}
	defer func() { _ = p.Close() }()
	return fn(m, p)
}

// newGooseProvider opens a goose provider of the embedded migrations on
// dsn, set up as postgres.Migrator sets up its own: the same session lock,
// no global registry, goose's log through log.
func newGooseProvider(dsn string, log *slog.Logger) (*goose.Provider, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("migrate: parse SECKILL_PG_DSN: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(migrationLockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrate: session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS(),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(log))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrate: goose provider: %w", err)
	}
	return p, nil
}

// printVersion writes "database version: N" (0: no migration applied).
func printVersion(ctx context.Context, w io.Writer, p *goose.Provider) error {
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("migrate: read the database version: %w", err)
	}
	fmt.Fprintf(w, "database version: %d\n", v)
	return nil
}
