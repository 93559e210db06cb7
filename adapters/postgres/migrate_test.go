package postgres_test

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/migrations"
)

func migrationFiles(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no migration files: %v", err)
	}
	return names
}

func newMigrator(t *testing.T, dsn string) *postgres.Migrator {
	t.Helper()
	m, err := postgres.NewMigrator(dsn, nil)
	if err != nil {
		t.Fatalf("NewMigrator: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close migrator: %v", err)
		}
	})
	return m
}

// Concurrent Up calls on an empty database apply every migration exactly
// once; a later Up is a no-op and Status lists all of them as applied.
func TestMigratorConcurrentUpThenNoopAndStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewEmptyDatabase(t)
	files := migrationFiles(t)

	const migrators = 4
	ms := make([]*postgres.Migrator, migrators)
	for i := range ms {
		ms[i] = newMigrator(t, dsn)
	}
	applied := make([][]string, migrators)
	errs := make([]error, migrators)
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { applied[i], errs[i] = m.Up(ctx) })
	}
	wg.Wait()
	total := 0
	for i := range ms {
		if errs[i] != nil {
			t.Fatalf("Up %d: %v", i, errs[i])
		}
		total += len(applied[i])
	}
	if total != len(files) {
		t.Fatalf("concurrent Up applied %d migrations in total, want %d: %v", total, len(files), applied)
	}

	again, err := newMigrator(t, dsn).Up(ctx)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Up = %v, %v; want nothing applied", again, err)
	}
	st, err := ms[0].Status(ctx)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if len(st) != len(files) {
		t.Fatalf("Status lists %d migrations, want %d", len(st), len(files))
	}
	for i, s := range st {
		if !s.Applied || s.AppliedAt.IsZero() || s.Name != files[i] {
			t.Errorf("status %d = %+v, want %s applied", i, s, files[i])
		}
		if line := s.String(); !strings.HasPrefix(line, "applied") || !strings.HasSuffix(line, files[i]) {
			t.Errorf("status line %q", line)
		}
	}
}

// A fresh database from pgtest is current: Up applies nothing.
func TestMigratorUpOnTemplateCloneIsNoop(t *testing.T) {
	t.Parallel()
	m := newMigrator(t, pgtest.NewDatabase(t))
	applied, err := m.Up(context.Background())
	if err != nil || len(applied) != 0 {
		t.Fatalf("Up = %v, %v; want nothing applied", applied, err)
	}
	st, err := m.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("%s pending on a template clone", s.Name)
		}
	}
}
