package benchenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/brokers"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// Namespace is the isolated broker namespace of one benchmark run on
// the broker SECKILL_BROKER chose: every topic and consumer group of the
// service (and the dead-letter resources a whole service needs) under a
// fresh prefix, deleted by Close. It is the broker plug's namespace
// (brokerplug.Namespace) and the plug's own broker opened on it: the
// benches reach the broker through ports.Publisher and ports.BatchHandler
// and name no broker.
type Namespace struct {
	plug    brokerplug.Plug
	ns      brokerplug.Namespace
	neutral brokerplug.Neutral
	log     *slog.Logger
	// base is the plug's broker opened on the namespace, never started:
	// it names the groups.
	base brokerplug.Broker

	mu     sync.Mutex
	opened []brokerplug.Broker // closed by Close
}

// benchRedeliveries is how often a bench group receives a message again
// before it is dead-lettered.
const benchRedeliveries = 5

// NewNamespace creates a namespace on the broker cfg.Broker.Name names
// (SECKILL_BROKER, default the registry's first).
func NewNamespace(ctx context.Context, cfg config.Config, log *slog.Logger) (*Namespace, error) {
	plug, err := brokers.Lookup(cfg.Broker.Name)
	if err != nil {
		return nil, fmt.Errorf("SECKILL_BROKER: %w", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "BENCH" + strings.ToUpper(hex.EncodeToString(b)) + "_"
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ns, err := plug.NewNamespace(cctx, cfg.Broker.Settings, brokerplug.NamespaceOptions{Prefix: prefix, Redeliveries: benchRedeliveries})
	if err != nil {
		return nil, fmt.Errorf("the bench namespace: %w", err)
	}
	e := &Namespace{plug: plug, ns: ns, neutral: cfg.Broker.Neutral, log: log}
	if e.base, err = e.open(cfg.Broker.Neutral.SendTimeout, log); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Broker names the broker's plug (adapters/brokers).
func (e *Namespace) Broker() string { return e.plug.Name() }

// Prefix is the namespace's name prefix.
func (e *Namespace) Prefix() string { return e.ns.Prefix() }

// Configure points cfg at the namespace (the broker and its prefix), for
// a service built in process (bootstrap.NewApp).
func (e *Namespace) Configure(cfg *config.Config) {
	cfg.Broker.Name, cfg.Broker.Settings = e.plug.Name(), e.ns.Settings()
}

// ServiceEnv is the environment a `seckill serve` subprocess needs to use
// the namespace (appended after os.Environ(), so it wins).
func (e *Namespace) ServiceEnv() []string { return e.ns.Env() }

// open opens the plug's broker on the namespace with sends bounded by
// sendTimeout, metrics in a registry of its own and no tracing; Close
// closes it.
func (e *Namespace) open(sendTimeout time.Duration, log *slog.Logger) (brokerplug.Broker, error) {
	n := e.neutral
	n.SendTimeout = sendTimeout
	b, err := e.plug.Open(e.ns.Settings(), brokerplug.Deps{Neutral: n, Tracer: noop.NewTracerProvider(),
		Registerer: prometheus.NewRegistry(), Log: log})
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.opened = append(e.opened, b)
	e.mu.Unlock()
	return b, nil
}

// Publisher returns a started publisher into the namespace whose sends
// wait at most sendTimeout; close it with the returned function.
func (e *Namespace) Publisher(ctx context.Context, sendTimeout time.Duration, log *slog.Logger) (ports.Publisher, func(), error) {
	b, err := e.open(sendTimeout, log)
	if err != nil {
		return nil, nil, err
	}
	if err := b.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("start the publisher: %w", err)
	}
	return b, func() { _ = b.Close() }, nil
}

// Group returns the physical name of business group g (the name the
// inbox records).
func (e *Namespace) Group(g ports.ConsumerGroup) string { return e.base.Group(g) }

// Consumer returns the run loop of business group sub in the namespace:
// it hands the group's messages to h, at most batch per call and at most
// concurrency calls at a time (fewer while limit, when not nil, says so),
// until its context ends.
func (e *Namespace) Consumer(sub ports.Subscription, h ports.BatchHandler, batch, concurrency int, limit ports.ConcurrencyLimit,
	log *slog.Logger) (func(context.Context) error, error) {
	b, err := e.open(e.neutral.SendTimeout, log)
	if err != nil {
		return nil, err
	}
	return b.Consumer(sub, h, brokerplug.ConsumerOptions{Batch: batch, Concurrency: concurrency, Limit: limit})
}

// StackProcesses names the broker's processes of the local stack whose
// CPU `bench sale` samples (stackProcesses).
func (e *Namespace) StackProcesses() [][2]string {
	return stackProcesses(e.plug.Name(), e.ns.Settings())
}

// Close closes the brokers opened on the namespace and deletes it,
// messages included; failures are logged.
func (e *Namespace) Close() {
	e.mu.Lock()
	opened := e.opened
	e.opened = nil
	e.mu.Unlock()
	for _, b := range opened {
		_ = b.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.ns.Close(ctx); err != nil {
		e.log.Warn("delete the bench namespace", "prefix", e.ns.Prefix(), "error", err)
	}
}

// BrokerText names the broker of cfg for a header line.
func BrokerText(cfg config.Config) string {
	return "broker " + cfg.Broker.Name + " (" + cfg.Broker.Settings.Target() + ")"
}
