package devstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is the stack's own PostgreSQL cluster in <state>/pg/data, run
// with pg_ctl on 127.0.0.1:PGPort and a unix socket, with role and password
// seckill (a superuser: tests create and drop databases) and database
// seckill. As root it runs as an unprivileged OS user (PostgreSQL refuses
// root), who is granted search permission on the directories above its data.
// The same type runs the optional standby (NewPostgresStandby).
type Postgres struct {
	Process
	cfg  Config
	data string
	port int
	// standby: a streaming copy of the primary (pg_basebackup on first
	// use, read-only until promoted).
	standby bool
}

// NewPostgres returns the PostgreSQL component of cfg.
func NewPostgres(cfg Config, log *Logger) *Postgres {
	return newPostgresServer(cfg, log, "postgres", cfg.PGData(), cfg.PGPort, false)
}

// NewPostgresStandby returns the standby of the PostgreSQL standby mode
// (Config.PGStandby): postgres-standby in <state>/pg/standby on
// PGStandbyPort, a pg_basebackup of the primary made on first use that
// streams from it as application seckill_standby. The primary lists it
// in synchronous_standby_names in the sync mode, so a commit returns only
// once the standby has it. It belongs to the group postgres: `down
// postgres` stops both, and a purge of one purges the other.
func NewPostgresStandby(cfg Config, log *Logger) *Postgres {
	return newPostgresServer(cfg, log, "postgres-standby", cfg.PGStandbyData(), cfg.PGStandbyPort, true)
}

// newPostgresServer is one postmaster of the stack: name (and its pid
// file run/<name>.pid), its data directory and port.
func newPostgresServer(cfg Config, log *Logger, name, data string, port int, standby bool) *Postgres {
	return &Postgres{cfg: cfg, data: data, port: port, standby: standby, Process: Process{
		ComponentName: name,
		File:          filepath.Join(cfg.RunDir(), name+".pid"),
		Owner:         Owner{Dir: data, Needle: "postgres"},
		// SIGINT = "fast" shutdown (SIGTERM would wait for every client to disconnect).
		StopSignal:  syscall.SIGINT,
		StopTimeout: 60 * time.Second,
		Log:         log,
	}}
}

// Group implements Component.
func (p *Postgres) Group() string { return "postgres" }

// DependsOn implements Component: the primary needs nothing, the standby
// the primary.
func (p *Postgres) DependsOn() []string {
	if p.standby {
		return []string{"postgres"}
	}
	return nil
}

// DataDir implements Component: the cluster directory, the postmaster's
// working directory.
func (p *Postgres) DataDir() string { return p.data }

// Grace implements Component: a postmaster still recovering gets 30 s.
func (p *Postgres) Grace() time.Duration { return 30 * time.Second }

// pid is the postmaster's pid: postmaster.pid first, then our pid file.
func (p *Postgres) pid() int {
	if pid := readPID(filepath.Join(p.data, "postmaster.pid")); pid != 0 {
		return pid
	}
	return readPID(p.File)
}

// PID implements Component with the postmaster's own pid file first.
func (p *Postgres) PID() int {
	if pid := p.pid(); pid != 0 && p.Owner.Owns(pid) {
		return pid
	}
	return 0
}

// Adopt implements Component: a live postmaster of ours is recorded in our
// pid file.
func (p *Postgres) Adopt(context.Context) (int, error) {
	pid := p.PID()
	if pid != 0 && readPID(p.File) != pid {
		if err := writePID(p.File, pid); err != nil {
			return 0, fmt.Errorf("postgres: %w", err)
		}
	}
	return pid, nil
}

// Stop implements Component for the postmaster.
func (p *Postgres) Stop(ctx context.Context) error { return p.StopPID(ctx, p.pid()) }

// Healthy implements Component: ours and answering `select 1` over TCP with
// the exported DSN.
func (p *Postgres) Healthy(ctx context.Context) error {
	if p.PID() == 0 {
		return fmt.Errorf("%s: not running (no live postmaster of ours for %s)", p.Name(), p.data)
	}
	if err := p.probe(ctx); err != nil {
		return err
	}
	if p.standby {
		return p.streaming(ctx)
	}
	return nil
}

// streaming checks that the primary sees the standby streaming, and
// synchronously in the sync mode.
func (p *Postgres) streaming(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.cfg.pgDSNAt(p.cfg.PGPort))
	if err != nil {
		return fmt.Errorf("%s: connect to the primary: %w", p.Name(), err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var state string
	err = conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = 'seckill_standby' AND state = 'streaming'`).Scan(&state)
	if err != nil {
		return fmt.Errorf("%s: the primary sees no streaming seckill_standby: %w", p.Name(), err)
	}
	if want := p.cfg.PGStandby; state != want {
		return fmt.Errorf("%s: streaming %s, want %s", p.Name(), state, want)
	}
	return nil
}

func (p *Postgres) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.cfg.pgDSNAt(p.port))
	if err != nil {
		return fmt.Errorf("%s: connect: %w", p.Name(), err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var one int
	if err := conn.QueryRow(ctx, "select 1").Scan(&one); err != nil {
		return fmt.Errorf("postgres: select 1: %w", err)
	}
	return nil
}

// FindPGBinDir returns the directory holding initdb, postgres and pg_ctl:
// dir when it is set (and has them), else the newest
// /usr/lib/postgresql/<major>/bin, else the directory of postgres on PATH.
func FindPGBinDir(dir string) (string, error) {
	has := func(d string) bool {
		for _, b := range []string{"initdb", "postgres", "pg_ctl"} {
			if st, err := os.Stat(filepath.Join(d, b)); err != nil || st.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if dir != "" {
		if has(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("SECKILL_PG_BINDIR=%s has no initdb, postgres and pg_ctl", dir)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	sort.Slice(dirs, func(i, j int) bool { return major(dirs[i]) > major(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if bin, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(bin); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	return "", errors.New("PostgreSQL server binaries initdb/postgres/pg_ctl not found (looked in /usr/lib/postgresql/*/bin and PATH; deploy/local/stack.sh up installs them)")
}

// osUser is the account PostgreSQL runs as.
type osUser struct {
	name     string
	uid, gid int
	asRoot   bool // we are root and run PostgreSQL's programs through runuser
}

// chooseUser picks (and as root creates) the OS user of PostgreSQL.
func (p *Postgres) chooseUser(ctx context.Context) (osUser, error) {
	if !isRoot() {
		u, err := user.Current()
		if err != nil {
			return osUser{}, fmt.Errorf("postgres: current user: %w", err)
		}
		return osUser{name: u.Username, uid: os.Getuid(), gid: os.Getgid()}, nil
	}
	name := p.cfg.PGOSUser
	if name == "" {
		name = "seckill-pg"
		if _, err := user.Lookup("postgres"); err == nil {
			name = "postgres"
		}
	}
	u, err := user.Lookup(name)
	if err != nil {
		p.Log.Infof("creating system user %s to run PostgreSQL (it refuses to run as root)", name)
		out, err := exec.CommandContext(ctx, "useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
			"--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if err != nil {
			return osUser{}, fmt.Errorf("postgres: could not create system user %s: %w: %s", name, err, out)
		}
		if u, err = user.Lookup(name); err != nil {
			return osUser{}, fmt.Errorf("postgres: %w", err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return osUser{name: name, uid: uid, gid: gid, asRoot: true}, nil
}

// command runs argv as u (through runuser when we are root).
func (u osUser) command(ctx context.Context, argv ...string) *exec.Cmd {
	if u.asRoot {
		argv = append([]string{"runuser", "-u", u.name, "--"}, argv...)
	}
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// chown gives paths to u when we are root.
func (u osUser) chown(paths ...string) error {
	if !u.asRoot {
		return nil
	}
	for _, path := range paths {
		if err := os.Lchown(path, u.uid, u.gid); err != nil {
			return fmt.Errorf("postgres: chown %s: %w", path, err)
		}
	}
	return nil
}

// grantTraverse lets u search (x, not read) every directory above PGRoot,
// e.g. /root (mode 700): with an ACL when setfacl works, else chmod o+x.
func (p *Postgres) grantTraverse(ctx context.Context, u osUser) error {
	if !u.asRoot {
		return nil
	}
	var parents []string
	for d := filepath.Dir(p.cfg.PGRoot()); d != "/" && d != "."; d = filepath.Dir(d) {
		parents = append([]string{d}, parents...)
	}
	for _, d := range parents {
		if u.command(ctx, "test", "-x", d).Run() == nil {
			continue
		}
		if exec.CommandContext(ctx, "setfacl", "-m", "u:"+u.name+":--x", d).Run() == nil {
			p.Log.Infof("granted search permission (ACL u:%s:--x) on %s so PostgreSQL can reach its data dir", u.name, d)
			continue
		}
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		if err := os.Chmod(d, st.Mode().Perm()|0o001); err != nil {
			return fmt.Errorf("postgres: chmod o+x %s: %w", d, err)
		}
		p.Log.Infof("granted search permission (chmod o+x) on %s so PostgreSQL (%s) can reach its data dir", d, u.name)
	}
	if u.command(ctx, "test", "-w", p.cfg.PGRoot()).Run() != nil {
		return fmt.Errorf("postgres: PostgreSQL user %s cannot write %s", u.name, p.cfg.PGRoot())
	}
	return nil
}

var pgMajor = regexp.MustCompile(` (\d+)\.`)

// Start implements Component: initdb on first use, seckill.conf, pg_ctl
// start, then the role and the database (idempotent).
func (p *Postgres) Start(ctx context.Context) error {
	bindir, err := FindPGBinDir(p.cfg.PGBinDir)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	u, err := p.chooseUser(ctx)
	if err != nil {
		return err
	}
	root, data, logDir := p.cfg.PGRoot(), p.data, p.cfg.LogDir()
	sockDir := p.cfg.PGSocketDir()
	pgLog := filepath.Join(logDir, p.Name()+".log")
	for _, d := range []string{root, sockDir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	if f, err := os.OpenFile(pgLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		_ = f.Close()
	}
	if err := u.chown(root, sockDir, pgLog); err != nil {
		return err
	}
	if _, err := os.Stat(data); err == nil && u.asRoot {
		if err := filepath.WalkDir(data, func(path string, _ os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return u.chown(path)
		}); err != nil {
			return fmt.Errorf("postgres: chown %s: %w", data, err)
		}
	}
	for _, d := range []string{root, sockDir} {
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	if err := p.grantTraverse(ctx, u); err != nil {
		return err
	}

	out, err := exec.CommandContext(ctx, filepath.Join(bindir, "postgres"), "--version").Output()
	if err != nil {
		return fmt.Errorf("postgres: %s --version: %w", filepath.Join(bindir, "postgres"), err)
	}
	m := pgMajor.FindStringSubmatch(string(out))
	if m == nil {
		return fmt.Errorf("postgres: cannot read the version in %q", out)
	}
	binVer := m[1]
	if b, err := os.ReadFile(filepath.Join(data, "PG_VERSION")); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		if ver := strings.TrimSpace(string(b)); ver != binVer {
			return fmt.Errorf("postgres: %s was created by PostgreSQL %s but the binaries in %s are %s; run 'stack.sh down --purge' or point SECKILL_PG_BINDIR at PostgreSQL %s", data, ver, bindir, binVer, ver)
		}
	} else if p.standby {
		if err := p.basebackup(ctx, u, bindir); err != nil {
			return err
		}
	} else if err := p.initdb(ctx, u, bindir, binVer); err != nil {
		return err
	}
	if err := p.writeConf(u, sockDir); err != nil {
		return err
	}
	// A postmaster that was just killed can linger a moment; PostgreSQL refuses to start while the pid in
	// postmaster.pid still exists.
	oldPID := p.pid()
	if oldPID != 0 {
		waitGone(ctx, oldPID, 10*time.Second)
	}
	if err := ensurePortsFree(ctx, p.Name(), p.port); err != nil {
		return err
	}
	p.Log.Infof("%s: starting on 127.0.0.1:%d (log: %s)", p.Name(), p.port, pgLog)
	t0 := time.Now()
	if err := p.pgCtlStart(ctx, u, bindir, pgLog); err != nil {
		if !strings.Contains(tailFile(pgLog, 5), `lock file "postmaster.pid" already exists`) {
			p.Log.Raw(tailFile(pgLog, 10))
			return err
		}
		p.Log.Warnf("postgres: stale postmaster.pid (pid %d); retrying in 3 s", oldPID)
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres: %w", ctx.Err())
		case <-time.After(3 * time.Second):
		}
		if err := p.pgCtlStart(ctx, u, bindir, pgLog); err != nil {
			return err
		}
	}
	pid := p.pid()
	if err := writePID(p.File, pid); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if err := p.setup(ctx, sockDir); err != nil {
		return err
	}
	if err := p.probe(ctx); err != nil {
		return fmt.Errorf("%s started (pid %d) but '%s' does not answer: %w", p.Name(), pid, p.cfg.pgDSNAt(p.port), err)
	}
	if p.standby {
		// The primary reports the standby async until it caught up.
		var last error
		if !poll(ctx, 60*time.Second, 200*time.Millisecond, func() bool { last = p.streaming(ctx); return last == nil }) {
			return fmt.Errorf("%s started (pid %d) but does not stream: %w", p.Name(), pid, last)
		}
	}
	p.Log.Infof("%s: ready, pid %d (%s)", p.Name(), pid, since(t0))
	return nil
}

func (p *Postgres) initdb(ctx context.Context, u osUser, bindir, binVer string) error {
	data := p.cfg.PGData()
	p.Log.Infof("postgres: initdb %s (PostgreSQL %s, superuser seckill, run as OS user %s)", data, binVer, u.name)
	if err := os.RemoveAll(data); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	pwfile := filepath.Join(p.cfg.PGRoot(), ".pwfile")
	if err := os.WriteFile(pwfile, []byte("seckill\n"), 0o600); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer os.Remove(pwfile)
	if err := u.chown(pwfile); err != nil {
		return err
	}
	logPath := filepath.Join(p.cfg.LogDir(), "initdb.log")
	cmd := u.command(ctx, filepath.Join(bindir, "initdb"), "-D", data, "--username=seckill", "--pwfile="+pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-locale")
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(logPath, out, 0o644)
	if err != nil {
		return fmt.Errorf("postgres: initdb failed: %w; see %s", err, logPath)
	}
	return nil
}

func (p *Postgres) writeConf(u osUser, sockDir string) error {
	data := p.data
	conf := fmt.Sprintf(`# Written by deploy/local/stack.sh on every start; edit the script, not this file.
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
max_connections = 300
shared_buffers = 256MB
# Durability stays at the defaults on purpose (benchmarks must be honest).
fsync = on
synchronous_commit = on
full_page_writes = on
logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%%m [%%p] %%q%%u@%%d '
log_timezone = 'UTC'
timezone = 'UTC'
# The standby mode (SECKILL_STACK_PG_STANDBY): the primary's synchronous standby, if any. A standby has
# none: promoted, it must not wait for one.
synchronous_standby_names = '%s'
# WAL kept for a standby that was down a while (no replication slot: nothing grows when the mode is dropped).
wal_keep_size = '%s'
`, p.port, sockDir, p.syncNames(), map[bool]string{true: "512MB", false: "0"}[p.cfg.PGStandby != ""])
	if err := os.WriteFile(filepath.Join(data, "seckill.conf"), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("postgres: write seckill.conf: %w", err)
	}
	main := filepath.Join(data, "postgresql.conf")
	b, err := os.ReadFile(main)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if !regexp.MustCompile(`(?m)^include_if_exists = 'seckill.conf'`).Match(b) {
		f, err := os.OpenFile(main, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		_, err = f.WriteString("\ninclude_if_exists = 'seckill.conf'\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("postgres: append to postgresql.conf: %w", err)
		}
	}
	return u.chown(filepath.Join(data, "seckill.conf"), main)
}

// syncNames is synchronous_standby_names: the standby's application name
// on the primary in the sync mode, else none.
func (p *Postgres) syncNames() string {
	if !p.standby && p.cfg.PGStandby == "sync" {
		return "seckill_standby"
	}
	return ""
}

// basebackup copies the primary into the standby's data directory with
// pg_basebackup -R (standby.signal, and primary_conninfo naming the
// application seckill_standby); its output goes to
// logs/pg_basebackup.log.
func (p *Postgres) basebackup(ctx context.Context, u osUser, bindir string) error {
	p.Log.Infof("%s: pg_basebackup of 127.0.0.1:%d into %s (run as OS user %s)", p.Name(), p.cfg.PGPort, p.data, u.name)
	if err := os.RemoveAll(p.data); err != nil {
		return fmt.Errorf("%s: %w", p.Name(), err)
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=seckill password=seckill application_name=seckill_standby", p.cfg.PGPort)
	logPath := filepath.Join(p.cfg.LogDir(), "pg_basebackup.log")
	out, err := u.command(ctx, filepath.Join(bindir, "pg_basebackup"), "-d", conninfo, "-D", p.data, "-R", "-X", "stream", "-c", "fast").CombinedOutput()
	_ = os.WriteFile(logPath, out, 0o644)
	if err != nil {
		return fmt.Errorf("%s: pg_basebackup failed: %w; see %s", p.Name(), err, logPath)
	}
	return nil
}

// pgCtlStart runs pg_ctl start -w in its own session (pg_ctl forks the
// postmaster), its output appended to logs/pg_ctl.log.
func (p *Postgres) pgCtlStart(ctx context.Context, u osUser, bindir, pgLog string) error {
	ctlLog := filepath.Join(p.cfg.LogDir(), "pg_ctl.log")
	out, err := os.OpenFile(ctlLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer out.Close()
	cmd := u.command(ctx, filepath.Join(bindir, "pg_ctl"), "-D", p.data, "-l", pgLog, "-w", "-t", "120", "start")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("postgres: pg_ctl start failed: %w; see %s and %s", err, pgLog, ctlLog)
	}
	return nil
}

// setup makes the role seckill a superuser with password seckill and
// creates the database seckill, over the unix socket (trust). Its own
// commits wait for no standby (synchronous_commit local): the standby
// starts after the primary. A standby has nothing to set up: it has the
// primary's role and database.
func (p *Postgres) setup(ctx context.Context, sockDir string) error {
	if p.standby {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=seckill dbname=postgres sslmode=disable", sockDir, p.port))
	if err != nil {
		return fmt.Errorf("postgres: connect over %s: %w", sockDir, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = local"); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER ROLE seckill WITH SUPERUSER LOGIN PASSWORD 'seckill'"); err != nil {
		return fmt.Errorf("postgres: could not configure role seckill: %w", err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'seckill')").Scan(&exists); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE seckill"); err != nil {
			return fmt.Errorf("postgres: could not create database seckill: %w", err)
		}
	}
	return nil
}

// Status implements Component: RSS and PSS summed over the postmaster and
// its children.
func (p *Postgres) Status(context.Context) StatusInfo {
	info := StatusInfo{Ports: strconv.Itoa(p.port)}
	var rss, pss int64
	if pid := p.PID(); pid != 0 {
		rss, pss = treeKB(pid)
		info.RSSKB = rss
	}
	info.Detail = fmt.Sprintf("RSS summed over postmaster+children (PSS %s), data %s", fmtMB(pss), p.data)
	return info
}

// Purge implements Component: the cluster, its socket dir and its log.
func (p *Postgres) Purge() error {
	if p.standby {
		return removeAll(p.data, filepath.Join(p.cfg.LogDir(), p.Name()+".log"))
	}
	return removeAll(p.cfg.PGRoot(), p.cfg.PGSocketDir(), filepath.Join(p.cfg.LogDir(), "postgres.log"))
}

// fmtMB formats KiB as "NMiB", or "-" for 0.
func fmtMB(kb int64) string {
	if kb == 0 {
		return "-"
	}
	return fmt.Sprintf("%dMiB", kb/1024)
}
