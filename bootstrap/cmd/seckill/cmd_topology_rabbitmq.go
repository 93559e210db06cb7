package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/bootstrap/config"
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
	rc := rabbitmq.Config{URL: string(cfg.RabbitMQ.URL), Prefix: cfg.RabbitMQ.Prefix, FIFOShards: cfg.RabbitMQ.FIFOShards}
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
