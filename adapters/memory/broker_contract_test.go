package memory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/ports"
)

// TestBrokerContract runs the shared publisher and consumer suite (also
// run against RocketMQ) against the memory broker, driven synchronously:
// the suite's Pump delivers what is due and moves the fake clock.
// It runs three times: with every feature; as a broker without delayed
// delivery (the suite then checks that a delayed message is refused); and
// as a broker without a delivery count (the suite then supplies the
// counts as the composition does, and checks the broker reported none).
func TestBrokerContract(t *testing.T) {
	t.Run("delayed", func(t *testing.T) { contracttest.Broker(t, memoryBrokerHarness{}) })
	t.Run("no-delay", func(t *testing.T) { contracttest.Broker(t, memoryBrokerHarness{noDelay: true}) })
	t.Run("no-delivery-count", func(t *testing.T) { contracttest.Broker(t, memoryBrokerHarness{noCount: true}) })
}

// memoryBrokerHarness gives the suite a new memory broker per namespace,
// with the invisible duration of the RocketMQ tests' runners.
type memoryBrokerHarness struct{ noDelay, noCount bool }

// pumpStep is how far Pump moves the clock when nothing was due.
const pumpStep = 100 * time.Millisecond

func (h memoryBrokerHarness) Options() contracttest.BrokerOptions {
	return contracttest.BrokerOptions{Features: brokerplug.Features{DelayedDelivery: !h.noDelay, DeliveryCount: !h.noCount}}
}

func (h memoryBrokerHarness) Namespace(t *testing.T) contracttest.BrokerNamespace {
	clock := memory.NewClock(start)
	b := memory.NewBroker(memory.BrokerConfig{Clock: clock, TopicPrefix: "CT_", InvisibleDuration: 2 * time.Second, NoDelay: h.noDelay,
		NoDeliveryCount: h.noCount})
	type consumer struct {
		topic ports.Topic
		group string
		h     ports.BatchHandler
	}
	var (
		mu        sync.Mutex
		consumers []consumer
	)
	return contracttest.BrokerNamespace{
		Publisher: b,
		Consume: func(_ *testing.T, topic ports.Topic, group string, h ports.BatchHandler) {
			mu.Lock()
			defer mu.Unlock()
			consumers = append(consumers, consumer{topic, "CG_" + group, h})
		},
		Pump: func(ctx context.Context) error {
			mu.Lock()
			cs := append([]consumer(nil), consumers...)
			mu.Unlock()
			delivered := 0
			for _, c := range cs {
				n, err := b.Drain(ctx, c.topic, c.group, c.h, 8)
				if err != nil {
					return err
				}
				delivered += n
			}
			if delivered == 0 {
				clock.Advance(pumpStep)
			}
			return nil
		},
		Now: clock.Now,
	}
}
