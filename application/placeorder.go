package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckill-dev/seckill/domain/clientid"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// PlaceOrderConfig tunes the hot path.
type PlaceOrderConfig struct {
	// RequestClaimTTL is how long a request_id stays bound to its ids.
	RequestClaimTTL time.Duration
	// ScanGrace delays the scanner's first look at a new reservation so it
	// does not race the inline send (a few send timeouts).
	ScanGrace time.Duration
	// SoldOutTTL is how long a SOLD_OUT answer of the stock gate lets the
	// next requests for the SKU be answered SOLD_OUT without reserving
	// (see soldOutMarks); 0 disables the mark.
	SoldOutTTL time.Duration
	// Rates, when not nil, records every call of a known activity SKU
	// (accepted or not, with its latency) for the status page.
	Rates *SaleRates
}

// PlaceOrder is the hot path: admission, Redis reservation, bounded
// synchronous send, answer QUEUING.
//
// All ids are generated before anything is stored and bound to the
// client's request_id, so a retried request reuses them. The send outcome
// decides what happens to the reservation: CONFIRMED marks it SENT;
// UNKNOWN leaves it pending for the scanner, which resends with the same
// message id (never compensate on a timeout: the broker may have stored
// the message); DEFINITE_FAILURE releases it at once (the message was
// certainly not stored) and the client is told to retry.
type PlaceOrder struct {
	admission    ports.Admission
	reservations ports.Reservations
	publisher    ports.Publisher
	activities   *Activities
	gate         *BacklogGate
	queries      *Queries
	marker       *SentMarker
	ids          ports.IDGenerator
	clock        ports.Clock
	metrics      ports.Metrics
	fp           ports.Failpoints
	log          *slog.Logger
	cfg          PlaceOrderConfig
	soldOut      *soldOutMarks
}

// NewPlaceOrder wires the use case. fp may be nil.
func NewPlaceOrder(admission ports.Admission, reservations ports.Reservations, publisher ports.Publisher,
	activities *Activities, gate *BacklogGate, queries *Queries, marker *SentMarker, ids ports.IDGenerator,
	clock ports.Clock, metrics ports.Metrics, fp ports.Failpoints, log *slog.Logger, cfg PlaceOrderConfig) *PlaceOrder {
	return &PlaceOrder{admission: admission, reservations: reservations, publisher: publisher,
		activities: activities, gate: gate, queries: queries, marker: marker, ids: ids, clock: clock,
		metrics: metrics, fp: fp, log: log, cfg: cfg, soldOut: newSoldOutMarks(cfg.SoldOutTTL)}
}

// Place reserves one unit for cmd.UserID and queues the order's creation.
//
// The user's rate limit (inside ClaimRequest) is the first work done, so
// no database or stock work is spent on a caller beyond its budget. A
// request that reserves nothing (unknown, scheduled, ended or paused
// activity, backlog, sold out, already purchased) has its claim forgotten (see forgetTTL): it
// leaves no long-lived key in Redis.
func (p *PlaceOrder) Place(ctx context.Context, cmd ports.PlaceOrderCommand) (ports.PlaceOrderResult, error) {
	if p.cfg.Rates == nil {
		return p.place(ctx, cmd)
	}
	start := p.clock.Now()
	res, err := p.place(ctx, cmd)
	if recordedCall(err) {
		end := p.clock.Now()
		p.cfg.Rates.Record(cmd.ActivityID, cmd.SKUID, end, end.Sub(start), err == nil)
	}
	return res, err
}

// recordedCall reports whether a call that answered err counts in
// SaleRates: not one refused before any activity was looked at (bad
// fields, rate limited) nor one of an unknown activity SKU, so made-up
// ids cannot take the recorder's slots.
func recordedCall(err error) bool {
	var fe *ports.FieldError
	return !errors.As(err, &fe) && !errors.Is(err, ports.ErrRateLimited) && !errors.Is(err, ports.ErrActivityNotFound)
}

// place is Place without the recording.
func (p *PlaceOrder) place(ctx context.Context, cmd ports.PlaceOrderCommand) (ports.PlaceOrderResult, error) {
	if err := validatePlace(cmd); err != nil {
		return ports.PlaceOrderResult{}, err
	}
	if p.soldOut.soldOut(cmd.ActivityID, cmd.SKUID, p.clock.Now()) {
		// Only a request seen before can have reserved, and a holder is
		// answered ALREADY_PURCHASED: both take the full path.
		st, err := p.admission.BuyerState(ctx, cmd.UserID, cmd.RequestID, cmd.ActivityID, cmd.SKUID)
		if err == nil && !st.RequestBound && !st.HoldsUnit {
			p.metrics.AdmissionRejected("SOLD_OUT_MARK")
			return ports.PlaceOrderResult{}, fmt.Errorf("activity %d/%d (sold-out mark): %w", cmd.ActivityID, cmd.SKUID, ports.ErrSoldOut)
		}
	}
	claim, existing, err := p.admission.ClaimRequest(ctx, ports.RequestClaim{
		UserID: cmd.UserID, RequestID: cmd.RequestID, ActivityID: cmd.ActivityID, SKUID: cmd.SKUID,
		ReservationID: p.ids.NewID(ports.IDReservation),
		OrderID:       p.ids.NewID(ports.IDOrder),
		MessageID:     p.ids.NewID(ports.IDMessage),
	}, p.cfg.RequestClaimTTL)
	if errors.Is(err, ports.ErrRateLimited) {
		p.metrics.AdmissionRejected("RATE_LIMITED")
	}
	if err != nil {
		return ports.PlaceOrderResult{}, fmt.Errorf("claim request: %w", err)
	}
	res, reserved, err := p.reserve(ctx, cmd, claim, existing)
	if !reserved {
		if ferr := p.admission.ForgetRequest(context.WithoutCancel(ctx), cmd.UserID, cmd.RequestID, claim, forgetTTL); ferr != nil {
			p.log.WarnContext(ctx, "forget a request that reserved nothing; its claim expires with its ttl",
				"user_id", cmd.UserID, "request_id", cmd.RequestID, "error", ferr)
		}
	}
	return res, err
}

// forgetTTL is how long the claim of a request that reserved nothing
// stays: retries within it get the same answer without a new token.
const forgetTTL = 5 * time.Second

// reserve runs the admission checks and the reservation for a claimed
// request and sends the order-create message. reserved is false when no
// reservation stands behind the claim (whatever the error); an error
// with reserved true leaves the reservation to the scanner.
func (p *PlaceOrder) reserve(ctx context.Context, cmd ports.PlaceOrderCommand, claim ports.RequestClaim, existing bool) (ports.PlaceOrderResult, bool, error) {
	act, err := p.activities.Get(ctx, cmd.ActivityID, cmd.SKUID)
	if errors.Is(err, ports.ErrNotFound) {
		return ports.PlaceOrderResult{}, false, fmt.Errorf("activity %d/%d: %w", cmd.ActivityID, cmd.SKUID, ports.ErrActivityNotFound)
	}
	if err != nil {
		return ports.PlaceOrderResult{}, existing, err
	}
	now := p.clock.Now()
	if err := p.gate.Admit(now, act.ReservationTTL); err != nil {
		p.metrics.AdmissionRejected("BACKLOG")
		return ports.PlaceOrderResult{}, existing, err
	}
	r, err := reservation.New(reservation.NewReservation{
		ReservationID: claim.ReservationID, OrderID: claim.OrderID, MessageID: claim.MessageID,
		RequestID: cmd.RequestID, ActivityID: cmd.ActivityID, SKUID: cmd.SKUID, UserID: cmd.UserID,
		TTL: act.ReservationTTL,
	}, now)
	if err != nil {
		return ports.PlaceOrderResult{}, false, fmt.Errorf("new reservation: %w", err)
	}
	stored, err := p.reservations.Reserve(ctx, r.Snapshot(), now.Add(p.cfg.ScanGrace))
	switch {
	case errors.Is(err, ports.ErrSoldOut):
		p.soldOut.mark(cmd.ActivityID, cmd.SKUID, p.clock.Now())
	case err == nil:
		p.soldOut.clear(cmd.ActivityID, cmd.SKUID)
	}
	if errors.Is(err, ports.ErrAlreadyPurchased) {
		return ports.PlaceOrderResult{}, false, p.alreadyPurchased(ctx, cmd, err)
	}
	if refused(err) {
		return ports.PlaceOrderResult{}, false, fmt.Errorf("reserve: %w", err)
	}
	if err != nil {
		// The outcome is unknown (for example a timeout): keep the claim.
		return ports.PlaceOrderResult{}, true, fmt.Errorf("reserve: %w", err)
	}
	res := ports.PlaceOrderResult{OrderID: stored.OrderID, ReservationID: stored.ReservationID, Status: ports.OrderQueuing}
	if existing || stored.Version > 1 || stored.Status != reservation.StatusPending {
		// A repeated request: the first one (or the scanner) owns the send.
		res, err = p.repeated(ctx, cmd.UserID, stored, res)
		return res, true, err
	}
	if err := ports.Inject(ctx, p.fp, ports.FailAfterReserve); err != nil {
		return ports.PlaceOrderResult{}, true, err
	}
	if err := p.send(ctx, stored); err != nil {
		return ports.PlaceOrderResult{}, true, err
	}
	return res, true, nil
}

// refused reports whether err is an answer of the reservation store that
// reserved nothing: the activity SKU is unknown, not started, ended or
// paused, or sold out.
func refused(err error) bool {
	for _, target := range []error{ports.ErrSoldOut, ports.ErrActivityNotFound, ports.ErrActivityNotStarted,
		ports.ErrActivityEnded, ports.ErrActivityPaused} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// ReleaseRetryAfter is the retry hint of ErrReleaseInFlight: the time a
// canceled order's unit usually takes to go back to the entry (the
// cancel's outbox row relayed within the relay interval, the compensation
// task delivered and released in one Redis round trip: well under a second
// when the pipeline keeps up), with room for a backlog of a few hundred
// milliseconds. A retry that comes too early is answered the same way
// again, so the hint errs on the short side rather than make the buyer
// wait.
const ReleaseRetryAfter = 2 * time.Second

// alreadyPurchased answers a Reserve refused because the buyer holds a
// unit (err matches ErrAlreadyPurchased). When the holding reservation's
// order is canceled or rejected, its unit is on its way back (the
// release removes the holder entry; a canceled order always has a release
// task): the answer is then a *ports.RetryAfterError wrapping
// ErrReleaseInFlight and ErrAlreadyPurchased. When the order cannot be
// read the plain ErrAlreadyPurchased stands.
func (p *PlaceOrder) alreadyPurchased(ctx context.Context, cmd ports.PlaceOrderCommand, err error) error {
	var held *ports.HolderError
	if !errors.As(err, &held) || held.OrderID == "" {
		return fmt.Errorf("reserve: %w", err)
	}
	v, gerr := p.queries.GetOrder(ctx, cmd.UserID, held.OrderID)
	if gerr != nil {
		p.log.DebugContext(ctx, "read the holder's order to tell a release in flight; answering already purchased",
			"user_id", cmd.UserID, "order_id", held.OrderID, "error", gerr)
		return fmt.Errorf("reserve: %w", err)
	}
	if v.Status != ports.OrderCanceled && v.Status != ports.OrderRejected {
		return fmt.Errorf("reserve: %w", err)
	}
	return &ports.RetryAfterError{
		Err: fmt.Errorf("reserve activity %d sku %d: order %s is %s: %w: %w", cmd.ActivityID, cmd.SKUID,
			held.OrderID, v.Status, ports.ErrReleaseInFlight, ports.ErrAlreadyPurchased),
		After: ReleaseRetryAfter,
	}
}

// send publishes the order-create message and records the outcome. Only a
// definite failure of the first attempt surfaces to the client, as a
// transient error after the stock went back; a definite failure after an
// unknown outcome releases nothing (the first copy may still become an
// order). An unknown outcome is retried once at once with the same
// message id (a send that timed out on a broker still warming up mostly
// succeeds the second time, with the longer timeout the first one caused),
// then left to the scanner and the client is answered QUEUING: until the
// message is confirmed, Redis is its only record.
func (p *PlaceOrder) send(ctx context.Context, r reservation.Snapshot) error {
	ref := ports.ReservationRef{ActivityID: r.ActivityID, SKUID: r.SKUID, ReservationID: r.ReservationID, UserID: r.UserID}
	msg, err := orderCreateMessage(r, 0, p.clock.Now(), ports.TraceFrom(ctx))
	if err != nil {
		p.logSend(ctx, slog.LevelError, "build order-create message; the scanner retries", r, "", err, 0)
		return nil
	}
	for attempt := 1; ; attempt++ {
		start := p.clock.Now()
		receipt, err := p.publisher.Publish(ctx, msg)
		latency := p.clock.Now().Sub(start)
		switch {
		case err == nil:
			if ferr := ports.Inject(ctx, p.fp, ports.FailAfterSend); ferr != nil {
				return ferr
			}
			p.marker.Mark(ctx, ref)
			if p.log.Enabled(ctx, slog.LevelDebug) {
				p.logSend(ctx, slog.LevelDebug, "order-create sent", r, "CONFIRMED", nil, latency,
					slog.String("broker_message_id", receipt.BrokerMessageID), slog.Int("attempt", attempt))
			}
		case errors.Is(err, ports.ErrSendRejected) && attempt > 1:
			// The first attempt's outcome was unknown: its copy may be in
			// the broker and become an order, so the unit must not go back
			// (I1). The scanner resends; the reconciler releases the
			// reservation once it expired without an order.
			p.logSend(ctx, slog.LevelWarn, "order-create resend definitely failed after an unknown send; scanner will resend", r,
				"DEFINITE_FAILURE", err, latency, slog.Int("attempt", attempt))
		case errors.Is(err, ports.ErrSendRejected):
			released, rerr := p.reservations.Release(context.WithoutCancel(ctx), ref, reservation.ReasonSendFailed)
			p.logSend(ctx, slog.LevelError, "order-create send definitely failed, reservation released", r,
				"DEFINITE_FAILURE", err, latency, slog.Bool("released", released), slog.Any("release_error", rerr))
			return fmt.Errorf("order queue rejected the message: %w", ports.ErrTransient)
		case errors.Is(err, ports.ErrBrokerUnavailable):
			// Not written (the breaker is open, or the publisher had no
			// free channel within the bound): the scanner sends it later;
			// one line per request would flood the log.
			if p.log.Enabled(ctx, slog.LevelDebug) {
				p.logSend(ctx, slog.LevelDebug, "order-create send not attempted (broker believed down or busy); scanner will send", r,
					"SKIPPED", err, latency)
			}
		case attempt == 1 && ctx.Err() == nil:
			msg.Retry = true
			continue
		default:
			p.logSend(ctx, slog.LevelWarn, "order-create send outcome unknown, scanner will resend", r, "UNKNOWN", err, latency,
				slog.Int("attempt", attempt))
		}
		return nil
	}
}

// logSend writes one producer log line with the fields of spec 28.1.
func (p *PlaceOrder) logSend(ctx context.Context, level slog.Level, msg string, r reservation.Snapshot, outcome string,
	err error, latency time.Duration, extra ...slog.Attr) {
	attrs := append([]slog.Attr{
		slog.String("message_id", r.MessageID), slog.String("reservation_id", r.ReservationID),
		slog.String("request_id", r.RequestID), slog.String("order_id", r.OrderID),
		slog.Int64("activity_id", r.ActivityID), slog.Int64("sku_id", r.SKUID), slog.Int64("user_id", r.UserID),
		slog.String("topic", string(ports.TopicOrderCreate)), slog.String("tag", "CREATE_ORDER"),
		slog.Int("send_attempt", r.SendAttempt), slog.String("send_outcome", outcome),
		slog.Int64("send_latency_ms", latency.Milliseconds()), slog.String("trace_id", ports.TraceFrom(ctx).TraceID),
	}, extra...)
	if err != nil {
		attrs = append(attrs, slog.String("error_class", classifySend(err)), slog.String("error", err.Error()))
	}
	p.log.LogAttrs(ctx, level, msg, attrs...)
}

// classifySend names a send error for logs.
func classifySend(err error) string {
	switch {
	case errors.Is(err, ports.ErrSendRejected):
		return "SEND_REJECTED"
	case errors.Is(err, ports.ErrSendUnknown):
		return "SEND_UNKNOWN"
	}
	return "SEND_ERROR"
}

// repeated answers a retried request_id from the stored reservation.
func (p *PlaceOrder) repeated(ctx context.Context, userID int64, r reservation.Snapshot, res ports.PlaceOrderResult) (ports.PlaceOrderResult, error) {
	switch r.Status {
	case reservation.StatusPending, reservation.StatusSent:
		return res, nil
	}
	v, err := p.queries.GetOrder(ctx, userID, r.OrderID)
	if err != nil {
		return ports.PlaceOrderResult{}, err
	}
	res.Status = v.Status
	return res, nil
}

func validatePlace(cmd ports.PlaceOrderCommand) error {
	switch {
	case cmd.UserID <= 0:
		return ports.InvalidField("user_id", "must be > 0")
	case cmd.ActivityID <= 0:
		return ports.InvalidField("activity_id", "must be > 0")
	case cmd.SKUID <= 0:
		return ports.InvalidField("sku_id", "must be > 0")
	case clientid.Validate(cmd.RequestID) != nil:
		return ports.InvalidField("request_id", "must be %s", clientid.Allowed)
	}
	return nil
}
