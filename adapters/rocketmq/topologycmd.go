package rocketmq

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
)

// adminTimeout bounds one remoting call of the topology command.
const adminTimeout = 5 * time.Second

// TopologyCommand returns RocketMQ's part of `seckill topology`. Its flags:
// --broker and --namesrv select the brokers (apply, check, add-group: the
// one broker of --broker, or of SECKILL_ROCKETMQ_BROKER when the flag is
// not given, else every master the name server lists), --queues and
// --retry-max shape the topology (apply, check, show).
func (Plug) TopologyCommand() brokerplug.TopologyCommand { return &topologyCommand{} }

// topologyCommand is the RocketMQ brokerplug.TopologyCommand; it holds the
// values of its flags.
type topologyCommand struct {
	broker, namesrv setString
	// shape: the subcommand takes --queues and --retry-max.
	shape    bool
	queues   int
	retryMax []string
}

// setString is a string flag that remembers whether it was given, so that
// an empty value given on the command line overrides the settings.
type setString struct {
	value string
	set   bool
}

func (s *setString) String() string { return s.value }

func (s *setString) Set(v string) error {
	s.value, s.set = v, true
	return nil
}

// or returns the flag's value when it was given, else def.
func (s *setString) or(def string) string {
	if s.set {
		return s.value
	}
	return def
}

// DeclareFlags declares the broker selection on apply, check and add-group
// and the topology's shape on apply, check and show.
func (c *topologyCommand) DeclareFlags(fs *flag.FlagSet, sub brokerplug.TopologySub) {
	if sub != brokerplug.TopologyShow {
		fs.Var(&c.broker, "broker",
			"remoting `address` of the one broker to work on (default $SECKILL_ROCKETMQ_BROKER); empty: every master the name server lists")
		fs.Var(&c.namesrv, "namesrv",
			"name server `address` (default $SECKILL_ROCKETMQ_NAMESRV, else 127.0.0.1:9876); \"\" skips the check that it routes every topic to the broker (then --broker is needed)")
	}
	if sub != brokerplug.TopologyAddGroup {
		c.shape = true
		fs.IntVar(&c.queues, "queues", DefaultTopicQueues, "read and write queues of each business topic")
		fs.Func("retry-max", "retryMaxTimes N for the consumer group GROUP (its name without the prefix) as `GROUP=N`; repeatable",
			func(v string) error {
				c.retryMax = append(c.retryMax, v)
				return nil
			})
	}
}

// Open builds the topology of the settings' prefix (o.Prefix replaces it)
// with the flags' queue count and retry overrides, on the brokers the
// flags or the settings select.
func (c *topologyCommand) Open(ps brokerplug.Settings, o brokerplug.TopologyOptions) (brokerplug.Topology, error) {
	s, ok := ps.(Settings)
	if !ok {
		return nil, fmt.Errorf("rocketmq topology: settings of type %T", ps)
	}
	if o.Prefix != nil {
		s.TopicPrefix = *o.Prefix
	}
	broker, namesrv := c.broker.or(s.Broker), c.namesrv.or(s.Namesrv)
	if broker == "" && namesrv == "" && (c.broker.set || c.namesrv.set) {
		return nil, fmt.Errorf(`%w: --namesrv "" needs --broker: the brokers are read from the name server`, brokerplug.ErrInvalidTopology)
	}
	var opts []TopologyOption
	if c.shape {
		opts = append(opts, WithTopicQueues(c.queues))
	}
	for _, kv := range c.retryMax {
		group, n, ok := strings.Cut(kv, "=")
		retries, err := strconv.Atoi(n)
		if !ok || err != nil {
			return nil, fmt.Errorf("%w: --retry-max %q: want GROUP=N", brokerplug.ErrInvalidTopology, kv)
		}
		opts = append(opts, WithRetryMaxTimes(Group(group), retries))
	}
	t, err := NewTopology(Config{TopicPrefix: s.TopicPrefix}, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", brokerplug.ErrInvalidTopology, err)
	}
	return topologyAdmin{t: t, broker: broker, namesrv: namesrv}, nil
}

// topologyAdmin is the RocketMQ brokerplug.Topology: t on the broker of
// broker, or on every master namesrv lists.
type topologyAdmin struct {
	t               Topology
	broker, namesrv string
}

// Show writes the topics (message type, queues, perm) and the groups
// (retryMaxTimes, orderly) as two tables.
func (a topologyAdmin) Show(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tTYPE\tQUEUES\tPERM")
	for _, s := range a.t.Topics {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", s.Name, s.Type, s.Queues, s.Perm)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "GROUP\tRETRY_MAX_TIMES\tORDERLY")
	for _, s := range a.t.Groups {
		fmt.Fprintf(tw, "%s\t%d\t%t\n", s.Name, s.RetryMaxTimes, s.Orderly)
	}
	return tw.Flush()
}

// Targets returns the broker of a.broker alone, else every master the name
// server lists (Admin.Masters): each master holds its own copy of the
// topics and groups.
func (a topologyAdmin) Targets(ctx context.Context) ([]brokerplug.TopologyTarget, error) {
	if a.broker == "" && a.namesrv == "" {
		return nil, fmt.Errorf(`%w: no broker and no name server: set SECKILL_ROCKETMQ_BROKER or SECKILL_ROCKETMQ_NAMESRV`, brokerplug.ErrInvalidTopology)
	}
	admin := NewAdmin(a.broker, a.namesrv, adminTimeout)
	if a.broker != "" {
		return brokerplug.SingleTarget(topologyTarget{a: a, admin: admin, ref: BrokerRef{Addr: a.broker}, alone: true}), nil
	}
	masters, err := admin.Masters(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]brokerplug.TopologyTarget, len(masters))
	for i, m := range masters {
		out[i] = topologyTarget{a: a, admin: admin.ForBroker(m), ref: m}
	}
	return out, nil
}

// topologyTarget is one broker of a topologyAdmin.
type topologyTarget struct {
	a     topologyAdmin
	admin *Admin
	ref   BrokerRef
	// alone: the broker was asked for by address, not listed.
	alone bool
}

// Name is the broker's name ("broker-a"), empty for the broker asked for
// by address.
func (b topologyTarget) Name() string {
	if b.alone {
		return ""
	}
	return b.ref.Name
}

// Summary reads `10 topics and 6 groups (prefix "", broker broker-a
// 127.0.0.1:10911, routed by name server 127.0.0.1:9876)`.
func (b topologyTarget) Summary() string {
	s := fmt.Sprintf("%d topics and %d groups (prefix %q, broker %s", len(b.a.t.Topics), len(b.a.t.Groups), b.a.t.Prefix, b.ref)
	if b.a.namesrv != "" {
		s += ", routed by name server " + b.a.namesrv
	}
	return s + ")"
}

// Apply makes the broker match (Topology.Apply) and returns each
// difference it repaired.
func (b topologyTarget) Apply(ctx context.Context) ([]string, error) {
	diffs, err := b.a.t.Apply(ctx, b.admin)
	return differences(diffs), err
}

// Check returns every difference of the broker (Topology.Check).
func (b topologyTarget) Check(ctx context.Context) ([]string, error) {
	diffs, err := b.a.t.Check(ctx, b.admin)
	return differences(diffs), err
}

func differences(diffs []Difference) []string {
	out := make([]string, len(diffs))
	for i, d := range diffs {
		out[i] = d.String()
	}
	return out
}

// AddGroup registers the outside group name (Topology.OutsideGroup: a
// NORMAL group with retryMaxTimes retries) on the broker and says whether
// it registered, updated or found it.
func (b topologyTarget) AddGroup(ctx context.Context, name string, retries int) (string, error) {
	spec, err := b.a.t.OutsideGroup(name, retries)
	if err != nil {
		return "", fmt.Errorf("%w: %w", brokerplug.ErrInvalidTopology, err)
	}
	topic, err := b.a.t.OrderEventTopic()
	if err != nil {
		return "", err
	}
	settings := fmt.Sprintf("NORMAL, retryMaxTimes %d, for topic %s", spec.RetryMaxTimes, topic)
	found, err := b.a.t.ApplyGroup(ctx, b.admin, spec)
	switch {
	case err != nil:
		return "", err
	case len(found) == 0:
		return fmt.Sprintf("group %s: already registered (%s) on broker %s: nothing changed", spec.Name, settings, b.ref), nil
	case found[0].Field == FieldMissing:
		return fmt.Sprintf("group %s: registered (%s) on broker %s", spec.Name, settings, b.ref), nil
	}
	was := make([]string, len(found))
	for i, d := range found {
		was[i] = d.Field + " was " + d.Got
	}
	return fmt.Sprintf("group %s: updated (%s; %s) on broker %s", spec.Name, settings, strings.Join(was, ", "), b.ref), nil
}
