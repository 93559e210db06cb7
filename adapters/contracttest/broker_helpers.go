package contracttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// brokerRun is one subtest's view of a broker namespace: its consumers
// record every delivery, with the group, the decision and the broker's
// clock, in one log in handling order.
type brokerRun struct {
	t      *testing.T
	ns     BrokerNamespace
	opts   BrokerOptions
	mu     sync.Mutex
	log    []brokerRecord
	notify chan struct{}
	// rawCounted counts deliveries a broker without DeliveryCount
	// reported with a count of its own (it should report 0).
	rawCounted int
}

// brokerRecord is one recorded delivery.
type brokerRecord struct {
	group string
	// id is the delivery's message_id property.
	id  string
	d   ports.Delivery
	at  time.Time
	ack bool
}

func newBrokerRun(t *testing.T, ns BrokerNamespace, opts BrokerOptions) *brokerRun {
	if ns.Publisher == nil || ns.Consume == nil || ns.Now == nil {
		t.Fatal("the broker harness returned a namespace without Publisher, Consume or Now")
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = DefaultBrokerWait
	}
	b := &brokerRun{t: t, ns: ns, opts: opts, notify: make(chan struct{}, 1)}
	if !opts.Features.DeliveryCount {
		t.Cleanup(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.rawCounted > 0 {
				t.Errorf("%d deliveries carried a count, but the broker declares no DeliveryCount (it must report 0)", b.rawCounted)
			}
		})
	}
	return b
}

// consume starts the consumer group of topic; it decides every delivery
// with decide and records it.
func (b *brokerRun) consume(topic ports.Topic, group string, decide func(ports.Delivery) ports.Decision) {
	b.t.Helper()
	var h ports.BatchHandler = brokerHandler(func(_ context.Context, ds []ports.Delivery) []ports.Decision {
		out := make([]ports.Decision, len(ds))
		b.mu.Lock()
		for i, d := range ds {
			out[i] = decide(d)
			b.log = append(b.log, brokerRecord{group: group, id: d.Properties[message.PropMessageID], d: d, at: b.ns.Now(), ack: out[i].Ack})
		}
		b.mu.Unlock()
		select {
		case b.notify <- struct{}{}:
		default:
		}
		return out
	})
	if !b.opts.Features.DeliveryCount {
		// What the composition does for such a broker.
		counted := brokerkit.CountDeliveries(h, 0)
		h = brokerHandler(func(ctx context.Context, ds []ports.Delivery) []ports.Decision {
			b.mu.Lock()
			for _, d := range ds {
				if d.DeliveryAttempt != 0 {
					b.rawCounted++
				}
			}
			b.mu.Unlock()
			return counted.HandleBatch(ctx, ds)
		})
	}
	b.ns.Consume(b.t, topic, group, h)
}

// ackAll acknowledges every delivery.
func ackAll(ports.Delivery) ports.Decision { return ports.Acked("contract") }

// brokerHandler adapts a function to ports.BatchHandler.
type brokerHandler func(ctx context.Context, ds []ports.Delivery) []ports.Decision

func (f brokerHandler) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	return f(ctx, ds)
}

// publish publishes msg and fails the test unless it is confirmed.
func (b *brokerRun) publish(msg ports.OutboundMessage) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.ns.Publisher.Publish(ctx, msg); err != nil {
		b.t.Fatalf("publish %s to %s: %v, want it confirmed", msg.MessageID, msg.Topic, err)
	}
}

// publishRejected publishes msg and fails the test unless it is refused
// with ports.ErrSendRejected alone.
func (b *brokerRun) publishRejected(what string, msg ports.OutboundMessage) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := b.ns.Publisher.Publish(ctx, msg)
	if !errors.Is(err, ports.ErrSendRejected) || errors.Is(err, ports.ErrSendUnknown) {
		b.t.Errorf("publish %s: got error %v, want one matching %v and not %v", what, err, ports.ErrSendRejected, ports.ErrSendUnknown)
	}
}

// records returns the recorded deliveries to group (every group when
// group is "") of the message ids given (every id when none), in handling
// order.
func (b *brokerRun) records(group string, ids ...string) []brokerRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []brokerRecord
	for _, r := range b.log {
		if (group == "" || r.group == group) && (len(ids) == 0 || slices.Contains(ids, r.id)) {
			out = append(out, r)
		}
	}
	return out
}

// maxAttempt returns the largest DeliveryAttempt of id's deliveries to
// group (0 when none).
func (b *brokerRun) maxAttempt(group, id string) int32 {
	var m int32
	for _, r := range b.records(group, id) {
		m = max(m, r.d.DeliveryAttempt)
	}
	return m
}

// waitFor returns once cond holds, pumping a broker that has Pump (a
// bounded number of times) or waiting for deliveries of one that has not
// (bounded by WaitTimeout); it fails the test when cond never holds.
func (b *brokerRun) waitFor(what string, cond func() bool) {
	b.t.Helper()
	if b.ns.Pump != nil {
		for range maxPumps {
			if cond() {
				return
			}
			if err := b.ns.Pump(b.t.Context()); err != nil {
				b.t.Fatalf("pump while waiting for %s: %v", what, err)
			}
		}
		if !cond() {
			b.t.Fatalf("no %s after %d pumps; deliveries:%s", what, maxPumps, b.describe())
		}
		return
	}
	deadline := time.NewTimer(b.opts.WaitTimeout)
	defer deadline.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for !cond() {
		select {
		case <-b.notify:
		case <-poll.C:
		case <-deadline.C:
			if cond() {
				return
			}
			b.t.Fatalf("no %s within %v; deliveries:%s", what, b.opts.WaitTimeout, b.describe())
		}
	}
}

// describe lists the log for failure messages (group/message_id#attempt).
func (b *brokerRun) describe() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s strings.Builder
	for i, r := range b.log {
		if i == 40 {
			s.WriteString(" ...")
			break
		}
		ack := ""
		if !r.ack {
			ack = "(no ack)"
		}
		fmt.Fprintf(&s, " %s/%s#%d%s", r.group, r.id, r.d.DeliveryAttempt, ack)
	}
	return s.String()
}

// describeRecords lists records for failure messages.
func describeRecords(rs []brokerRecord) string {
	var s strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&s, " %s/%s#%d", r.group, r.id, r.d.DeliveryAttempt)
	}
	return s.String()
}
