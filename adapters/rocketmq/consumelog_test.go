package rocketmq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(s.b.Bytes()), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestConsumerLogLineCarriesTheSpecFields: with LogAcks, every acknowledged
// message gets one INFO line with the consumer log fields: message_id,
// reservation_id, order_id, consumer_group, topic, queue, offset,
// delivery_attempt, schema_version, decision, inbox_result, order_result,
// tx_latency_ms, ack_result and trace_id.
func TestConsumerLogLineCarriesTheSpecFields(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	pub := startPublisher(t, relaxed(env.Config), nil)
	topic := env.Topic(ports.TopicOrderCreate)
	group := env.Group(rocketmq.GroupOrderCreate)
	const n = 3
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for i := range n {
		mustPublish(t, pub, ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: fmt.Sprint("evt_log_", i),
			Body: []byte(`{}`), Properties: map[string]string{"reservation_id": fmt.Sprint("rsv_", i), "order_id": fmt.Sprint("ord_", i),
				"schema_version": "1", "traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}})
	}
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rc := fastRunner(group, map[string]string{topic: "*"}, 2)
	rc.LogAcks = true
	rec := newRecorder()
	r, err := rocketmq.NewRunner(env.Config, rc, eachMessage(rec, func(ports.Delivery) ports.Decision {
		return ports.Decision{Ack: true, Outcome: "created", Inbox: "inserted", Effect: "created", TxLatency: 7 * time.Millisecond}
	}), log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	rec.waitFor(t, 60*time.Second, "every message", func(ds []ports.Delivery) bool { return len(byMessageID(ds)) == n })
	waitUntil(t, 30*time.Second, "one log line per acknowledged message", func() bool {
		c := 0
		for _, l := range buf.lines(t) {
			if l["msg"] == "mq consume" && l["ack_result"] == "acked" {
				c++
			}
		}
		return c >= n
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fields := []string{"message_id", "reservation_id", "order_id", "consumer_group", "topic", "queue", "offset",
		"delivery_attempt", "schema_version", "decision", "inbox_result", "order_result", "tx_latency_ms", "ack_result", "trace_id"}
	seen := 0
	for _, l := range buf.lines(t) {
		if l["msg"] != "mq consume" {
			continue
		}
		seen++
		if l["level"] != "INFO" {
			t.Errorf("an acknowledged message logged at %v, want INFO", l["level"])
		}
		for _, f := range fields {
			if _, ok := l[f]; !ok {
				t.Errorf("log line without %s: %v", f, l)
			}
		}
		if l["trace_id"] != traceID || l["schema_version"] != "1" || l["inbox_result"] != "inserted" ||
			l["order_result"] != "created" || l["tx_latency_ms"] != float64(7) || l["consumer_group"] != group {
			t.Errorf("log line fields: %v", l)
		}
		if q, ok := l["queue"].(float64); !ok || q < 0 {
			t.Errorf("queue %v: not read from the receipt handle", l["queue"])
		}
	}
	if seen != n {
		t.Errorf("%d consume lines for %d messages", seen, n)
	}
}
