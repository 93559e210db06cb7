// Package pgtest gives tests a PostgreSQL database of their own on the
// local stack (SECKILL_PG_DSN, a SUPERUSER role in the private instance).
//
// NewDatabase clones a fresh database from a template that has every
// migration applied. The template is built once per set of migration files
// (its name carries a hash of them) under a PostgreSQL advisory lock, so
// parallel test processes cooperate: one builds, the others wait and reuse
// it. Each cloned database is dropped (its backends terminated) when the
// test ends, so tests and packages run in parallel and a reused stack with
// old data does not matter.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/migrations"
)

// EnvDSN names the environment variable holding the PostgreSQL DSN.
const EnvDSN = "SECKILL_PG_DSN"

// templateLockKey is the advisory lock key guarding template creation:
// crc32("seckill-pgtest-template").
const templateLockKey int64 = 2216345463

// setupTimeout bounds creating (and dropping) one database, including a
// wait for another process that is building the template.
const setupTimeout = 2 * time.Minute

// BaseDSN returns SECKILL_PG_DSN or fails the test with how to set it.
func BaseDSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		tb.Fatalf("%s is not set: run `make test` or eval \"$(deploy/local/stack.sh env)\"", EnvDSN)
	}
	return dsn
}

// NewDatabase creates a database for this test, with all migrations
// applied, and returns its DSN. The database is dropped when the test
// ends.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	base := BaseDSN(tb)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	tpl, err := ensureTemplate(ctx, base)
	if err != nil {
		tb.Fatalf("pgtest: template database: %v (is the stack up? run `make test` or eval \"$(deploy/local/stack.sh env)\")", err)
	}
	name := databaseName(tb.Name())
	if err := createFromTemplate(ctx, base, name, tpl); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	dropAtCleanup(tb, base, name)
	dsn, err := WithDatabase(base, name)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// NewEmptyDatabase creates an empty database (no migrations applied) for
// this test and returns its DSN; it is dropped when the test ends.
func NewEmptyDatabase(tb testing.TB) string {
	tb.Helper()
	base := BaseDSN(tb)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	name := databaseName(tb.Name())
	if err := exec(ctx, base, "CREATE DATABASE "+ident(name)); err != nil {
		tb.Fatalf("pgtest: create database %s: %v (is the stack up? run `make test` or eval \"$(deploy/local/stack.sh env)\")", name, err)
	}
	dropAtCleanup(tb, base, name)
	dsn, err := WithDatabase(base, name)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return dsn
}

func dropAtCleanup(tb testing.TB, base, name string) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if err := exec(ctx, base, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
}

// Pool returns a pgx pool on dsn for direct SQL in tests, closed when the
// test ends.
func Pool(tb testing.TB, dsn string) *pgxpool.Pool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		tb.Fatalf("pgtest: pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		tb.Fatalf("pgtest: ping: %v", err)
	}
	return pool
}

// OpenStore opens a postgres.Store on dsn with default settings, its
// metrics on a private registry and logs discarded; it is closed when the
// test ends.
func OpenStore(tb testing.TB, dsn string) *postgres.Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, postgres.Config{DSN: dsn, MaxConns: 16}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatalf("pgtest: open store: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// WithDatabase returns dsn (URL or key=value form) pointing at database
// name instead.
func WithDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse DSN: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil
}

// ensureTemplate returns the name of the template database for the
// current migration files, building it first if needed.
func ensureTemplate(ctx context.Context, base string) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "seckill_tpl_" + sum[:16]
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()

	if ready, _, err := templateState(ctx, conn, name); err != nil || ready {
		return name, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", templateLockKey)
	}()
	ready, exists, err := templateState(ctx, conn, name)
	if err != nil || ready {
		return name, err
	}
	if exists { // left half-built by a process that died
		if _, err := conn.Exec(ctx, "DROP DATABASE "+ident(name)+" WITH (FORCE)"); err != nil {
			return "", fmt.Errorf("drop stale template: %w", err)
		}
	}
	dropStaleTemplates(ctx, conn, name)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(name)); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	dsn, err := WithDatabase(base, name)
	if err != nil {
		return "", err
	}
	if err := migrate(ctx, dsn); err != nil {
		return "", err
	}
	// Marking it a template that takes no connections is the "ready" flag;
	// no connection may be open on it while it is cloned.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true"); err != nil {
		return "", fmt.Errorf("mark template: %w", err)
	}
	return name, nil
}

// dropStaleTemplates drops the templates of other migration sets, best
// effort: one still being cloned by a process running older code stays.
func dropStaleTemplates(ctx context.Context, conn *pgx.Conn, keep string) {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'seckill\_tpl\_%' AND datname <> $1`, keep)
	if err != nil {
		return
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range stale {
		_, _ = conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" IS_TEMPLATE false")
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name))
	}
}

func templateState(ctx context.Context, conn *pgx.Conn, name string) (ready, exists bool, err error) {
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&ready)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("template state: %w", err)
	}
	return ready, true, nil
}

func migrate(ctx context.Context, dsn string) error {
	m, err := postgres.NewMigrator(dsn, nil)
	if err != nil {
		return err
	}
	_, upErr := m.Up(ctx)
	return errors.Join(upErr, m.Close())
}

// createFromTemplate clones tpl into name. CREATE DATABASE fails while
// another session is connected to the template; connections are disabled
// on it, so that only happens in the instant another process builds it,
// and the clone is retried.
func createFromTemplate(ctx context.Context, base, name, tpl string) error {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = exec(ctx, base, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(tpl)); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return err
}

// exec runs one statement on a short-lived connection to base.
func exec(ctx context.Context, base, sql string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		return err
	}
	return nil
}

// migrationsHash hashes the migration files' names and contents.
func migrationsHash() (string, error) {
	h := sha256.New()
	fsys := migrations.FS()
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// databaseName derives a unique, valid database name from the test name.
func databaseName(test string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(test) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('_')
			dash = true
		}
	}
	s := strings.Trim(b.String(), "_")
	if len(s) > 40 {
		s = s[len(s)-40:]
	}
	r := make([]byte, 6)
	_, _ = rand.Read(r)
	return "t_" + s + "_" + hex.EncodeToString(r)
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }
