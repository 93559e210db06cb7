package main

import (
	"context"
	"fmt"
	"io"

	"github.com/seckill-dev/seckill/adapters/brokers"
	"github.com/seckill-dev/seckill/deploy/devstack"
)

// brokerClusterUsage is the help of the --broker-cluster flag.
const brokerClusterUsage = "also the cluster mode of the broker NAME whose plug describes one (kafka: three nodes in " +
	"<state>/kafka-cluster); its variables then point at it ($SECKILL_STACK_BROKER_CLUSTER)"

// brokerCluster is the broker whose cluster mode is requested: the
// --broker-cluster flag, else $SECKILL_STACK_BROKER_CLUSTER; "" for none.
func (c *cli) brokerCluster(flag string) string {
	if flag != "" {
		return flag
	}
	return c.getenv("SECKILL_STACK_BROKER_CLUSTER")
}

// pluggedCluster is the cluster mode of broker in cfg's state dir.
func (c *cli) pluggedCluster(cfg devstack.Config, broker string, quiet bool) (*devstack.Stack, error) {
	s, err := devstack.PluggedClusterStack(cfg, devstack.NewLogger(c.stderr, quiet), broker)
	if err != nil {
		return nil, fmt.Errorf("--broker-cluster: %w", err)
	}
	return s, nil
}

// withBrokerCluster brings up (up) or checks (env) the cluster mode of
// broker and returns exports with the broker's variables pointing at it;
// exports unchanged when broker is "".
func (c *cli) withBrokerCluster(ctx context.Context, cfg devstack.Config, broker string, up, quiet bool,
	exports []devstack.Export) ([]devstack.Export, error) {
	if broker == "" {
		return exports, nil
	}
	cs, err := c.pluggedCluster(cfg, broker, quiet)
	if err != nil {
		return nil, err
	}
	if up {
		err = cs.Up(ctx)
	} else {
		err = cs.Env(ctx, io.Discard)
	}
	if err != nil {
		return nil, fmt.Errorf("%s-cluster: %w", broker, err)
	}
	// The shell that evaluates the exports keeps the cluster mode chosen:
	// a later `up` from it (a chaos run restarting a node it killed) brings
	// the cluster's nodes up too, and the tools find their pid files.
	selected := devstack.Export{Name: "SECKILL_STACK_BROKER_CLUSTER", Value: broker}
	return devstack.OverrideExports(exports, append(cs.ClusterExports(), selected)), nil
}

// statusBrokerCluster prints the status of broker's cluster mode.
func (c *cli) statusBrokerCluster(ctx context.Context, cfg devstack.Config, broker string) error {
	cs, err := c.pluggedCluster(cfg, broker, false)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(c.stdout, "\n%s cluster mode (%s):\n", broker, cfg.PluggedClusterDir(broker))
	if err := cs.Status(ctx, c.stdout); err != nil {
		return fmt.Errorf("%s-cluster: %w", broker, err)
	}
	return nil
}

// downBrokerClusters stops the cluster modes that exist in cfg's state
// dir, for a down of the whole stack.
func (c *cli) downBrokerClusters(ctx context.Context, cfg devstack.Config) error {
	for _, p := range brokers.All() {
		if len(p.DevCluster()) == 0 {
			continue
		}
		cs, err := c.pluggedCluster(cfg, p.Name(), false)
		if err != nil {
			return err
		}
		if cs.Exists() {
			if err := cs.Down(ctx, false, nil); err != nil {
				return fmt.Errorf("%s-cluster: %w", p.Name(), err)
			}
		}
	}
	return nil
}
