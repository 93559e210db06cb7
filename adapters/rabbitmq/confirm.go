package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// errChannelReset is the cause of an UNKNOWN outcome whose confirmation
// was lost to a channel close or recovery.
var errChannelReset = errors.New("the channel closed or recovered before the broker confirmed the message")

// errChannelClosed is the cause of an UNKNOWN outcome of a publish whose
// channel closed for good (connection closed) before its write.
var errChannelClosed = errors.New("the channel closed before the message was written")

// errRecovering is the cause of an UNKNOWN outcome of a publish whose
// channel was being reopened by the client's recovery when its turn came.
var errRecovering = errors.New("the channel is being recovered (not open)")

// errNacked is the cause of a DEFINITE_FAILURE: the broker nacked the
// message on an open channel.
var errNacked = errors.New("the broker nacked the message (a queue refused it: x-overflow reject-publish, or a queue error)")

// pipelineDepth bounds the publishes queued for one confirm channel's
// writer. A publish that finds the queue full waits for room until its
// deadline (then DEFINITE_FAILURE: nothing was written). 1024 is four
// times the bench's 256 concurrent clients per channel; a queued publish
// holds its message only.
const pipelineDepth = 1024

// The states of a queued publish (request.state). queued becomes claimed
// (by the writer, which then writes it) or abandoned (by the caller whose
// context ended, or by the writer finding that context ended), once.
const (
	stateQueued int32 = iota
	stateClaimed
	stateAbandoned
)

// confirmChannel is one confirm-mode channel with a publish pipeline: a
// writer goroutine writes the queued publishes one after another, and
// each publish then waits for its own confirmation, matched by delivery
// tag, so any number of publishes are in flight on the channel at once
// (only the writes are serialised, as they are on the connection's socket
// anyway). A publish waits for other publishes only while their writes
// are written, never for their confirmations.
//
// It tells a broker nack from a confirmation lost to a channel close or
// recovery, which the client reports alike (a DeferredConfirmation
// resolved as not acknowledged): it listens to the channel's
// confirmations (NotifyPublish), which carry only what the broker sent,
// and to its state changes.
//
// The writer and the listeners live as long as the channel: they end
// when the client closes it for good (its connection closed); a publish
// queued then ends as UNKNOWN (errChannelClosed).
type confirmChannel struct {
	ch *amqp.Channel
	// queue holds the publishes waiting for the writer.
	queue chan *request
	// closed is closed when the channel closed for good; the writer
	// returns then.
	closed chan struct{}
	// open is false from the channel's leaving StateOpen (a recovery
	// started) until it is open again. The client lets a publish through
	// while it reopens the channel (before confirm mode is re-enabled and
	// the tags reset), which shifts the delivery tags of every later
	// confirmation by one; the writer does not write then.
	open atomic.Bool

	mu sync.Mutex
	// pending maps the delivery tags of unconfirmed publishes to their
	// waiters.
	pending map[uint64]*waiter
	// lastTag is the highest delivery tag registered since the last
	// reset; a smaller one means the client reset the channel.
	lastTag uint64
}

// request is one publish queued for the writer.
type request struct {
	// ctx is the publish's context: the writer skips a request whose
	// context ended before it was claimed.
	ctx           context.Context
	exchange, key string
	msg           amqp.Publishing
	// state is stateQueued until the writer claims it or it is abandoned.
	state atomic.Int32
	// done receives the write's result once (buffered: the writer never
	// waits for the caller).
	done chan written
}

// written is the result of one write.
type written struct {
	// c is the channel that wrote it (the writers of a shared queue
	// take any request).
	c   *confirmChannel
	w   *waiter
	err error
}

// abandon gives r up unless the writer claimed it; it reports whether r
// was abandoned (nothing was or will be written).
func (r *request) abandon() bool {
	r.state.CompareAndSwap(stateQueued, stateAbandoned)
	return r.state.Load() == stateAbandoned
}

// waiter follows one publish.
type waiter struct {
	dc  *amqp.DeferredConfirmation
	tag uint64
	// nacked is closed when the broker nacked the message.
	nacked chan struct{}
	// lost is closed when the channel closed or recovered first.
	lost chan struct{}
	done bool
}

// newConfirmChannel opens a confirm-mode channel on conn with a queue of
// its own and starts its writer and listeners (they end when the channel
// closes for good).
func newConfirmChannel(conn *amqp.Connection) (*confirmChannel, error) {
	return newConfirmChannelOn(conn, make(chan *request, pipelineDepth))
}

// newConfirmChannelOn is newConfirmChannel with the writer taking its
// publishes from queue, which other channels' writers may share: a
// publish queued there is written by whichever writer is free first, so
// a writer held up (its goroutine not scheduled, its write blocked) does
// not hold up the publishes queued after it.
func newConfirmChannelOn(conn *amqp.Connection, queue chan *request) (*confirmChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	c := &confirmChannel{ch: ch, queue: queue, closed: make(chan struct{}), pending: map[uint64]*waiter{}}
	c.open.Store(true)
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1024))
	states := make(chan *amqp.StateChanged, 16)
	ch.NotifyStateChange(states)
	go func() {
		for conf := range confirms {
			c.confirmed(conf)
		}
		c.loseAll()
		close(c.closed)
	}()
	go func() {
		for s := range states {
			c.open.Store(s.To == amqp.StateOpen)
			if s.To != amqp.StateOpen {
				c.loseAll()
			}
		}
	}()
	go c.writeLoop()
	return c, nil
}

// writeLoop writes the queued publishes in order until the channel
// closes for good.
func (c *confirmChannel) writeLoop() {
	for {
		select {
		case <-c.closed:
			return
		case r := <-c.queue:
			if r.ctx.Err() != nil {
				r.abandon()
				continue
			}
			if !r.state.CompareAndSwap(stateQueued, stateClaimed) {
				continue
			}
			if !c.open.Load() {
				r.done <- written{c: c, err: errRecovering}
				continue
			}
			w, err := c.write(r.exchange, r.key, r.msg)
			r.done <- written{c, w, err}
		}
	}
}

// confirmed records one confirmation of the broker. The client resolves
// the DeferredConfirmation before it notifies listeners, so a real nack
// finds its waiter's confirmation already resolved as not acknowledged; a
// stale confirmation (of a channel generation before a reset) does not,
// and is ignored.
func (c *confirmChannel) confirmed(conf amqp.Confirmation) {
	c.mu.Lock()
	w := c.pending[conf.DeliveryTag]
	if w == nil {
		c.mu.Unlock()
		return
	}
	select {
	case <-w.dc.Done():
	default:
		c.mu.Unlock()
		return
	}
	delete(c.pending, conf.DeliveryTag)
	w.done = true
	c.mu.Unlock()
	if !conf.Ack && !w.dc.Acked() {
		close(w.nacked)
	}
}

// loseAll resolves every pending publish as lost (channel closed or
// recovering).
func (c *confirmChannel) loseAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for tag, w := range c.pending {
		if !w.done {
			w.done = true
			close(w.lost)
		}
		delete(c.pending, tag)
	}
	c.lastTag = 0
}

// publish queues one message for the channel's writer and waits for its
// write and then its confirmation until ctx ends. It returns the outcome
// and, unless CONFIRMED, its cause:
//
//   - ctx ended before the writer took the message (already ended, or
//     the writer was busy with the publishes queued before it until the
//     deadline): DEFINITE_FAILURE, nothing was written and nothing will
//     be;
//   - the channel closed for good before the write: UNKNOWN (as any
//     failed write);
//   - the channel was being recovered when the writer took the message
//     (the client's write would have failed or, worse, gone through
//     before confirm mode was back): UNKNOWN, as a failed write;
//   - the write failed, or had not finished at the deadline (the client's
//     write is not context-aware; it goes on in the writer): UNKNOWN,
//     part of it may have reached the broker;
//   - acknowledged: CONFIRMED;
//   - nacked by the broker on the open channel: DEFINITE_FAILURE;
//   - not acknowledged because the channel closed or recovered, or no
//     confirmation before ctx ended: UNKNOWN.
func (c *confirmChannel) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) (string, error) {
	if err := ctx.Err(); err != nil {
		return OutcomeDefiniteFailure, fmt.Errorf("not sent: %w", err)
	}
	r := &request{ctx: ctx, exchange: exchange, key: key, msg: msg, done: make(chan written, 1)}
	select {
	case c.queue <- r:
	case <-c.closed:
		return OutcomeUnknown, errChannelClosed
	case <-ctx.Done():
		return OutcomeDefiniteFailure, fmt.Errorf("not sent: the channel's publish queue was full until the deadline: %w", ctx.Err())
	}
	var wr written
	select {
	case wr = <-r.done:
	case <-ctx.Done():
		if r.abandon() {
			return OutcomeDefiniteFailure, fmt.Errorf("not sent: the channel was busy with the writes queued before it until the deadline: %w", ctx.Err())
		}
		return OutcomeUnknown, fmt.Errorf("the write had not finished at the deadline: %w", ctx.Err())
	case <-c.closed:
		if r.abandon() {
			return OutcomeUnknown, errChannelClosed
		}
		// Claimed: the writer sent its result before it could see the
		// close.
		wr = <-r.done
	}
	if wr.err != nil {
		return OutcomeUnknown, fmt.Errorf("write: %w", wr.err)
	}
	w := wr.w
	acked, err := w.dc.WaitContext(ctx)
	if err != nil {
		wr.c.forget(w)
		return OutcomeUnknown, fmt.Errorf("no confirmation: %w", err)
	}
	if acked {
		wr.c.forget(w)
		return OutcomeConfirmed, nil
	}
	select {
	case <-w.nacked:
		return OutcomeDefiniteFailure, errNacked
	case <-w.lost:
		return OutcomeUnknown, errChannelReset
	case <-ctx.Done():
		wr.c.forget(w)
		return OutcomeUnknown, fmt.Errorf("not acknowledged, cause unknown: %w", ctx.Err())
	}
}

// write publishes msg and registers its waiter, under mu so that the
// listener cannot see the confirmation before the waiter exists. Only
// the writer calls it.
func (c *confirmChannel) write(exchange, key string, msg amqp.Publishing) (*waiter, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dc, err := c.ch.PublishWithDeferredConfirm(exchange, key, false, false, msg)
	if err != nil {
		return nil, err
	}
	if dc == nil {
		return nil, errors.New("the channel is not in confirm mode")
	}
	if dc.DeliveryTag <= c.lastTag {
		// The client reset the channel (recovery) since the last publish:
		// what was pending will never be confirmed.
		for tag, w := range c.pending {
			if !w.done {
				w.done = true
				close(w.lost)
			}
			delete(c.pending, tag)
		}
	}
	c.lastTag = dc.DeliveryTag
	w := &waiter{dc: dc, tag: dc.DeliveryTag, nacked: make(chan struct{}), lost: make(chan struct{})}
	c.pending[dc.DeliveryTag] = w
	return w, nil
}

// forget drops w from the pending publishes.
func (c *confirmChannel) forget(w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[w.tag] == w {
		delete(c.pending, w.tag)
	}
	w.done = true
}
