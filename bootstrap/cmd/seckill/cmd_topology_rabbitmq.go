package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// rabbitTopology is the topology command on RabbitMQ (SECKILL_BROKER=
// rabbitmq): the exchanges and queues of rabbitmq.NewTopology, built from
// the service's configuration (SECKILL_RABBITMQ_URL, _PREFIX,
// _FIFO_SHARDS).
type rabbitTopology struct {
	cfg  rabbitmq.Config
	topo rabbitmq.Topology
}

// newRabbitTopology reads the RabbitMQ configuration of cfg.
func newRabbitTopology(cfg config.Config) (rabbitTopology, error) {
	s, ok := cfg.Broker.Settings.(rabbitmq.Settings)
	if !ok {
		return rabbitTopology{}, fmt.Errorf("SECKILL_BROKER is %s, not %s", cfg.Broker.Name, rabbitmq.PlugName)
	}
	rc := s.ClientConfig(cfg.Broker.Neutral)
	t, err := rabbitmq.NewTopology(rc)
	if err != nil {
		return rabbitTopology{}, err
	}
	return rabbitTopology{cfg: rc, topo: t}, nil
}

func (r rabbitTopology) summary() string {
	return fmt.Sprintf("%d exchanges and %d groups (prefix %q, %d FIFO shards)", len(r.topo.Topics), len(r.topo.Groups),
		r.topo.Prefix, r.topo.Shards)
}

// apply declares the topology (idempotent).
func (r rabbitTopology) apply(ctx context.Context, w io.Writer, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := rabbitmq.Declare(ctx, r.cfg, r.topo); err != nil {
		return fmt.Errorf("topology apply: %w", err)
	}
	fmt.Fprintf(w, "topology: %s declared on RabbitMQ\n", r.summary())
	return nil
}

// check lists every difference and fails when there is one.
func (r rabbitTopology) check(ctx context.Context, w io.Writer, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	diffs, err := rabbitmq.Check(ctx, r.cfg, r.topo)
	if err != nil {
		return fmt.Errorf("topology check: %w", err)
	}
	for _, d := range diffs {
		fmt.Fprintln(w, d.String())
	}
	if len(diffs) > 0 {
		return fmt.Errorf("topology check: %d difference(s) from the topology on RabbitMQ; seckill topology apply repairs missing ones", len(diffs))
	}
	fmt.Fprintf(w, "topology: %s match on RabbitMQ\n", r.summary())
	return nil
}

// withPrefix returns r under another prefix (add-group's --prefix).
func (r rabbitTopology) withPrefix(prefix string) (rabbitTopology, error) {
	cfg := r.cfg
	cfg.Prefix = prefix
	t, err := rabbitmq.NewTopology(cfg)
	if err != nil {
		return rabbitTopology{}, err
	}
	return rabbitTopology{cfg: cfg, topo: t}, nil
}

// addGroup declares the queue of the outside consumer group name (with
// its dead-letter queue) bound to the ORDER_EVENT fanout exchange, with
// the exchanges it needs (idempotent), and prints one line: declared, or
// already declared (nothing changed; the bindings are declared again,
// which changes nothing when they exist). A queue of that name declared
// with other arguments is an error.
func (r rabbitTopology) addGroup(ctx context.Context, w io.Writer, timeout time.Duration, name string, retries int) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sub := ports.Subscription{Group: ports.ConsumerGroup(name), Topic: ports.TopicOrderEvent, MaxRetries: retries}
	t, err := rabbitmq.NewTopology(r.cfg, sub)
	if err != nil {
		return fmt.Errorf("topology add-group: %w", err)
	}
	g, _ := t.Group(sub.Group)
	diffs, err := rabbitmq.Check(ctx, r.cfg, t)
	if err != nil {
		return fmt.Errorf("topology add-group: %w", err)
	}
	own := append(slices.Clone(g.Queues), g.DLQ)
	missing := 0
	for _, d := range diffs {
		if d.Kind != "queue" || !slices.Contains(own, d.Name) {
			continue
		}
		if d.Problem != "missing" {
			return fmt.Errorf("topology add-group: %s exists with other arguments (%s); choose another name or delete the queue", d.Name, d.Problem)
		}
		missing++
	}
	if err := rabbitmq.Declare(ctx, r.cfg, t); err != nil {
		return fmt.Errorf("topology add-group: %w", err)
	}
	state, tail := "declared", ""
	if missing == 0 {
		state, tail = "already declared", ": nothing changed"
	}
	fmt.Fprintf(w, "queue %s: %s (quorum, delivery limit %d, dead letters to %s), bound to exchange %s on RabbitMQ%s\n",
		g.Queues[0], state, retries, g.DLQ, g.Exchange, tail)
	return nil
}
