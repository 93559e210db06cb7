package devstack

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Redis is a redis-server of the stack: Debian's binary in the foreground,
// configured by <dir>/redis.conf (rewritten on every start), on
// 127.0.0.1:<port> with append-only persistence and no RDB snapshots. The
// stack's own is NewRedis; NewRedisNode makes others (the nodes of a Redis
// Cluster, for example) with their own name, directory, port and extra
// configuration lines.
type Redis struct {
	Process
	cfg  Config
	spec RedisSpec
}

// RedisSpec describes one redis-server: its component name and group, its
// directory (working directory, config and AOF), its port and extra lines
// of redis.conf (e.g. "cluster-enabled yes"), and other ports it listens
// on (a cluster node's bus port), which must be free when it starts.
type RedisSpec struct {
	Name, Group string
	Dir         string
	Port        int
	ExtraConf   []string
	ExtraPorts  []int
}

// NewRedis returns the stack's Redis component: "redis" in <state>/redis on
// Config.RedisPort.
func NewRedis(cfg Config, log *Logger) *Redis {
	return NewRedisNode(cfg, log, RedisSpec{Name: "redis", Group: "redis", Dir: cfg.RedisDir(), Port: cfg.RedisPort})
}

// NewRedisNode returns a Redis component described by spec; its pid file
// is <state>/run/<name>.pid and its logs <state>/logs/<name>.log and .out.
func NewRedisNode(cfg Config, log *Logger, spec RedisSpec) *Redis {
	return &Redis{cfg: cfg, spec: spec, Process: Process{
		ComponentName: spec.Name,
		File:          filepath.Join(cfg.RunDir(), spec.Name+".pid"),
		Owner:         Owner{Dir: spec.Dir, Needle: "redis-server"},
		AdoptPort:     spec.Port,
		StopSignal:    syscall.SIGTERM,
		StopTimeout:   30 * time.Second,
		Log:           log,
	}}
}

// Group implements Component.
func (r *Redis) Group() string { return r.spec.Group }

// DependsOn implements Component: Redis needs nothing.
func (r *Redis) DependsOn() []string { return nil }

// Grace implements Component: a Redis that does not answer PING is
// restarted at once.
func (r *Redis) Grace() time.Duration { return 0 }

// Healthy implements Component: ours and answering PING.
func (r *Redis) Healthy(ctx context.Context) error {
	if r.PID() == 0 {
		return fmt.Errorf("%s: not running (no live process of ours in %s)", r.spec.Name, r.File)
	}
	return redisPing(ctx, r.spec.Port)
}

// redisPing sends PING to 127.0.0.1:port and expects +PONG within 3 s.
func redisPing(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return fmt.Errorf("redis: PING: %w", err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("redis: PING: %w", err)
	}
	if strings.TrimRight(line, "\r\n") != "+PONG" {
		return fmt.Errorf("redis: PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// Start implements Component.
func (r *Redis) Start(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis: %w (deploy/local/stack.sh up installs it)", err)
	}
	logDir, dir, name, port := r.cfg.LogDir(), r.spec.Dir, r.spec.Name, r.spec.Port
	logFile := filepath.Join(logDir, name+".log")
	conf := fmt.Sprintf(`# Written by deploy/local/stack.sh on every start.
bind 127.0.0.1
port %d
protected-mode no
daemonize no
dir "%s"
logfile "%s"
appendonly yes
appendfsync everysec
# AOF is the persistence; no RDB snapshots (no fork pauses during tests).
save ""
`, port, dir, logFile)
	for _, line := range r.spec.ExtraConf {
		conf += line + "\n"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	confPath := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("%s: write config: %w", name, err)
	}
	if err := ensurePortsFree(ctx, name, append([]int{port}, r.spec.ExtraPorts...)...); err != nil {
		return err
	}
	r.Log.Infof("%s: starting on 127.0.0.1:%d (log: %s)", name, port, logFile)
	t0 := time.Now()
	pid, err := spawn(r.File, filepath.Join(logDir, name+".out"), dir, []string{bin, confPath}, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	err = waitReady(ctx, r.Log, name, pid, 10*time.Second, logFile, logFile, func() error { return redisPing(ctx, port) })
	if err != nil {
		return err
	}
	r.Log.Infof("%s: ready, pid %d (%s)", name, pid, since(t0))
	return nil
}

// Status implements Component.
func (r *Redis) Status(context.Context) StatusInfo {
	info := StatusInfo{Ports: strconv.Itoa(r.spec.Port), Detail: "dir " + r.spec.Dir + ", PING"}
	for _, p := range r.spec.ExtraPorts {
		info.Ports += "," + strconv.Itoa(p)
	}
	if pid := r.PID(); pid != 0 {
		info.RSSKB = rssKB(pid)
	}
	return info
}

// Purge implements Component: the Redis directory (config and AOF).
func (r *Redis) Purge() error { return removeAll(r.spec.Dir) }
