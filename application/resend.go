package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// ResendConfig tunes the scanner (spec 13.3).
type ResendConfig struct {
	Interval time.Duration // pause between scans that found nothing
	// IdleMax, when above Interval, lets the pause double after each
	// empty scan up to it; a scan that claims work goes back to Interval.
	IdleMax     time.Duration
	Batch       int           // reservations claimed per scan
	Workers     int           // fixed size of the send pool
	Lease       time.Duration // how long a claim is exclusive
	BackoffBase time.Duration // delay after the first unknown outcome
	BackoffMax  time.Duration // cap of the exponential backoff
}

// ResendPending is the reservation scanner: it resends the order-create
// message of reservations whose send outcome is not yet confirmed (crash
// after reserve, unknown outcome), always with the reservation's original
// message id. Claims are Redis leases, so several instances can scan
// safely and a crashed instance's claims expire and are taken over. Sends
// run on a fixed pool; unknown outcomes are rescheduled with exponential
// backoff and jitter, and so is a definite failure (an earlier copy of the
// message may be in the broker, so only the reconciler releases a
// reservation, once it expired without an order).
type ResendPending struct {
	reservations ports.Reservations
	publisher    ports.Publisher
	clock        ports.Clock
	metrics      ports.Metrics
	log          *slog.Logger
	owner        string
	cfg          ResendConfig
}

// NewResendPending wires the scanner; owner names this instance in leases.
func NewResendPending(reservations ports.Reservations, publisher ports.Publisher, clock ports.Clock,
	metrics ports.Metrics, log *slog.Logger, owner string, cfg ResendConfig) *ResendPending {
	return &ResendPending{reservations: reservations, publisher: publisher, clock: clock, metrics: metrics,
		log: log.With("component", "scanner", "lease_owner", owner), owner: owner, cfg: cfg}
}

// Run scans until ctx is canceled. While the publisher reports the broker
// down (ports.BrokerHealth), it claims nothing and waits for the next
// probe time instead.
func (s *ResendPending) Run(ctx context.Context) error {
	idle := newIdleBackoff(s.cfg.Interval, s.cfg.IdleMax)
	for {
		if w := brokerWait(s.publisher, time.Now()); w > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(w):
			}
			continue
		}
		n, err := s.ScanOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "scan failed", "error", err)
		}
		wait := idle.next(n)
		if n >= s.cfg.Batch {
			wait = 0 // more may be due
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// ScanOnce claims one batch of due reservations, resends them on the
// worker pool and waits for all of them. It returns how many it claimed.
func (s *ResendPending) ScanOnce(ctx context.Context) (int, error) {
	due, err := s.reservations.ClaimDue(ctx, s.clock.Now(), s.cfg.Batch, s.owner, s.cfg.Lease)
	if err != nil {
		return 0, fmt.Errorf("claim due reservations: %w", err)
	}
	work := make(chan reservation.Snapshot)
	var wg sync.WaitGroup
	for range min(s.cfg.Workers, len(due)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				s.resend(ctx, r)
			}
		}()
	}
	for _, r := range due {
		work <- r
	}
	close(work)
	wg.Wait()
	return len(due), nil
}

func (s *ResendPending) resend(ctx context.Context, r reservation.Snapshot) {
	ref := ports.ReservationRef{ActivityID: r.ActivityID, SKUID: r.SKUID, ReservationID: r.ReservationID, UserID: r.UserID}
	log := s.log.With("reservation_id", r.ReservationID, "order_id", r.OrderID, "message_id", r.MessageID,
		"request_id", r.RequestID, "activity_id", r.ActivityID, "sku_id", r.SKUID, "user_id", r.UserID,
		"send_attempt", r.SendAttempt)
	msg, err := orderCreateMessage(r, int32(r.SendAttempt), s.clock.Now(), ports.TraceFrom(ctx))
	if err != nil {
		log.ErrorContext(ctx, "cannot build order-create message", "error", err)
		s.reschedule(ctx, log, ref, r.SendAttempt)
		return
	}
	msg.Retry = true // PlaceOrder made the first attempt
	start := s.clock.Now()
	receipt, err := s.publisher.Publish(ctx, msg)
	latency := s.clock.Now().Sub(start).Milliseconds()
	switch {
	case err == nil:
		s.metrics.ResendOutcome("CONFIRMED")
		if err := s.reservations.MarkSent(context.WithoutCancel(ctx), ref); err != nil {
			log.WarnContext(ctx, "mark sent failed", "error", err)
		}
		log.InfoContext(ctx, "reservation resent", "send_outcome", "CONFIRMED",
			"broker_message_id", receipt.BrokerMessageID, "send_latency_ms", latency)
	case errors.Is(err, ports.ErrSendRejected):
		// This copy was refused, but an earlier send of the same message
		// (whose outcome was unknown, or cut short by a crash) may be in
		// the broker and become an order: releasing now could sell the
		// unit twice (I1). Keep the reservation and resend later; one that
		// expires without an order is released by the reconciler (and a
		// late copy is then rejected as expired by the consumer).
		s.metrics.ResendOutcome("DEFINITE_FAILURE")
		log.WarnContext(ctx, "resend definitely failed; an earlier copy may exist, the reservation stays and is resent later",
			"send_outcome", "DEFINITE_FAILURE", "error_class", "SEND_REJECTED", "error", err, "send_latency_ms", latency)
		s.reschedule(ctx, log, ref, r.SendAttempt)
	case errors.Is(err, ports.ErrBrokerUnavailable):
		// Not attempted: no backoff growth, just the next probe.
		s.metrics.ResendOutcome("SKIPPED")
		log.DebugContext(ctx, "resend skipped, the broker is believed down", "error", err)
		if err := s.reservations.ScheduleRetry(context.WithoutCancel(ctx), ref, s.owner,
			s.clock.Now().Add(s.cfg.BackoffBase)); err != nil {
			log.WarnContext(ctx, "reschedule failed", "error", err)
		}
	default:
		s.metrics.ResendOutcome("UNKNOWN")
		log.WarnContext(ctx, "resend outcome unknown", "send_outcome", "UNKNOWN", "error_class", "SEND_UNKNOWN",
			"error", err, "send_latency_ms", latency)
		s.reschedule(ctx, log, ref, r.SendAttempt)
	}
}

func (s *ResendPending) reschedule(ctx context.Context, log *slog.Logger, ref ports.ReservationRef, attempt int) {
	next := s.clock.Now().Add(Backoff(s.cfg.BackoffBase, s.cfg.BackoffMax, attempt))
	if err := s.reservations.ScheduleRetry(context.WithoutCancel(ctx), ref, s.owner, next); err != nil {
		// The lease expires and another scan takes it over.
		log.WarnContext(ctx, "reschedule failed", "error", err)
	}
}

// brokerWait returns how long a bulk sender should wait before claiming
// work: zero when publisher keeps no view of the broker's health or the
// broker is available, else the time until the next probe (at least
// 10 ms).
func brokerWait(publisher ports.Publisher, now time.Time) time.Duration {
	h, ok := publisher.(ports.BrokerHealth)
	if !ok {
		return 0
	}
	available, retryAt := h.BrokerAvailable()
	if available {
		return 0
	}
	return max(retryAt.Sub(now), 10*time.Millisecond)
}

// Backoff returns the delay before retry number attempt (1-based):
// base·2^(attempt-1) capped at maxDelay, with "equal jitter" (half fixed,
// half random) so that retries of a burst spread out.
func Backoff(base, maxDelay time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	half := d / 2
	return half + rand.N(half+1)
}
