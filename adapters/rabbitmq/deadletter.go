package rabbitmq

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-dev/seckill/ports"
)

// lastDeathReason returns the reason of the message's latest
// dead-lettering: x-death lists one entry per queue and reason, the most
// recent first (x-first-death-reason keeps the first one, which for a
// retried message is the delay tier's "expired").
func lastDeathReason(h amqp.Table) string {
	deaths, _ := h["x-death"].([]any)
	if len(deaths) == 0 {
		return ""
	}
	last, _ := deaths[0].(amqp.Table)
	return stringHeader(last, "reason")
}

// DeadLetter describes a message received from a group's dead-letter
// queue. The dead-lettered copy keeps the original's body, headers (tag,
// keys, properties with message_id, born time, send id) and AMQP message
// id; RabbitMQ adds an x-death entry naming the source queue and the
// reason ("rejected" by the runner on the last attempt,
// "delivery_limit" when the quorum queue's limit was reached first, for
// example by consumers that crashed while holding the message).
type DeadLetter struct {
	// SourceGroup is the physical group whose retries ran out.
	SourceGroup string
	// LogicalTopic is the topic the group consumes.
	LogicalTopic ports.Topic
	// SourceDeliveries is how many times the group received the message.
	SourceDeliveries int32
	// Reason is the reason of the latest dead-lettering (x-death):
	// "rejected" or "delivery_limit".
	Reason string
}

// originKey names one dead letter being handled.
type originKey struct{ queue, sendID string }

// NewDeadLetterRunner returns the runner of every group's dead-letter
// queue of topo (concurrency 1, batches of up to 16). reader builds the
// handler from origin, which tells a delivery's source while the handler
// runs; a delivery's Topic is its dead-letter queue's name, like the
// RocketMQ adapter's %DLQ%<group> topic. Not acknowledged dead letters
// are requeued after the backoff; nothing is dead-lettered further.
func NewDeadLetterRunner(cfg Config, topo Topology, reader func(origin func(ports.Delivery) (DeadLetter, bool)) ports.BatchHandler,
	log *slog.Logger, reg prometheus.Registerer) (*Runner, error) {
	var srcs []source
	for _, g := range topo.Groups {
		srcs = append(srcs, source{queue: g.DLQ, group: g, dead: true})
	}
	var r *Runner
	h := reader(func(d ports.Delivery) (DeadLetter, bool) { return r.origin(d) })
	r, err := newRunner(cfg, topo, RunnerConfig{Group: "DLQ_READER", BatchSize: 16, Concurrency: 1}, h, log, reg,
		topo.Prefix+"SECKILL_DLQ_READER", srcs)
	return r, err
}

// setOrigin records the source of a dead letter about to be handled.
func (r *Runner) setOrigin(src source, d amqp.Delivery, pd ports.Delivery) {
	attempts := intHeader(d.Headers, hdrAttempts)
	reason := lastDeathReason(d.Headers)
	limit := int64(src.group.MaxRetries)
	var deliveries int64
	switch reason {
	case "delivery_limit":
		// Returned limit times, the last return past the limit.
		deliveries = attempts + limit + 1
	default:
		// Rejected by the runner on the group's last attempt: the copy's
		// first delivery (a retry copy) or the queue's last one (ordered).
		deliveries = max(attempts+1, limit+1)
	}
	r.originsMu.Lock()
	r.origins[originKey{src.queue, pd.BrokerMessageID}] = DeadLetter{
		SourceGroup: src.group.Name, LogicalTopic: src.group.Topic, SourceDeliveries: int32(deliveries), Reason: reason,
	}
	r.originsMu.Unlock()
}

// clearOrigins forgets the sources of a handled batch.
func (r *Runner) clearOrigins(src source, ds []ports.Delivery) {
	r.originsMu.Lock()
	defer r.originsMu.Unlock()
	for _, d := range ds {
		delete(r.origins, originKey{src.queue, d.BrokerMessageID})
	}
}

// origin tells the source of a dead letter being handled.
func (r *Runner) origin(d ports.Delivery) (DeadLetter, bool) {
	r.originsMu.Lock()
	defer r.originsMu.Unlock()
	o, ok := r.origins[originKey{d.Topic, d.BrokerMessageID}]
	return o, ok
}
