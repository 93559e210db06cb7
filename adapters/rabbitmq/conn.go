package rabbitmq

import (
	"context"
	"fmt"
	"math"
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
