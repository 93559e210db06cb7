package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/testkit/faultproxy"
	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
	"github.com/seckill-dev/seckill/ports"
)

// event returns a valid ORDER_EVENT message.
func event(id string) ports.OutboundMessage {
	return ports.OutboundMessage{Topic: ports.TopicOrderEvent, MessageID: id, Tag: "ORDER_CREATED", Keys: []string{"ord_" + id},
		Body: []byte(`{"id":"` + id + `"}`), Properties: map[string]string{"schema_version": "1"}}
}

// isUnknown reports an UNKNOWN outcome (and not a definite one).
func isUnknown(err error) bool {
	return errors.Is(err, ports.ErrSendUnknown) && !errors.Is(err, ports.ErrSendRejected)
}

// isRejected reports a DEFINITE_FAILURE outcome (and not an unknown one).
func isRejected(err error) bool {
	return errors.Is(err, ports.ErrSendRejected) && !errors.Is(err, ports.ErrSendUnknown)
}

// TestPublishConfirmed: an acknowledged publish is CONFIRMED and the
// message is stored in the group's queue with its message id, tag, keys,
// properties and the receipt's id.
func TestPublishConfirmed(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, []ports.Subscription{{Group: "CG_AUDIT", Topic: ports.TopicOrderEvent, MaxRetries: 3}})
	p := startPublisher(t, env.Config)
	receipt, err := p.Publish(context.Background(), event("evt_confirmed"))
	if err != nil {
		t.Fatalf("publish: %v, want CONFIRMED", err)
	}
	if receipt.BrokerMessageID == "" {
		t.Error("a confirmed publish without a broker message id")
	}
	g, _ := env.Topology().Group("CG_AUDIT")
	d, ok := env.Get(g.Queues[0])
	if !ok {
		t.Fatalf("the confirmed message is not in %s", g.Queues[0])
	}
	if d.MessageId != "evt_confirmed" || d.Headers["seckill-send-id"] != receipt.BrokerMessageID || d.DeliveryMode != 2 {
		t.Errorf("stored message: id %q send id %v mode %d, want evt_confirmed, %s, persistent", d.MessageId,
			d.Headers["seckill-send-id"], d.DeliveryMode, receipt.BrokerMessageID)
	}
}

// TestUnroutableCaughtByAlternateExchange: a message no group queue is
// bound for is kept by the alternate exchange's queue (not dropped), and
// the publish is CONFIRMED: the broker stored it.
func TestUnroutableCaughtByAlternateExchange(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, nil)
	p := startPublisher(t, env.Config)
	if _, err := p.Publish(context.Background(), event("evt_unroutable")); err != nil {
		t.Fatalf("publish to a topic without groups: %v, want CONFIRMED", err)
	}
	n, err := p.UnroutableCount(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("UnroutableCount = %d, %v; want 1", n, err)
	}
	d, ok := env.Get(env.Topology().Unroutable())
	if !ok || d.MessageId != "evt_unroutable" {
		t.Fatalf("unroutable queue: %q (%v), want evt_unroutable", d.MessageId, ok)
	}
}

// TestNackIsDefiniteFailure: a queue that refuses the message
// (x-max-length reached, x-overflow reject-publish) makes the broker nack
// it on an open channel: DEFINITE_FAILURE, and the message is not stored.
// The channel stays usable. (A 3.10 quorum queue checks the limit before
// appending, so it holds max-length + 1 messages before it refuses.)
func TestNackIsDefiniteFailure(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, []ports.Subscription{{Group: "CG_AUDIT", Topic: ports.TopicOrderEvent, MaxRetries: 3}},
		rabbittest.WithMaxQueueLength(1))
	cfg := env.Config
	cfg.PublishChannels = 1
	p := startPublisher(t, cfg)
	for _, id := range []string{"evt_fits", "evt_overshoot"} {
		if _, err := p.Publish(context.Background(), event(id)); err != nil {
			t.Fatalf("publish %s: %v, want CONFIRMED", id, err)
		}
	}
	if _, err := p.Publish(context.Background(), event("evt_refused")); !isRejected(err) {
		t.Fatalf("publish to a full queue: %v, want only %v", err, ports.ErrSendRejected)
	}
	g, _ := env.Topology().Group("CG_AUDIT")
	var ids []string
	for {
		d, ok := env.Get(g.Queues[0])
		if !ok {
			break
		}
		ids = append(ids, d.MessageId)
	}
	if fmt.Sprint(ids) != "[evt_fits evt_overshoot]" {
		t.Fatalf("queue held %v, want [evt_fits evt_overshoot] (the nacked message not stored)", ids)
	}
	if _, err := p.Publish(context.Background(), event("evt_after")); err != nil {
		t.Fatalf("publish after the nack, on the same channel, to the emptied queue: %v, want CONFIRMED", err)
	}
}

// TestCanceledBeforeWriteIsDefiniteFailure: a context that ended before
// the write means nothing was sent: DEFINITE_FAILURE.
func TestCanceledBeforeWriteIsDefiniteFailure(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, []ports.Subscription{{Group: "CG_AUDIT", Topic: ports.TopicOrderEvent, MaxRetries: 3}})
	p := startPublisher(t, env.Config)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Publish(ctx, event("evt_canceled")); !isRejected(err) {
		t.Fatalf("publish with a canceled context: %v, want only %v", err, ports.ErrSendRejected)
	}
	g, _ := env.Topology().Group("CG_AUDIT")
	if n := env.QueueDepth(g.Queues[0]); n != 0 {
		t.Fatalf("%d messages stored, want none", n)
	}
}

// TestLostConnectionIsUnknown: through a fault proxy, a publish whose
// confirmation does not come in time (blackholed connection) and one on a
// connection the network reset are UNKNOWN; once the network is back the
// client's recovery reconnects and publishes are CONFIRMED again. A
// publish after Close is UNKNOWN too.
func TestLostConnectionIsUnknown(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, []ports.Subscription{{Group: "CG_AUDIT", Topic: ports.TopicOrderEvent, MaxRetries: 3}})
	proxy, err := faultproxy.New(brokerAddr(t, env.Config.URL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cfg := env.Config
	cfg.URL = viaProxy(t, cfg.URL, proxy.Addr())
	cfg.SendTimeout = 300 * time.Millisecond
	cfg.ReconnectInterval = 200 * time.Millisecond
	p, err := rabbitmq.NewPublisher(cfg, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(context.Background(), event("evt_before")); err != nil {
		t.Fatalf("publish through the proxy: %v", err)
	}

	proxy.SetBlackhole()
	if _, err := p.Publish(context.Background(), event("evt_blackholed")); !isUnknown(err) {
		t.Fatalf("publish into a blackhole: %v, want only %v", err, ports.ErrSendUnknown)
	}
	proxy.SetReset()
	if _, err := p.Publish(context.Background(), event("evt_reset")); !isUnknown(err) {
		t.Fatalf("publish on a reset connection: %v, want only %v", err, ports.ErrSendUnknown)
	}
	proxy.SetPass()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := p.Publish(context.Background(), event("evt_recovered"))
		if err == nil {
			break
		}
		if !isUnknown(err) {
			t.Fatalf("publish while recovering: %v, want %v", err, ports.ErrSendUnknown)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no confirmed publish 30 s after the network came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(context.Background(), event("evt_closed")); !isUnknown(err) {
		t.Fatalf("publish after Close: %v, want only %v", err, ports.ErrSendUnknown)
	}
}

// TestInvalidMessagesRejected: the messages the ports call invalid are
// refused before anything is sent.
func TestInvalidMessagesRejected(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, nil)
	p := startPublisher(t, env.Config)
	for name, m := range map[string]ports.OutboundMessage{
		"FIFO without message group": {Topic: ports.TopicOrderStateFIFO, MessageID: "st_1", Body: []byte("x")},
		"delay on NORMAL":            {Topic: ports.TopicOrderEvent, MessageID: "e_1", Body: []byte("x"), DeliverAt: time.Now().Add(time.Hour)},
		"unknown topic":              {Topic: "NOPE", MessageID: "e_2", Body: []byte("x")},
	} {
		if _, err := p.Publish(context.Background(), m); !isRejected(err) {
			t.Errorf("%s: %v, want only %v", name, err, ports.ErrSendRejected)
		}
	}
}

// TestBlockedWriteIsBounded: a write the network blocks (a blackholed
// connection that stopped reading, a 16 MiB message filling the socket
// buffers) does not hold Publish past its deadline: UNKNOWN, since part of
// the message may have been written. A second publish on the same
// channel, whose write cannot start before its deadline, sent nothing:
// UNKNOWN with ErrBrokerUnavailable (a loaded channel is not a refusal;
// the caller keeps the message). Once the network is back the publisher
// recovers.
func TestBlockedWriteIsBounded(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, []ports.Subscription{{Group: "CG_AUDIT", Topic: ports.TopicOrderEvent, MaxRetries: 3}})
	proxy, err := faultproxy.New(brokerAddr(t, env.Config.URL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cfg := env.Config
	cfg.URL = viaProxy(t, cfg.URL, proxy.Addr())
	cfg.SendTimeout = 300 * time.Millisecond
	cfg.PublishChannels = 1
	cfg.ReconnectInterval = 200 * time.Millisecond
	p := startPublisher(t, cfg)
	if _, err := p.Publish(context.Background(), event("evt_before")); err != nil {
		t.Fatalf("publish through the proxy: %v", err)
	}
	proxy.SetBlackhole()
	big := event("evt_big")
	big.Body = make([]byte, 16<<20)
	type result struct{ err error }
	done := make(chan result, 1)
	go func() {
		_, err := p.Publish(context.Background(), big)
		done <- result{err}
	}()
	var first result
	select {
	case first = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Publish of a blocked write did not return (its send timeout is 300 ms)")
	}
	if !isUnknown(first.err) {
		t.Fatalf("blocked write: %v, want only %v", first.err, ports.ErrSendUnknown)
	}
	if _, err := p.Publish(context.Background(), event("evt_queued")); !isUnknown(err) || !errors.Is(err, ports.ErrBrokerUnavailable) {
		t.Fatalf("publish behind a blocked write: %v, want %v and %v (nothing written, the caller sends it later)",
			err, ports.ErrSendUnknown, ports.ErrBrokerUnavailable)
	}
	proxy.SetPass()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := p.Publish(context.Background(), event("evt_after"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no confirmed publish 30 s after the network came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
