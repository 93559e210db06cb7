package rocketmq

import (
	"context"
	"fmt"
	"strings"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
)

// ReceiveForTest receives n messages of topic for group through the client
// library with the given invisible duration, or fails after within.
func ReceiveForTest(cfg Config, group, topic string, n int, invisible, within time.Duration) ([]*rmq.MessageView, error) {
	return receiveForTest(cfg, group, topic, "", n, invisible, within)
}

// receiveForTest is ReceiveForTest; a broker other than "" is named in
// every receive (the runner's per-broker receive loops).
func receiveForTest(cfg Config, group, topic, broker string, n int, invisible, within time.Duration) ([]*rmq.MessageView, error) {
	cfg = cfg.withDefaults()
	if broker != "" {
		if err := InstallRuntime(cfg, nil); err != nil {
			return nil, err
		}
	}
	c, err := rmq.NewSimpleConsumer(clientConfig(cfg, group), rmq.WithAwaitDuration(time.Second),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}),
		rmq.WithClientFuncForSimpleConsumer(clientFunc(cfg)))
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = c.GracefulStop() }()
	var got []*rmq.MessageView
	for end := time.Now().Add(within); len(got) < n && time.Now().Before(end); {
		rctx := context.Background()
		if broker != "" {
			rctx = withBrokerTarget(rctx, broker)
		}
		ctx, cancel := context.WithTimeout(rctx, 3*time.Second)
		mvs, _ := c.Receive(ctx, int32(n-len(got)), invisible)
		cancel()
		got = append(got, mvs...)
	}
	if len(got) < n {
		return got, fmt.Errorf("received %d of %d messages", len(got), n)
	}
	return got, nil
}

// AckBatchForTest acknowledges views of group in batched calls (ackBatch).
func AckBatchForTest(cfg Config, group string, views []*rmq.MessageView) ([]error, error) {
	pc, err := dialProto(cfg.withDefaults(), "ack-test")
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return pc.ackBatch(ctx, group, views), nil
}

// ReadableBrokersForTest returns the brokers the proxy routes topics to
// (the runner's readableBrokers).
func ReadableBrokersForTest(cfg Config, topics ...string) ([]string, error) {
	pc, err := dialProto(cfg.withDefaults(), "route-test")
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return pc.readableBrokers(ctx, topics)
}

// ReceiveFromBrokerForTest is ReceiveForTest with every receive asking the
// proxy for broker's messages (the runner's per-broker receive loops).
func ReceiveFromBrokerForTest(cfg Config, group, topic, broker string, n int, invisible, within time.Duration) ([]*rmq.MessageView, error) {
	return receiveForTest(cfg, group, topic, broker, n, invisible, within)
}

// BrokerOfForTest reads the broker name from a receipt handle ("" when it
// has another shape).
func BrokerOfForTest(receiptHandle string) string {
	f := strings.Fields(receiptHandle)
	if len(f) < 8 {
		return ""
	}
	return f[5]
}
