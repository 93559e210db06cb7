package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/ports"
)

// part is one assigned partition of a runner: the records fetched and
// not yet handed out (ready), the retry records held until due (held),
// its offset tracker and its loop. Fetching the partition is paused while
// ready+held reach limit and resumed below half of it.
type part struct {
	r         *runner
	k         tp
	kind      sourceKind
	tracker   *offsetTracker
	committed atomic.Int64
	ctx       context.Context
	cancel    context.CancelFunc
	signal    chan struct{}
	done      chan struct{}
	inflight  sync.WaitGroup
	limit     int

	mu     sync.Mutex
	ready  []*kgo.Record
	held   int
	paused bool
}

// push tracks fetched records and queues them (a retry record not due yet
// is held by a timer instead).
func (p *part) push(recs []*kgo.Record) {
	if p.ctx.Err() != nil {
		return
	}
	now := time.Now()
	p.mu.Lock()
	for _, rec := range recs {
		if err := p.tracker.add(rec.Offset); err != nil {
			p.r.log.Error("kafka offset tracking", slog.String("error", err.Error()))
			continue
		}
		if due := dueOf(rec); p.kind == kindRetry && due.After(now) {
			p.held++
			time.AfterFunc(due.Sub(now), func() { p.due(rec) })
			continue
		}
		p.ready = append(p.ready, rec)
	}
	if !p.paused && len(p.ready)+p.held >= p.limit {
		p.paused = true
		p.r.cl.PauseFetchPartitions(map[string][]int32{p.k.topic: {p.k.partition}})
	}
	p.mu.Unlock()
	p.wake()
}

// due moves a held retry record to the ready queue.
func (p *part) due(rec *kgo.Record) {
	p.mu.Lock()
	p.held--
	p.ready = append(p.ready, rec)
	p.mu.Unlock()
	p.wake()
}

func (p *part) wake() {
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// take removes up to n ready records, resuming fetching when the buffer
// fell below half its limit.
func (p *part) take(n int) []*kgo.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	n = min(n, len(p.ready))
	out := p.ready[:n:n]
	p.ready = p.ready[n:]
	if p.paused && len(p.ready)+p.held < p.limit/2 && p.ctx.Err() == nil {
		p.paused = false
		p.r.cl.ResumeFetchPartitions(map[string][]int32{p.k.topic: {p.k.partition}})
	}
	return out
}

// stop ends the loop and waits, at most wait, for its running calls.
func (p *part) stop(wait time.Duration) {
	p.cancel()
	<-p.done
	idle := make(chan struct{})
	go func() {
		p.inflight.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-time.After(wait):
		p.r.log.Warn("kafka partition released with handler calls still running",
			slog.String("topic", p.k.topic), slog.Int("partition", int(p.k.partition)))
	}
}

// loop hands the ready records out until the partition stops: batches
// run concurrently for an unordered topic, one record at a time in place
// for an ordered or dead-letter topic.
func (p *part) loop() {
	defer close(p.done)
	size := p.r.batch
	if p.kind == kindOrdered || p.kind == kindDead {
		size = 1
	}
	for {
		recs := p.take(size)
		if len(recs) == 0 {
			select {
			case <-p.ctx.Done():
				return
			case <-p.signal:
				continue
			}
		}
		if !p.enter() {
			return
		}
		p.inflight.Add(1)
		p.r.workers.Add(1)
		if size == 1 && len(recs) == 1 && (p.kind == kindOrdered || p.kind == kindDead) {
			p.inPlace(recs[0])
			continue
		}
		go p.batch(recs)
	}
}

// enter takes a handler slot and passes the gate; false when the
// partition stopped first.
func (p *part) enter() bool {
	select {
	case <-p.ctx.Done():
		return false
	case p.r.slots <- struct{}{}:
	}
	if !p.r.gate.Enter(p.ctx) {
		<-p.r.slots
		return false
	}
	return true
}

// leave returns the slot taken by enter.
func (p *part) leave() {
	p.r.gate.Leave()
	<-p.r.slots
}

// batch handles recs of an unordered topic and settles each decision.
func (p *part) batch(recs []*kgo.Record) {
	defer p.r.workers.Done()
	defer p.inflight.Done()
	ds := make([]ports.Delivery, len(recs))
	for i, rec := range recs {
		ds[i] = toDelivery(rec, attemptOf(rec))
	}
	decisions := func() []ports.Decision {
		defer p.leave()
		return p.r.handle(ds)
	}()
	for i, rec := range recs {
		p.settle(rec, ds[i], decisions[i])
	}
}

// settle applies one decision of an unordered group: acknowledged =
// finished; otherwise a copy goes to the retry topic (attempt+1, due) or,
// past the bound, to the dead-letter topic, and the record is finished
// once the copy is stored.
func (p *part) settle(rec *kgo.Record, d ports.Delivery, dec ports.Decision) {
	p.r.metrics.Count(p.r.name, d.Topic, dec)
	if dec.Ack {
		p.finish(rec)
		p.r.logDecision(d, dec, ackResultAcked, nil)
		return
	}
	if int(d.DeliveryAttempt) >= p.r.bound+1 {
		p.deadLetter(rec, d, dec)
		return
	}
	delay := dec.RetryAfter
	if delay <= 0 {
		delay = p.r.s.RetryDelay
	}
	cp := copyRecord(rec, p.r.retry, map[string]string{hdrAttempt: itoa(int64(d.DeliveryAttempt) + 1),
		hdrDue: itoa(time.Now().Add(delay).UnixMilli() + 1), hdrTopic: d.Topic})
	if err := p.produce(cp); err != nil {
		p.r.metrics.AckFailure.WithLabelValues(p.r.name).Inc()
		p.r.logDecision(d, dec, ackResultRetryFailed, err)
		return
	}
	p.r.metrics.retried.WithLabelValues(p.r.name).Inc()
	p.finish(rec)
	p.r.logDecision(d, dec, ackResultRetryScheduled, nil)
}

// deadLetter writes rec to the group's dead-letter topic with its origin
// and finishes it.
func (p *part) deadLetter(rec *kgo.Record, d ports.Delivery, dec ports.Decision) {
	cp := copyRecord(rec, p.r.dlq, map[string]string{hdrOriginGroup: p.r.origin, hdrDeliveries: itoa(int64(d.DeliveryAttempt)),
		hdrTopic: d.Topic, hdrAttempt: "", hdrDue: ""})
	if err := p.produce(cp); err != nil {
		p.r.metrics.AckFailure.WithLabelValues(p.r.name).Inc()
		p.r.logDecision(d, dec, ackResultRetryFailed, err)
		return
	}
	p.r.metrics.deadLettered.WithLabelValues(p.r.name).Inc()
	p.finish(rec)
	p.r.logDecision(d, dec, ackResultDeadLettered, nil)
}

// produce stores rec, retrying every second while the partition is
// assigned; an error means it stopped first (the record stays unfinished
// and is consumed again from the committed watermark).
func (p *part) produce(rec *kgo.Record) error {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		err := p.r.cl.ProduceSync(ctx, rec).FirstErr()
		cancel()
		if err == nil {
			return nil
		}
		p.r.log.Warn("kafka copy not stored; retrying", slog.String("topic", rec.Topic), slog.String("error", err.Error()))
		if !brokerkit.Sleep(p.ctx, retryProducePause) {
			return fmt.Errorf("copy to %s: %w", rec.Topic, err)
		}
	}
}

// inPlace handles one record of an ordered or dead-letter topic until it
// is acknowledged or (ordered) dead-lettered, waiting RetryAfter or the
// retry delay between deliveries while holding the partition but no
// handler slot. It returns early, leaving the record unfinished, when the
// partition stops.
func (p *part) inPlace(rec *kgo.Record) {
	defer p.r.workers.Done()
	defer p.inflight.Done()
	attempt := attemptOf(rec)
	for entered := true; ; attempt++ {
		if !entered && !p.enter() {
			return
		}
		entered = false
		d := toDelivery(rec, attempt)
		if p.kind == kindDead {
			d.Topic = rec.Topic // like the other adapters: the dead-letter topic
		}
		p.r.noteOrigin(rec, d)
		dec := func() ports.Decision {
			defer p.leave()
			return p.r.handle([]ports.Delivery{d})[0]
		}()
		if dec.Ack || p.kind == kindOrdered && int(attempt) >= p.r.bound+1 {
			p.settle(rec, d, dec)
			return
		}
		p.r.metrics.Count(p.r.name, d.Topic, dec)
		p.r.metrics.retried.WithLabelValues(p.r.name).Inc()
		p.r.logDecision(d, dec, ackResultRequeued, nil)
		delay := dec.RetryAfter
		if delay <= 0 {
			delay = p.r.s.RetryDelay
		}
		if !brokerkit.Sleep(p.ctx, min(delay, maxHold)) {
			return
		}
	}
}

// finish marks rec finished.
func (p *part) finish(rec *kgo.Record) {
	if err := p.tracker.done(rec.Offset); err != nil {
		p.r.log.Error("kafka offset tracking", slog.String("error", err.Error()))
	}
}

// Values of the ack_result log field (the RabbitMQ adapter's).
const (
	ackResultAcked          = "acked"
	ackResultRetryScheduled = "retry_scheduled"
	ackResultRetryFailed    = "retry_failed"
	ackResultRequeued       = "requeued"
	ackResultDeadLettered   = "dead_lettered"
)

// handle calls the handler on ds with the runner's span, metrics and dead
// letter origins; a panic or a wrong number of decisions acknowledges
// nothing.
func (r *runner) handle(ds []ports.Delivery) (decisions []ports.Decision) {
	r.metrics.Inflight.WithLabelValues(r.name).Add(float64(len(ds)))
	defer r.metrics.Inflight.WithLabelValues(r.name).Sub(float64(len(ds)))
	if r.origins != nil {
		r.origins.set(ds)
		defer r.origins.clear(ds)
	}
	ctx, span := brokerkit.StartProcess(r.handlerCtx, r.tracer, PlugName, r.name, ds)
	start := time.Now()
	defer func() {
		if span != nil {
			span.End()
		}
		r.metrics.Process.WithLabelValues(ds[0].Topic).Observe(time.Since(start).Seconds())
	}()
	return brokerkit.CallHandler(ctx, r.handler, ds, r.log)
}

// logDecision writes the consumer log line of one delivery.
func (r *runner) logDecision(d ports.Delivery, dec ports.Decision, result string, err error) {
	brokerkit.LogDecision(r.log, d, dec, result, result == ackResultAcked, r.logAcks, err)
}

// noteOrigin records a dead letter's origin headers for origin().
func (r *runner) noteOrigin(rec *kgo.Record, d ports.Delivery) {
	if r.origins != nil {
		r.origins.note(d.BrokerMessageID, header(rec, hdrOriginGroup), header(rec, hdrDeliveries))
	}
}
