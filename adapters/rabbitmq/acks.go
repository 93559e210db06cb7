package rabbitmq

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/ports"
)

// ackChannel is what an ackTracker needs of its channel (*amqp.Channel).
type ackChannel interface {
	Ack(tag uint64, multiple bool) error
	IsClosed() bool
}

// tagState is where one delivery tag of an ackTracker stands.
type tagState uint8

const (
	// tagOpen: handed to the runner, not decided yet (a handler is
	// running, or its individual settlement has not returned).
	tagOpen tagState = iota
	// tagAckReady: the handler acknowledged it (its effect committed);
	// the next multiple ack that reaches it acknowledges it.
	tagAckReady
	// tagSettled: settled by a call of its own (nack, reject, or the ack
	// after a park) that has returned; the broker no longer holds it
	// unacknowledged, so a multiple ack above it skips it.
	tagSettled
)

// ackItem is what the runner logs of an acknowledged delivery once its
// acknowledgement was sent.
type ackItem struct {
	d   ports.Delivery
	dec ports.Decision
}

// trackedTag is one outstanding delivery tag of an ackTracker.
type trackedTag struct {
	tag   uint64
	state tagState
	item  ackItem
}

// ackTracker batches the acknowledgements of one channel into multiple
// acks (basic.ack with multiple=true, which settles every delivery of the
// channel up to its tag) without acknowledging any delivery before its
// handler's decision: it records every tag handed to the runner in
// delivery order, and a multiple ack is sent only for the longest prefix
// of them that is settled - acknowledged by a decision, or settled by an
// individual call that has returned - and only up to the highest
// acknowledged tag of that prefix, so the tag it names is always still
// unacknowledged on the broker. Acknowledgements above a tag still open
// wait until that tag is settled; the runner flushes after every batch, so
// the batch that settles the last open tag of a prefix sends its ack.
// Multiple acks leave in increasing tag order (sent under the lock).
//
// A tracker belongs to one channel and is dropped with it: the broker
// redelivers whatever the channel held unacknowledged when it closed.
type ackTracker struct {
	ch ackChannel

	mu sync.Mutex
	// pending holds the outstanding tags, ascending (tags of a channel
	// grow with each delivery): not yet covered by a multiple ack nor
	// dropped after an individual settlement.
	pending []trackedTag
	// acked is the tag of the last multiple ack sent (0: none yet).
	acked uint64
}

func newAckTracker(ch ackChannel) *ackTracker { return &ackTracker{ch: ch} }

// errUntracked is a settlement of a tag the tracker does not hold.
var errUntracked = errors.New("delivery tag not outstanding on this channel")

// track records tags, handed to the runner in delivery order; each must
// be above every tag tracked before.
func (t *ackTracker) track(tags ...uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tag := range tags {
		last := t.acked
		if n := len(t.pending); n > 0 {
			last = max(last, t.pending[n-1].tag)
		}
		if tag <= last {
			return fmt.Errorf("track delivery tag %d after %d: %w", tag, last, errUntracked)
		}
		t.pending = append(t.pending, trackedTag{tag: tag})
	}
	return nil
}

// ready marks tag acknowledged by its decision (its effect committed);
// item is returned by the flush that acknowledges it.
func (t *ackTracker) ready(tag uint64, item ackItem) error {
	return t.mark(tag, tagAckReady, item)
}

// settled marks tag settled by an individual call that has returned.
func (t *ackTracker) settled(tag uint64) error {
	return t.mark(tag, tagSettled, ackItem{})
}

func (t *ackTracker) mark(tag uint64, s tagState, item ackItem) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := slices.BinarySearchFunc(t.pending, tag, func(e trackedTag, tag uint64) int {
		switch {
		case e.tag < tag:
			return -1
		case e.tag > tag:
			return 1
		}
		return 0
	})
	if !ok || t.pending[i].state != tagOpen {
		return fmt.Errorf("settle delivery tag %d: %w", tag, errUntracked)
	}
	t.pending[i].state, t.pending[i].item = s, item
	return nil
}

// ackFlush is the result of one flush.
type ackFlush struct {
	// items are the acknowledged deliveries the flush settled, in tag
	// order: acknowledged when err is nil.
	items []ackItem
	// sent reports whether a multiple ack was sent (its tag is tag).
	sent bool
	tag  uint64
	// err is the multiple ack's error, or errStaleDelivery when the
	// channel closed before it: the broker redelivers those messages.
	err error
}

// flush sends the one multiple ack that the settled prefix of the
// outstanding tags allows, if it reaches an acknowledged tag, and drops
// that prefix. When the channel has closed, every acknowledged tag still
// outstanding is dropped without a call and returned with
// errStaleDelivery (the broker returns those messages to their queue).
func (t *ackTracker) flush() ackFlush {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ch.IsClosed() {
		var f ackFlush
		for _, e := range t.pending {
			if e.state == tagAckReady {
				f.items = append(f.items, e.item)
			}
		}
		t.pending = slices.DeleteFunc(t.pending, func(e trackedTag) bool { return e.state != tagOpen })
		if len(f.items) > 0 {
			f.err = errStaleDelivery
		}
		return f
	}
	var f ackFlush
	n := 0 // the settled prefix is pending[:n]
	for n < len(t.pending) && t.pending[n].state != tagOpen {
		if e := t.pending[n]; e.state == tagAckReady {
			f.items = append(f.items, e.item)
			f.tag = e.tag
		}
		n++
	}
	if len(f.items) > 0 {
		f.sent = true
		if err := t.ch.Ack(f.tag, true); err != nil {
			f.err = fmt.Errorf("multiple ack up to delivery tag %d (%d messages): %w", f.tag, len(f.items), err)
		}
		t.acked = f.tag
	}
	// Clear the dropped entries so that their items can be collected
	// before the slice's array is reallocated.
	clear(t.pending[:n])
	t.pending = t.pending[n:]
	return f
}

// ackBatchMetric is mq_ack_batch_messages{group}: messages per multiple
// ack of a RabbitMQ consumer.
func newAckBatchMetric(reg prometheus.Registerer) (*prometheus.HistogramVec, error) {
	return brokerkit.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mq_ack_batch_messages",
		Help:    "Messages acknowledged per multiple basic.ack of a RabbitMQ consumer (RunnerConfig.AckOneByOne false).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
	}, []string{"group"}))
}
