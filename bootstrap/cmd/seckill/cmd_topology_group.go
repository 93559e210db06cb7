package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
)

// addGroupFlags are the flags of topology add-group: apply's broker
// selection and prefix, and the group's retry count.
type addGroupFlags struct {
	topologyFlags
	retries int
}

// addGroupCmd is topology add-group: it registers an outside consumer
// group of the ORDER_EVENT topic (RocketMQ) or declares its queue bound to
// the ORDER_EVENT exchange (RabbitMQ).
func (c *cli) addGroupCmd() *cobra.Command {
	var f addGroupFlags
	cmd := &cobra.Command{
		Use:   "add-group NAME [flags]",
		Short: "Register a consumer group of the ORDER_EVENT topic for an outside consumer",
		Long: `Register the consumer group NAME (after the prefix) for a consumer of another team that reads
the ORDER_EVENT topic from the broker (docs/events.md, "On the broker"): RocketMQ 5.5 refuses a
consumer group it does not know.

RocketMQ: a NORMAL (concurrent, not orderly) group with retryMaxTimes --retry-max (default 16,
the broker's), on every master the name server lists or on --broker only (as apply). The
ORDER_EVENT topic must exist (seckill topology apply). One line per broker says what it did:
registered, updated (the settings that differed) or already registered (nothing changed).
Idempotent.

Another broker (SECKILL_BROKER) through its plug. RabbitMQ: a durable quorum queue NAME (after $SECKILL_RABBITMQ_PREFIX,
or --prefix when given) bound to the ORDER_EVENT fanout exchange, with a delivery limit of
--retry-max and its dead-letter queue NAME.DLQ, like the service's own groups. It receives only
messages published after it was bound. Idempotent.

NAME: letters, digits, '_' and '-' (the broker's rule without '%' and '|'); names starting with
CG_SECKILL_ are the service's own groups and CID_RMQ_SYS_ the broker's: both are refused.`,
		Example: `  seckill topology add-group CG_FINANCE_EXPORT_V1                 # every master of $SECKILL_ROCKETMQ_NAMESRV
  seckill topology add-group CG_SEARCH_INDEX_V1 --retry-max 5 --broker 127.0.0.1:10911
  SECKILL_BROKER=rabbitmq seckill topology add-group CG_FINANCE_EXPORT_V1`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return clikit.Usagef(cmd, "want one argument, the group NAME; got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := rocketmq.CheckOutsideGroupName(name); err != nil {
				return clikit.Usagef(cmd, "%v", err)
			}
			if f.retries < 0 {
				return clikit.Usagef(cmd, "--retry-max %d: want at least 0", f.retries)
			}
			if f.timeout <= 0 {
				return clikit.Usagef(cmd, "--timeout must be > 0")
			}
			var prefix *string
			if cmd.Flags().Changed("prefix") {
				prefix = &f.prefix
			}
			if t, ok, err := pluggedTopology(cmd, prefix); ok || err != nil {
				if err != nil {
					return err
				}
				return addGroupPlugged(cmd, c.stdout, t, f.timeout, name, f.retries)
			}
			t, err := rocketmq.NewTopology(rocketmq.Config{TopicPrefix: f.prefix})
			if err != nil {
				return clikit.Usagef(cmd, "%v", err)
			}
			spec, err := t.OutsideGroup(name, f.retries)
			if err != nil {
				return clikit.Usagef(cmd, "%v", err)
			}
			return c.runAddGroup(cmd, &f.topologyFlags, t, spec)
		},
	}
	f.addBroker(cmd)
	cmd.Flags().StringVar(&f.prefix, "prefix", os.Getenv("SECKILL_TOPIC_PREFIX"),
		"prefix of the group name ($SECKILL_TOPIC_PREFIX; on RabbitMQ $SECKILL_RABBITMQ_PREFIX unless given)")
	cmd.Flags().IntVar(&f.retries, "retry-max", rocketmq.OutsideGroupRetryMaxTimes,
		"retryMaxTimes of the group (RabbitMQ: the queue's delivery limit)")
	return cmd
}

// runAddGroup registers spec on every target in turn and prints one line
// per broker: "[broker: ]group X: registered|updated (...)|already
// registered (...)". A broker that fails does not stop the others; the
// error names each that failed.
func (c *cli) runAddGroup(cmd *cobra.Command, f *topologyFlags, t rocketmq.Topology, spec rocketmq.GroupSpec) error {
	targets, ctx, cancel, err := f.targets(cmd)
	if err != nil {
		if clikit.ExitCode(err) == 2 {
			return err
		}
		return fmt.Errorf("topology add-group: %w", err)
	}
	defer cancel()
	topic, err := t.OrderEventTopic()
	if err != nil {
		return fmt.Errorf("topology add-group: %w", err)
	}
	settings := fmt.Sprintf("NORMAL, retryMaxTimes %d, for topic %s", spec.RetryMaxTimes, topic)
	var failed []string
	for _, b := range targets {
		found, err := t.ApplyGroup(ctx, b.admin, spec)
		if err != nil {
			if b.label() == "" { // the one broker of --broker: its error as such
				return fmt.Errorf("topology add-group: %w", err)
			}
			failed = append(failed, fmt.Sprintf("%s: %v", b.ref, err))
			continue
		}
		switch {
		case len(found) == 0:
			fmt.Fprintf(c.stdout, "%sgroup %s: already registered (%s) on broker %s: nothing changed\n", b.label(), spec.Name, settings, b.ref)
		case found[0].Field == rocketmq.FieldMissing:
			fmt.Fprintf(c.stdout, "%sgroup %s: registered (%s) on broker %s\n", b.label(), spec.Name, settings, b.ref)
		default:
			was := make([]string, len(found))
			for i, d := range found {
				was[i] = d.Field + " was " + d.Got
			}
			fmt.Fprintf(c.stdout, "%sgroup %s: updated (%s; %s) on broker %s\n", b.label(), spec.Name, settings, strings.Join(was, ", "), b.ref)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("topology add-group: %d of %d broker(s) failed: %s", len(failed), len(targets), strings.Join(failed, "; "))
	}
	return nil
}
