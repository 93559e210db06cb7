package contracttest

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/ports"
)

// BrokerHarness gives the broker suite the adapter under test: a real
// broker adapter (RocketMQ, later RabbitMQ) or the memory broker.
type BrokerHarness interface {
	// Namespace returns a fresh namespace of the broker, isolated from
	// every other namespace: its topics hold only what the subtest
	// publishes and its consumer groups are new. It is called once per
	// subtest and registers its own cleanup with t.
	Namespace(t *testing.T) BrokerNamespace
	// Options tunes the suite's tolerances to the adapter (timer precision, waits).
	Options() BrokerOptions
}

// BrokerNamespace is one isolated namespace of the broker under test.
type BrokerNamespace struct {
	// Publisher publishes to the namespace's topics.
	Publisher ports.Publisher
	// Consume runs h as the consumer group named group of topic until the
	// test ends. The group name is local to the namespace (the harness
	// maps it to a physical group); different names are different groups,
	// each receiving every message of the topic. The suite starts a
	// consumer before it publishes what the consumer should receive, and
	// at most once per topic and group. The handler only records and
	// decides; it never blocks.
	Consume func(t *testing.T, topic ports.Topic, group string, h ports.BatchHandler)
	// Pump drives a broker that delivers only when told to (the memory
	// broker): it hands every consumer started with Consume what is due
	// for it and, when nothing was due, moves the broker's clock forward
	// by a small step (well below the delays the suite asks for). The
	// suite calls it, a bounded number of times, instead of waiting. Nil
	// for a broker that delivers on its own; the suite then waits on the
	// wall clock, bounded by BrokerOptions.WaitTimeout.
	Pump func(ctx context.Context) error
	// Now reads the broker's clock: time.Now for a real broker, the fake
	// clock that Pump advances for the memory broker. The suite compares
	// its readings only with each other.
	Now func() time.Time
}

// BrokerOptions tunes the suite's tolerances to the adapter. Every case
// runs for every adapter: the ports promise message-group order and
// RetryAfter, so an adapter that cannot keep them does not pass.
type BrokerOptions struct {
	// TimerPrecision is how much earlier than a decision's RetryAfter the
	// broker may redeliver (its timer's rounding); zero for a timer that
	// never fires early.
	TimerPrecision time.Duration
	// WaitTimeout bounds each wait for deliveries of a broker without
	// Pump. Zero means DefaultBrokerWait.
	WaitTimeout time.Duration
	// Features are what the broker declares it does natively
	// (brokerplug.Features): the suite checks a declared feature, and
	// that a broker without it refuses what would need it.
	Features brokerplug.Features
}

// DefaultBrokerWait is the wait bound of BrokerOptions.WaitTimeout: a real
// broker's redelivery may come seconds after the invisible time ends.
const DefaultBrokerWait = 60 * time.Second

// maxPumps bounds the Pump calls of one wait (with the memory broker's
// step of 100 ms, several minutes of its clock).
const maxPumps = 5000

// Broker runs the publisher and consumer contract suite of ports.Publisher
// and ports.BatchHandler consumers: what any broker adapter and the memory
// broker must do for the application's at-least-once messaging. Each case
// is a parallel subtest on a namespace of its own:
//
//   - DeliveredToEachGroup: a confirmed publish reaches every subscribed
//     group with its message_id property, keys, tag, body and user
//     properties intact, as attempt 1;
//   - AckMeansNoRedelivery: an acknowledged message is not delivered to
//     its group again;
//   - NoAckMeansRedelivery: a message not acknowledged is delivered again
//     with a larger DeliveryAttempt;
//   - RetryAfterDelaysRedelivery: a RetryAfter decision delays the next
//     delivery by at least the delay, and a shorter delay comes back
//     first;
//   - MessageGroupOrder: the messages of one message group on the FIFO
//     topic are delivered in publish order, also across a redelivery;
//   - InvalidMessageRejected: an invalid message is refused with
//     ports.ErrSendRejected (never ErrSendUnknown) and never delivered;
//   - SameMessageIDTwice: publishing one message id twice may deliver it
//     twice (at-least-once; deduplication is the consumer's), and every
//     delivery carries that message id;
//   - without the DeliveryCount feature, every case runs with the group
//     handlers wrapped in brokerkit.CountDeliveries, as the composition
//     runs them, and the suite checks that the broker reported no count
//     of its own (0) on any delivery;
//   - DelayedDelivery: with the feature, a message with DeliverAt on the
//     DELAY topic is not delivered before then; without it, the publish
//     is refused with ports.ErrSendRejected (the outbox relay then holds
//     the message until it is due).
//
// Absence ("not delivered again") is never checked by sleeping: the suite
// waits for a later message that the broker redelivers after its own
// redelivery delay, at least once more than the absent delivery would have
// needed.
func Broker(t *testing.T, h BrokerHarness) {
	opts := h.Options()
	run := func(name string, fn func(t *testing.T, b *brokerRun)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, newBrokerRun(t, h.Namespace(t), opts))
		})
	}
	run("DeliveredToEachGroup", testDeliveredToEachGroup)
	run("AckMeansNoRedelivery", testAckMeansNoRedelivery)
	run("NoAckMeansRedelivery", testNoAckMeansRedelivery)
	run("RetryAfterDelaysRedelivery", testRetryAfterDelaysRedelivery)
	run("MessageGroupOrder", testMessageGroupOrder)
	run("InvalidMessageRejected", testInvalidMessageRejected)
	run("SameMessageIDTwice", testSameMessageIDTwice)
	run("DelayedDelivery", testDelayedDelivery)
}
