package rocketmq_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

// TestAckBatchSettlesEachEntry: one batched acknowledgement settles every
// entry with a valid receipt handle (those messages never come back), fails
// only the entry whose receipt handle is forged, and leaves a message it
// does not name to come back after its invisible duration.
func TestAckBatchSettlesEachEntry(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	cfg := relaxed(env.Config)
	pub := startPublisher(t, cfg, nil)
	topic := env.Topic(ports.TopicOrderCreate)
	group := env.Group(rocketmq.GroupOrderCreate)
	const n = 6
	for i := range n {
		mustPublish(t, pub, ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: fmt.Sprintf("evt_%d", i), Body: []byte(`{}`)})
	}
	views, err := rocketmq.ReceiveForTest(cfg, group, topic, n, 3*time.Second, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kept := views[n-1] // not acknowledged: must come back
	forged := *views[n-2]
	forged.ReceiptHandle = "not-a-receipt-handle"
	batch := append(views[:n-2:n-2], &forged)
	errs, err := rocketmq.AckBatchForTest(cfg, group, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs[:len(errs)-1] {
		if e != nil {
			t.Errorf("entry %d (%s): %v", i, batch[i].GetMessageId(), e)
		}
	}
	if errs[len(errs)-1] == nil {
		t.Error("the entry with a forged receipt handle was acknowledged")
	}
	// Acknowledge the forged entry's message for real, alone.
	if errs, err := rocketmq.AckBatchForTest(cfg, group, views[n-2:n-1]); err != nil || errs[0] != nil {
		t.Fatalf("ack alone: %v %v", err, errs)
	}

	again, err := rocketmq.ReceiveForTest(cfg, group, topic, 1, 3*time.Second, 30*time.Second)
	if err != nil {
		t.Fatalf("the unacknowledged message did not come back: %v", err)
	}
	if again[0].GetMessageId() != kept.GetMessageId() {
		t.Fatalf("redelivered %s, want only the unacknowledged %s", again[0].GetMessageId(), kept.GetMessageId())
	}
	if errs, err := rocketmq.AckBatchForTest(cfg, group, again); err != nil || errs[0] != nil {
		t.Fatalf("ack the redelivered message: %v %v", err, errs)
	}
	if more, _ := rocketmq.ReceiveForTest(cfg, group, topic, 1, 3*time.Second, 6*time.Second); len(more) > 0 {
		t.Fatalf("an acknowledged message came back: %s", more[0].GetMessageId())
	}
}
