// Package mqtest gives tests their own RocketMQ topics and consumer groups on
// the local stack, so that tests and packages can run in parallel against
// one broker and a reused broker with old messages does not matter.
//
// NewEnv reads SECKILL_ROCKETMQ_ENDPOINT (proxy gRPC),
// SECKILL_ROCKETMQ_BROKER (broker remoting) and SECKILL_ROCKETMQ_NAMESRV
// (name server), picks a unique prefix ("T<hex>_"), creates the broker
// topology of the service under that prefix (rocketmq.NewTopology: the five
// topics of docs/architecture.md with their message types, their
// dead-letter topics, the five consumer groups and the dead-letter reader
// group; fewer queues and retries than production, see WithQueues and
// WithRetryMaxTimes) on every master broker the name server lists (one on
// the single-node stack, two in the stack's RocketMQ cluster mode) with
// rocketmq.ApplyNamespace, the service's own namespace mechanics, and
// deletes them all there when the test ends.
package mqtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/ports"
)

// Environment variables read by NewEnv.
const (
	EnvEndpoint = "SECKILL_ROCKETMQ_ENDPOINT"
	EnvBroker   = "SECKILL_ROCKETMQ_BROKER"
	EnvNamesrv  = "SECKILL_ROCKETMQ_NAMESRV"
	// EnvMetricsURL lists the brokers' Prometheus exporters (MetricsURL).
	EnvMetricsURL = "SECKILL_ROCKETMQ_METRICS_URL"
)

// MetricsURL returns the URLs of the brokers' Prometheus exporters of the
// local stack as rocketmq.NewLagCollector takes them, comma-separated, one
// per broker (the stack's cluster mode exports both brokers'), failing the
// test when it is not set.
func MetricsURL(tb testing.TB) string {
	tb.Helper()
	return mustEnv(tb, EnvMetricsURL)
}

// DefaultRetryMaxTimes is the retryMaxTimes of the test groups: a message
// reaches the group at most three times, then goes to %DLQ%<group>.
const DefaultRetryMaxTimes = 2

// DLQReaderRetryMaxTimes is the dead-letter reader group's retryMaxTimes
// (raised to the business groups' + rocketmq.DLQReaderMargin when
// WithRetryMaxTimes asks for more than 14). A dead-letter copy arrives with
// delivery attempt retryMaxTimes+3 of its source group, and the reader's
// own pops forward it again to %DLQ%<reader> once the attempt exceeds the
// reader's retryMaxTimes+1, so the reader needs retryMaxTimes >= source
// retryMaxTimes + 2.
const DLQReaderRetryMaxTimes = 16

// Env is one test's broker namespace.
type Env struct {
	// Config is an adapter configuration for the namespace: Endpoint,
	// TopicPrefix and a client log directory shared by the test process.
	Config rocketmq.Config
	// Admin is the remoting admin client of Broker (what it writes goes to
	// that broker only: Admins holds the client of every master).
	Admin *rocketmq.Admin
	// Prefix is the namespace's topic and group prefix ("T<hex>_").
	Prefix string
	// Broker is the remoting address of SECKILL_ROCKETMQ_BROKER.
	Broker string
	// Masters lists the brokers the namespace was created on: every master
	// the name server listed (rocketmq.Admin.Masters, sorted by name).
	Masters []rocketmq.BrokerRef
	// Admins holds the admin client of each of Masters, in that order.
	Admins []*rocketmq.Admin
	// Topology is what NewEnv created: rocketmq.NewTopology under Prefix
	// with the test's queue and retry counts (Topology.Check of the
	// namespace is clean).
	Topology rocketmq.Topology

	tb testing.TB
	ns *rocketmq.Namespace
}

// Option changes NewEnv's defaults.
type Option func(*options)

type options struct {
	retryMaxTimes int
	queues        int
}

// WithRetryMaxTimes sets the retryMaxTimes of the five business groups
// (default DefaultRetryMaxTimes).
func WithRetryMaxTimes(n int) Option { return func(o *options) { o.retryMaxTimes = n } }

// WithQueues sets the queue count of the business topics (default 4;
// production: rocketmq.DefaultTopicQueues).
func WithQueues(n int) Option { return func(o *options) { o.queues = n } }

// NewEnv creates a fresh namespace (see the package doc) with
// rocketmq.ApplyNamespace. It fails the test when the environment
// variables are unset or the broker does not answer.
func NewEnv(tb testing.TB, opts ...Option) *Env {
	tb.Helper()
	o := options{retryMaxTimes: DefaultRetryMaxTimes, queues: 4}
	for _, opt := range opts {
		opt(&o)
	}
	endpoint, broker, namesrv := mustEnv(tb, EnvEndpoint), mustEnv(tb, EnvBroker), mustEnv(tb, EnvNamesrv)
	e := &Env{
		Config: rocketmq.Config{
			Endpoint:     endpoint,
			TopicPrefix:  newPrefix(),
			ClientLogDir: filepath.Join(os.TempDir(), "seckill-rocketmq-client-test"),
		},
		Broker: broker,
		tb:     tb,
	}
	e.Prefix = e.Config.TopicPrefix
	if err := rocketmq.InstallRuntime(e.Config, nil); err != nil {
		tb.Fatalf("install rocketmq client runtime: %v", err)
	}
	// The production topology under the prefix, with the test's queue and
	// retry counts; the reader keeps its margin over larger test retries.
	top, err := rocketmq.NewTopology(e.Config, rocketmq.WithTopicQueues(o.queues),
		rocketmq.WithBusinessRetryMaxTimes(o.retryMaxTimes),
		rocketmq.WithRetryMaxTimes(rocketmq.GroupDLQReader, max(DLQReaderRetryMaxTimes, o.retryMaxTimes+rocketmq.DLQReaderMargin)))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := rocketmq.NewAdmin(broker, namesrv, 5*time.Second)
	ns, err := rocketmq.ApplyNamespace(ctx, admin, top)
	if err != nil {
		tb.Fatalf("%v (is the stack up? run `make test` or eval \"$(deploy/local/stack.sh env)\")", err)
	}
	e.ns, e.Topology, e.Masters, e.Admins, e.Admin = ns, top, ns.Masters, ns.Admins, admin
	for i, m := range ns.Masters {
		if m.Addr == broker {
			e.Admin = ns.Admins[i]
		}
	}
	tb.Cleanup(e.cleanup)
	return e
}

// Topic returns the physical name of a logical topic in this namespace.
func (e *Env) Topic(t ports.Topic) string {
	name, err := e.Config.Topic(t)
	if err != nil {
		e.tb.Fatal(err)
	}
	return name
}

// Group returns the physical name of a consumer group in this namespace.
func (e *Env) Group(g rocketmq.Group) string { return e.Config.Group(g) }

// CreateTopic creates an extra topic named Prefix+suffix (deleted when the
// test ends) and returns its name. queues 0 means 4.
func (e *Env) CreateTopic(suffix string, typ rocketmq.MessageType, queues int) string {
	e.tb.Helper()
	spec := rocketmq.TopicSpec{Name: e.Prefix + suffix, Type: typ, Queues: queues}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.ns.Create(ctx, []rocketmq.TopicSpec{spec}, nil); err != nil {
		e.tb.Fatalf("create topic %s: %v", spec.Name, err)
	}
	return spec.Name
}

// CreateGroup creates an extra consumer group named Prefix+suffix (deleted,
// with its dead-letter topic, when the test ends) and returns its name.
func (e *Env) CreateGroup(suffix string, orderly bool, retryMaxTimes int) string {
	e.tb.Helper()
	spec := rocketmq.GroupSpec{Name: e.Prefix + suffix, Orderly: orderly, RetryMaxTimes: retryMaxTimes}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.ns.Create(ctx, []rocketmq.TopicSpec{{Name: rocketmq.DLQTopic(spec.Name), Queues: 1}}, []rocketmq.GroupSpec{spec}); err != nil {
		e.tb.Fatalf("create group %s: %v", spec.Name, err)
	}
	return spec.Name
}

// RedirectThrough routes the gRPC connections that RocketMQ clients created
// from now until the end of the test open to the proxy endpoint, through
// addr (for example a faultproxy.Proxy's address). Process-wide (see
// rocketmq.RedirectDials): call it only from tests that do not run in
// parallel with other tests of their package.
func (e *Env) RedirectThrough(addr string) {
	e.tb.Helper()
	restore, err := rocketmq.RedirectDials(e.Config.Endpoint, addr)
	if err != nil {
		e.tb.Fatalf("redirect rocketmq dials: %v", err)
	}
	e.tb.Cleanup(restore)
}

// cleanup deletes the namespace on every master (rocketmq.Namespace.Close);
// failures are logged, not fatal.
func (e *Env) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.ns.Close(ctx); err != nil {
		e.tb.Logf("mqtest cleanup: %v", err)
	}
}

func mustEnv(tb testing.TB, name string) string {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		tb.Fatalf("%s is not set: run `make test` or eval \"$(deploy/local/stack.sh env)\"", name)
	}
	return v
}

// newPrefix returns "T" + 10 random hex digits + "_".
func newPrefix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return "T" + hex.EncodeToString(b) + "_"
}
