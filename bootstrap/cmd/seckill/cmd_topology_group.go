package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
)

// addGroupCmd is topology add-group: it registers an outside consumer
// group of the ORDER_EVENT topic on the chosen broker
// (brokerplug.TopologyTarget.AddGroup).
func (c *cli) addGroupCmd() *cobra.Command {
	var f topologyFlags
	var retries int
	cmd := &cobra.Command{
		Use:   "add-group NAME [flags]",
		Short: "Register a consumer group of the ORDER_EVENT topic for an outside consumer",
		Long: `Register the consumer group NAME (after the prefix) for a consumer of another team that reads
the ORDER_EVENT topic from the broker (docs/events.md, "On the broker"), with --retry-max
redeliveries before a message is dead-lettered. Idempotent: one line per node says what it did.

RocketMQ (5.5 refuses a consumer group it does not know): a NORMAL (concurrent, not orderly) group
with retryMaxTimes --retry-max, on every master the name server lists or on --broker only (as
apply); the ORDER_EVENT topic must exist (seckill topology apply). Each line says registered,
updated (the settings that differed) or already registered (nothing changed).
RabbitMQ: a durable quorum queue NAME bound to the ORDER_EVENT fanout exchange, with a delivery
limit of --retry-max and its dead-letter queue NAME.DLQ, like the service's own groups; it receives
only messages published after it was bound.
Kafka: the group's retry and dead-letter topics (the group comes into being when its consumer joins).

NAME: letters, digits, '_' and '-'; names starting with CG_SECKILL_ are the service's own groups
and are refused (RocketMQ also refuses its system groups, CID_RMQ_SYS_).`,
		Example: `  seckill topology add-group CG_FINANCE_EXPORT_V1                 # RocketMQ: every master of $SECKILL_ROCKETMQ_NAMESRV
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
			if err := brokerplug.CheckOutsideGroupName(name); err != nil {
				return clikit.Usagef(cmd, "%v", err)
			}
			if retries < 0 {
				return clikit.Usagef(cmd, "--retry-max %d: want at least 0", retries)
			}
			targets, ctx, cancel, err := f.targets(cmd)
			if err != nil {
				return wrapUnlessUsage("topology add-group", err)
			}
			defer cancel()
			err = perTarget(targets, func(t brokerplug.TopologyTarget) error {
				line, err := t.AddGroup(ctx, name, retries)
				if err == nil {
					fmt.Fprintln(c.stdout, label(t)+line)
				}
				return err
			})
			switch {
			case errors.Is(err, brokerplug.ErrInvalidTopology):
				return clikit.Usagef(cmd, "topology add-group: %v", err)
			case err != nil:
				return fmt.Errorf("topology add-group: %w", err)
			}
			return nil
		},
	}
	f.add(cmd, brokerplug.TopologyAddGroup)
	cmd.Flags().IntVar(&retries, "retry-max", brokerplug.OutsideGroupRetries,
		"redeliveries before a message is dead-lettered (RocketMQ: the group's retryMaxTimes; RabbitMQ: the queue's delivery limit)")
	return cmd
}
