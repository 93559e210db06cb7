package benchkit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/benchkit"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

func orderCreate(i int) ports.OutboundMessage {
	return ports.OutboundMessage{
		Topic: ports.TopicOrderCreate, MessageID: fmt.Sprint("evt_", i), Tag: "CREATE_ORDER",
		Keys: []string{fmt.Sprint("rsv_", i)}, Body: make([]byte, 512),
	}
}

// publisherFunc adapts a function to ports.Publisher.
type publisherFunc func(ctx context.Context, msg ports.OutboundMessage) (ports.SendReceipt, error)

func (f publisherFunc) Publish(ctx context.Context, msg ports.OutboundMessage) (ports.SendReceipt, error) {
	return f(ctx, msg)
}

// TestSendLoopClassifiesOutcomes: a send without error is confirmed, one
// rejected definitely (ports.ErrSendRejected) is rejected, and any other
// error is unknown.
func TestSendLoopClassifiesOutcomes(t *testing.T) {
	t.Parallel()
	pub := publisherFunc(func(_ context.Context, msg ports.OutboundMessage) (ports.SendReceipt, error) {
		var i int
		_, _ = fmt.Sscanf(msg.MessageID, "evt_%d", &i)
		switch i % 3 {
		case 1:
			return ports.SendReceipt{}, fmt.Errorf("topic missing: %w", ports.ErrSendRejected)
		case 2:
			return ports.SendReceipt{}, fmt.Errorf("deadline: %w", ports.ErrSendUnknown)
		}
		return ports.SendReceipt{}, nil
	})
	res, err := benchkit.SendLoop(context.Background(), pub, 30, 4, orderCreate)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent() != 30 || res.Confirmed != 10 || res.Rejected != 10 || res.Unknown != 10 || len(res.Latencies) != 30 {
		t.Fatalf("result %v", res)
	}
	if res.Percentile(0.99) < res.Percentile(0.5) || res.Rate() <= 0 {
		t.Fatalf("result %v", res)
	}
	if _, err := benchkit.SendLoop(context.Background(), pub, 1, 0, orderCreate); err == nil {
		t.Fatal("no workers: no error")
	}
}

// TestSendLoopStopsWithItsContext: a canceled context ends the loop with
// its error and the sends made so far.
func TestSendLoopStopsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	pub := publisherFunc(func(_ context.Context, msg ports.OutboundMessage) (ports.SendReceipt, error) {
		if msg.MessageID == "evt_5" {
			cancel()
		}
		return ports.SendReceipt{}, nil
	})
	res, err := benchkit.SendLoop(ctx, pub, 1_000_000, 2, orderCreate)
	if !errors.Is(err, context.Canceled) || res.Sent() == 0 || res.Sent() >= 1_000_000 {
		t.Fatalf("result %v, error %v", res, err)
	}
}

// TestSendLoopCountsOutcomes runs the loop through a real publisher on the
// local stack's broker.
func TestSendLoopCountsOutcomes(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	cfg := env.Config
	cfg.SendTimeout = 5 * time.Second // generous on a loaded test machine
	pub, err := rocketmq.NewPublisher(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	res, err := benchkit.SendLoop(context.Background(), pub, 40, 4, orderCreate)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent() != 40 || res.Confirmed != 40 || len(res.Latencies) != 40 {
		t.Fatalf("result %v", res)
	}
	t.Log(res)
}
