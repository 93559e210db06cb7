package devstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/brokers"
)

// mavenDependencyPlugin is the plugin that copies an artifact's runtime
// class path (the one deploy/local/stack.sh uses for RocketMQ).
const mavenDependencyPlugin = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"

// Plugged is a broker's process that its plug describes
// (brokerplug.DevProcess): the stack resolves its Maven artifacts into the
// download cache, writes its files, runs its set-up once and supervises
// the JVM. It is Optional: Up starts it only when its broker is selected
// (Config.BrokerSelected).
type Plugged struct {
	Process
	cfg    Config
	broker string
	spec   brokerplug.DevProcess
}

// NewPlugged returns the component of process spec of the broker plug
// named broker, in <state>/<spec.Name>.
func NewPlugged(cfg Config, log *Logger, broker string, spec brokerplug.DevProcess) *Plugged {
	dir := filepath.Join(cfg.StateDir, spec.Name)
	stopTimeout := spec.StopTimeout
	if stopTimeout <= 0 {
		stopTimeout = 60 * time.Second
	}
	return &Plugged{cfg: cfg, broker: broker, spec: spec, Process: Process{
		ComponentName: spec.Name,
		File:          filepath.Join(cfg.RunDir(), spec.Name+".pid"),
		Owner:         Owner{Dir: dir, Needle: spec.Main},
		AdoptPort:     spec.Ports[0],
		StopSignal:    syscall.SIGTERM,
		StopTimeout:   stopTimeout,
		Log:           log,
	}}
}

// pluggedComponents returns the processes of every plug of the registry
// that describes its own (RocketMQ and RabbitMQ have components of their
// own in this package).
func pluggedComponents(cfg Config, log *Logger) []Component {
	var out []Component
	for _, p := range brokers.All() {
		for _, spec := range p.DevStack() {
			out = append(out, NewPlugged(cfg, log, p.Name(), spec))
		}
	}
	return out
}

// Group implements Component: the broker's name, so `down kafka` stops
// all of its processes.
func (p *Plugged) Group() string { return p.broker }

// DependsOn implements Component: a broker needs nothing else.
func (p *Plugged) DependsOn() []string { return nil }

// Grace implements Component: a JVM that is ours but not ready yet gets
// its start timeout.
func (p *Plugged) Grace() time.Duration { return p.spec.StartTimeout }

// Selected implements Optional.
func (p *Plugged) Selected() bool { return p.cfg.BrokerSelected(p.broker) }

// Exports implements exporter: the plug's variables.
func (p *Plugged) Exports() []Export {
	var out []Export
	for _, kv := range p.spec.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out = append(out, Export{k, v})
		}
	}
	return out
}

// expand replaces the directory placeholder in s.
func (p *Plugged) expand(s string) string {
	return strings.ReplaceAll(s, brokerplug.DirPlaceholder, p.DataDir())
}

func (p *Plugged) expandAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = p.expand(s)
	}
	return out
}

// probe: every port accepts connections.
func (p *Plugged) probe(ctx context.Context) error {
	for _, port := range p.spec.Ports {
		if !portOpen(ctx, port) {
			return fmt.Errorf("%s: port %d closed", p.spec.Name, port)
		}
	}
	return nil
}

// Healthy implements Component: ours and every port open.
func (p *Plugged) Healthy(ctx context.Context) error {
	if p.PID() == 0 {
		return fmt.Errorf("%s: not running (no live process of ours in %s)", p.spec.Name, p.File)
	}
	return p.probe(ctx)
}

// Start implements Component: resolve the class path, write the files,
// run the set-up when it has not run, start the JVM and wait until its
// ports are open.
func (p *Plugged) Start(ctx context.Context) error {
	name, dir := p.spec.Name, p.DataDir()
	lib, err := p.classPath(ctx)
	if err != nil {
		return err
	}
	java, err := JavaBinary(p.cfg)
	if err != nil {
		return err
	}
	if err := p.writeFiles(); err != nil {
		return err
	}
	if err := p.setUp(ctx, java, lib); err != nil {
		return err
	}
	if err := ensurePortsFree(ctx, name, p.spec.Ports...); err != nil {
		return err
	}
	out := filepath.Join(p.cfg.LogDir(), name+".out")
	rotate(out)
	argv := append([]string{java}, p.expandAll(p.spec.JVMOptions)...)
	argv = append(append(argv, "-cp", filepath.Join(lib, "*"), p.spec.Main), p.expandAll(p.spec.Args)...)
	p.Log.Infof("%s: starting on 127.0.0.1 ports %s (output: %s, dir: %s)", name, p.ports(), out, dir)
	t0 := time.Now()
	pid, err := spawn(p.File, out, dir, argv, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := waitReady(ctx, p.Log, name, pid, p.spec.StartTimeout, out, out+" and "+dir, func() error { return p.probe(ctx) }); err != nil {
		return err
	}
	p.Log.Infof("%s: ready, pid %d (%s)", name, pid, since(t0))
	return nil
}

// writeFiles creates the directory and writes the plug's files into it.
func (p *Plugged) writeFiles() error {
	if err := os.MkdirAll(p.DataDir(), 0o755); err != nil {
		return fmt.Errorf("%s: %w", p.spec.Name, err)
	}
	for _, f := range p.spec.Files {
		if err := os.WriteFile(filepath.Join(p.DataDir(), f.Name), []byte(p.expand(f.Content)), 0o644); err != nil {
			return fmt.Errorf("%s: write %s: %w", p.spec.Name, f.Name, err)
		}
	}
	return nil
}

// setUp runs the one-time set-up while what it creates is missing.
func (p *Plugged) setUp(ctx context.Context, java, lib string) error {
	s := p.spec.Setup
	if s == nil {
		return nil
	}
	creates := p.expand(s.Creates)
	if !filepath.IsAbs(creates) {
		creates = filepath.Join(p.DataDir(), creates)
	}
	if _, err := os.Stat(creates); err == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	argv := append([]string{"-Xmx256m", "-cp", filepath.Join(lib, "*"), s.Main}, p.expandAll(s.Args)...)
	cmd := exec.CommandContext(ctx, java, argv...)
	cmd.Dir = p.DataDir()
	outFile := filepath.Join(p.cfg.LogDir(), p.spec.Name+".setup.out")
	b, err := cmd.CombinedOutput()
	_ = os.WriteFile(outFile, b, 0o644)
	if err != nil {
		return fmt.Errorf("%s: set-up %s: %w (output: %s)", p.spec.Name, s.Main, err, outFile)
	}
	if _, err := os.Stat(creates); err != nil {
		return fmt.Errorf("%s: set-up %s did not create %s (output: %s)", p.spec.Name, s.Main, creates, outFile)
	}
	p.Log.Infof("%s: set up (%s)", p.spec.Name, s.Main)
	return nil
}

// classPath returns the directory of the process's jars in the download
// cache, <cache>/<name>/<hash of the artifacts>/lib, resolving them with
// mvn the first time.
func (p *Plugged) classPath(ctx context.Context) (string, error) {
	sum := sha256.Sum256([]byte(strings.Join(p.spec.Maven, "\n")))
	base := filepath.Join(p.cfg.CacheDir, p.broker, hex.EncodeToString(sum[:6]))
	lib := filepath.Join(base, "lib")
	if _, err := os.Stat(filepath.Join(base, ".complete")); err == nil {
		return lib, nil
	}
	// The nodes of a cluster share one class path and start at once: one
	// resolves it, the others wait for the lock and find it complete.
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", fmt.Errorf("%s: %w", p.spec.Name, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(base, ".lock"))
	if err != nil {
		return "", fmt.Errorf("%s: %w", p.spec.Name, err)
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(base, ".complete")); err == nil {
		return lib, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", fmt.Errorf("%s: mvn not found; deploy/local/stack.sh up installs it (Debian package: maven): %w", p.spec.Name, err)
	}
	build := filepath.Join(base, "build")
	if err := os.MkdirAll(build, 0o755); err != nil {
		return "", fmt.Errorf("%s: %w", p.spec.Name, err)
	}
	pom, err := resolutionPOM(p.spec.Name, p.spec.Maven)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p.spec.Name, err)
	}
	if err := os.WriteFile(filepath.Join(build, "pom.xml"), []byte(pom), 0o644); err != nil {
		return "", fmt.Errorf("%s: %w", p.spec.Name, err)
	}
	tmp := filepath.Join(base, "lib.tmp")
	_ = os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	args := append([]string{"-B", "-q", "-f", filepath.Join(build, "pom.xml")}, strings.Fields(os.Getenv("SECKILL_MVN_ARGS"))...)
	args = append(args, mavenDependencyPlugin+":copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+tmp)
	p.Log.Infof("%s: resolving %s from Maven Central (mvn, log: %s)", p.spec.Name, strings.Join(p.spec.Maven, " "), filepath.Join(build, "mvn.log"))
	b, err := exec.CommandContext(ctx, mvn, args...).CombinedOutput()
	_ = os.WriteFile(filepath.Join(build, "mvn.log"), b, 0o644)
	if err != nil {
		return "", fmt.Errorf("%s: mvn copy-dependencies: %w (log: %s)", p.spec.Name, err, filepath.Join(build, "mvn.log"))
	}
	if err := os.RemoveAll(lib); err != nil {
		return "", fmt.Errorf("%s: %w", p.spec.Name, err)
	}
	if err := os.Rename(tmp, lib); err != nil {
		return "", fmt.Errorf("%s: %w", p.spec.Name, err)
	}
	if err := os.WriteFile(filepath.Join(base, ".complete"), []byte(strings.Join(p.spec.Maven, "\n")+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("%s: %w", p.spec.Name, err)
	}
	return lib, nil
}

// lockFile takes an exclusive lock on path (created when missing),
// waiting while ctx lasts, and returns its release.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return func() { _ = f.Close() }, nil
}

// resolutionPOM is a POM that only names artifacts as dependencies, for
// copy-dependencies; nothing is built.
func resolutionPOM(name string, artifacts []string) (string, error) {
	var deps strings.Builder
	for _, a := range artifacts {
		parts := strings.Split(a, ":")
		if len(parts) != 3 || slices.Contains(parts, "") {
			return "", fmt.Errorf("maven artifact %q is not groupId:artifactId:version", a)
		}
		fmt.Fprintf(&deps, "    <dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version></dependency>\n",
			parts[0], parts[1], parts[2])
	}
	return `<?xml version="1.0" encoding="UTF-8"?>
<!-- Resolution-only POM written by the local stack: copy-dependencies copies the runtime class path. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.seckill</groupId>
  <artifactId>` + name + `-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
` + deps.String() + `  </dependencies>
</project>
`, nil
}

// ports is the PORTS column.
func (p *Plugged) ports() string {
	s := make([]string, len(p.spec.Ports))
	for i, port := range p.spec.Ports {
		s[i] = strconv.Itoa(port)
	}
	return strings.Join(s, ",")
}

// Status implements Component.
func (p *Plugged) Status(context.Context) StatusInfo {
	info := StatusInfo{Ports: p.ports(), Detail: p.broker + " (" + strings.Join(p.spec.Maven, " ") + ")"}
	if pid := p.PID(); pid != 0 {
		info.RSSKB = rssKB(pid)
	} else if !p.Selected() {
		info.Detail = fmt.Sprintf("not started: up starts it with SECKILL_STACK_BROKERS=%s (or all) or SECKILL_BROKER=%s", p.broker, p.broker)
	}
	return info
}

// Purge implements Component: the process's directory (its data).
func (p *Plugged) Purge() error { return removeAll(p.DataDir()) }
