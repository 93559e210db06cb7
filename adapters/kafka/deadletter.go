package kafka

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/seckill-dev/seckill/ports"
)

// originTable holds the origin of the dead letters being handled, by
// BrokerMessageID (topic/partition/offset), read off their headers
// (dlq_group, dlq_deliveries) before the handler call and forgotten after.
type originTable struct {
	mu sync.Mutex
	m  map[string]ports.DeadLetterOrigin
	// pending holds the origin headers of records about to be handled.
	pending map[string][2]string
}

// set records the origins of ds; a delivery without both headers has none.
func (t *originTable) set(ds []ports.Delivery) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range ds {
		h, ok := t.pending[d.BrokerMessageID]
		if !ok || h[0] == "" {
			continue
		}
		n, err := strconv.ParseInt(h[1], 10, 32)
		if err != nil || n < 1 {
			continue
		}
		t.m[d.BrokerMessageID] = ports.DeadLetterOrigin{Group: h[0], Deliveries: int32(n)}
	}
}

// note records the origin headers of a record about to be delivered.
func (t *originTable) note(id, group, deliveries string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending == nil {
		t.pending = map[string][2]string{}
	}
	t.pending[id] = [2]string{group, deliveries}
}

// clear forgets the origins of ds.
func (t *originTable) clear(ds []ports.Delivery) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range ds {
		delete(t.m, d.BrokerMessageID)
		delete(t.pending, d.BrokerMessageID)
	}
}

// origin tells the origin of a dead letter being handled.
func (t *originTable) origin(d ports.Delivery) (ports.DeadLetterOrigin, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.m[d.BrokerMessageID]
	return o, ok
}

// DeadLetterReader returns the run loop of the group
// <prefix>SECKILL_DLQ_READER on every <prefix>*.DLQ topic (a regular
// expression subscription: a group added later is read too, within the
// metadata refresh of 10 s). Each dead letter is handed alone, in place:
// one not acknowledged is handed again after the retry delay and is never
// dead-lettered further. origin reads the source group and its delivery
// count off the record's headers (false without them).
func (b *broker) DeadLetterReader(reader func(origin func(ports.Delivery) (ports.DeadLetterOrigin, bool)) ports.BatchHandler) (func(context.Context) error, error) {
	r, err := newDeadLetterRunner(b.s, func(t *originTable) ports.BatchHandler { return reader(t.origin) }, b.deps(), b.log)
	if err != nil {
		return nil, fmt.Errorf("dead-letter reader: %w", err)
	}
	return r.Run, nil
}
