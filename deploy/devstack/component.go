package devstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Component is one supervised process of the stack. Implementations keep
// the rule of the package: they signal only a pid that is ours (see Owner).
// Methods are called by one goroutine at a time for a given component;
// different components are driven concurrently.
type Component interface {
	// Name is the component's name in logs, status and `down` arguments,
	// and the base of its pid file (<state>/run/<name>.pid).
	Name() string
	// Group is the `down` name that selects this component with others
	// sharing its data (namesrv and proxy are "rocketmq"); often Name.
	Group() string
	// DependsOn names the components that must be healthy before this one
	// starts and that stop only after it.
	DependsOn() []string
	// PIDFile is the component's pid file.
	PIDFile() string
	// DataDir is the component's own directory under the state dir (the
	// working directory its process runs in).
	DataDir() string
	// PID returns the pid of the component's process when it is alive and
	// ours, 0 otherwise. It changes nothing.
	PID() int
	// Adopt returns PID, or, when the pid file is lost but the component's
	// main port is served by a process of ours, records that process in the
	// pid file and returns it; 0 when nothing of ours runs.
	Adopt(ctx context.Context) (int, error)
	// Healthy returns nil when the process is ours and answers its probe,
	// otherwise an error saying what is wrong.
	Healthy(ctx context.Context) error
	// Grace is how long Up waits for a process that is ours and alive but
	// not healthy (still starting) before it restarts it.
	Grace() time.Duration
	// Start starts the process (PID must be 0) and returns once it is
	// healthy, or an error naming the logs to read.
	Start(ctx context.Context) error
	// Stop stops the process recorded in the pid file if it is ours (by
	// pid, never by name), waits for it to exit and removes the pid file.
	// A pid file naming a process that is not ours is removed with a
	// warning and that process is left alone.
	Stop(ctx context.Context) error
	// Status describes the running component for `status`.
	Status(ctx context.Context) StatusInfo
	// Purge deletes the component's data (it must be stopped).
	Purge() error
}

// StatusInfo is what a component reports on its `status` line besides its
// name, pid and health.
type StatusInfo struct {
	// Ports is the PORTS column, e.g. "56379".
	Ports string
	// RSSKB is the resident set size in KiB (0 when not running).
	RSSKB int64
	// Detail is the free-form last column.
	Detail string
}

// Process is the part of a Component that every process-based component
// shares: its pid file, its ownership rule, its main port for adoption and
// the way it is stopped. Components embed it.
type Process struct {
	// ComponentName is returned by Name.
	ComponentName string
	// File is the pid file.
	File string
	// Owner decides whether a pid is ours.
	Owner Owner
	// AdoptPort is the port whose listener Adopt may take over; 0: none.
	AdoptPort int
	// StopSignal is sent first by Stop (SIGTERM when zero).
	StopSignal syscall.Signal
	// StopTimeout is how long Stop waits before SIGKILL.
	StopTimeout time.Duration
	// Log receives progress lines.
	Log *Logger
}

// Name returns ComponentName.
func (p *Process) Name() string { return p.ComponentName }

// PIDFile returns File.
func (p *Process) PIDFile() string { return p.File }

// DataDir returns the owner's directory.
func (p *Process) DataDir() string { return p.Owner.Dir }

// PID returns the pid of the pid file when that process is alive and ours.
func (p *Process) PID() int {
	if pid := readPID(p.File); pid != 0 && p.Owner.Owns(pid) {
		return pid
	}
	return 0
}

// Adopt implements Component.Adopt with AdoptPort.
func (p *Process) Adopt(ctx context.Context) (int, error) {
	if pid := p.PID(); pid != 0 {
		return pid, nil
	}
	if p.AdoptPort == 0 || !portOpen(ctx, p.AdoptPort) {
		return 0, nil
	}
	pid := listenerPID(p.AdoptPort)
	if pid == 0 || !p.Owner.Owns(pid) {
		return 0, nil
	}
	if err := writePID(p.File, pid); err != nil {
		return 0, fmt.Errorf("%s: adopt pid %d: %w", p.ComponentName, pid, err)
	}
	p.Log.Infof("adopted running process %d on port %d (pid file was missing)", pid, p.AdoptPort)
	return pid, nil
}

// StopPID stops pid (read from the pid file by the caller) if it is ours
// and removes the pid file.
func (p *Process) StopPID(ctx context.Context, pid int) error {
	if pid != 0 && alive(pid) {
		if !p.Owner.Owns(pid) {
			p.Log.Warnf("%s: pid %d from the pid file is not our %s; not touching it", p.ComponentName, pid, p.ComponentName)
		} else {
			sig := p.StopSignal
			if sig == 0 {
				sig = syscall.SIGTERM
			}
			if err := stopPID(ctx, p.Log, p.ComponentName, pid, sig, p.StopTimeout); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(p.File); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("%s: remove pid file: %w", p.ComponentName, err)
	}
	return nil
}

// Stop implements Component.Stop for the pid in the pid file.
func (p *Process) Stop(ctx context.Context) error {
	return p.StopPID(ctx, readPID(p.File))
}

// waitReady polls until ready returns nil, the process pid exits (an error
// quoting the tail of outFile and naming logs) or timeout passes.
func waitReady(ctx context.Context, log *Logger, name string, pid int, timeout time.Duration, outFile, logs string, ready func() error) error {
	var last error
	ok := poll(ctx, timeout, 100*time.Millisecond, func() bool {
		if last = ready(); last == nil {
			return true
		}
		return !alive(pid)
	})
	switch {
	case ok && last == nil:
		return nil
	case ok:
		log.Raw(tailFile(outFile, 30))
		return fmt.Errorf("%s (pid %d) exited during startup; see %s", name, pid, logs)
	case ctx.Err() != nil:
		return fmt.Errorf("%s (pid %d) not ready: %w", name, pid, ctx.Err())
	default:
		return fmt.Errorf("%s (pid %d) not ready after %s (%v); see %s", name, pid, timeout, last, logs)
	}
}

// rotate moves path to path.1 when it exists.
func rotate(path string) {
	if _, err := os.Stat(path); err == nil {
		_ = os.Rename(path, path+".1")
	}
}

// removeAll deletes paths, wrapping the first error.
func removeAll(paths ...string) error {
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("purge %s: %w", filepath.Clean(p), err)
		}
	}
	return nil
}
