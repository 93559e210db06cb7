package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/brokers"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// topologyFlags are the flags of a topology subcommand: the command's own
// (--prefix, --timeout) and the chosen broker's (brokerplug.TopologyCommand).
type topologyFlags struct {
	prefix  string
	timeout time.Duration
	// broker is the chosen broker's part of the subcommand; nil when
	// SECKILL_BROKER names no plug (opening then reports it).
	broker brokerplug.TopologyCommand
}

// chosenPlug is the plug SECKILL_BROKER names (the registry's default when
// unset), or nil when it names none.
func chosenPlug() brokerplug.Plug {
	name := os.Getenv("SECKILL_BROKER")
	if name == "" {
		name = brokers.Default()
	}
	p, err := brokers.Lookup(name)
	if err != nil {
		return nil
	}
	return p
}

// add declares the flags of subcommand sub on cmd: --prefix, --timeout
// (not on show, which contacts no broker), then the chosen broker's own.
func (f *topologyFlags) add(cmd *cobra.Command, sub brokerplug.TopologySub) {
	fs := cmd.Flags()
	fs.StringVar(&f.prefix, "prefix", "", "prefix of every topic and group name (default: the chosen broker's prefix setting; empty in production)")
	if sub != brokerplug.TopologyShow {
		fs.DurationVar(&f.timeout, "timeout", time.Minute, "bound of the whole command")
	}
	if p := chosenPlug(); p != nil {
		f.broker = p.TopologyCommand()
		own := flag.NewFlagSet(p.Name(), flag.ContinueOnError)
		f.broker.DeclareFlags(own, sub)
		fs.AddGoFlagSet(own)
	}
}

// open returns the chosen broker's topology from the broker block of the
// service's configuration (config.LoadBroker) and the parsed flags; what
// the broker cannot take is a usage error.
func (f *topologyFlags) open(cmd *cobra.Command) (brokerplug.Topology, error) {
	b, err := config.LoadBroker(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if f.broker == nil {
		return nil, fmt.Errorf("broker %q has no topology command", b.Name)
	}
	var o brokerplug.TopologyOptions
	if cmd.Flags().Changed("prefix") {
		o.Prefix = &f.prefix
	}
	t, err := f.broker.Open(b.Settings, o)
	if errors.Is(err, brokerplug.ErrInvalidTopology) {
		return nil, clikit.Usagef(cmd, "%v", err)
	}
	return t, err
}

// targets opens the topology and lists its targets within the command's
// bound (--timeout), returning the bounded context.
func (f *topologyFlags) targets(cmd *cobra.Command) ([]brokerplug.TopologyTarget, context.Context, context.CancelFunc, error) {
	if f.timeout <= 0 {
		return nil, nil, nil, clikit.Usagef(cmd, "--timeout must be > 0")
	}
	t, err := f.open(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	targets, err := t.Targets(ctx)
	if errors.Is(err, brokerplug.ErrInvalidTopology) {
		cancel()
		return nil, nil, nil, clikit.Usagef(cmd, "%v", err)
	}
	if err == nil && len(targets) == 0 {
		err = errors.New("the broker lists no target")
	}
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return targets, ctx, cancel, nil
}

// label prefixes a target's lines when a command works on several
// ("broker-a: "); it is empty for a target asked for alone.
func label(t brokerplug.TopologyTarget) string {
	if t.Name() == "" {
		return ""
	}
	return t.Name() + ": "
}

// perTarget runs do on every target in turn. A target asked for alone
// (unnamed) fails with its error as such, and so does a request the
// broker cannot take (brokerplug.ErrInvalidTopology: no target would); of
// several, one that fails otherwise does not stop the others and the
// error names each that failed. The caller says which command failed.
func perTarget(targets []brokerplug.TopologyTarget, do func(brokerplug.TopologyTarget) error) error {
	var failed []string
	for _, t := range targets {
		if err := do(t); err != nil {
			if t.Name() == "" || errors.Is(err, brokerplug.ErrInvalidTopology) {
				return err
			}
			failed = append(failed, fmt.Sprintf("%s: %v", t.Name(), err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d target(s) failed: %s", len(failed), len(targets), strings.Join(failed, "; "))
	}
	return nil
}

// runApply applies the topology to every target in turn and prints what
// it changed ("applied: [target: ]change") and one summary line per target
// that matches ("topology: ... match (N change(s) applied)").
func (c *cli) runApply(cmd *cobra.Command, f *topologyFlags) error {
	targets, ctx, cancel, err := f.targets(cmd)
	if err != nil {
		return wrapUnlessUsage("topology apply", err)
	}
	defer cancel()
	err = perTarget(targets, func(t brokerplug.TopologyTarget) error {
		changes, err := t.Apply(ctx)
		for _, ch := range changes {
			fmt.Fprintln(c.stdout, "applied: "+label(t)+ch)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "topology: %s match (%d change(s) applied)\n", t.Summary(), len(changes))
		return nil
	})
	if err != nil {
		return fmt.Errorf("topology apply: %w", err)
	}
	return nil
}

// runCheck checks every target and prints each difference ("[target:
// ]difference") and one summary line per target that matches. It fails
// when a target differs or cannot be read.
func (c *cli) runCheck(cmd *cobra.Command, f *topologyFlags) error {
	targets, ctx, cancel, err := f.targets(cmd)
	if err != nil {
		return wrapUnlessUsage("topology check", err)
	}
	defer cancel()
	total := 0
	var differ []string
	unread := perTarget(targets, func(t brokerplug.TopologyTarget) error {
		diffs, err := t.Check(ctx)
		if err != nil {
			return err
		}
		for _, d := range diffs {
			fmt.Fprintln(c.stdout, label(t)+d)
		}
		if len(diffs) == 0 {
			fmt.Fprintf(c.stdout, "topology: %s match\n", t.Summary())
			return nil
		}
		total += len(diffs)
		differ = append(differ, t.Name())
		return nil
	})
	if unread != nil && targets[0].Name() == "" {
		return fmt.Errorf("topology check: %w", unread)
	}
	var problems []string
	if total > 0 {
		where := targets[0].Summary()
		if targets[0].Name() != "" {
			where = "on " + strings.Join(differ, ", ")
		}
		problems = append(problems, fmt.Sprintf("%d difference(s) from the topology (%s); seckill topology apply repairs them", total, where))
	}
	if unread != nil {
		problems = append(problems, unread.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("topology check: %s", strings.Join(problems, "; "))
	}
	return nil
}

// wrapUnlessUsage prefixes err with what, unless it is a usage error
// (exit status 2), which says what it is about already.
func wrapUnlessUsage(what string, err error) error {
	if clikit.ExitCode(err) == 2 {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// topologyCmd holds apply, check, show and add-group of the chosen
// broker's topology (brokerplug.Topology).
func (c *cli) topologyCmd() *cobra.Command {
	return groupCmd("topology", "Apply, check or show the broker's topics and consumer groups, register an outside group",
		`The broker topology of the service: every topic and consumer group the service uses (dead-letter
resources included), as the chosen broker's adapter (SECKILL_BROKER) defines them from the one
list of subscriptions, every name behind the prefix. apply creates what is missing, check lists
what differs, show prints the topology without contacting the broker, add-group registers a
consumer group of the ORDER_EVENT topic for another team's consumer. The broker's address and
prefix come from the service's configuration (seckill config lists them); the commands take the
flags of the chosen broker listed with each (RocketMQ: --broker and --namesrv select among the
masters a name server lists, --queues and --retry-max shape the topology).

RocketMQ: the five business topics with their message types and queue counts, a %DLQ% topic per
business group, the business groups with their retryMaxTimes (the projection group orderly) and
the dead-letter reader, on every master the name server lists (each holds its own copy) unless
--broker or $SECKILL_ROCKETMQ_BROKER names one; RocketMQ 5.5 refuses consumers of unknown groups,
so run apply before the service starts (the local stack does). RabbitMQ: the exchanges and
quorum queues. Kafka: the topics (the groups come into being when their consumers join). The
services also create their resources at start on RabbitMQ and Kafka. docs/cli.md has more.`,
		c.topologyApplyCmd(), c.topologyCheckCmd(), c.topologyShowCmd(), c.addGroupCmd())
}

// topologyApplyCmd is `topology apply`.
func (c *cli) topologyApplyCmd() *cobra.Command {
	var f topologyFlags
	apply := &cobra.Command{
		Use:   "apply [flags]",
		Short: "Create or update the topics and consumer groups that differ from the topology",
		Long: `Make the broker match the topology (seckill topology show): create or update only what is
missing or differs, then read it again. Idempotent: on a broker that matches it writes nothing.
Resources the topology does not name are left alone.

Where the broker keeps a copy of the topology on each of several nodes (RocketMQ's masters), apply
works on each in turn: each change reads "applied: broker-a: ...", each node that matches gets its
own summary line, and the command fails if any node still differs or cannot be written (the others
are applied all the same). A node asked for alone (RocketMQ: --broker ADDR, or
$SECKILL_ROCKETMQ_BROKER) gets unlabeled lines.

Prints each change ("applied: ..."), then the summary line ("topology: ... match").`,
		Example: `  seckill topology apply                                  # the production topology (RocketMQ: on every master of $SECKILL_ROCKETMQ_NAMESRV, or on $SECKILL_ROCKETMQ_BROKER when set)
  seckill topology apply --broker ""                      # RocketMQ: every master, even with $SECKILL_ROCKETMQ_BROKER set
  seckill topology apply --broker 127.0.0.1:10911         # RocketMQ: that broker only
  seckill topology apply --prefix T1_ --queues 4 --retry-max CG_SECKILL_AUDIT_V1=1
  SECKILL_BROKER=kafka seckill topology apply             # Kafka: the topics at $SECKILL_KAFKA_BROKERS`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.runApply(cmd, &f) },
	}
	f.add(apply, brokerplug.TopologyApply)
	return apply
}

// topologyCheckCmd is `topology check`.
func (c *cli) topologyCheckCmd() *cobra.Command {
	var f topologyFlags
	check := &cobra.Command{
		Use:   "check [flags]",
		Short: "List every difference between the broker and the topology (exit 1 if any)",
		Long: `Read the broker's topics and consumer groups and print every difference from the topology, one
per line ("topic X: missing"; on RocketMQ also a topic's message type, queue count or perm, a
group's retryMaxTimes or orderliness, a topic the name server does not route to the broker). Exit
status 1 when there is one (or the broker cannot be read), 0 with a summary line when it matches.
Changes nothing.

Which nodes: as apply. Checked on each of several nodes, each difference is prefixed with the
node's name ("broker-b: topic X: missing") and each node that matches gets a summary line.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.runCheck(cmd, &f) },
	}
	f.add(check, brokerplug.TopologyCheck)
	return check
}

// topologyShowCmd is `topology show`.
func (c *cli) topologyShowCmd() *cobra.Command {
	var f topologyFlags
	show := &cobra.Command{
		Use:   "show [flags]",
		Short: "Print the topology: topics and consumer groups with their settings",
		Long: `Print the topology the other subcommands apply and check, without contacting the broker: each
topic and each consumer group with the settings the broker gives it (RocketMQ: message type,
queue count and perm; retryMaxTimes and orderliness).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := f.open(cmd)
			if err != nil {
				return err
			}
			return t.Show(c.stdout)
		},
	}
	f.add(show, brokerplug.TopologyShow)
	return show
}
