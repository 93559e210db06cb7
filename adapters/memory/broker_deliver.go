package memory

import (
	"context"
	"errors"
	"fmt"

	"github.com/seckill-dev/seckill/ports"
)

// DefaultBatchSize is the batch size of Deliver and Drain when given 0.
const DefaultBatchSize = 32

// maxDrainRounds bounds Drain against handlers that never settle.
const maxDrainRounds = 10_000

// errDrainRounds is returned by Drain when messages keep coming.
var errDrainRounds = errors.New("memory broker: drain did not settle")

// Deliver performs one receive for group on topic (test facility): it
// hands up to batchSize (DefaultBatchSize when <= 0) deliverable messages,
// oldest first, to h in one HandleBatch call and applies the decisions. A
// message is deliverable when group has neither acknowledged nor
// dead-lettered it, it is not being handled by another Deliver call, the
// clock reached its DeliverAt and its redelivery time, and, for a FIFO
// message group, every earlier message of the group is acknowledged or
// dead-lettered (so at most one message per group per receive). Each
// delivery counts an attempt. An acknowledging decision settles the
// message; any other makes it deliverable again after RetryAfter (or
// BrokerConfig.InvisibleDuration), or dead-letters it when it had
// MaxDeliveryAttempts. The handler runs without any broker lock held, so
// it may publish; if it panics, the batch counts as not acknowledged and
// the panic propagates. Deliver returns how many messages it delivered,
// and an error when ctx is done or h returned the wrong number of
// decisions (all of the batch then count as not acknowledged).
func (b *Broker) Deliver(ctx context.Context, topic ports.Topic, group string, h ports.BatchHandler, batchSize int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory broker deliver: %w", err)
	}
	if batchSize <= 0 {
		batchSize = DefaultBatchSize
	}
	batch, states := b.receive(topic, group, batchSize)
	if len(batch) == 0 {
		return 0, nil
	}
	settled := false
	defer func() {
		if !settled { // the handler panicked: nothing was acknowledged
			b.settle(topic, group, batch, states, make([]ports.Decision, len(batch)))
		}
	}()
	decisions := h.HandleBatch(ctx, batch)
	settled = true
	var err error
	if len(decisions) != len(batch) {
		err = fmt.Errorf("memory broker deliver %s/%s: handler returned %d decisions for %d deliveries", topic, group, len(decisions), len(batch))
		decisions = make([]ports.Decision, len(batch))
	}
	b.settle(topic, group, batch, states, decisions)
	return len(batch), err
}

// receive picks and marks in flight the next batch. It returns the
// deliveries and their consume states.
func (b *Broker) receive(topic ports.Topic, group string, batchSize int) ([]ports.Delivery, []*consumeState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := subKey{topic, group}
	states := b.subs[key]
	if states == nil {
		states = map[int64]*consumeState{}
		b.subs[key] = states
	}
	now := b.cfg.Clock.Now()
	blocked := map[string]bool{}
	var (
		batch  []ports.Delivery
		picked []*consumeState
	)
	for _, sm := range b.topics[topic] {
		if len(batch) == batchSize {
			break
		}
		st := states[sm.seq]
		if st == nil {
			st = &consumeState{}
			states[sm.seq] = st
		}
		if st.acked || st.dead {
			continue
		}
		fifo := sm.msg.MessageGroup
		if fifo != "" && blocked[fifo] {
			continue
		}
		if fifo != "" {
			blocked[fifo] = true
		}
		if st.inflight || sm.msg.DeliverAt.After(now) || st.visibleAt.After(now) {
			continue
		}
		st.inflight = true
		st.attempts++
		batch = append(batch, b.delivery(sm, st.attempts))
		picked = append(picked, st)
	}
	return batch, picked
}

// settle applies the decisions of one batch.
func (b *Broker) settle(topic ports.Topic, group string, batch []ports.Delivery, states []*consumeState, decisions []ports.Decision) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.cfg.Clock.Now()
	for i, st := range states {
		st.inflight = false
		d := decisions[i]
		switch {
		case d.Ack:
			st.acked = true
		case st.attempts >= b.cfg.MaxDeliveryAttempts:
			st.dead = true
			key := subKey{topic, group}
			b.dlq[key] = append(b.dlq[key], cloneDelivery(batch[i]))
		case d.RetryAfter > 0:
			st.visibleAt = now.Add(d.RetryAfter)
		default:
			st.visibleAt = now.Add(b.cfg.InvisibleDuration)
		}
	}
}

// Drain calls Deliver until no message is deliverable (test facility) and
// returns the total number of deliveries. Messages waiting for the clock
// (DeliverAt, RetryAfter) stay; advance the clock and drain again. It
// stops with an error when ctx is done, a Deliver fails, or after 10,000
// receives (a handler that never settles).
func (b *Broker) Drain(ctx context.Context, topic ports.Topic, group string, h ports.BatchHandler, batchSize int) (int, error) {
	total := 0
	for range maxDrainRounds {
		n, err := b.Deliver(ctx, topic, group, h, batchSize)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
	return total, fmt.Errorf("%w: %s/%s after %d receives", errDrainRounds, topic, group, maxDrainRounds)
}
