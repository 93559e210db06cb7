package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/adapters/postgres"
)

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
			return withMigrator(func(m *postgres.Migrator) error {
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
			return withMigrator(func(m *postgres.Migrator) error {
				name, err := m.Down(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Fprintln(c.stdout, "down "+name)
				return printVersion(cmd.Context(), c.stdout, m)
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
			return withMigrator(func(m *postgres.Migrator) error {
				name, err := m.Redo(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Fprintln(c.stdout, "down "+name)
				fmt.Fprintln(c.stdout, "up "+name)
				return printVersion(cmd.Context(), c.stdout, m)
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
			return withMigrator(func(m *postgres.Migrator) error {
				states, err := m.Status(cmd.Context())
				if err != nil {
					return err
				}
				for _, s := range states {
					fmt.Fprintln(c.stdout, s.String())
				}
				return printVersion(cmd.Context(), c.stdout, m)
			})
		},
	}
	return groupCmd("migrate", "Apply, roll back or list the database migrations",
		`Apply, roll back or list the goose migrations embedded in the binary (migrations/*.sql) on
the database of SECKILL_PG_DSN.`, up, down, redo, status)
}

// withMigrator runs fn with the migrator of the configuration's database
// and closes it afterwards.
func withMigrator(fn func(m *postgres.Migrator) error) error {
	cfg, log, err := loadConfig()
	if err != nil {
		return err
	}
	m, err := postgres.NewMigrator(string(cfg.Postgres.DSN), log)
	if err != nil {
		return err
	}
	defer func() { _ = m.Close() }()
	return fn(m)
}

// printVersion writes "database version: N" (0: no migration applied).
func printVersion(ctx context.Context, w io.Writer, m *postgres.Migrator) error {
	v, err := m.Version(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "database version: %d\n", v)
	return nil
}
