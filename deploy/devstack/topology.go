package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Resource is something the stack ensures once its components are healthy
// and reports on its own `status` line: for RocketMQ, the broker's
// registration and the topics and groups. Ensure may be called on every
// `up`; it must be idempotent.
type Resource interface {
	// Name is the resource's name on its status line.
	Name() string
	// Ensure makes the resource as it should be; started names the
	// components this `up` (re)started.
	Ensure(ctx context.Context, started []string) error
	// Check reports whether the resource is as it should be, with a one-line
	// detail either way.
	Check(ctx context.Context) (ok bool, detail string)
}

// Preparer is a Resource that has work to do before the components are up
// (building a binary, say): Up calls Prepare concurrently with starting
// the components, and fails if it fails. Ensure must not rely on it having
// run (Status does not call it).
type Preparer interface {
	// Prepare does that work; it must be idempotent and safe to run while
	// the components start.
	Prepare(ctx context.Context) error
}

// RocketMQResources is the RocketMQ resource: the broker registered with
// the name server, then the topics and consumer groups of the service's
// topology, applied and checked by the service binary (`seckill topology
// apply|check`, built into <state>/bin/seckill from Config.RepoDir when
// stale).
type RocketMQResources struct {
	cfg     Config
	log     *Logger
	brokers []brokerRef
	// allMasters runs each command once without --broker: the command
	// then works on every master the name server lists (the cluster
	// mode); otherwise once per broker with --broker.
	allMasters bool
	// RegistrationTimeout bounds the wait for the brokers' registration.
	RegistrationTimeout time.Duration
}

// brokerRef is a broker the resources are applied to: its name and
// remoting port on 127.0.0.1.
type brokerRef struct {
	name string
	port int
}

// NewRocketMQResources returns the RocketMQ resource of cfg: broker-a at
// BrokerPort.
func NewRocketMQResources(cfg Config, log *Logger) *RocketMQResources {
	return &RocketMQResources{cfg: cfg, log: log, brokers: []brokerRef{{BrokerName, cfg.BrokerPort}}, RegistrationTimeout: 90 * time.Second}
}

// newClusterResources returns the RocketMQ resource of the cluster mode:
// every broker registered with the name server, then the topology applied
// to and checked on every master by one `seckill topology apply` and one
// `check` without --broker; each broker must have its summary line.
func newClusterResources(cfg Config, log *Logger, brokers []*Broker) *RocketMQResources {
	r := &RocketMQResources{cfg: cfg, log: log, allMasters: true, RegistrationTimeout: 90 * time.Second}
	for _, b := range brokers {
		r.brokers = append(r.brokers, brokerRef{b.Name(), b.port})
	}
	return r
}

// Name implements Resource.
func (r *RocketMQResources) Name() string { return "resources" }

// WaitRegistered waits until the name server lists every broker (the
// stack's: broker-a at 127.0.0.1:BrokerPort). After a (re)start a broker
// often registers only with its periodic task, ~10 s later.
func (r *RocketMQResources) WaitRegistered(ctx context.Context) error {
	for _, b := range r.brokers {
		if err := r.waitRegistered(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

func (r *RocketMQResources) waitRegistered(ctx context.Context, b brokerRef) error {
	t0 := time.Now()
	var last error
	attempt := 0
	ok := poll(ctx, r.RegistrationTimeout, 250*time.Millisecond, func() bool {
		registered, err := brokerRegistered(ctx, r.cfg.NamesrvPort, b.name, b.port)
		last = err
		if registered {
			return true
		}
		attempt++
		if attempt%20 == 1 {
			r.log.Infof("rocketmq: broker %s not registered with the name server yet; waiting", b.name)
		}
		return false
	})
	if !ok {
		if ctx.Err() != nil {
			return fmt.Errorf("rocketmq: wait for the broker's registration: %w", ctx.Err())
		}
		return fmt.Errorf("rocketmq: the broker %s did not register with the name server within %s (last error: %v); see its broker.log",
			b.name, r.RegistrationTimeout, last)
	}
	r.log.Infof("rocketmq: the name server lists %s at 127.0.0.1:%d (%s)", b.name, b.port, since(t0))
	return nil
}

// Prepare implements Preparer: it builds the service binary when stale,
// while the JVMs start.
func (r *RocketMQResources) Prepare(ctx context.Context) error {
	return BuildSeckill(ctx, r.cfg, r.log)
}

// Ensure implements Resource: registration, then `seckill topology apply`
// and `check` (once per broker, or once for every master in the cluster
// mode); their output is kept in <state>/rocketmq/topology.out.
func (r *RocketMQResources) Ensure(ctx context.Context, _ []string) error {
	for _, v := range r.cfg.Deprecated {
		r.log.Warnf("%s is no longer read; use SECKILL_TOPOLOGY_ARGS (docs/local-stack.md)", v)
	}
	if err := r.WaitRegistered(ctx); err != nil {
		return err
	}
	if err := BuildSeckill(ctx, r.cfg, r.log); err != nil {
		return err
	}
	if err := os.MkdirAll(r.cfg.RMQHome(), 0o755); err != nil {
		return fmt.Errorf("rocketmq: %w", err)
	}
	outPath := filepath.Join(r.cfg.RMQHome(), "topology.out")
	var all []byte
	for _, b := range r.targets() {
		t0 := time.Now()
		out, err := r.topology(ctx, b, "apply")
		all = append(all, out...)
		_ = os.WriteFile(outPath, all, 0o644)
		if err != nil {
			r.log.Raw(indent(out))
			return fmt.Errorf("seckill topology apply on %s failed: %w; see its broker.log", r.targetName(b), err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "applied: ") {
				if b != nil {
					line = b.name + ": " + line
				}
				r.log.Infof("rocketmq: %s", line)
			}
		}
		out, err = r.topology(ctx, b, "check")
		all = append(all, out...)
		_ = os.WriteFile(outPath, all, 0o644)
		if err == nil {
			err = r.missingBrokers(b, out)
		}
		if err != nil {
			r.log.Raw(indent(out))
			return fmt.Errorf("seckill topology check on %s failed after apply: %w", r.targetName(b), err)
		}
		for _, line := range summaries(out) {
			r.log.Infof("rocketmq: topology: %s (%s)", line, since(t0))
		}
	}
	return nil
}

// targets lists the brokers to run each command for; a nil broker is one
// run without --broker (every master).
func (r *RocketMQResources) targets() []*brokerRef {
	if r.allMasters {
		return []*brokerRef{nil}
	}
	out := make([]*brokerRef, len(r.brokers))
	for i := range r.brokers {
		out[i] = &r.brokers[i]
	}
	return out
}

// targetName names a target in messages.
func (r *RocketMQResources) targetName(b *brokerRef) string {
	if b == nil {
		return "every master"
	}
	return b.name
}

// missingBrokers is an error when a run for every master printed no
// summary line of one of the stack's brokers (the name server no longer
// lists it: a dead broker).
func (r *RocketMQResources) missingBrokers(b *brokerRef, out []byte) error {
	if b != nil {
		return nil
	}
	var missing []string
	for _, want := range r.brokers {
		if !slices.ContainsFunc(summaries(out), func(s string) bool {
			return strings.Contains(s, fmt.Sprintf("broker %s 127.0.0.1:%d", want.name, want.port))
		}) {
			missing = append(missing, want.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the name server does not list %s as a master", strings.Join(missing, ", "))
	}
	return nil
}

// summaries returns the summary lines of a topology command's output
// without their "topology: " prefix, one per broker that matches.
func summaries(out []byte) []string {
	var lines []string
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "topology: "); ok {
			lines = append(lines, rest)
		}
	}
	return lines
}

// Check implements Resource with `seckill topology check --timeout 10s`
// on each broker (once for every master in the cluster mode).
func (r *RocketMQResources) Check(ctx context.Context) (bool, string) {
	if err := BuildSeckill(ctx, r.cfg, r.log); err != nil {
		return false, err.Error()
	}
	var details []string
	for _, b := range r.targets() {
		ok, detail := r.check(ctx, b)
		if !ok {
			if b != nil && len(r.brokers) > 1 {
				detail = b.name + ": " + detail
			}
			return false, detail
		}
		details = append(details, detail)
	}
	return true, strings.Join(details, "; ")
}

func (r *RocketMQResources) check(ctx context.Context, b *brokerRef) (bool, string) {
	out, err := r.topology(ctx, b, "check", "--timeout", "10s")
	if err == nil {
		if err := r.missingBrokers(b, out); err != nil {
			return false, err.Error()
		}
		return true, strings.Join(summaries(out), "; ")
	}
	if bytes.Contains(out, []byte("difference(s) from the topology")) {
		n := 0
		for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			if !strings.HasPrefix(line, "seckill: ") && !strings.HasPrefix(line, "topology: ") {
				n++
			}
		}
		return false, fmt.Sprintf("%d difference(s) from the topology (up re-applies them; seckill topology check lists them)", n)
	}
	return false, lastLine(out)
}

// topology runs `seckill topology SUB` against broker b (every master the
// name server lists when b is nil: no --broker, and no
// SECKILL_ROCKETMQ_BROKER in its environment, which would select one
// broker) with Config.TopologyArgs and extra, and returns its combined
// output.
func (r *RocketMQResources) topology(ctx context.Context, b *brokerRef, sub string, extra ...string) ([]byte, error) {
	args := []string{"topology", sub}
	if b != nil {
		args = append(args, "--broker", fmt.Sprintf("127.0.0.1:%d", b.port))
	}
	args = append(args, "--namesrv", fmt.Sprintf("127.0.0.1:%d", r.cfg.NamesrvPort), "--prefix", r.cfg.TopicPrefix)
	args = append(append(args, r.cfg.TopologyArgs...), extra...)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.cfg.SeckillBin(), args...)
	// These are RocketMQ's resources whatever broker the caller's service
	// uses (SECKILL_BROKER=rabbitmq would turn the command to RabbitMQ).
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return b == nil && strings.HasPrefix(kv, "SECKILL_ROCKETMQ_BROKER=")
	})
	cmd.Env = append(env, "SECKILL_BROKER=rocketmq")
	return cmd.CombinedOutput()
}

func indent(out []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		b.WriteString("    " + line + "\n")
	}
	return b.String()
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return lines[len(lines)-1]
}

// SeckillStale reports whether the service binary at cfg.SeckillBin() must
// be rebuilt: it is missing, was built from another checkout (recorded in
// seckill.src beside it) or is older than a Go source file (tests aside),
// go.mod or go.sum of cfg.RepoDir.
func SeckillStale(cfg Config) bool {
	bin := cfg.SeckillBin()
	st, err := os.Stat(bin)
	if err != nil || st.Mode()&0o111 == 0 {
		return true
	}
	src, _ := os.ReadFile(bin + ".src")
	if strings.TrimSpace(string(src)) != cfg.RepoDir {
		return true
	}
	built := st.ModTime()
	errNewer := errors.New("newer")
	err = filepath.WalkDir(cfg.RepoDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil //nolint:nilerr // an unreadable entry cannot make the binary stale
		}
		name := d.Name()
		if d.IsDir() {
			if name == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if !(strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") || name == "go.mod" || name == "go.sum") {
			return nil
		}
		if info, err := d.Info(); err == nil && info.ModTime().After(built) {
			return errNewer
		}
		return nil
	})
	return errors.Is(err, errNewer)
}

// BuildSeckill builds ./bootstrap/cmd/seckill of cfg.RepoDir into
// cfg.SeckillBin() when SeckillStale says so (without a RepoDir the binary
// must exist). The build writes a temporary file and renames it, so
// concurrent callers never run a half-written binary.
func BuildSeckill(ctx context.Context, cfg Config, log *Logger) error {
	if cfg.RepoDir == "" {
		if _, err := os.Stat(cfg.SeckillBin()); err != nil {
			return fmt.Errorf("no repository to build %s from: %w", cfg.SeckillBin(), err)
		}
		return nil
	}
	if !SeckillStale(cfg) {
		return nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return errors.New("go is not on PATH: the stack applies its topics and groups with the service binary (the README requires Go)")
	}
	t0 := time.Now()
	bin := cfg.SeckillBin()
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return fmt.Errorf("build seckill: %w", err)
	}
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", tmp, "./bootstrap/cmd/seckill")
	cmd.Dir = cfg.RepoDir
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		log.Raw(string(out))
		return fmt.Errorf("go build ./bootstrap/cmd/seckill failed: %w", err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return fmt.Errorf("build seckill: %w", err)
	}
	if err := os.WriteFile(bin+".src", []byte(cfg.RepoDir+"\n"), 0o644); err != nil {
		return fmt.Errorf("build seckill: %w", err)
	}
	log.Infof("built %s from %s (%s)", bin, cfg.RepoDir, since(t0))
	return nil
}
