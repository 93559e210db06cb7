package brokerkit_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/ports"
)

type handlerFunc func(ctx context.Context, ds []ports.Delivery) []ports.Decision

func (f handlerFunc) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	return f(ctx, ds)
}

// TestCallHandler passes decisions through, and answers a panic or a
// decision list of the wrong length with no acknowledgement at all.
func TestCallHandler(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ds := make([]ports.Delivery, 3)
	cases := map[string]handlerFunc{
		"panic": func(context.Context, []ports.Delivery) []ports.Decision { panic("boom") },
		"short": func(context.Context, []ports.Delivery) []ports.Decision { return []ports.Decision{ports.Acked("x")} },
	}
	for name, h := range cases {
		got := brokerkit.CallHandler(context.Background(), h, ds, log)
		if len(got) != 3 || got[0].Ack || got[1].Ack || got[2].Ack {
			t.Errorf("%s: decisions %+v, want three without an acknowledgement", name, got)
		}
	}
	ok := handlerFunc(func(_ context.Context, ds []ports.Delivery) []ports.Decision {
		return []ports.Decision{ports.Acked("a"), {}, ports.Acked("c")}
	})
	if got := brokerkit.CallHandler(context.Background(), ok, ds, log); !got[0].Ack || got[1].Ack || !got[2].Ack {
		t.Errorf("decisions %+v, want the handler's", got)
	}
}

// TestSleep reports a live context after the wait and a dead one at once.
func TestSleep(t *testing.T) {
	if !brokerkit.Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep on a live context reported it dead")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if brokerkit.Sleep(ctx, time.Hour) {
		t.Error("Sleep on a canceled context reported it alive")
	}
}
