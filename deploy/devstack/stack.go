package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Stack is a set of components and resources sharing one state directory.
// Its methods take the state dir's lock (<state>/.lock, flock) where the
// old script did, so concurrent `up` and `down` calls serialize.
type Stack struct {
	cfg        Config
	log        *Logger
	components []Component
	resources  []Resource
	// LockTimeout bounds the wait for another process holding the lock.
	LockTimeout time.Duration
}

// New returns a Stack of components (in the order of `status`) and
// resources. A component's DependsOn must name components of the list.
func New(cfg Config, log *Logger, components []Component, resources []Resource) (*Stack, error) {
	names := map[string]bool{}
	for _, c := range components {
		if names[c.Name()] {
			return nil, fmt.Errorf("devstack: two components named %q", c.Name())
		}
		names[c.Name()] = true
	}
	for _, c := range components {
		for _, d := range c.DependsOn() {
			if !names[d] {
				return nil, fmt.Errorf("devstack: %s depends on %q, which is not in the stack", c.Name(), d)
			}
		}
	}
	return &Stack{cfg: cfg, log: log, components: components, resources: resources, LockTimeout: 15 * time.Minute}, nil
}

// Default returns the local stack of deploy/local/stack.sh: postgres
// (and postgres-standby in the standby mode, Config.PGStandby), redis, the Redis Cluster (its nodes redis-c1.. and redis-cluster, which
// joins them), namesrv and proxy, the RocketMQ resources, and RabbitMQ
// (rabbitmq-epmd and rabbitmq: Optional, started only when selected), and
// the processes of every broker plug that describes its own
// (brokerplug.DevProcess; Optional likewise).
func Default(cfg Config, log *Logger) *Stack {
	components := []Component{NewPostgres(cfg, log)}
	if cfg.PGStandby != "" {
		components = append(components, NewPostgresStandby(cfg, log))
	}
	components = append(components, NewRedis(cfg, log))
	nodes := NewRedisClusterNodes(cfg, log)
	for _, n := range nodes {
		components = append(components, n)
	}
	components = append(components, NewRedisCluster(cfg, log, nodes), NewNameServer(cfg, log), NewProxy(cfg, log))
	epmd, rabbit := NewRabbitMQ(cfg, log)
	components = append(components, epmd, rabbit)
	components = append(components, pluggedComponents(cfg, log)...)
	s, err := New(cfg, log, components, []Resource{NewRocketMQResources(cfg, log)})
	if err != nil {
		panic(err) // the default list is consistent
	}
	return s
}

// Components returns the stack's components in status order.
func (s *Stack) Components() []Component { return slices.Clone(s.components) }

// initStateDir creates the state directory and its marker; it refuses a
// non-empty directory without the marker (not ours).
func (s *Stack) initStateDir() error {
	entries, err := os.ReadDir(s.cfg.StateDir)
	if err == nil && len(entries) > 0 {
		if _, err := os.Stat(s.cfg.Marker()); err != nil {
			return fmt.Errorf("state dir %s exists, is not empty and was not created by this script (no %s); refusing to use it",
				s.cfg.StateDir, s.cfg.Marker())
		}
	}
	for _, d := range []string{s.cfg.StateDir, s.cfg.RunDir(), s.cfg.LogDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	if _, err := os.Stat(s.cfg.Marker()); err != nil {
		if err := os.WriteFile(s.cfg.Marker(), []byte("seckill local stack state dir (deploy/local/stack.sh)\n"), 0o644); err != nil {
			return fmt.Errorf("state dir marker: %w", err)
		}
	}
	return nil
}

// Exists reports whether the stack's state dir exists (with its marker).
func (s *Stack) Exists() bool { return s.hasMarker() }

// hasMarker reports whether the state dir is the stack's.
func (s *Stack) hasMarker() bool {
	_, err := os.Stat(s.cfg.Marker())
	return err == nil
}

// lock takes <state>/.lock (waiting up to LockTimeout); the returned
// function releases it. The file is close-on-exec: started processes do
// not hold the lock.
func (s *Stack) lock(ctx context.Context) (func(), error) {
	path := s.cfg.StateDir + "/.lock"
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	try := func() bool { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil }
	if !try() {
		s.log.Infof("another stack.sh is running on %s; waiting for it", s.cfg.StateDir)
		if !poll(ctx, s.LockTimeout, 200*time.Millisecond, try) {
			_ = f.Close()
			return nil, fmt.Errorf("timed out waiting for the lock %s", path)
		}
	}
	return func() { _ = f.Close() }, nil
}

// ensure brings one component up: adopt what runs and is ours, give a
// starting one its grace, restart a wedged one, start a missing one. It
// reports whether it started the process.
func (s *Stack) ensure(ctx context.Context, c Component) (bool, error) {
	if _, ok := c.(Processless); ok {
		if c.Healthy(ctx) == nil {
			s.log.Infof("%s: healthy", c.Name())
			return false, nil
		}
		return true, c.Start(ctx)
	}
	pid, err := c.Adopt(ctx)
	if err != nil {
		return false, err
	}
	if pid == 0 && skipped(c) {
		s.log.Infof("%s: not selected, not started", c.Name())
		return false, nil
	}
	if pid != 0 {
		if c.Healthy(ctx) == nil {
			s.log.Infof("%s: running, pid %d", c.Name(), pid)
			return false, nil
		}
		if g := c.Grace(); g > 0 {
			s.log.Infof("%s: pid %d alive but not healthy yet; waiting up to %s", c.Name(), pid, g)
			if poll(ctx, g, 200*time.Millisecond, func() bool { return c.Healthy(ctx) == nil || c.PID() == 0 }) && c.PID() != 0 {
				s.log.Infof("%s: ready, pid %d", c.Name(), pid)
				return false, nil
			}
		}
		s.log.Warnf("%s: pid %d alive but not healthy (%v); restarting it", c.Name(), pid, c.Healthy(ctx))
		if err := c.Stop(ctx); err != nil {
			return false, err
		}
	}
	if err := c.Start(ctx); err != nil {
		return true, err
	}
	return true, nil
}

// Up brings every component up, concurrently where DependsOn allows (a
// component starts once its dependencies are healthy), then ensures the
// resources. It is idempotent: a healthy component of ours is adopted, not
// restarted. The state dir is created (with its marker) when missing. It
// returns the first error of each failed component, joined.
func (s *Stack) Up(ctx context.Context) error {
	if err := s.initStateDir(); err != nil {
		return err
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	t0 := time.Now()
	s.log.Infof("state dir %s", s.cfg.StateDir)
	if err := s.cfg.SaveModes(); err != nil {
		return err
	}

	type result struct {
		started bool
		err     error
	}
	done := map[string]chan struct{}{}
	results := make([]result, len(s.components))
	index := map[string]int{}
	for i, c := range s.components {
		done[c.Name()] = make(chan struct{})
		index[c.Name()] = i
	}
	// One goroutine per component, all joined before Up returns; each waits for its dependencies first.
	var wg sync.WaitGroup
	for i, c := range s.components {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[c.Name()])
			for _, d := range c.DependsOn() {
				<-done[d]
				if err := results[index[d]].err; err != nil {
					results[i].err = fmt.Errorf("%s: not started: %s failed", c.Name(), d)
					return
				}
			}
			started, err := s.ensure(ctx, c)
			results[i] = result{started: started, err: err}
		}()
	}
	// Resources that can prepare themselves (build a binary) do it meanwhile, one goroutine each, joined too.
	prepErrs := make([]error, len(s.resources))
	for i, r := range s.resources {
		if p, ok := r.(Preparer); ok {
			wg.Add(1)
			go func() {
				defer wg.Done()
				prepErrs[i] = p.Prepare(ctx)
			}()
		}
	}
	wg.Wait()
	var errs []error
	var started []string
	for i, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
		}
		if r.started {
			started = append(started, s.components[i].Name())
		}
	}
	for _, err := range prepErrs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, c := range s.components {
		if p, ok := c.(*Proxy); ok {
			if rt, err := FindRocketMQ(s.cfg); err == nil && p.RunningVersion() != "" && p.RunningVersion() != rt.Version {
				s.log.Warnf("the running proxy is RocketMQ %s but %s is selected; run 'stack.sh down' then 'up' to switch", p.RunningVersion(), rt.Version)
			}
		}
	}
	for _, r := range s.resources {
		if err := r.Ensure(ctx, started); err != nil {
			return err
		}
	}
	var where []string
	for _, c := range s.components {
		where = append(where, c.Name()+" "+c.Status(ctx).Ports)
	}
	s.log.Infof("up: all healthy in %s (%s)", since(t0), strings.Join(where, ", "))
	return nil
}

// Healthy returns nil when the state dir is the stack's and every
// component is healthy, else the first problem.
func (s *Stack) Healthy(ctx context.Context) error {
	if !s.hasMarker() {
		return fmt.Errorf("no stack in %s", s.cfg.StateDir)
	}
	for _, c := range s.components {
		if skipped(c) {
			continue
		}
		if err := c.Healthy(ctx); err != nil {
			return err
		}
	}
	return nil
}

// WriteExports writes the stack's `export NAME='VALUE'` lines to w.
func (s *Stack) WriteExports(w io.Writer) error {
	for _, e := range s.Exports() {
		if _, err := fmt.Fprintf(w, "export %s='%s'\n", e.Name, e.Value); err != nil {
			return fmt.Errorf("write exports: %w", err)
		}
	}
	return nil
}

// Exports are the stack's variables: the stack-wide ones, then those of
// its running components.
func (s *Stack) Exports() []Export { return append(s.cfg.Exports(), componentExports(s.components)...) }

// ErrNotHealthy is returned (wrapped) by Env and Status when the stack is
// missing or a component or resource is not healthy.
var ErrNotHealthy = errors.New("not healthy")

// Env writes the exports of a running, healthy stack to w; otherwise it
// writes nothing and returns an error wrapping ErrNotHealthy.
func (s *Stack) Env(ctx context.Context, w io.Writer) error {
	if err := s.Healthy(ctx); err != nil {
		return fmt.Errorf("seckill local stack is not running (or not healthy) in %s; run: deploy/local/stack.sh up (%v): %w",
			s.cfg.StateDir, err, ErrNotHealthy)
	}
	return s.WriteExports(w)
}

const statusFormat = "%-13s %-8s %-38s %-8s %-9s %s\n"

// Status writes one line per component (pid, ports, healthy, RSS, detail)
// and per resource, then the state and log dirs, to w. It returns an error
// wrapping ErrNotHealthy when something is not healthy or there is no
// stack (then it writes only that).
func (s *Stack) Status(ctx context.Context, w io.Writer) error {
	if !s.hasMarker() {
		_, _ = fmt.Fprintf(w, "no stack in %s (run: deploy/local/stack.sh up)\n", s.cfg.StateDir)
		return fmt.Errorf("no stack in %s: %w", s.cfg.StateDir, ErrNotHealthy)
	}
	var bad []string
	_, _ = fmt.Fprintf(w, statusFormat, "COMPONENT", "PID", "PORTS", "HEALTHY", "RSS", "DETAIL")
	for _, c := range s.components {
		pid, healthy := "-", "yes"
		if p := c.PID(); p != 0 {
			pid = fmt.Sprint(p)
		}
		if skipped(c) {
			healthy = "-"
		} else if c.Healthy(ctx) != nil {
			healthy = "no"
			bad = append(bad, c.Name())
		}
		info := c.Status(ctx)
		_, _ = fmt.Fprintf(w, statusFormat, c.Name(), pid, info.Ports, healthy, fmtMB(info.RSSKB), info.Detail)
	}
	for _, r := range s.resources {
		ok, detail := r.Check(ctx)
		healthy := "yes"
		if !ok {
			healthy = "no"
			bad = append(bad, r.Name())
		}
		_, _ = fmt.Fprintf(w, statusFormat, r.Name(), "-", "-", healthy, "-", detail)
	}
	_, _ = fmt.Fprintf(w, "state dir: %s   logs: %s, %s\n", s.cfg.StateDir, s.cfg.LogDir(), s.cfg.RMQLogs())
	if len(bad) > 0 {
		return fmt.Errorf("%s: %w", strings.Join(bad, ", "), ErrNotHealthy)
	}
	return nil
}

// Select returns the components that names designate (a component's name
// or its group; all components when names is empty), in stack order.
func (s *Stack) Select(names []string) ([]Component, error) {
	if len(names) == 0 {
		return s.Components(), nil
	}
	want := map[string]bool{}
	for _, n := range names {
		found := false
		for _, c := range s.components {
			if c.Name() == n || c.Group() == n {
				// A member of a group takes the whole group: its members share their data.
				want[c.Group()] = true
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown argument for down: %s (use: down [--purge] [%s]...)", n, strings.Join(s.groups(), "|"))
		}
	}
	var out []Component
	for _, c := range s.components {
		if want[c.Group()] {
			out = append(out, c)
		}
	}
	return out, nil
}

// groups lists the group names in stack order.
func (s *Stack) groups() []string {
	var gs []string
	for _, c := range s.components {
		if !slices.Contains(gs, c.Group()) {
			gs = append(gs, c.Group())
		}
	}
	return gs
}

// Down stops the components names designate (see Select; all when empty),
// each by its pid and only if ours, a component only after the selected
// components that depend on it (the proxy before the name server; the
// others in parallel). With purge it then deletes their data, or the whole
// state dir (the download cache is kept) when names is empty. Without a
// stack in the state dir it does nothing.
func (s *Stack) Down(ctx context.Context, purge bool, names []string) error {
	sel, err := s.Select(names)
	if err != nil {
		return err
	}
	if !s.hasMarker() {
		s.log.Infof("nothing to stop: no stack in %s", s.cfg.StateDir)
		return nil
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	done := map[string]chan struct{}{}
	for _, c := range sel {
		done[c.Name()] = make(chan struct{})
	}
	errs := make([]error, len(sel))
	// One goroutine per selected component, all joined before Down goes on; each waits for its dependents.
	var wg sync.WaitGroup
	for i, c := range sel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[c.Name()])
			for _, other := range sel {
				if slices.Contains(other.DependsOn(), c.Name()) {
					<-done[other.Name()]
				}
			}
			errs[i] = c.Stop(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if purge {
		if !s.hasMarker() {
			return fmt.Errorf("refusing to purge %s (no %s)", s.cfg.StateDir, s.cfg.Marker())
		}
		if len(names) == 0 {
			s.log.Infof("purging %s (data and logs; the download cache %s is kept)", s.cfg.StateDir, s.cfg.CacheDir)
		}
		purged := map[string]bool{}
		for _, c := range sel {
			if len(names) != 0 && !purged[c.Group()] {
				s.log.Infof("purging %s data of %s", c.Group(), c.DataDir())
			}
			purged[c.Group()] = true
			if err := c.Purge(); err != nil {
				return err
			}
		}
		if len(names) == 0 {
			if err := os.RemoveAll(s.cfg.StateDir); err != nil {
				return fmt.Errorf("purge %s: %w", s.cfg.StateDir, err)
			}
		}
	}
	s.log.Infof("down: done")
	return nil
}
