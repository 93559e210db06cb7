// Package pgpair starts a private PostgreSQL primary with one streaming
// standby for failover tests and drills: two postmasters on free loopback
// ports, each in a directory of its own under one temporary directory,
// run as PostgreSQL's OS user (postgres, else seckill-pg, as the local
// stack creates it) when the caller is root, since PostgreSQL refuses
// root. The standby is a pg_basebackup of the primary. The caller owns the
// processes: Node.Kill and Pair.Close stop them by PID, and Close removes
// the directory. It has no dependency on testing, so benches and chaos
// drills use it as tests do.
package pgpair

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configure Start.
type Options struct {
	// Synchronous makes the primary commit synchronously to the standby
	// (synchronous_commit = on, synchronous_standby_names = '*'): a commit
	// returns only once the standby flushed it. Otherwise the standby is
	// asynchronous.
	Synchronous bool
	// Durable runs both servers with the local stack's settings (fsync,
	// full_page_writes, shared_buffers 256MB), for benchmarks; otherwise
	// fsync is off, which a test that kills processes (not machines) does
	// not notice.
	Durable bool
}

// Pair is a running primary and standby.
type Pair struct {
	bin     string
	cred    *syscall.Credential // nil: run as ourselves
	root    string
	Primary *Node
	Standby *Node
}

// Node is one postmaster of a Pair.
type Node struct {
	// Dir is the data directory; Port the loopback TCP port.
	Dir  string
	Port int
	// Log is the server's log file.
	Log string
	cmd *exec.Cmd
}

// URL is the connection URL of n alone, database db, as the superuser
// seckill (trust authentication on loopback).
func (n *Node) URL(db string) string {
	return fmt.Sprintf("postgres://seckill@127.0.0.1:%d/%s?sslmode=disable", n.Port, url.PathEscape(db))
}

// URL is the connection URL naming both servers, primary first, with
// target_session_attrs=read-write: a connection keeps whichever accepts
// writes, so a client on it follows a promotion.
func (p *Pair) URL(db string) string {
	return fmt.Sprintf("postgres://seckill@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		p.Primary.Port, p.Standby.Port, url.PathEscape(db))
}

// Start initdbs and starts the primary, takes the standby with
// pg_basebackup, starts it, and returns once the standby streams
// (synchronously with o.Synchronous). On an error everything started is
// stopped and removed.
func Start(ctx context.Context, o Options) (_ *Pair, err error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "seckill-pgpair-")
	if err != nil {
		return nil, err
	}
	p := &Pair{bin: bin, cred: cred, root: root}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if cred != nil { // PostgreSQL's user makes the data directories in it
		if err := os.Chown(root, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	if p.Primary, err = newNode(ctx, root, "primary"); err != nil {
		return nil, err
	}
	if err := p.run(ctx, "initdb", "-D", p.Primary.Dir, "-U", "seckill", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, err
	}
	names := map[bool]string{true: "*", false: ""}[o.Synchronous]
	if err := appendConf(p.Primary, "postgresql.conf", fmt.Sprintf(`port = %d
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
wal_level = replica
max_wal_senders = 4
max_connections = 300
%s
synchronous_commit = on
synchronous_standby_names = '%s'
`, p.Primary.Port, durability(o.Durable), names)); err != nil {
		return nil, err
	}
	if err := p.start(ctx, p.Primary); err != nil {
		return nil, err
	}
	if p.Standby, err = newNode(ctx, root, "standby"); err != nil {
		return nil, err
	}
	if err := p.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Primary.Port), "-U", "seckill",
		"-D", p.Standby.Dir, "-R", "-X", "stream", "--no-sync"); err != nil {
		return nil, err
	}
	// Promoted, the standby is a primary with no standby of its own: it
	// must not wait for one (the copied synchronous_standby_names would
	// hold every commit until a new standby attaches).
	if err := appendConf(p.Standby, "postgresql.auto.conf",
		fmt.Sprintf("port = %d\nsynchronous_standby_names = ''\n", p.Standby.Port)); err != nil {
		return nil, err
	}
	if err := p.start(ctx, p.Standby); err != nil {
		return nil, err
	}
	want := map[bool]string{true: "sync", false: "async"}[o.Synchronous]
	err = poll(ctx, "the standby streams, "+want, func() bool {
		var state string
		err := p.Primary.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication`, &state)
		return err == nil && state == want
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// durability is the configuration lines of Options.Durable.
func durability(durable bool) string {
	if durable {
		return "fsync = on\nfull_page_writes = on\nshared_buffers = 256MB"
	}
	return "fsync = off"
}

// Promote promotes the standby (pg_promote) and returns once it accepts
// writes; a standby whose processes restart (after a killed WAL receiver)
// is asked again until ctx ends.
func (p *Pair) Promote(ctx context.Context) error {
	return poll(ctx, "the standby is promoted", func() bool {
		var inRecovery bool
		if err := p.Standby.QueryRow(ctx, `SELECT pg_is_in_recovery()`, &inRecovery); err != nil {
			return false
		}
		if inRecovery {
			var promoted bool
			_ = p.Standby.QueryRow(ctx, `SELECT pg_promote(true, 4)`, &promoted)
			return promoted
		}
		return true
	})
}

// PID is the pid of n's postmaster (0 before it started).
func (n *Node) PID() int {
	if n == nil || n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Kill ends n's postmaster with SIGKILL, by its PID, and reaps it; its
// other processes end when they notice. Killing a node already killed is
// a no-op.
func (n *Node) Kill() {
	if n == nil || n.cmd == nil || n.cmd.ProcessState != nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
}

// Close kills both postmasters by PID and removes the pair's directory.
func (p *Pair) Close() {
	p.Primary.Kill()
	p.Standby.Kill()
	_ = os.RemoveAll(p.root)
}

// QueryRow runs one query on a connection of its own to n (database
// postgres), bounded by 5 s and ctx.
func (n *Node) QueryRow(ctx context.Context, sql string, dst ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.URL("postgres"))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return conn.QueryRow(ctx, sql).Scan(dst...)
}

func newNode(ctx context.Context, root, name string) (*Node, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return nil, err
	}
	return &Node{Dir: filepath.Join(root, name), Port: port, Log: filepath.Join(root, name+".log")}, nil
}

// binDir is the newest /usr/lib/postgresql/<major>/bin (the local stack
// installs PostgreSQL there).
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	sort.Slice(dirs, func(i, j int) bool { return major(dirs[i]) > major(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_basebackup")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("pgpair: no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (deploy/local/stack.sh up installs them)")
}

// credential is the OS user PostgreSQL runs as when we are root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "seckill-pg"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgpair: running as root with no postgres or seckill-pg user (deploy/local/stack.sh up creates one)")
}

// command is one of PostgreSQL's programs, run as its OS user.
func (p *Pair) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, name), args...)
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	cmd.Dir = p.root
	return cmd
}

// run runs a program to its end.
func (p *Pair) run(ctx context.Context, name string, args ...string) error {
	if out, err := p.command(ctx, name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("pgpair: %s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func appendConf(n *Node, file, text string) error {
	f, err := os.OpenFile(filepath.Join(n.Dir, file), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString("\n" + text); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// start runs n's postmaster (not bound to ctx: it lives until Kill) and
// waits until it accepts connections.
func (p *Pair) start(ctx context.Context, n *Node) error {
	logf, err := os.Create(n.Log)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }() // the child has its own descriptor
	n.cmd = p.command(context.WithoutCancel(ctx), "postgres", "-D", n.Dir)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("pgpair: start postgres on %s: %w", n.Dir, err)
	}
	return poll(ctx, fmt.Sprintf("postgres on port %d accepts connections (log %s)", n.Port, n.Log), func() bool {
		var one int
		return n.QueryRow(ctx, `SELECT 1`, &one) == nil
	})
}

// poll calls cond every 100 ms until it holds, for at most 60 s or until
// ctx ends.
func poll(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("pgpair: never happened within 60 s: %s", what)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
