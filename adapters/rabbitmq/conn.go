package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dial opens a connection. With recover, the client's automatic recovery
// is on: after a network failure the client reconnects every
// Config.ReconnectInterval until it succeeds or the connection is closed,
// reopens the channels (with their QoS and confirm mode) and re-subscribes
// their consumers; durable topology is not redeclared (the broker keeps
// it). The Publisher uses it; the Runner reconnects on its own (see Run).
func dial(ctx context.Context, cfg Config, name string, recover bool) (*amqp.Connection, error) {
	type result struct {
		conn *amqp.Connection
		err  error
	}
	done := make(chan result, 1)
	go func() {
		ac := amqp.Config{
			Heartbeat:  10 * time.Second,
			Properties: amqp.Table{"connection_name": name},
			Dial:       amqp.DefaultDial(5 * time.Second),
		}
		if recover {
			ac.Recovery = &amqp.Recovery{
				ReconnectionConfig:   &amqp.ReconnectionConfig{MaxRetryCount: math.MaxInt32, RetryInterval: cfg.ReconnectInterval},
				TopologyRecoveryMode: amqp.TopologyRecoveryOnlyTransient,
			}
		}
		c, err := amqp.DialConfig(cfg.URL, ac)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("dial rabbitmq: %w", r.err)
		}
		return r.conn, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				_ = r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("dial rabbitmq: %w", ctx.Err())
	}
}

// Declare connects to cfg.URL, declares t (Topology.Declare) and
// disconnects. Idempotent: `seckill` and the local stack call it at start.
func Declare(ctx context.Context, cfg Config, t Topology) error {
	conn, err := dial(ctx, cfg.withDefaults(), "seckill-topology", false)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	return t.Declare(ch)
}

// errChannelReset is the cause of an UNKNOWN outcome whose confirmation
// was lost to a channel close or recovery.
var errChannelReset = errors.New("the channel closed or recovered before the broker confirmed the message")

// errChannelBusy is the cause of a publish that was never written: its
// channel was busy with another write until the deadline. Nothing reached
// the broker.
var errChannelBusy = errors.New("the channel was busy with another write until the deadline")

// errNacked is the cause of a DEFINITE_FAILURE: the broker nacked the
// message on an open channel.
var errNacked = errors.New("the broker nacked the message (a queue refused it: x-overflow reject-publish, or a queue error)")

// confirmChannel is one confirm-mode channel. It tells a broker nack from
// a confirmation lost to a channel close or recovery, which the client
// reports alike (a DeferredConfirmation resolved as not acknowledged):
// it listens to the channel's confirmations (NotifyPublish), which carry
// only what the broker sent, and to its state changes.
type confirmChannel struct {
	ch *amqp.Channel
	// sem admits one write at a time; a publish waits for it only until
	// its deadline (a write the broker's flow control or the network
	// blocks must not hold the others past theirs).
	sem chan struct{}

	mu sync.Mutex
	// pending maps the delivery tags of unconfirmed publishes to their
	// waiters.
	pending map[uint64]*waiter
	// lastTag is the highest delivery tag registered since the last
	// reset; a smaller one means the client reset the channel.
	lastTag uint64
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

func newConfirmChannel(conn *amqp.Connection) (*confirmChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	c := &confirmChannel{ch: ch, sem: make(chan struct{}, 1), pending: map[uint64]*waiter{}}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1024))
	states := make(chan *amqp.StateChanged, 16)
	ch.NotifyStateChange(states)
	go func() {
		for conf := range confirms {
			c.confirmed(conf)
		}
		c.loseAll()
	}()
	go func() {
		for s := range states {
			if s.To != amqp.StateOpen {
				c.loseAll()
			}
		}
	}()
	return c, nil
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

// idle reports whether no write holds the channel at this instant: a
// hint for choosing a channel, which the next publish may still find
// taken.
func (c *confirmChannel) idle() bool { return len(c.sem) == 0 }

// publish sends one message and waits for its confirmation until ctx
// ends. It returns the outcome and, unless CONFIRMED, its cause:
//
//   - ctx ended before the write started (already ended, or the channel
//     was busy with another write until the deadline, errChannelBusy):
//     DEFINITE_FAILURE, nothing was written;
//   - the write failed, or had not finished at the deadline (the client's
//     write is not context-aware; it goes on in the background):
//     UNKNOWN, part of it may have reached the broker;
//   - acknowledged: CONFIRMED;
//   - nacked by the broker on the open channel: DEFINITE_FAILURE;
//   - not acknowledged because the channel closed or recovered, or no
//     confirmation before ctx ended: UNKNOWN.
func (c *confirmChannel) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) (string, error) {
	if err := ctx.Err(); err != nil {
		return OutcomeDefiniteFailure, fmt.Errorf("not sent: %w", err)
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return OutcomeDefiniteFailure, fmt.Errorf("not sent: %w: %w", errChannelBusy, ctx.Err())
	}
	type written struct {
		w   *waiter
		err error
	}
	done := make(chan written, 1)
	go func() {
		defer func() { <-c.sem }()
		w, err := c.write(exchange, key, msg)
		done <- written{w, err}
	}()
	var wr written
	select {
	case wr = <-done:
	case <-ctx.Done():
		return OutcomeUnknown, fmt.Errorf("the write had not finished at the deadline: %w", ctx.Err())
	}
	if wr.err != nil {
		return OutcomeUnknown, fmt.Errorf("write: %w", wr.err)
	}
	w := wr.w
	acked, err := w.dc.WaitContext(ctx)
	if err != nil {
		c.forget(w)
		return OutcomeUnknown, fmt.Errorf("no confirmation: %w", err)
	}
	if acked {
		c.forget(w)
		return OutcomeConfirmed, nil
	}
	select {
	case <-w.nacked:
		return OutcomeDefiniteFailure, errNacked
	case <-w.lost:
		return OutcomeUnknown, errChannelReset
	case <-ctx.Done():
		c.forget(w)
		return OutcomeUnknown, fmt.Errorf("not acknowledged, cause unknown: %w", ctx.Err())
	}
}

// write publishes msg and registers its waiter, under mu so that the
// listener cannot see the confirmation before the waiter exists.
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
