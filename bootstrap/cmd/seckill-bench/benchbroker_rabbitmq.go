package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// rabbitMQNamespace is a benchNamespace on RabbitMQ (SECKILL_RABBITMQ_URL):
// the service's whole topology (exchanges, group queues and their
// dead-letter queues, delay tiers) declared under the prefix, as the
// service declares it at start, so messages published before a consumer
// runs are queued. Close deletes it with Topology.Delete.
type rabbitMQNamespace struct {
	rc   rabbitmq.Config
	topo rabbitmq.Topology
	log  *slog.Logger
	// ackOneByOne turns the runner's multiple acks off
	// (SECKILL_ACK_BATCH=false), as in the service.
	ackOneByOne bool
}

func newRabbitMQNamespace(ctx context.Context, cfg config.Config, prefix string, log *slog.Logger) (*rabbitMQNamespace, error) {
	s, ok := cfg.Broker.Settings.(rabbitmq.Settings)
	if !ok {
		return nil, fmt.Errorf("SECKILL_BROKER is %s, not %s", cfg.Broker.Name, rabbitmq.PlugName)
	}
	s.Prefix = prefix
	rc := s.ClientConfig(cfg.Broker.Neutral)
	rc.SendTimeout = 0
	topo, err := rabbitmq.NewTopology(rc)
	if err != nil {
		return nil, err
	}
	e := &rabbitMQNamespace{rc: rc, topo: topo, log: log, ackOneByOne: !cfg.Broker.Neutral.AckBatch}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := rabbitmq.Declare(dctx, rc, topo); err != nil {
		e.Close()
		return nil, fmt.Errorf("declare the bench namespace %s: %w", prefix, err)
	}
	return e, nil
}

func (e *rabbitMQNamespace) Broker() string { return rabbitmq.PlugName }
func (e *rabbitMQNamespace) Prefix() string { return e.rc.Prefix }

func (e *rabbitMQNamespace) Configure(cfg *config.Config) {
	s, _ := cfg.Broker.Settings.(rabbitmq.Settings) // cfg chose this broker (newBenchEnv)
	s.Prefix = e.rc.Prefix
	cfg.Broker.Name, cfg.Broker.Settings = rabbitmq.PlugName, s
}

func (e *rabbitMQNamespace) ServiceEnv() []string {
	return []string{"SECKILL_BROKER=" + rabbitmq.PlugName, "SECKILL_RABBITMQ_PREFIX=" + e.rc.Prefix}
}

func (e *rabbitMQNamespace) Publisher(ctx context.Context, sendTimeout time.Duration, log *slog.Logger) (ports.Publisher, func(), error) {
	rc := e.rc
	rc.SendTimeout = sendTimeout
	pub, err := rabbitmq.NewPublisher(rc, log, prometheus.NewRegistry())
	if err != nil {
		return nil, nil, err
	}
	if err := pub.Start(ctx); err != nil {
		_ = pub.Close()
		return nil, nil, fmt.Errorf("start the publisher: %w", err)
	}
	return pub, func() { _ = pub.Close() }, nil
}

func (e *rabbitMQNamespace) Group(g ports.ConsumerGroup) string {
	if spec, ok := e.topo.Group(g); ok {
		return spec.Name
	}
	return e.rc.Prefix + string(g)
}

func (e *rabbitMQNamespace) Consumer(sub ports.Subscription, h ports.BatchHandler, batch, concurrency int, limit ports.ConcurrencyLimit,
	log *slog.Logger) (func(context.Context) error, error) {
	rn, err := rabbitmq.NewRunner(e.rc, e.topo, rabbitmq.RunnerConfig{Group: sub.Group, BatchSize: batch, Concurrency: concurrency,
		AckOneByOne: e.ackOneByOne, Limit: limit},
		h, log, prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	return rn.Run, nil
}

// StackProcesses names the stack's RabbitMQ node only when it is the node
// SECKILL_RABBITMQ_URL points at (it listens on the URL's port): a node
// outside the stack would otherwise be charged the stack's idle node.
func (e *rabbitMQNamespace) StackProcesses() [][2]string {
	pid, err := stackPID("rabbitmq")
	if err != nil {
		return [][2]string{{"rabbitmq", "rabbitmq"}}
	}
	u, err := url.Parse(e.rc.URL)
	if err != nil || !listensOn(pid, u.Port()) {
		return [][2]string{{"rabbitmq (the node of SECKILL_RABBITMQ_URL is not the stack's)", ""}}
	}
	return [][2]string{{"rabbitmq", "rabbitmq"}}
}

// listensOn reports whether process pid holds a TCP socket listening on
// port (decimal), from /proc/net/tcp{,6} and /proc/<pid>/fd.
func listensOn(pid int, port string) bool {
	p, err := strconv.Atoi(port)
	if err != nil {
		return false
	}
	want := fmt.Sprintf(":%04X", p)
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if l, err := os.Readlink(dir + "/" + fd.Name()); err == nil && inodes[l] {
			return true
		}
	}
	return false
}

func (e *rabbitMQNamespace) Close() {
	if err := e.delete(); err != nil {
		e.log.Warn("delete bench namespace", "prefix", e.rc.Prefix, "error", err)
	}
}

func (e *rabbitMQNamespace) delete() error {
	conn, err := amqp.DialConfig(e.rc.URL, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	return e.topo.Delete(ch)
}
