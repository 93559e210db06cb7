package benchenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// PrivateRedis is a redis-server process of one chaos scenario, with its
// own port and data directory (AOF everysec, as the local stack's), so a
// scenario can kill and restore Redis without touching the stack's
// (`seckill-bench chaos --private-redis`, the subset `make test` runs).
type PrivateRedis struct {
	dir  string
	port int
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartPrivateRedis starts redis-server (from PATH) on a free loopback
// port (freePort) with a new data directory and waits until it answers.
func StartPrivateRedis(ctx context.Context) (*PrivateRedis, error) {
	dir, err := os.MkdirTemp("", "seckill-chaos-redis-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p := &PrivateRedis{dir: dir, port: port}
	if err := p.Start(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// Addr is the server's loopback address.
func (p *PrivateRedis) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// AOFDir is the server's append-only directory (its data).
func (p *PrivateRedis) AOFDir() string { return filepath.Join(p.dir, "appendonlydir") }

// Start runs the server and waits up to 10 s for a PONG.
func (p *PrivateRedis) Start(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("private redis: %w (deploy/local/stack.sh up installs it)", err)
	}
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(p.port), "--dir", p.dir,
		"--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--protected-mode", "no",
		"--logfile", filepath.Join(p.dir, "redis.log")}
	cmd := exec.Command(bin, args...) //nolint:noctx // the private Redis lives for the whole run: stopped by PID
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("private redis: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := c.Ping(ctx).Err(); err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New("private redis: no PONG within 10 s (see " + filepath.Join(p.dir, "redis.log") + ")")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *PrivateRedis) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Stop kills the server and removes its data.
func (p *PrivateRedis) Stop() {
	p.Kill()
	_ = os.RemoveAll(p.dir)
}

// Signal sends sig to the running redis-server.
func (p *PrivateRedis) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Signal(sig)
}
