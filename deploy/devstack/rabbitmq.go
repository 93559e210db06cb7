package devstack

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ in the dev stack (docs/local-stack.md, "RabbitMQ"): Debian's
// rabbitmq-server run as the current user with all its state in
// <state>/rabbitmq, AMQP and the Erlang distribution on 127.0.0.1 only, and
// an epmd of its own on a private port. It is optional: Up starts it only
// when it is selected (SECKILL_STACK_RABBITMQ=1 or SECKILL_BROKER=rabbitmq),
// but a running one is adopted, checked, exported and stopped like every
// other component.

const (
	// RabbitMQGroup is the `down` name of the RabbitMQ node and its epmd.
	RabbitMQGroup = "rabbitmq"
	// rabbitMQServer is the real start script (Debian's
	// /usr/sbin/rabbitmq-server would switch to the rabbitmq user and
	// /var/lib/rabbitmq).
	rabbitMQServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"
	// rabbitMQNode is the Erlang node name; each stack has its own epmd,
	// so stacks do not collide on it.
	rabbitMQNode = "seckill@localhost"
	// RabbitMQUser and RabbitMQPassword are the default user the node
	// creates on its first boot (all permissions on vhost /).
	RabbitMQUser, RabbitMQPassword = "seckill", "seckill"
)

// RabbitMQConfig is the RabbitMQ part of Config.
type RabbitMQConfig struct {
	// Selected makes Up start RabbitMQ (SECKILL_STACK_RABBITMQ=1 or
	// SECKILL_BROKER=rabbitmq); unselected, Up only adopts a running one.
	Selected bool
	// Port (AMQP), DistPort (Erlang distribution) and EpmdPort (the
	// node's own epmd) on 127.0.0.1.
	Port, DistPort, EpmdPort int
}

// rabbitMQFromEnv fills c.RabbitMQ from getenv: SECKILL_RABBITMQ_PORT
// (56720), SECKILL_RABBITMQ_DIST_PORT (56725), SECKILL_RABBITMQ_EPMD_PORT
// (56369), and the selection.
func rabbitMQFromEnv(getenv func(string) string, c *Config) error {
	r := RabbitMQConfig{
		Selected: getenv("SECKILL_STACK_RABBITMQ") == "1" || c.BrokerSelected("rabbitmq"),
		Port:     56720, DistPort: 56725, EpmdPort: 56369,
	}
	for _, p := range []struct {
		dst  *int
		name string
	}{{&r.Port, "SECKILL_RABBITMQ_PORT"}, {&r.DistPort, "SECKILL_RABBITMQ_DIST_PORT"}, {&r.EpmdPort, "SECKILL_RABBITMQ_EPMD_PORT"}} {
		if v := getenv(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || n > 65535 {
				return fmt.Errorf("%s=%q is not a port number", p.name, v)
			}
			*p.dst = n
		}
	}
	c.RabbitMQ = r
	return nil
}

// RabbitMQDir is <state>/rabbitmq: the node's and epmd's working
// directory, config, mnesia/, log/ and home/ (the Erlang cookie).
func (c Config) RabbitMQDir() string { return filepath.Join(c.StateDir, "rabbitmq") }

// RabbitMQURL is the AMQP URL exported as SECKILL_RABBITMQ_URL.
func (c Config) RabbitMQURL() string {
	return fmt.Sprintf("amqp://%s:%s@127.0.0.1:%d/", RabbitMQUser, RabbitMQPassword, c.RabbitMQ.Port)
}

// Optional is a component Up starts only when Selected. Unselected, Up
// adopts it when it runs and otherwise leaves it alone, and a stopped one
// does not make the stack unhealthy.
type Optional interface {
	Selected() bool
}

// skipped reports whether c is an optional component that is neither
// selected nor running.
func skipped(c Component) bool {
	o, ok := c.(Optional)
	return ok && !o.Selected() && c.PID() == 0
}

// exporter is a component with export lines of its own, printed (after
// Config.Exports) while it runs.
type exporter interface {
	Exports() []Export
}

// componentExports are the export lines of the running components.
func componentExports(cs []Component) []Export {
	var out []Export
	for _, c := range cs {
		if e, ok := c.(exporter); ok && c.PID() != 0 {
			out = append(out, e.Exports()...)
		}
	}
	return out
}

// NewRabbitMQ returns the RabbitMQ components: the node's epmd
// ("rabbitmq-epmd") and the node ("rabbitmq", depending on it), both in
// group rabbitmq.
func NewRabbitMQ(cfg Config, log *Logger) (*Epmd, *RabbitMQ) {
	dir := cfg.RabbitMQDir()
	epmd := &Epmd{cfg: cfg, Process: Process{
		ComponentName: "rabbitmq-epmd",
		File:          filepath.Join(cfg.RunDir(), "rabbitmq-epmd.pid"),
		Owner:         Owner{Dir: dir, Needle: "epmd -port " + strconv.Itoa(cfg.RabbitMQ.EpmdPort)},
		AdoptPort:     cfg.RabbitMQ.EpmdPort,
		StopSignal:    syscall.SIGTERM,
		StopTimeout:   10 * time.Second,
		Log:           log,
	}}
	node := &RabbitMQ{cfg: cfg, Process: Process{
		ComponentName: "rabbitmq",
		File:          filepath.Join(cfg.RunDir(), "rabbitmq.pid"),
		// The beam.smp of the node; the launcher shell runs in the same directory but is not it.
		Owner:       Owner{Dir: dir, Needle: "beam.smp"},
		AdoptPort:   cfg.RabbitMQ.Port,
		StopSignal:  syscall.SIGTERM,
		StopTimeout: 60 * time.Second,
		Log:         log,
	}}
	return epmd, node
}

// Epmd is the Erlang port mapper of the stack's RabbitMQ node: `epmd -port
// <EpmdPort> -address 127.0.0.1` in the foreground, started by us before
// the node (which then uses it instead of starting a daemon epmd that
// would outlive it and not be ours), stopped by its pid after the node.
type Epmd struct {
	Process
	cfg Config
}

// Group implements Component.
func (e *Epmd) Group() string { return RabbitMQGroup }

// DependsOn implements Component.
func (e *Epmd) DependsOn() []string { return nil }

// Grace implements Component.
func (e *Epmd) Grace() time.Duration { return 0 }

// Selected implements Optional.
func (e *Epmd) Selected() bool { return e.cfg.RabbitMQ.Selected }

// Healthy implements Component: ours and answering a NAMES request.
func (e *Epmd) Healthy(ctx context.Context) error {
	if e.PID() == 0 {
		return fmt.Errorf("rabbitmq-epmd: not running (no live process of ours in %s)", e.File)
	}
	return epmdNames(ctx, e.cfg.RabbitMQ.EpmdPort)
}

// epmdNames sends epmd's NAMES_REQ to 127.0.0.1:port and checks that the
// answer starts with that port.
func epmdNames(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("epmd: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte{0, 1, 110}); err != nil { // length 1, NAMES_REQ
		return fmt.Errorf("epmd: NAMES: %w", err)
	}
	var head [4]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return fmt.Errorf("epmd: NAMES: %w", err)
	}
	if got := binary.BigEndian.Uint32(head[:]); got != uint32(port) {
		return fmt.Errorf("epmd: NAMES answered port %d, want %d", got, port)
	}
	return nil
}

// Start implements Component.
func (e *Epmd) Start(ctx context.Context) error {
	bin := "/usr/bin/epmd"
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("rabbitmq-epmd: %s: %w (deploy/local/stack.sh up installs rabbitmq-server when RabbitMQ is selected)", bin, err)
	}
	dir, port := e.cfg.RabbitMQDir(), e.cfg.RabbitMQ.EpmdPort
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("rabbitmq-epmd: %w", err)
	}
	if err := ensurePortsFree(ctx, e.Name(), port); err != nil {
		return err
	}
	out := filepath.Join(e.cfg.LogDir(), "rabbitmq-epmd.out")
	e.Log.Infof("rabbitmq-epmd: starting on 127.0.0.1:%d", port)
	pid, err := spawn(e.File, out, dir, []string{bin, "-port", strconv.Itoa(port), "-address", "127.0.0.1"}, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq-epmd: %w", err)
	}
	if err := waitReady(ctx, e.Log, e.Name(), pid, 10*time.Second, out, out, func() error { return epmdNames(ctx, port) }); err != nil {
		return err
	}
	e.Log.Infof("rabbitmq-epmd: ready, pid %d", pid)
	return nil
}

// Status implements Component.
func (e *Epmd) Status(context.Context) StatusInfo {
	info := StatusInfo{Ports: strconv.Itoa(e.cfg.RabbitMQ.EpmdPort), Detail: "epmd of the rabbitmq node, NAMES"}
	if pid := e.PID(); pid != 0 {
		info.RSSKB = rssKB(pid)
	} else if !e.Selected() {
		info.Detail = rabbitMQNotSelected
	}
	return info
}

// Purge implements Component: the RabbitMQ directory (shared with the node).
func (e *Epmd) Purge() error { return removeAll(e.cfg.RabbitMQDir()) }

const rabbitMQNotSelected = "not started: up starts it with SECKILL_STACK_BROKERS=rabbitmq (or all) or SECKILL_BROKER=rabbitmq"

// RabbitMQ is the stack's RabbitMQ node (see the top of this file). Its pid
// file holds the pid of the node's beam.smp, which the node also writes to
// <dir>/rabbit.pid; SIGTERM shuts it down cleanly (~1.5 s).
type RabbitMQ struct {
	Process
	cfg Config
}

// Group implements Component.
func (r *RabbitMQ) Group() string { return RabbitMQGroup }

// DependsOn implements Component: the node registers with its epmd.
func (r *RabbitMQ) DependsOn() []string { return []string{"rabbitmq-epmd"} }

// Grace implements Component: a node starts in ~6 s.
func (r *RabbitMQ) Grace() time.Duration { return 30 * time.Second }

// Selected implements Optional.
func (r *RabbitMQ) Selected() bool { return r.cfg.RabbitMQ.Selected }

// Exports implements exporter: SECKILL_RABBITMQ_URL.
func (r *RabbitMQ) Exports() []Export {
	return []Export{{"SECKILL_RABBITMQ_URL", r.cfg.RabbitMQURL()}}
}

// Healthy implements Component: ours and accepting an AMQP connection of
// the default user.
func (r *RabbitMQ) Healthy(ctx context.Context) error {
	if r.PID() == 0 {
		return fmt.Errorf("rabbitmq: not running (no live process of ours in %s)", r.File)
	}
	return amqpDial(ctx, r.cfg.RabbitMQURL())
}

// amqpDial opens and closes an AMQP connection to url within 5 s.
func amqpDial(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := amqp.DialConfig(url, amqp.Config{
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				if dl, ok := ctx.Deadline(); ok {
					_ = c.SetDeadline(dl) // the handshake; amqp091 clears it afterwards
				}
			}
			return c, err
		},
	})
	if err != nil {
		return fmt.Errorf("rabbitmq: AMQP: %w", err)
	}
	_ = conn.Close()
	return nil
}

// env is the environment of the node and of rabbitmqctl.
func (r *RabbitMQ) env() []string {
	dir, rc := r.cfg.RabbitMQDir(), r.cfg.RabbitMQ
	return []string{
		"RABBITMQ_NODENAME=" + rabbitMQNode,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(rc.Port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(rc.DistPort),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE=" + filepath.Join(dir, "rabbit.pid"),
		// Else the distribution listens on 0.0.0.0.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"ERL_EPMD_PORT=" + strconv.Itoa(rc.EpmdPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		// The Erlang cookie is created here.
		"HOME=" + filepath.Join(dir, "home"),
	}
}

// Start implements Component.
func (r *RabbitMQ) Start(ctx context.Context) error {
	if _, err := os.Stat(rabbitMQServer); err != nil {
		return fmt.Errorf("rabbitmq: %w (deploy/local/stack.sh up installs rabbitmq-server when RabbitMQ is selected)", err)
	}
	dir, rc := r.cfg.RabbitMQDir(), r.cfg.RabbitMQ
	for _, d := range []string{"mnesia", "log", "home"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("rabbitmq: %w", err)
		}
	}
	files := map[string]string{
		"rabbitmq.conf": fmt.Sprintf(`# Written by seckill-stack (deploy/devstack/rabbitmq.go) on every start.
listeners.tcp.1 = 127.0.0.1:%d
default_user = %s
default_pass = %s
default_vhost = /
default_permissions.configure = .*
default_permissions.read = .*
default_permissions.write = .*
log.console = false
log.file.level = info
`, rc.Port, RabbitMQUser, RabbitMQPassword),
		"enabled_plugins":   "[].\n",
		"rabbitmq-env.conf": "# Written by seckill-stack: the settings are in the environment (deploy/devstack/rabbitmq.go).\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return fmt.Errorf("rabbitmq: write %s: %w", name, err)
		}
	}
	if err := ensurePortsFree(ctx, r.Name(), rc.Port, rc.DistPort); err != nil {
		return err
	}
	nodePIDFile := filepath.Join(dir, "rabbit.pid")
	_ = os.Remove(nodePIDFile)
	out := filepath.Join(r.cfg.LogDir(), "rabbitmq.out")
	logs := out + ", " + filepath.Join(dir, "log")
	r.Log.Infof("rabbitmq: starting on 127.0.0.1:%d (dist %d, epmd %d; logs: %s)", rc.Port, rc.DistPort, rc.EpmdPort, logs)
	t0 := time.Now()
	// The launcher shell runs beam.smp as its child and waits for it; the pid file is switched to beam's
	// pid as soon as the node has written it.
	launcher, err := spawn(r.File, out, dir, []string{rabbitMQServer}, r.env())
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	beam := 0
	err = waitReady(ctx, r.Log, r.Name(), launcher, 90*time.Second, out, logs, func() error {
		if beam == 0 {
			if pid := readPID(nodePIDFile); pid != 0 && r.Owner.Owns(pid) {
				if err := writePID(r.File, pid); err != nil {
					return err
				}
				beam = pid
			} else {
				return fmt.Errorf("rabbitmq: no beam.smp pid in %s yet", nodePIDFile)
			}
		}
		return amqpDial(ctx, r.cfg.RabbitMQURL())
	})
	if err != nil {
		if beam != 0 {
			_ = r.StopPID(context.WithoutCancel(ctx), beam) // ours: we just started it
		}
		return err
	}
	r.Log.Infof("rabbitmq: ready, pid %d (%s)", beam, since(t0))
	return nil
}

// Status implements Component.
func (r *RabbitMQ) Status(context.Context) StatusInfo {
	rc := r.cfg.RabbitMQ
	info := StatusInfo{
		Ports:  fmt.Sprintf("%d,%d", rc.Port, rc.DistPort),
		Detail: "dir " + r.cfg.RabbitMQDir() + ", node " + rabbitMQNode + ", AMQP " + strings.TrimSuffix(r.cfg.RabbitMQURL(), "/"),
	}
	if pid := r.PID(); pid != 0 {
		info.RSSKB = rssKB(pid)
	} else if !r.Selected() {
		info.Detail = rabbitMQNotSelected
	}
	return info
}

// Purge implements Component: the RabbitMQ directory (data, logs, cookie).
func (r *RabbitMQ) Purge() error { return removeAll(r.cfg.RabbitMQDir()) }
