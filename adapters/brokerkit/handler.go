package brokerkit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// CallHandler calls h with deliveries and returns one decision per
// delivery. A panic of h, or a decision list of the wrong length, is
// logged at ERROR on log and answered with no acknowledgement for the
// whole batch (every message comes back), so a broken handler never
// loses or acknowledges a message by accident.
func CallHandler(ctx context.Context, h ports.BatchHandler, deliveries []ports.Delivery, log *slog.Logger) (decisions []ports.Decision) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("handler panicked; no message of the batch is acknowledged",
				slog.String("error", fmt.Sprint(p)), slog.Int("batch", len(deliveries)))
			decisions = make([]ports.Decision, len(deliveries))
		}
	}()
	decisions = h.HandleBatch(ctx, deliveries)
	if len(decisions) != len(deliveries) {
		log.Error("handler returned a wrong number of decisions; no message of the batch is acknowledged",
			slog.Int("batch", len(deliveries)), slog.Int("decisions", len(decisions)))
		decisions = make([]ports.Decision, len(deliveries))
	}
	return decisions
}

// Sleep waits d or until ctx ends; it reports whether ctx is still alive.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
