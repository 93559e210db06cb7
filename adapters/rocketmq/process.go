package rocketmq

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/ports"
)

// Values of the ack_result log field.
const (
	ackResultAcked          = "acked"
	ackResultAckFailed      = "ack_failed"
	ackResultRetryScheduled = "retry_scheduled"
	ackResultRetryFailed    = "retry_failed"
	ackResultNotAcked       = "not_acked"
	ackResultHeldForOrder   = "held_for_order"
)

// process runs the handler on one batch, renewing the messages' invisible
// duration while it runs, then applies the decisions.
func (r *Runner) process(ctx context.Context, consumer rmq.SimpleConsumer, views []*rmq.MessageView) {
	deliveries := make([]ports.Delivery, len(views))
	for i, mv := range views {
		deliveries[i] = toDelivery(mv)
	}
	ctx, span := brokerkit.StartProcess(ctx, r.tracer, PlugName, r.rc.Group, deliveries)
	if span != nil {
		defer span.End()
	}
	result := make(chan []ports.Decision, 1)
	start := time.Now()
	go func() { result <- brokerkit.CallHandler(ctx, r.handler, deliveries, r.log) }()

	renew := time.NewTicker(r.rc.InvisibleDuration / 2)
	defer renew.Stop()
	var decisions []ports.Decision
wait:
	for {
		select {
		case decisions = <-result:
			break wait
		case <-renew.C:
			r.renew(consumer, views, deliveries, result)
		}
	}
	r.metrics.Process.WithLabelValues(deliveries[0].Topic).Observe(time.Since(start).Seconds())
	r.apply(consumer, views, deliveries, decisions)
}

// renew extends the invisible duration of the batch's messages; it stops
// early when the handler's result is ready (result is buffered).
func (r *Runner) renew(consumer rmq.SimpleConsumer, views []*rmq.MessageView, deliveries []ports.Delivery, result chan []ports.Decision) {
	for i, mv := range views {
		if len(result) > 0 {
			return
		}
		if err := consumer.ChangeInvisibleDuration(mv, r.rc.InvisibleDuration); err != nil {
			r.log.LogAttrs(context.Background(), slog.LevelWarn,
				"renewing invisible duration failed; the message may be redelivered while its handler runs",
				brokerkit.DeliveryAttrs(deliveries[i], slog.String("error", err.Error()))...)
		}
	}
}

// apply acknowledges, reschedules or leaves each message as its decision
// says (see Runner for the orderly rule). The acknowledgements of a batch
// go in one AckMessage call per topic (Config.AckOneByOne: one call each,
// through the client library). For an orderly subscription the other
// messages are settled one after the other in queue order; otherwise the
// reschedules are sent concurrently, bounded by the batch size.
func (r *Runner) apply(consumer rmq.SimpleConsumer, views []*rmq.MessageView, deliveries []ports.Delivery, decisions []ports.Decision) {
	if r.rc.Orderly {
		held := map[string]time.Duration{} // message group -> RetryAfter of its first unacknowledged message
		var acks []int
		for i, mv := range views {
			d := deliveries[i]
			if after, isHeld := held[d.MessageGroup]; isHeld {
				r.settleHeld(consumer, mv, d, decisions[i], after)
				continue
			}
			if r.acker != nil && decisions[i].Ack {
				acks = append(acks, i)
				continue
			}
			if r.settle(consumer, mv, d, decisions[i]) != ackResultAcked {
				held[d.MessageGroup] = decisions[i].RetryAfter
			}
		}
		// The acknowledgements of the groups not held go in one call per
		// topic. One that fails leaves its message to come back with the
		// rest of its queue, as the broker redelivers an orderly queue from
		// its first unacknowledged offset: the later messages of its group
		// come back too, after it, and are duplicates to the handler.
		if len(acks) > 0 {
			r.settleAcks(views, deliveries, decisions, acks)
		}
		return
	}
	var wg sync.WaitGroup
	var acks []int
	for i, mv := range views {
		if r.acker != nil && decisions[i].Ack {
			acks = append(acks, i)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.settle(consumer, mv, deliveries[i], decisions[i])
		}()
	}
	if len(acks) > 0 {
		r.settleAcks(views, deliveries, decisions, acks)
	}
	wg.Wait()
}

// settleAcks acknowledges the messages at acks (all with acknowledging
// decisions) in one call per topic and records each one's result.
func (r *Runner) settleAcks(views []*rmq.MessageView, deliveries []ports.Delivery, decisions []ports.Decision, acks []int) {
	batch := make([]*rmq.MessageView, len(acks))
	for k, i := range acks {
		batch[k] = views[i]
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.rc.AckTimeout)
	defer cancel()
	errs := r.acker.ackBatch(ctx, r.rc.Group, batch)
	for k, i := range acks {
		r.count(deliveries[i], decisions[i])
		result := ackResultAcked
		if errs[k] != nil {
			result = ackResultAckFailed
			r.metrics.AckFailure.WithLabelValues(r.rc.Group).Inc()
		}
		r.logDecision(deliveries[i], decisions[i], result, errs[k])
	}
}

// settle applies one decision and returns the ack result.
func (r *Runner) settle(consumer rmq.SimpleConsumer, mv *rmq.MessageView, d ports.Delivery, dec ports.Decision) string {
	r.count(d, dec)
	var result string
	var err error
	switch {
	case dec.Ack:
		result, err = ackResultAcked, r.ack(consumer, mv)
		if err != nil {
			result = ackResultAckFailed
			r.metrics.AckFailure.WithLabelValues(r.rc.Group).Inc()
		}
	case dec.RetryAfter > 0:
		result, err = ackResultRetryScheduled, consumer.ChangeInvisibleDuration(mv, dec.RetryAfter)
		if err != nil {
			result = ackResultRetryFailed
		}
	default:
		result = ackResultNotAcked
	}
	r.logDecision(d, dec, result, err)
	return result
}

// settleHeld keeps a message of an orderly group behind its group's first
// unacknowledged message: not acknowledged, rescheduled with that
// message's delay.
func (r *Runner) settleHeld(consumer rmq.SimpleConsumer, mv *rmq.MessageView, d ports.Delivery, dec ports.Decision, after time.Duration) string {
	r.count(d, dec)
	var err error
	if after > 0 {
		err = consumer.ChangeInvisibleDuration(mv, after)
	}
	r.logDecision(d, dec, ackResultHeldForOrder, err)
	return ackResultHeldForOrder
}

// ack acknowledges one message with its own timeout. The v5.1.2 client
// returns nil when the proxy answers with a non-OK status (for example an
// expired receipt handle), so only transport failures are seen here.
func (r *Runner) ack(consumer rmq.SimpleConsumer, mv *rmq.MessageView) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.rc.AckTimeout)
	defer cancel()
	if err := consumer.Ack(ctx, mv); err != nil {
		return fmt.Errorf("ack %s: %w", mv.GetMessageId(), err)
	}
	return nil
}

// count records the consume metrics of one decision.
func (r *Runner) count(d ports.Delivery, dec ports.Decision) {
	r.metrics.Count(r.rc.Group, d.Topic, dec)
}

// logDecision writes the spec 28.1 consumer log line of one delivery:
// debug when acknowledged, info when left for redelivery, warn when the
// acknowledgement or rescheduling failed.
func (r *Runner) logDecision(d ports.Delivery, dec ports.Decision, result string, err error) {
	brokerkit.LogDecision(r.log, d, dec, result, result == ackResultAcked, r.rc.LogAcks, err)
}
