package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// rocketMQNamespace is a benchNamespace on RocketMQ: the five topics, the
// consumer groups and their %DLQ% topics, created under the prefix through
// the broker's admin protocol (SECKILL_ROCKETMQ_BROKER and _NAMESRV).
type rocketMQNamespace struct {
	cfg    config.Config
	prefix string
	admin  *rocketmq.Admin
	topics []string
	groups []string
	log    *slog.Logger
}

func newRocketMQNamespace(ctx context.Context, cfg config.Config, prefix string, log *slog.Logger) (*rocketMQNamespace, error) {
	broker := os.Getenv("SECKILL_ROCKETMQ_BROKER")
	if broker == "" {
		broker = "127.0.0.1:10911"
	}
	namesrv := os.Getenv("SECKILL_ROCKETMQ_NAMESRV")
	if namesrv == "" {
		namesrv = "127.0.0.1:9876"
	}
	e := &rocketMQNamespace{cfg: cfg, prefix: prefix, admin: rocketmq.NewAdmin(broker, namesrv, 10*time.Second), log: log}
	if err := e.create(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *rocketMQNamespace) create(ctx context.Context) error {
	for _, t := range ports.Topics {
		base, typ, err := rocketmq.TopicBaseName(t)
		if err != nil {
			return err
		}
		name := e.prefix + base
		if err := e.admin.CreateTopic(ctx, rocketmq.TopicSpec{Name: name, Type: typ, Queues: 8}); err != nil {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
		e.topics = append(e.topics, name)
	}
	for _, g := range append(rocketmq.Groups(), rocketmq.GroupDLQReader) {
		name := e.prefix + string(g)
		if err := e.admin.CreateGroup(ctx, rocketmq.GroupSpec{Name: name, Orderly: g.Orderly(), RetryMaxTimes: 5}); err != nil {
			return fmt.Errorf("create group %s: %w", name, err)
		}
		e.groups = append(e.groups, name)
	}
	// A whole service runs its dead-letter reader, which cannot start
	// without the %DLQ% topic of every group.
	for _, g := range e.groups {
		name := rocketmq.DLQTopic(g)
		if err := e.admin.CreateTopic(ctx, rocketmq.TopicSpec{Name: name, Queues: 1}); err != nil {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
		e.topics = append(e.topics, name)
	}
	return nil
}

func (e *rocketMQNamespace) Broker() string { return config.BrokerRocketMQ }
func (e *rocketMQNamespace) Prefix() string { return e.prefix }

func (e *rocketMQNamespace) Configure(cfg *config.Config) {
	cfg.Broker = config.BrokerRocketMQ
	cfg.RocketMQ.TopicPrefix = e.prefix
}

func (e *rocketMQNamespace) ServiceEnv() []string {
	return []string{"SECKILL_BROKER=" + config.BrokerRocketMQ, "SECKILL_TOPIC_PREFIX=" + e.prefix}
}

// bc is the adapter configuration of the namespace.
func (e *rocketMQNamespace) bc(sendTimeout time.Duration) rocketmq.Config {
	c := e.cfg.RocketMQ
	return rocketmq.Config{Endpoint: c.Endpoint, TopicPrefix: e.prefix, SendTimeout: sendTimeout, AccessKey: c.AccessKey,
		AccessSecret: string(c.SecretKey), ClientLogDir: c.ClientLogDir, AckOneByOne: !c.AckBatch}
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

func (e *rocketMQNamespace) Consumer(sub ports.Subscription, h ports.BatchHandler, batch, concurrency int, log *slog.Logger) (func(context.Context) error, error) {
	bc := e.bc(0)
	topic, err := bc.Topic(sub.Topic)
	if err != nil {
		return nil, err
	}
	rn, err := rocketmq.NewRunner(bc, rocketmq.RunnerConfig{Group: e.Group(sub.Group), Subscriptions: map[string]string{topic: "*"},
		Orderly: sub.Ordered, BatchSize: batch, Concurrency: concurrency, InvisibleDuration: 30 * time.Second},
		h, log, prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	return rn.Run, nil
}

func (e *rocketMQNamespace) StackProcesses() [][2]string {
	return [][2]string{{"broker proxy", "proxy"}, {"broker", "broker"}, {"namesrv", "namesrv"}}
}

func (e *rocketMQNamespace) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, g := range e.groups {
		if err := e.admin.DeleteGroup(ctx, g); err != nil {
			e.log.Warn("delete bench group", "group", g, "error", err)
		}
	}
	for _, t := range e.topics {
		if err := e.admin.DeleteTopic(ctx, t); err != nil {
			e.log.Warn("delete bench topic", "topic", t, "error", err)
		}
	}
}
