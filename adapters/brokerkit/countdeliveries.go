package brokerkit

import (
	"container/list"
	"context"
	"sync"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// DefaultCountedMessages bounds the message ids one CountDeliveries
// handler remembers.
const DefaultCountedMessages = 65536

// CountDeliveries returns h with each delivery's DeliveryAttempt supplied
// by this process, for a broker that does not count deliveries
// (brokerplug.Features.DeliveryCount false; it reports 0). h serves one
// consumer group. The count is the deliveries of the message's message_id
// (the business id, the same on every redelivery and copy) that this
// handler has seen, from 1; the handler's decision to acknowledge a
// message forgets it at once. At most limit ids are remembered
// (DefaultCountedMessages when limit <= 0), the least recently delivered
// forgotten first, and nothing survives the process: after a restart, or
// for a message forgotten for room, the count starts at 1 again. Counts
// are therefore a lower bound, which is what their readers need: the
// retry backoff grows with them, and a compensation that runs out of
// attempts still ends at its RetryUntil time. A delivery whose broker
// reports a count (> 0) keeps it.
func CountDeliveries(h ports.BatchHandler, limit int) ports.BatchHandler {
	if limit <= 0 {
		limit = DefaultCountedMessages
	}
	return &deliveryCounter{next: h, limit: limit, byID: map[string]*list.Element{}, lru: list.New()}
}

type deliveryCounter struct {
	next  ports.BatchHandler
	limit int

	mu   sync.Mutex
	byID map[string]*list.Element // message id -> element of lru
	lru  *list.List               // *counted, most recently delivered first
}

type counted struct {
	id string
	n  int32
}

// HandleBatch implements ports.BatchHandler.
func (c *deliveryCounter) HandleBatch(ctx context.Context, deliveries []ports.Delivery) []ports.Decision {
	ds := make([]ports.Delivery, len(deliveries))
	c.mu.Lock()
	for i, d := range deliveries {
		if d.DeliveryAttempt <= 0 {
			d.DeliveryAttempt = c.count(d.Properties[message.PropMessageID])
		}
		ds[i] = d
	}
	c.mu.Unlock()
	decisions := c.next.HandleBatch(ctx, ds)
	c.mu.Lock()
	for i, dec := range decisions {
		if i < len(ds) && dec.Ack {
			c.forget(ds[i].Properties[message.PropMessageID])
		}
	}
	c.mu.Unlock()
	return decisions
}

// count records one more delivery of id and returns its number; a
// delivery without an id counts as a first one. c.mu is held.
func (c *deliveryCounter) count(id string) int32 {
	if id == "" {
		return 1
	}
	if e, ok := c.byID[id]; ok {
		e.Value.(*counted).n++
		c.lru.MoveToFront(e)
		return e.Value.(*counted).n
	}
	c.byID[id] = c.lru.PushFront(&counted{id: id, n: 1})
	for c.lru.Len() > c.limit {
		oldest := c.lru.Back()
		delete(c.byID, oldest.Value.(*counted).id)
		c.lru.Remove(oldest)
	}
	return 1
}

// forget drops id's count. c.mu is held.
func (c *deliveryCounter) forget(id string) {
	if e, ok := c.byID[id]; ok {
		delete(c.byID, id)
		c.lru.Remove(e)
	}
}
