package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// privateRedis is a redis-server process of one chaos scenario, with its
// own port and data directory (AOF everysec, as the local stack's), so a
// scenario can kill and restore Redis without touching the stack's
// (`seckill-bench chaos --private-redis`, the subset `make test` runs).
type privateRedis struct {
	dir  string
	port int
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startPrivateRedis starts redis-server (from PATH) on a free loopback
// port with a new data directory and waits until it answers.
func startPrivateRedis(ctx context.Context) (*privateRedis, error) {
	dir, err := os.MkdirTemp("", "seckill-chaos-redis-")
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	p := &privateRedis{dir: dir, port: port}
	if err := p.start(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

func (p *privateRedis) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

func (p *privateRedis) aofDir() string { return filepath.Join(p.dir, "appendonlydir") }

// start runs the server and waits up to 10 s for a PONG.
func (p *privateRedis) start(ctx context.Context) error {
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
	c := goredis.NewClient(&goredis.Options{Addr: p.addr(), MaxRetries: -1})
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

// kill sends SIGKILL and waits until the process is gone.
func (p *privateRedis) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// stop kills the server and removes its data.
func (p *privateRedis) stop() {
	p.kill()
	_ = os.RemoveAll(p.dir)
}
