package rabbitmq

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/ports"
)

// TopologyCommand returns RabbitMQ's part of `seckill topology`: no flags
// of its own, and the administration of the exchanges and queues of
// NewTopology for settings s (SECKILL_RABBITMQ_URL, _PREFIX, _FIFO_SHARDS;
// o.Prefix replaces the prefix).
func (Plug) TopologyCommand() brokerplug.TopologyCommand { return topologyCommand{} }

// topologyCommand is the RabbitMQ brokerplug.TopologyCommand.
type topologyCommand struct{}

// DeclareFlags declares nothing: RabbitMQ's topology takes its shape from
// the settings.
func (topologyCommand) DeclareFlags(*flag.FlagSet, brokerplug.TopologySub) {}

func (topologyCommand) Open(ps brokerplug.Settings, o brokerplug.TopologyOptions) (brokerplug.Topology, error) {
	s, ok := ps.(Settings)
	if !ok {
		return nil, fmt.Errorf("rabbitmq topology: settings of type %T", ps)
	}
	if o.Prefix != nil {
		s.Prefix = *o.Prefix
	}
	rc := s.ClientConfig(brokerplug.Neutral{})
	t, err := NewTopology(rc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", brokerplug.ErrInvalidTopology, err)
	}
	return topologyAdmin{cfg: rc, topo: t}, nil
}

// topologyAdmin is the RabbitMQ brokerplug.Topology and its one target:
// the virtual host.
type topologyAdmin struct {
	cfg  Config
	topo Topology
}

// Show writes each exchange with its topic's kind, then each group with
// its queues, delivery limit and dead-letter queue.
func (a topologyAdmin) Show(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EXCHANGE\tKIND")
	for _, t := range a.topo.Topics {
		fmt.Fprintf(tw, "%s\t%s\n", t.Exchange, t.Kind)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "GROUP\tEXCHANGE\tQUEUES\tDELIVERY_LIMIT\tDLQ")
	for _, g := range a.topo.Groups {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", g.Name, g.Exchange, strings.Join(g.Queues, ","), g.MaxRetries, g.DLQ)
	}
	return tw.Flush()
}

func (a topologyAdmin) Targets(context.Context) ([]brokerplug.TopologyTarget, error) {
	return brokerplug.SingleTarget(a), nil
}

// Name is empty: the virtual host is the one target.
func (topologyAdmin) Name() string { return "" }

func (a topologyAdmin) Summary() string {
	return fmt.Sprintf("%d exchanges and %d groups (prefix %q, %d FIFO shards) on RabbitMQ", len(a.topo.Topics), len(a.topo.Groups),
		a.topo.Prefix, a.topo.Shards)
}

// Apply declares the topology (idempotent). A declaration does not say
// whether it created anything, so it returns no lines.
func (a topologyAdmin) Apply(ctx context.Context) ([]string, error) {
	return nil, Declare(ctx, a.cfg, a.topo)
}

// Check returns every difference (Check).
func (a topologyAdmin) Check(ctx context.Context) ([]string, error) {
	diffs, err := Check(ctx, a.cfg, a.topo)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(diffs))
	for i, d := range diffs {
		out[i] = d.String()
	}
	return out, nil
}

// AddGroup declares the queue of the outside consumer group name (with
// its dead-letter queue) bound to the ORDER_EVENT fanout exchange, with
// the exchanges it needs. A queue of that name declared with other
// arguments is an error; so is a delivery limit below 1.
func (a topologyAdmin) AddGroup(ctx context.Context, name string, retries int) (string, error) {
	if retries < 1 {
		return "", fmt.Errorf("%w: --retry-max %d: a RabbitMQ delivery limit must be at least 1", brokerplug.ErrInvalidTopology, retries)
	}
	sub := ports.Subscription{Group: ports.ConsumerGroup(name), Topic: ports.TopicOrderEvent, MaxRetries: retries}
	t, err := NewTopology(a.cfg, sub)
	if err != nil {
		return "", fmt.Errorf("%w: %w", brokerplug.ErrInvalidTopology, err)
	}
	g, _ := t.Group(sub.Group)
	diffs, err := Check(ctx, a.cfg, t)
	if err != nil {
		return "", err
	}
	own := append(slices.Clone(g.Queues), g.DLQ)
	missing := 0
	for _, d := range diffs {
		if d.Kind != "queue" || !slices.Contains(own, d.Name) {
			continue
		}
		if d.Problem != "missing" {
			return "", fmt.Errorf("%s exists with other arguments (%s); choose another name or delete the queue", d.Name, d.Problem)
		}
		missing++
	}
	if err := Declare(ctx, a.cfg, t); err != nil {
		return "", err
	}
	state, tail := "declared", ""
	if missing == 0 {
		state, tail = "already declared", ": nothing changed"
	}
	return fmt.Sprintf("queue %s: %s (quorum, delivery limit %d, dead letters to %s), bound to exchange %s on RabbitMQ%s",
		g.Queues[0], state, retries, g.DLQ, g.Exchange, tail), nil
}
