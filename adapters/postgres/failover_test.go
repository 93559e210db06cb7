package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// pgPair is a PostgreSQL primary with one streaming standby started by
// one test: two postmasters on free loopback ports, each in a directory of
// its own, run as PostgreSQL's OS user when the test runs as root (it
// refuses root). The standby is a pg_basebackup of the primary; the
// primary commits synchronously to it (synchronous_standby_names = '*',
// synchronous_commit = on: the durability docs/operations.md chooses, so
// a commit that returned is on the standby too) or asynchronously. The
// test owns both processes: they are killed by PID when it ends.
type pgPair struct {
	t                *testing.T
	bin              string
	cred             *syscall.Credential // nil: run as ourselves
	primary, standby *pgNode
}

// pgNode is one postmaster of a pgPair.
type pgNode struct {
	dir  string
	port int
	cmd  *exec.Cmd
}

func (n *pgNode) dsn() string {
	return fmt.Sprintf("postgres://seckill@127.0.0.1:%d/postgres?sslmode=disable", n.port)
}

// startPGPair initdbs and starts the primary, then takes and starts the
// standby, and returns once the standby streams (synchronously when sync:
// the primary's synchronous_standby_names is '*', else empty).
func startPGPair(t *testing.T, sync bool) *pgPair {
	t.Helper()
	p := &pgPair{t: t, bin: pgBinDir(t), cred: pgCredential(t)}
	root, err := os.MkdirTemp("", "seckill-pgpair-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if p.cred != nil { // PostgreSQL's user makes the data directories in it
		if err := os.Chown(root, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	p.primary = &pgNode{dir: filepath.Join(root, "primary"), port: freePort(t)}
	p.run("initdb", "-D", p.primary.dir, "-U", "seckill", "--auth=trust", "-E", "UTF8", "--no-sync")
	p.appendConf(p.primary, "postgresql.conf", fmt.Sprintf(`port = %d
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
wal_level = replica
max_wal_senders = 4
fsync = off
synchronous_commit = on
synchronous_standby_names = '%s'
`, p.primary.port, map[bool]string{true: "*", false: ""}[sync]))
	p.start(p.primary)

	p.standby = &pgNode{dir: filepath.Join(root, "standby"), port: freePort(t)}
	p.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.primary.port), "-U", "seckill",
		"-D", p.standby.dir, "-R", "-X", "stream", "--no-sync")
	// Promoted, the standby is a primary with no standby of its own: it
	// must not wait for one (the copied synchronous_standby_names would
	// hold every commit until a new standby attaches).
	p.appendConf(p.standby, "postgresql.auto.conf", fmt.Sprintf("port = %d\nsynchronous_standby_names = ''\n", p.standby.port))
	p.start(p.standby)
	want := map[bool]string{true: "sync", false: "async"}[sync]
	p.eventually("the standby streams, "+want, func() bool {
		var state string
		err := p.queryRow(p.primary, `SELECT sync_state FROM pg_stat_replication`, &state)
		return err == nil && state == want
	})
	return p
}

// pgBinDir is the newest /usr/lib/postgresql/<major>/bin (the local stack
// installs PostgreSQL there).
func pgBinDir(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	sort.Slice(dirs, func(i, j int) bool { return major(dirs[i]) > major(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_basebackup")); err == nil {
			return d
		}
	}
	t.Fatal("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin: the local stack installs them (deploy/local/stack.sh up)")
	return ""
}

// pgCredential is the OS user PostgreSQL runs as when the test runs as
// root: the account the local stack uses (postgres, else seckill-pg).
func pgCredential(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	for _, name := range []string{"postgres", "seckill-pg"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	t.Fatal("running as root with no postgres or seckill-pg user: the local stack creates one (deploy/local/stack.sh up)")
	return nil
}

// freePort returns a loopback TCP port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// command is one of PostgreSQL's programs, run as its OS user.
func (p *pgPair) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	cmd.Dir = os.TempDir()
	return cmd
}

// run runs a program to its end and fails the test on an error.
func (p *pgPair) run(name string, args ...string) {
	p.t.Helper()
	if out, err := p.command(name, args...).CombinedOutput(); err != nil {
		p.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func (p *pgPair) appendConf(n *pgNode, file, text string) {
	p.t.Helper()
	f, err := os.OpenFile(filepath.Join(n.dir, file), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := f.WriteString("\n" + text); err != nil {
		p.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		p.t.Fatal(err)
	}
}

// start runs the postmaster of n and waits until it accepts connections;
// it is killed by PID when the test ends.
func (p *pgPair) start(n *pgNode) {
	t := p.t
	t.Helper()
	logf, err := os.Create(filepath.Join(filepath.Dir(n.dir), filepath.Base(n.dir)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logf.Close() })
	n.cmd = p.command("postgres", "-D", n.dir)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start postgres on %s: %v", n.dir, err)
	}
	cmd := n.cmd
	t.Cleanup(func() { p.kill(cmd) })
	p.eventually(fmt.Sprintf("postgres on port %d accepts connections (log %s)", n.port, logf.Name()), func() bool {
		var one int
		return p.queryRow(n, `SELECT 1`, &one) == nil
	})
}

// kill ends a postmaster with SIGKILL, by its PID, and reaps it.
func (p *pgPair) kill(cmd *exec.Cmd) {
	if cmd.ProcessState == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// queryRow runs one query on a connection of its own to n.
func (p *pgPair) queryRow(n *pgNode, sql string, dst ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.dsn())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(dst...)
}

// eventually polls cond every 100 ms for at most 60 s (a bound on
// waiting: the failure says what never happened).
func (p *pgPair) eventually(what string, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			p.t.Fatalf("never happened within 60 s: %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFailoverToAPromotedStandby: the store runs on a DSN naming the
// primary and its standby with target_session_attrs=read-write (the shape
// docs/operations.md gives for a PostgreSQL pair). Orders are committed
// one transaction each; the primary is killed and the standby promoted.
// The store's transactions move to the new primary by themselves (a
// transaction on a dead connection fails as transient and a new
// connection finds the read-write host). What survives is what the
// replication setting promises:
//
//   - synchronous (the default docs/operations.md chooses), the standby
//     streaming, or with its replay paused (lagging): every order whose
//     commit returned is on the new primary;
//   - synchronous with the standby's WAL receiver stopped (then killed
//     with the primary, so what it had not written is gone): a commit does
//     not return (it waits for the standby, and the store's bound ends it
//     with an error), so nothing unacknowledged is promised, and every
//     order whose commit returned before is on the new primary;
//   - asynchronous with the WAL receiver stopped then killed: commits
//     return, and the orders committed after the receiver stopped vanish
//     with the old primary: the loss the synchronous setting exists to
//     prevent.
func TestFailoverToAPromotedStandby(t *testing.T) {
	for _, tc := range []struct {
		name            string
		sync            bool
		pause, receiver bool // pause the standby's replay; stop its WAL receiver
	}{
		{name: "synchronous", sync: true},
		{name: "synchronous, replay paused", sync: true, pause: true},
		{name: "synchronous, receiver stopped", sync: true, receiver: true},
		{name: "asynchronous, receiver stopped", receiver: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			failover(t, tc.sync, tc.pause, tc.receiver)
		})
	}
}

func failover(t *testing.T, sync, pause, stopReceiver bool) {
	p := startPGPair(t, sync)
	dsn := fmt.Sprintf("postgres://seckill@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
		p.primary.port, p.standby.port)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := postgres.NewMigrator(dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(ctx, postgres.Config{DSN: dsn, MaxConns: 4}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open the store on the pair: %v", err)
	}
	t.Cleanup(s.Close)
	insert := func(o *order.Order, bound time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		return s.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
			ok, err := tx.InsertOrders(ctx, []order.Snapshot{o.Snapshot()})
			if err == nil && !slices.Equal(ok, []bool{true}) {
				err = fmt.Errorf("order %s not inserted: %v", o.Snapshot().OrderID, ok)
			}
			return err
		})
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var acknowledged []string
	commit := func(user int64) {
		t.Helper()
		o := newOrder(t, 1, 1, user, now)
		if err := insert(o, 5*time.Second); err != nil {
			t.Fatalf("insert order of user %d: %v", user, err)
		}
		acknowledged = append(acknowledged, o.Snapshot().OrderID)
	}
	for user := range int64(10) {
		commit(100 + user)
	}
	if pause {
		var none string
		if err := p.queryRow(p.standby, `SELECT pg_wal_replay_pause()::text`, &none); err != nil {
			t.Fatalf("pause the standby's replay: %v", err)
		}
	}
	var receiver int
	if stopReceiver {
		if err := p.queryRow(p.standby, `SELECT pid FROM pg_stat_wal_receiver`, &receiver); err != nil {
			t.Fatalf("the standby's WAL receiver: %v", err)
		}
		if err := syscall.Kill(receiver, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	if stopReceiver && sync {
		// The commit waits for a standby that does not answer: it never
		// returns success.
		if err := insert(newOrder(t, 1, 1, 500, now), 2*time.Second); err == nil {
			t.Fatal("a commit returned while the synchronous standby's WAL receiver was stopped")
		}
	} else {
		for user := range int64(10) {
			commit(200 + user)
		}
	}

	p.kill(p.primary.cmd)
	if stopReceiver {
		// The receiver dies with what it had not written yet (the WAL
		// still in its socket): a standby that lagged loses what it never
		// got. Its postmaster restarts its processes and recovers.
		_ = syscall.Kill(receiver, syscall.SIGKILL)
	}
	p.eventually("the standby is promoted", func() bool {
		var inRecovery bool
		if err := p.queryRow(p.standby, `SELECT pg_is_in_recovery()`, &inRecovery); err != nil {
			return false
		}
		if inRecovery {
			var promoted bool
			_ = p.queryRow(p.standby, `SELECT pg_promote(true, 4)`, &promoted)
			return promoted
		}
		return true
	})
	after := newOrder(t, 1, 1, 999, now)
	attempts := 0
	p.eventually("a transaction of the store commits on the promoted standby", func() bool {
		attempts++
		err := insert(after, 5*time.Second)
		if err != nil && !errors.Is(err, ports.ErrTransient) {
			t.Fatalf("insert after the failover: %v, want a transient error or success", err)
		}
		return err == nil
	})
	acknowledged = append(acknowledged, after.Snapshot().OrderID)
	found, err := pgxRows(ctx, p.standby, `SELECT order_id FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for _, id := range acknowledged {
		if !slices.Contains(found, id) {
			lost = append(lost, id)
		}
	}
	t.Logf("%d acknowledged orders, %d on the new primary, %d lost; the store's first commit there came at attempt %d",
		len(acknowledged), len(found), len(lost), attempts)
	if !sync && stopReceiver {
		if len(lost) != 10 {
			t.Fatalf("asynchronous with the receiver stopped: %d acknowledged orders lost, want the 10 committed after it stopped", len(lost))
		}
		return
	}
	if len(lost) > 0 {
		t.Fatalf("%d acknowledged orders vanished in the failover: %v", len(lost), lost)
	}
}

// pgxRows returns the one text column of every row of sql on n.
func pgxRows(ctx context.Context, n *pgNode, sql string) ([]string, error) {
	conn, err := pgx.Connect(ctx, n.dsn())
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
