package application

import (
	"context"
	"log/slog"

	"github.com/seckill-dev/seckill/ports"
)

// maxMarkBatch bounds one flush of the SentMarker.
const maxMarkBatch = 256

// SentMarker records confirmed sends (PENDING -> SENT) in Redis off the
// request path: PlaceOrder hands it each reservation whose message the
// broker confirmed, and one owner goroutine (Run) flushes what has queued
// up as one round trip per activity SKU. A lost mark is harmless: the
// reservation stays PENDING and the scanner resends its message with the
// same message id, which the consumer's inbox absorbs. The queue is
// bounded; when it is full (or has no capacity), Mark records the send
// synchronously instead of dropping it.
type SentMarker struct {
	reservations ports.Reservations
	log          *slog.Logger
	queue        chan ports.ReservationRef
}

// NewSentMarker returns a marker with a queue of capacity entries (0 makes
// every Mark synchronous).
func NewSentMarker(reservations ports.Reservations, log *slog.Logger, capacity int) *SentMarker {
	return &SentMarker{reservations: reservations, log: log.With("component", "sent-marker"),
		queue: make(chan ports.ReservationRef, capacity)}
}

// Mark queues ref, or records it at once when the queue is full.
func (m *SentMarker) Mark(ctx context.Context, ref ports.ReservationRef) {
	select {
	case m.queue <- ref:
		return
	default:
	}
	if err := m.reservations.MarkSent(context.WithoutCancel(ctx), ref); err != nil {
		m.log.WarnContext(ctx, "mark sent failed; the scanner resends", "reservation_id", ref.ReservationID, "error", err)
	}
}

// Run flushes queued marks until ctx is canceled, then flushes what is
// still queued and returns.
func (m *SentMarker) Run(ctx context.Context) error {
	batch := make([]ports.ReservationRef, 0, maxMarkBatch)
	for {
		select {
		case ref := <-m.queue:
			batch = append(batch[:0], ref)
			batch = m.drain(batch)
			m.flush(ctx, batch)
		case <-ctx.Done():
			for {
				batch = m.drain(batch[:0])
				if len(batch) == 0 {
					return nil
				}
				m.flush(context.WithoutCancel(ctx), batch)
			}
		}
	}
}

// drain appends queued refs without waiting, up to maxMarkBatch.
func (m *SentMarker) drain(batch []ports.ReservationRef) []ports.ReservationRef {
	for len(batch) < maxMarkBatch {
		select {
		case ref := <-m.queue:
			batch = append(batch, ref)
		default:
			return batch
		}
	}
	return batch
}

func (m *SentMarker) flush(ctx context.Context, batch []ports.ReservationRef) {
	if err := m.reservations.MarkSentBatch(context.WithoutCancel(ctx), batch); err != nil {
		m.log.WarnContext(ctx, "mark sent failed; the scanner resends", "reservations", len(batch), "error", err)
	}
}
