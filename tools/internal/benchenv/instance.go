package benchenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Instance is one `seckill serve` process of a run (NewInstance prepares
// it, Start starts it). Its exported fields are set before Start and read
// after; Env and CleanEnv change while it runs only through
// DropFailpoints.
type Instance struct {
	// Name names the instance in errors and its log file.
	Name string
	// API and Ops are the loopback addresses of its public API and of its
	// operations listener (/livez, /metrics, /status.json).
	API, Ops string
	// Env is the environment of the next start.
	Env []string
	// CleanEnv is Env without failpoints (what crash-consumers restarts
	// with after its crash phase).
	CleanEnv []string
	exe      string
	// Args are the command line after exe; nil: "serve".
	Args []string
	// LogFile receives the process's output; the caller closes it.
	LogFile  *os.File
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	stopping atomic.Bool
}

// Start starts the process (again, after a crash or a kill) with the
// current environment; the process outlives ctx-bound work, so only Stop,
// KillAndWait and Signal end it.
func (in *Instance) Start() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	args := in.Args
	if args == nil {
		args = []string{"serve"}
	}
	cmd := exec.Command(in.exe, args...) //nolint:noctx // the instance outlives any request: chaos stops it by PID
	cmd.Env = in.Env
	cmd.Stdout, cmd.Stderr = in.LogFile, in.LogFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", in.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	in.cmd, in.done = cmd, done
	return nil
}

// PID is the running process's pid.
func (in *Instance) PID() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cmd.Process.Pid
}

// DropFailpoints has the next start use cleanEnv and reports whether
// the environment had failpoints until now.
func (in *Instance) DropFailpoints() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	crashy := !slices.Equal(in.Env, in.CleanEnv)
	in.Env = in.CleanEnv
	return crashy
}

// RunsClean reports whether the running process was started with
// cleanEnv.
func (in *Instance) RunsClean() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Equal(in.cmd.Env, in.CleanEnv)
}

// Signal sends sig to the running process.
func (in *Instance) Signal(sig syscall.Signal) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cmd.Process.Signal(sig)
}

// SuperviseCrashes restarts the instance whenever it exits until stop is
// called or ctx ends, counting the restarts in crashes. Once crashes
// reaches target the instance restarts with cleanEnv (no failpoints); it
// stops supervising after limit restarts.
func (in *Instance) SuperviseCrashes(ctx context.Context, crashes *atomic.Int64, target, limit int64) {
	for ctx.Err() == nil && !in.stopping.Load() && crashes.Load() < limit {
		in.mu.Lock()
		done := in.done
		in.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-done:
		}
		if in.stopping.Load() {
			return
		}
		if crashes.Add(1) >= target {
			in.mu.Lock()
			in.Env = in.CleanEnv
			in.mu.Unlock()
		}
		if err := in.Start(); err != nil {
			return
		}
	}
}

// Stop ends the process (SIGTERM, then SIGKILL after 15 s) and waits.
func (in *Instance) Stop() {
	in.stopping.Store(true)
	in.mu.Lock()
	cmd, done := in.cmd, in.done
	in.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// KillAndWait sends SIGKILL and waits for the process to be gone.
func (in *Instance) KillAndWait() {
	in.mu.Lock()
	cmd, done := in.cmd, in.done
	in.mu.Unlock()
	_ = cmd.Process.Kill()
	<-done
}

// WaitLive waits until the operations listener answers /livez.
func (in *Instance) WaitLive(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		res, err := HTTPGet(ctx, "http://"+in.Ops+"/livez")
		if err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not come up within 60 s (log: %s)", in.Name, in.LogFile.Name())
}

// NewInstance prepares (does not start) the `seckill serve` named name:
// exe with the environment of this process, listeners on free loopback
// ports below the ephemeral range (freePort; SECKILL_HTTP_ADDR,
// SECKILL_OPS_ADDR) and env after them, its
// output in logDir/<name>.log (the caller closes it).
func NewInstance(name, exe, logDir string, env ...string) (*Instance, error) {
	api, err := freeAddr()
	if err != nil {
		return nil, err
	}
	ops, err := freeAddr()
	if err != nil {
		return nil, err
	}
	lf, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("create the log of %s: %w", name, err)
	}
	in := &Instance{Name: name, API: api, Ops: ops, exe: exe, LogFile: lf,
		// The load generator is one client address: no per-address limit.
		Env: append(append(os.Environ(), "SECKILL_HTTP_ADDR="+api, "SECKILL_OPS_ADDR="+ops, "SECKILL_CLIENT_RATE=0"), env...)}
	in.CleanEnv = in.Env
	return in, nil
}

// Ports handed to the processes a run starts (freePort): below Linux's
// ephemeral range (32768 and up), where the kernel picks the local port of
// every outgoing connection, so that a client connection of a process
// running beside cannot take one between the pick and the bind.
const (
	firstPort = 20000
	portRange = 12000
	portTries = 100
)

// freePort returns a loopback TCP port in firstPort..firstPort+portRange-1
// that nothing listens on now.
func freePort() (int, error) {
	var lc net.ListenConfig
	for range portTries {
		port := firstPort + rand.IntN(portRange) //nolint:gosec // a port pick, not a secret
		ln, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = ln.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port in %d-%d after %d tries", firstPort, firstPort+portRange-1, portTries)
}

// freeAddr returns a loopback address with a free port (freePort).
func freeAddr() (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// HTTPGet is a GET bound by ctx.
func HTTPGet(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(req)
}
