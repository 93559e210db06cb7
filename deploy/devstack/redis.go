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

// Redis is the stack's redis-server: Debian's binary in the foreground,
// configured by <state>/redis/redis.conf (rewritten on every start), on
// 127.0.0.1:RedisPort with append-only persistence and no RDB snapshots.
type Redis struct {
	Process
	cfg Config
}

// NewRedis returns the Redis component of cfg.
func NewRedis(cfg Config, log *Logger) *Redis {
	return &Redis{cfg: cfg, Process: Process{
		ComponentName: "redis",
		File:          filepath.Join(cfg.RunDir(), "redis.pid"),
		Owner:         Owner{Dir: cfg.RedisDir(), Needle: "redis-server"},
		AdoptPort:     cfg.RedisPort,
		StopSignal:    syscall.SIGTERM,
		StopTimeout:   30 * time.Second,
		Log:           log,
	}}
}

// Group implements Component.
func (r *Redis) Group() string { return "redis" }

// DependsOn implements Component: Redis needs nothing.
func (r *Redis) DependsOn() []string { return nil }

// Grace implements Component: a Redis that does not answer PING is
// restarted at once.
func (r *Redis) Grace() time.Duration { return 0 }

// Healthy implements Component: ours and answering PING.
func (r *Redis) Healthy(ctx context.Context) error {
	if r.PID() == 0 {
		return fmt.Errorf("redis: not running (no live process of ours in %s)", r.File)
	}
	return redisPing(ctx, r.cfg.RedisPort)
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
	logDir := r.cfg.LogDir()
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
`, r.cfg.RedisPort, r.cfg.RedisDir(), filepath.Join(logDir, "redis.log"))
	if err := os.MkdirAll(r.cfg.RedisDir(), 0o755); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	confPath := filepath.Join(r.cfg.RedisDir(), "redis.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("redis: write config: %w", err)
	}
	if err := ensurePortsFree(ctx, "redis", r.cfg.RedisPort); err != nil {
		return err
	}
	r.Log.Infof("redis: starting on 127.0.0.1:%d (log: %s)", r.cfg.RedisPort, filepath.Join(logDir, "redis.log"))
	t0 := time.Now()
	pid, err := spawn(r.File, filepath.Join(logDir, "redis.out"), r.cfg.RedisDir(), []string{bin, confPath}, nil)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	err = waitReady(ctx, r.Log, "redis", pid, 10*time.Second, filepath.Join(logDir, "redis.log"),
		filepath.Join(logDir, "redis.log"), func() error { return redisPing(ctx, r.cfg.RedisPort) })
	if err != nil {
		return err
	}
	r.Log.Infof("redis: ready, pid %d (%s)", pid, since(t0))
	return nil
}

// Status implements Component.
func (r *Redis) Status(context.Context) StatusInfo {
	info := StatusInfo{Ports: strconv.Itoa(r.cfg.RedisPort), Detail: "dir " + r.cfg.RedisDir() + ", PING"}
	if pid := r.PID(); pid != 0 {
		info.RSSKB = rssKB(pid)
	}
	return info
}

// Purge implements Component: the Redis directory (config and AOF).
func (r *Redis) Purge() error { return removeAll(r.cfg.RedisDir()) }
