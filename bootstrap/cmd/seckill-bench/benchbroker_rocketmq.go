package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// rocketMQNamespace is a benchNamespace on RocketMQ: the five topics, the
// consumer groups and their %DLQ% topics, created under the prefix through
// the brokers' admin protocol on every master broker the name server
// (SECKILL_ROCKETMQ_NAMESRV, default the local stack's) lists: one on the
// single-node stack, both in its RocketMQ cluster mode.
type rocketMQNamespace struct {
	cfg     config.Config
	prefix  string
	masters []rocketmq.BrokerRef
	admins  []*rocketmq.Admin // one per master, in masters order
	topics  []string
	groups  []string
	log     *slog.Logger
}

func newRocketMQNamespace(ctx context.Context, cfg config.Config, prefix string, log *slog.Logger) (*rocketMQNamespace, error) {
	namesrv := os.Getenv("SECKILL_ROCKETMQ_NAMESRV")
	if namesrv == "" {
		namesrv = "127.0.0.1:9876"
	}
	ns := rocketmq.NewAdmin("", namesrv, 10*time.Second)
	masters, err := ns.Masters(ctx)
	if err != nil {
		return nil, err
	}
	e := &rocketMQNamespace{cfg: cfg, prefix: prefix, masters: masters, log: log}
	for _, m := range masters {
		e.admins = append(e.admins, ns.ForBroker(m))
	}
	if err := e.create(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// create creates the namespace's topics and groups on every master.
func (e *rocketMQNamespace) create(ctx context.Context) error {
	createTopic := func(spec rocketmq.TopicSpec) error {
		e.topics = append(e.topics, spec.Name)
		for i, a := range e.admins {
			if err := a.CreateTopic(ctx, spec); err != nil {
				return fmt.Errorf("create topic %s on %s: %w", spec.Name, e.masters[i], err)
			}
		}
		return nil
	}
	for _, t := range ports.Topics {
		base, typ, err := rocketmq.TopicBaseName(t)
		if err != nil {
			return err
		}
		if err := createTopic(rocketmq.TopicSpec{Name: e.prefix + base, Type: typ, Queues: 8}); err != nil {
			return err
		}
	}
	for _, g := range append(rocketmq.Groups(), rocketmq.GroupDLQReader) {
		spec := rocketmq.GroupSpec{Name: e.prefix + string(g), Orderly: g.Orderly(), RetryMaxTimes: 5}
		e.groups = append(e.groups, spec.Name)
		for i, a := range e.admins {
			if err := a.CreateGroup(ctx, spec); err != nil {
				return fmt.Errorf("create group %s on %s: %w", spec.Name, e.masters[i], err)
			}
		}
	}
	// A whole service runs its dead-letter reader, which cannot start
	// without the %DLQ% topic of every group.
	for _, g := range e.groups {
		if err := createTopic(rocketmq.TopicSpec{Name: rocketmq.DLQTopic(g), Queues: 1}); err != nil {
			return err
		}
	}
	return nil
}

func (e *rocketMQNamespace) Broker() string { return rocketmq.PlugName }
func (e *rocketMQNamespace) Prefix() string { return e.prefix }

func (e *rocketMQNamespace) Configure(cfg *config.Config) {
	s, _ := cfg.Broker.Settings.(rocketmq.Settings) // cfg chose this broker (newBenchEnv)
	s.TopicPrefix = e.prefix
	cfg.Broker.Name, cfg.Broker.Settings = rocketmq.PlugName, s
}

func (e *rocketMQNamespace) ServiceEnv() []string {
	return []string{"SECKILL_BROKER=" + rocketmq.PlugName, "SECKILL_TOPIC_PREFIX=" + e.prefix}
}

// bc is the adapter configuration of the namespace.
func (e *rocketMQNamespace) bc(sendTimeout time.Duration) rocketmq.Config {
	s, _ := e.cfg.Broker.Settings.(rocketmq.Settings) // cfg chose this broker (newBenchEnv)
	s.TopicPrefix = e.prefix
	n := e.cfg.Broker.Neutral
	n.SendTimeout = sendTimeout
	return s.ClientConfig(n)
}

func (e *rocketMQNamespace) Publisher(ctx context.Context, sendTimeout time.Duration, log *slog.Logger) (ports.Publisher, func(), error) {
	pub, err := rocketmq.NewPublisher(e.bc(sendTimeout), log, prometheus.NewRegistry())
	if err != nil {
		return nil, nil, err
	}
	if err := pub.Start(ctx); err != nil {
		_ = pub.Close()
		return nil, nil, fmt.Errorf("start the publisher: %w", err)
	}
	return pub, func() { _ = pub.Close() }, nil
}

func (e *rocketMQNamespace) Group(g ports.ConsumerGroup) string {
	return e.bc(0).Group(rocketmq.Group(g))
}

func (e *rocketMQNamespace) Consumer(sub ports.Subscription, h ports.BatchHandler, batch, concurrency int, limit ports.ConcurrencyLimit,
	log *slog.Logger) (func(context.Context) error, error) {
	bc := e.bc(0)
	topic, err := bc.Topic(sub.Topic)
	if err != nil {
		return nil, err
	}
	rn, err := rocketmq.NewRunner(bc, rocketmq.RunnerConfig{Group: e.Group(sub.Group), Subscriptions: map[string]string{topic: "*"},
		Orderly: sub.Ordered, BatchSize: batch, Concurrency: concurrency, InvisibleDuration: 30 * time.Second, Limit: limit},
		h, log, prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	return rn.Run, nil
}

// StackProcesses names the local stack's RocketMQ processes: the proxy
// (whose process also runs the embedded broker), the broker and the name
// server, by pid file base name under $SECKILL_STACK_DIR/run. When
// SECKILL_ROCKETMQ_CLUSTER_DIR is set (the stack's RocketMQ cluster mode,
// eval "$(deploy/local/stack.sh env --rocketmq-cluster)") they are the
// cluster's: its proxy, broker-a, broker-b and name server, by absolute
// pid file path under $SECKILL_ROCKETMQ_CLUSTER_DIR/run.
func (e *rocketMQNamespace) StackProcesses() [][2]string {
	if dir := os.Getenv("SECKILL_ROCKETMQ_CLUSTER_DIR"); dir != "" {
		run, err := filepath.Abs(filepath.Join(dir, "run"))
		if err != nil {
			run = filepath.Join(dir, "run")
		}
		return [][2]string{{"broker proxy", filepath.Join(run, "proxy.pid")}, {"broker-a", filepath.Join(run, "broker-a.pid")},
			{"broker-b", filepath.Join(run, "broker-b.pid")}, {"namesrv", filepath.Join(run, "namesrv.pid")}}
	}
	return [][2]string{{"broker proxy", "proxy"}, {"broker", "broker"}, {"namesrv", "namesrv"}}
}

// Close deletes the namespace's groups and topics on every master;
// failures are logged.
func (e *rocketMQNamespace) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, a := range e.admins {
		for _, g := range e.groups {
			if err := a.DeleteGroup(ctx, g); err != nil {
				e.log.Warn("delete bench group", "group", g, "broker", e.masters[i].String(), "error", err)
			}
		}
		for _, t := range e.topics {
			if err := a.DeleteTopic(ctx, t); err != nil {
				e.log.Warn("delete bench topic", "topic", t, "broker", e.masters[i].String(), "error", err)
			}
		}
	}
}
