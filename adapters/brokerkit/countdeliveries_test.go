package brokerkit_test

import (
	"context"
	"testing"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// recorder acknowledges the ids in ack and records the attempts it saw.
type recorder struct {
	ack  map[string]bool
	seen []int32
}

func (r *recorder) HandleBatch(_ context.Context, ds []ports.Delivery) []ports.Decision {
	out := make([]ports.Decision, len(ds))
	for i, d := range ds {
		r.seen = append(r.seen, d.DeliveryAttempt)
		if r.ack[d.Properties[message.PropMessageID]] {
			out[i] = ports.Acked("test")
		}
	}
	return out
}

func delivery(id string, attempt int32) ports.Delivery {
	return ports.Delivery{Properties: map[string]string{message.PropMessageID: id}, DeliveryAttempt: attempt}
}

// TestCountDeliveries supplies counts from 1 per message id, forgets an
// acknowledged message, keeps a count the broker reports, and forgets the
// least recently delivered id beyond its bound.
func TestCountDeliveries(t *testing.T) {
	r := &recorder{ack: map[string]bool{}}
	h := brokerkit.CountDeliveries(r, 2)
	ctx := context.Background()
	h.HandleBatch(ctx, []ports.Delivery{delivery("a", 0), delivery("b", 0)})
	h.HandleBatch(ctx, []ports.Delivery{delivery("a", 0)})
	r.ack["a"] = true
	h.HandleBatch(ctx, []ports.Delivery{delivery("a", 0), delivery("b", 7)})
	r.ack["a"] = false
	h.HandleBatch(ctx, []ports.Delivery{delivery("a", 0)}) // acknowledged before: forgotten, 1 again
	h.HandleBatch(ctx, []ports.Delivery{delivery("c", 0)}) // the bound of 2 forgets b (a is newer)
	h.HandleBatch(ctx, []ports.Delivery{delivery("b", 0), delivery("", 0)})
	want := []int32{1, 1, 2, 3, 7, 1, 1, 1, 1}
	if len(r.seen) != len(want) {
		t.Fatalf("seen %v, want %v", r.seen, want)
	}
	for i := range want {
		if r.seen[i] != want[i] {
			t.Fatalf("seen %v, want %v", r.seen, want)
		}
	}
}
