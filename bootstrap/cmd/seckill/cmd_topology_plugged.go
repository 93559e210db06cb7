package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/brokers"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// pluggedTopology returns the topology administration the chosen broker's
// plug provides (brokerplug.Topology) from the broker block of the
// service's configuration (config.LoadBroker),
// with prefix replacing the settings' name prefix when not nil. ok is
// false when the plug has a topology command of its own (RocketMQ's,
// with the flags of this command).
func pluggedTopology(cmd *cobra.Command, prefix *string) (t brokerplug.Topology, ok bool, err error) {
	b, err := config.LoadBroker(os.LookupEnv)
	if err != nil {
		return nil, true, err
	}
	plug, err := brokers.Lookup(b.Name)
	if err != nil {
		return nil, true, err
	}
	t, err = plug.Topology(b.Settings, brokerplug.TopologyOptions{Prefix: prefix})
	if errors.Is(err, brokerplug.ErrInvalidTopology) {
		return nil, true, clikit.Usagef(cmd, "%v", err)
	}
	if err != nil {
		return nil, true, err
	}
	return t, t != nil, nil
}

// applyPlugged applies t and prints each change ("applied: ...") and the
// summary line.
func applyPlugged(ctx context.Context, w io.Writer, t brokerplug.Topology, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	changes, err := t.Apply(ctx)
	for _, c := range changes {
		fmt.Fprintln(w, "applied: "+c)
	}
	if err != nil {
		return fmt.Errorf("topology apply: %w", err)
	}
	fmt.Fprintf(w, "topology: %s match (%d change(s) applied)\n", t.Summary(), len(changes))
	return nil
}

// checkPlugged prints every difference of t and fails when there is one;
// otherwise it prints the summary line.
func checkPlugged(ctx context.Context, w io.Writer, t brokerplug.Topology, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	diffs, err := t.Check(ctx)
	if err != nil {
		return fmt.Errorf("topology check: %w", err)
	}
	for _, d := range diffs {
		fmt.Fprintln(w, d)
	}
	if len(diffs) > 0 {
		return fmt.Errorf("topology check: %d difference(s) from the topology; seckill topology apply repairs missing ones", len(diffs))
	}
	fmt.Fprintf(w, "topology: %s match\n", t.Summary())
	return nil
}

// addGroupPlugged adds the outside group name to t and prints what it did.
func addGroupPlugged(cmd *cobra.Command, w io.Writer, t brokerplug.Topology, timeout time.Duration, name string, retries int) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	line, err := t.AddGroup(ctx, name, retries)
	if errors.Is(err, brokerplug.ErrInvalidTopology) {
		return clikit.Usagef(cmd, "%v", err)
	}
	if err != nil {
		return fmt.Errorf("topology add-group: %w", err)
	}
	fmt.Fprintln(w, line)
	return nil
}
