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
	"github.com/seckill-dev/seckill/bootstrap/cmd/internal/clikit"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// Addresses of the local stack, the defaults of the topology commands when
// the environment names none.
const (
	defaultBroker  = "127.0.0.1:10911"
	defaultNamesrv = "127.0.0.1:9876"
)

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
	if !broker {
		return
	}
	fs.StringVar(&f.broker, "broker", envOr("SECKILL_ROCKETMQ_BROKER", defaultBroker),
		"broker remoting address ($SECKILL_ROCKETMQ_BROKER)")
	fs.StringVar(&f.namesrv, "namesrv", envOr("SECKILL_ROCKETMQ_NAMESRV", defaultNamesrv),
		`name server address ($SECKILL_ROCKETMQ_NAMESRV); "" skips the check that it routes every topic`)
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

// admin returns the admin client of the flags' broker and name server and
// the command's context bounded by --timeout.
func (f *topologyFlags) admin(cmd *cobra.Command) (*rocketmq.Admin, context.Context, context.CancelFunc, error) {
	if f.broker == "" {
		return nil, nil, nil, clikit.Usagef(cmd, "--broker is empty")
	}
	if f.timeout <= 0 {
		return nil, nil, nil, clikit.Usagef(cmd, "--timeout must be > 0")
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	return rocketmq.NewAdmin(f.broker, f.namesrv, 5*time.Second), ctx, cancel, nil
}

// rabbitSelected reports whether SECKILL_BROKER selects RabbitMQ and, if
// so, returns its topology from the service's configuration.
func rabbitSelected() (rabbitTopology, bool, error) {
	if os.Getenv("SECKILL_BROKER") != config.BrokerRabbitMQ {
		return rabbitTopology{}, false, nil
	}
	cfg, _, err := loadConfig()
	if err != nil {
		return rabbitTopology{}, true, err
	}
	r, err := newRabbitTopology(cfg)
	return r, true, err
}

// where describes the broker a summary line is about.
func (f *topologyFlags) where(t rocketmq.Topology) string {
	s := fmt.Sprintf("prefix %q, broker %s", t.Prefix, f.broker)
	if f.namesrv != "" {
		s += ", routed by name server " + f.namesrv
	}
	return s
}

// topologyCmd holds apply, check and show of the broker topology
// (rocketmq.Topology).
func (c *cli) topologyCmd() *cobra.Command {
	var applyFlags, checkFlags, showFlags topologyFlags
	apply := &cobra.Command{
		Use:   "apply [flags]",
		Short: "Create or update the topics and consumer groups that differ from the topology",
		Long: `Make the broker match the topology (seckill topology show): read its topics and consumer
groups, create or update only those that are missing or differ (each with its whole
configuration), read them again and wait until the name server routes every topic. Prints
each difference it repaired ("applied: ..."), then the summary line. Idempotent: on a broker
that matches it writes nothing. Topics and groups the topology does not name are left alone.`,
		Example: `  seckill topology apply                                  # the production topology, $SECKILL_ROCKETMQ_BROKER
  seckill topology apply --prefix T1_ --queues 4 --retry-max CG_SECKILL_AUDIT_V1=1`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if r, ok, err := rabbitSelected(); ok || err != nil {
				if err != nil {
					return err
				}
				return r.apply(cmd.Context(), c.stdout, applyFlags.timeout)
			}
			t, err := applyFlags.topology(cmd)
			if err != nil {
				return err
			}
			admin, ctx, cancel, err := applyFlags.admin(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			applied, err := t.Apply(ctx, admin)
			for _, d := range applied {
				fmt.Fprintln(c.stdout, "applied: "+d.String())
			}
			if err != nil {
				return fmt.Errorf("topology apply: %w", err)
			}
			fmt.Fprintf(c.stdout, "topology: %d topics and %d groups match (%s; %d difference(s) repaired)\n",
				len(t.Topics), len(t.Groups), applyFlags.where(t), len(applied))
			return nil
		},
	}
	applyFlags.add(apply, true)

	check := &cobra.Command{
		Use:   "check [flags]",
		Short: "List every difference between the broker and the topology (exit 1 if any)",
		Long: `Read the broker's topics and consumer groups (and the name server's routes) and print every
difference from the topology, one per line: a missing topic or group, a topic's message type,
queue count or perm, a group's retryMaxTimes, consumeMessageOrderly or consumeEnable, a topic
the name server does not route. Exit status 1 when there is one (or the broker cannot be read),
0 with a summary line when the broker matches. Changes nothing.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if r, ok, err := rabbitSelected(); ok || err != nil {
				if err != nil {
					return err
				}
				return r.check(cmd.Context(), c.stdout, checkFlags.timeout)
			}
			t, err := checkFlags.topology(cmd)
			if err != nil {
				return err
			}
			admin, ctx, cancel, err := checkFlags.admin(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			diffs, err := t.Check(ctx, admin)
			if err != nil {
				return fmt.Errorf("topology check: %w", err)
			}
			for _, d := range diffs {
				fmt.Fprintln(c.stdout, d.String())
			}
			if len(diffs) > 0 {
				return fmt.Errorf("topology check: %d difference(s) from the topology (%s); seckill topology apply repairs them",
					len(diffs), checkFlags.where(t))
			}
			fmt.Fprintf(c.stdout, "topology: %d topics and %d groups match (%s)\n", len(t.Topics), len(t.Groups), checkFlags.where(t))
			return nil
		},
	}
	checkFlags.add(check, true)

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
			return writeTopology(c.stdout, t)
		},
	}
	showFlags.add(show, false)

	return groupCmd("topology", "Apply, check or show the broker's topics and consumer groups",
		`The broker topology of the service, defined once in Go (adapters/rocketmq, Topology): the five
business topics with their message types and queue counts, a %DLQ% topic per business consumer
group, the five business consumer groups with their retryMaxTimes (the projection group orderly)
and the dead-letter reader group, every name behind the prefix. The commands talk to the
broker's remoting port directly (no mqadmin, no JVM). The local stack (deploy/local/stack.sh up)
runs apply and check; elsewhere run apply before the service starts: RocketMQ 5.5 refuses
consumers of unknown groups. With SECKILL_BROKER=rabbitmq, apply and check work on RabbitMQ
instead (SECKILL_RABBITMQ_URL, _PREFIX, _FIFO_SHARDS): apply declares the exchanges and quorum
queues of adapters/rabbitmq (the service also declares them at start), check lists the missing
ones and those declared with other arguments.`, apply, check, show)
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
