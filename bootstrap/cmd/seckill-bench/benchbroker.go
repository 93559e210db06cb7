package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// benchNamespace is the isolated broker namespace of one benchmark run on
// the broker SECKILL_BROKER chose: every topic and consumer group of the
// service (and the dead-letter resources a whole service needs) under a
// fresh prefix, deleted by Close. The benches reach the broker through
// ports.Publisher and ports.BatchHandler; what differs per broker is only
// here, one file per broker (benchbroker_rocketmq.go,
// benchbroker_rabbitmq.go).
type benchNamespace interface {
	// Broker names the broker's plug (adapters/brokers).
	Broker() string
	// Prefix is the namespace's name prefix.
	Prefix() string
	// Configure points cfg at the namespace (the broker and its prefix),
	// for a service built in process (bootstrap.NewApp).
	Configure(cfg *config.Config)
	// ServiceEnv is the environment a `seckill serve` subprocess needs to
	// use the namespace (appended after os.Environ(), so it wins).
	ServiceEnv() []string
	// Publisher returns a started publisher into the namespace whose sends
	// wait at most sendTimeout; close it with the returned function.
	Publisher(ctx context.Context, sendTimeout time.Duration, log *slog.Logger) (ports.Publisher, func(), error)
	// Group returns the physical name of business group g (the name the
	// inbox records).
	Group(g ports.ConsumerGroup) string
	// Consumer returns the run loop of business group sub in the
	// namespace: it hands the group's messages to h, at most batch per
	// call and at most concurrency calls at a time (fewer while limit,
	// when not nil, says so), until its context ends.
	Consumer(sub ports.Subscription, h ports.BatchHandler, batch, concurrency int, limit ports.ConcurrencyLimit,
		log *slog.Logger) (func(context.Context) error, error)
	// StackProcesses names the broker's processes of the local stack whose
	// CPU `bench sale` samples: display name, and either a pid file base
	// name under $SECKILL_STACK_DIR/run or an absolute pid file path (the
	// RocketMQ cluster mode's, under $SECKILL_ROCKETMQ_CLUSTER_DIR/run);
	// an empty one is a process not sampled (reported missing).
	StackProcesses() [][2]string
	// Close deletes the namespace, messages included.
	Close()
}

// newBenchEnv creates a namespace on the broker cfg.Broker.Name names
// (SECKILL_BROKER, default rocketmq).
func newBenchEnv(ctx context.Context, cfg config.Config, log *slog.Logger) (benchNamespace, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "BENCH" + strings.ToUpper(hex.EncodeToString(b)) + "_"
	switch cfg.Broker.Name {
	case rocketmq.PlugName:
		return newRocketMQNamespace(ctx, cfg, prefix, log)
	case rabbitmq.PlugName:
		return newRabbitMQNamespace(ctx, cfg, prefix, log)
	}
	return nil, fmt.Errorf("SECKILL_BROKER %q: the benches run on %s or %s", cfg.Broker.Name, rocketmq.PlugName, rabbitmq.PlugName)
}

// brokerText names the broker of cfg for a header line.
func brokerText(cfg config.Config) string {
	return "broker " + cfg.Broker.Name + " (" + cfg.Broker.Settings.Target() + ")"
}
