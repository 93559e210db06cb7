package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
)

// defaultNamesrv is the name server of the local stack, the default of the
// topology commands when the environment names none.
const defaultNamesrv = "127.0.0.1:9876"

// topologyFlags are the flags of the topology subcommands.
type topologyFlags struct {
	broker, namesrv, prefix string
	queues                  int
	retryMax                []string
	timeout                 time.Duration
}

// envOr returns the environment variable key, or def when it is unset.
func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// add declares the flags on cmd; broker adds the addresses and the timeout.
func (f *topologyFlags) add(cmd *cobra.Command, broker bool) {
	fs := cmd.Flags()
	fs.StringVar(&f.prefix, "prefix", os.Getenv("SECKILL_TOPIC_PREFIX"),
		"prefix of every topic and group name ($SECKILL_TOPIC_PREFIX; empty in production)")
	fs.IntVar(&f.queues, "queues", rocketmq.DefaultTopicQueues, "read and write queues of each business topic")
	fs.StringArrayVar(&f.retryMax, "retry-max", nil,
		"GROUP=N: retryMaxTimes N for the consumer group GROUP (its name without the prefix); repeatable")
	if broker {
		f.addBroker(cmd)
	}
}

// addBroker declares the flags that select the brokers (--broker,
// --namesrv) and the bound of the whole command (--timeout).
func (f *topologyFlags) addBroker(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.broker, "broker", os.Getenv("SECKILL_ROCKETMQ_BROKER"),
		`remoting address of the one broker to work on ($SECKILL_ROCKETMQ_BROKER); empty: every master the name server lists`)
	fs.StringVar(&f.namesrv, "namesrv", envOr("SECKILL_ROCKETMQ_NAMESRV", defaultNamesrv),
		`name server address ($SECKILL_ROCKETMQ_NAMESRV); "" skips the check that it routes every topic to the broker (then --broker is needed)`)
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "bound of the whole command")
}

// topology builds the topology the flags describe; a flag value it cannot
// use is a usage error.
func (f *topologyFlags) topology(cmd *cobra.Command) (rocketmq.Topology, error) {
	opts := []rocketmq.TopologyOption{rocketmq.WithTopicQueues(f.queues)}
	for _, kv := range f.retryMax {
		group, n, ok := strings.Cut(kv, "=")
		retries, err := strconv.Atoi(n)
		if !ok || err != nil {
			return rocketmq.Topology{}, clikit.Usagef(cmd, "--retry-max %q: want GROUP=N", kv)
		}
		opts = append(opts, rocketmq.WithRetryMaxTimes(rocketmq.Group(group), retries))
	}
	t, err := rocketmq.NewTopology(rocketmq.Config{TopicPrefix: f.prefix}, opts...)
	if err != nil {
		return rocketmq.Topology{}, clikit.Usagef(cmd, "%v", err)
	}
	return t, nil
}

// brokerTarget is one broker a topology command works on.
type brokerTarget struct {
	admin *rocketmq.Admin
	// ref names the broker; ref.Name is empty for --broker.
	ref rocketmq.BrokerRef
}

// label prefixes the broker's lines when the command works on every master
// ("broker-a: "); it is empty for --broker, whose output is one broker's.
func (b brokerTarget) label() string {
	if b.ref.Name == "" {
		return ""
	}
	return b.ref.Name + ": "
}

// targets returns the brokers the flags select and the command's context
// bounded by --timeout: the broker of --broker (or $SECKILL_ROCKETMQ_BROKER)
// alone, else every master the name server lists (rocketmq.Admin.Masters).
// Flags it cannot use are usage errors; a name server that cannot be read
// or lists no master is an error.
func (f *topologyFlags) targets(cmd *cobra.Command) ([]brokerTarget, context.Context, context.CancelFunc, error) {
	if f.broker == "" && f.namesrv == "" {
		return nil, nil, nil, clikit.Usagef(cmd, `--namesrv "" needs --broker: the brokers are read from the name server`)
	}
	if f.timeout <= 0 {
		return nil, nil, nil, clikit.Usagef(cmd, "--timeout must be > 0")
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	admin := rocketmq.NewAdmin(f.broker, f.namesrv, 5*time.Second)
	if f.broker != "" {
		return []brokerTarget{{admin: admin, ref: rocketmq.BrokerRef{Addr: f.broker}}}, ctx, cancel, nil
	}
	masters, err := admin.Masters(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	out := make([]brokerTarget, len(masters))
	for i, m := range masters {
		out[i] = brokerTarget{admin: admin.ForBroker(m), ref: m}
	}
	return out, ctx, cancel, nil
}

// where describes the broker a summary line is about.
func (f *topologyFlags) where(t rocketmq.Topology, b brokerTarget) string {
	s := fmt.Sprintf("prefix %q, broker %s", t.Prefix, b.ref)
	if f.namesrv != "" {
		s += ", routed by name server " + f.namesrv
	}
	return s
}

// runApply applies t to every target in turn and prints what it repaired
// ("applied: [broker: ]difference") and one summary line per broker that
// matches ("topology: ..."). A broker that fails does not stop the others;
// the error names each that failed.
func (c *cli) runApply(cmd *cobra.Command, f *topologyFlags, t rocketmq.Topology) error {
	targets, ctx, cancel, err := f.targets(cmd)
	if err != nil {
		if clikit.ExitCode(err) == 2 {
			return err
		}
		return fmt.Errorf("topology apply: %w", err)
	}
	defer cancel()
	var failed []string
	for _, b := range targets {
		applied, err := t.Apply(ctx, b.admin)
		for _, d := range applied {
			fmt.Fprintln(c.stdout, "applied: "+b.label()+d.String())
		}
		if err != nil {
			if b.label() == "" { // the one broker of --broker: its error as such
				return fmt.Errorf("topology apply: %w", err)
			}
			failed = append(failed, fmt.Sprintf("%s: %v", b.ref, err))
			continue
		}
		fmt.Fprintf(c.stdout, "topology: %d topics and %d groups match (%s; %d difference(s) repaired)\n",
			len(t.Topics), len(t.Groups), f.where(t, b), len(applied))
	}
	if len(failed) > 0 {
		return fmt.Errorf("topology apply: %d of %d broker(s) failed: %s", len(failed), len(targets), strings.Join(failed, "; "))
	}
	return nil
}

// runCheck checks t on every target and prints each difference
// ("[broker: ]difference") and one summary line per broker that matches.
// It fails when a broker differs or cannot be read.
func (c *cli) runCheck(cmd *cobra.Command, f *topologyFlags, t rocketmq.Topology) error {
	targets, ctx, cancel, err := f.targets(cmd)
	if err != nil {
		if clikit.ExitCode(err) == 2 {
			return err
		}
		return fmt.Errorf("topology check: %w", err)
	}
	defer cancel()
	total := 0
	var differ, unread []string
	for _, b := range targets {
		diffs, err := t.Check(ctx, b.admin)
		if err != nil {
			if b.label() == "" { // the one broker of --broker: its error as such
				return fmt.Errorf("topology check: %w", err)
			}
			unread = append(unread, fmt.Sprintf("%s: %v", b.ref, err))
			continue
		}
		for _, d := range diffs {
			fmt.Fprintln(c.stdout, b.label()+d.String())
		}
		if len(diffs) > 0 {
			total += len(diffs)
			differ = append(differ, b.ref.String())
			continue
		}
		fmt.Fprintf(c.stdout, "topology: %d topics and %d groups match (%s)\n", len(t.Topics), len(t.Groups), f.where(t, b))
	}
	var problems []string
	if total > 0 {
		where := f.where(t, targets[0])
		if targets[0].label() != "" {
			where = fmt.Sprintf("prefix %q, broker(s) %s", t.Prefix, strings.Join(differ, ", "))
		}
		problems = append(problems, fmt.Sprintf("%d difference(s) from the topology (%s); seckill topology apply repairs them", total, where))
	}
	if len(unread) > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d broker(s) could not be read: %s", len(unread), len(targets), strings.Join(unread, "; ")))
	}
	if len(problems) > 0 {
		return fmt.Errorf("topology check: %s", strings.Join(problems, "; "))
	}
	return nil
}

// topologyCmd holds apply, check and show of the broker topology
// (rocketmq.Topology).
func (c *cli) topologyCmd() *cobra.Command {
	return groupCmd("topology", "Apply, check or show the broker's topics and consumer groups, register an outside group",
		`The broker topology of the service, defined once in Go (adapters/rocketmq, Topology): the five
business topics with their message types and queue counts, a %DLQ% topic per business consumer
group, the five business consumer groups with their retryMaxTimes (the projection group orderly)
and the dead-letter reader group, every name behind the prefix. The commands talk to the
brokers' and the name server's remoting ports directly (no mqadmin, no JVM); apply and check
work on every master broker the name server lists unless --broker or $SECKILL_ROCKETMQ_BROKER
names one. The local stack (deploy/local/stack.sh up)
runs apply and check; elsewhere run apply before the service starts: RocketMQ 5.5 refuses
consumers of unknown groups. With another broker (SECKILL_BROKER), apply, check and add-group
work on that broker through its plug, from the service's configuration (its address and prefix
settings), and the RocketMQ flags do not apply: on RabbitMQ apply declares the exchanges and
quorum queues of adapters/rabbitmq, on Kafka it creates the topics; check lists what is missing
or differs (the service also creates its resources at start). add-group registers a consumer group of the
ORDER_EVENT topic for another team's consumer (on RabbitMQ: its queue bound to the exchange).`,
		c.topologyApplyCmd(), c.topologyCheckCmd(), topologyShowCmd(c.stdout), c.addGroupCmd())
}

// topologyApplyCmd is `topology apply`.
func (c *cli) topologyApplyCmd() *cobra.Command {
	var applyFlags topologyFlags
	apply := &cobra.Command{
		Use:   "apply [flags]",
		Short: "Create or update the topics and consumer groups that differ from the topology",
		Long: `Make the brokers match the topology (seckill topology show): read each broker's topics and
consumer groups, create or update only those that are missing or differ (each with its whole
configuration), read them again and wait until the name server routes every topic to the
broker. Idempotent: on a broker that matches it writes nothing. Topics and groups the topology
does not name are left alone.

Which brokers: --broker ADDR, or $SECKILL_ROCKETMQ_BROKER when --broker is not given, selects
that one broker only (as before; the output is that broker's lines without a prefix). With
neither (or an empty value: --broker "" overrides the variable), every master broker the name
server (--namesrv) lists, one after the other: each repaired difference reads "applied:
broker-a: ...", each broker that matches gets its own summary line, and the command fails if
any broker still differs or cannot be written (the others are applied all the same). On a
cluster, apply to every master: a topic or group missing on one broker breaks the clients whose
queues or retries land there.

Prints each difference it repaired ("applied: ..."), then the summary line ("topology: ...").`,
		Example: `  seckill topology apply                                  # the production topology on every master of $SECKILL_ROCKETMQ_NAMESRV (or on $SECKILL_ROCKETMQ_BROKER when set)
  seckill topology apply --broker ""                      # every master, even with $SECKILL_ROCKETMQ_BROKER set
  seckill topology apply --broker 127.0.0.1:10911         # that broker only
  seckill topology apply --prefix T1_ --queues 4 --retry-max CG_SECKILL_AUDIT_V1=1`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if t, ok, err := pluggedTopology(cmd, nil); ok || err != nil {
				if err != nil {
					return err
				}
				return applyPlugged(cmd.Context(), c.stdout, t, applyFlags.timeout)
			}
			t, err := applyFlags.topology(cmd)
			if err != nil {
				return err
			}
			return c.runApply(cmd, &applyFlags, t)
		},
	}
	applyFlags.add(apply, true)
	return apply
}

// topologyCheckCmd is `topology check`.
func (c *cli) topologyCheckCmd() *cobra.Command {
	var checkFlags topologyFlags
	check := &cobra.Command{
		Use:   "check [flags]",
		Short: "List every difference between the broker and the topology (exit 1 if any)",
		Long: `Read each broker's topics and consumer groups (and the name server's routes) and print every
difference from the topology, one per line: a missing topic or group, a topic's message type,
queue count or perm, a group's retryMaxTimes, consumeMessageOrderly or consumeEnable, a topic
whose route at the name server does not name the broker. Exit status 1 when there is one (or a
broker cannot be read), 0 with a summary line per broker when every broker matches. Changes
nothing.

Which brokers: as apply. --broker ADDR or $SECKILL_ROCKETMQ_BROKER: that broker only; with
neither (or --broker ""), every master broker the name server lists, each difference prefixed
with the broker's name ("broker-b: topic X: missing"), one summary line per broker that
matches. Checking every master also verifies that every topic is routed to every master.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if t, ok, err := pluggedTopology(cmd, nil); ok || err != nil {
				if err != nil {
					return err
				}
				return checkPlugged(cmd.Context(), c.stdout, t, checkFlags.timeout)
			}
			t, err := checkFlags.topology(cmd)
			if err != nil {
				return err
			}
			return c.runCheck(cmd, &checkFlags, t)
		},
	}
	checkFlags.add(check, true)
	return check
}

// topologyShowCmd is `topology show`, printing to w.
func topologyShowCmd(w io.Writer) *cobra.Command {
	var showFlags topologyFlags
	show := &cobra.Command{
		Use:   "show [flags]",
		Short: "Print the topology: topics and consumer groups with their settings",
		Long: `Print the topology the other subcommands apply and check, without contacting the broker:
each topic with its message type, queue count and perm, then each consumer group with its
retryMaxTimes and consumeMessageOrderly.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := showFlags.topology(cmd)
			if err != nil {
				return err
			}
			return writeTopology(w, t)
		},
	}
	showFlags.add(show, false)
	return show
}

// writeTopology prints t as two tables.
func writeTopology(w io.Writer, t rocketmq.Topology) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tTYPE\tQUEUES\tPERM")
	for _, s := range t.Topics {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", s.Name, s.Type, s.Queues, s.Perm)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "GROUP\tRETRY_MAX_TIMES\tORDERLY")
	for _, s := range t.Groups {
		fmt.Fprintf(tw, "%s\t%d\t%t\n", s.Name, s.RetryMaxTimes, s.Orderly)
	}
	return tw.Flush()
}
