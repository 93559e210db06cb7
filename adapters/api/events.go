package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// EventHandler serves seckill.v1.EventService over ports.EventSubscriptions.
// It validates the request, bounds the streams open at once
// (Limits.EventStreams) and the time one send may take
// (Limits.EventSendTimeout), converts the log's records to the published
// contract and maps errors in one place (toConnectError).
type EventHandler struct {
	seckillv1connect.UnimplementedEventServiceHandler
	subs        ports.EventSubscriptions
	log         *slog.Logger
	sendTimeout time.Duration
	streams     chan struct{}
}

// NewEventHandler returns the handler of subs with the stream cap and
// send bound of limits (their defaults when zero).
func NewEventHandler(subs ports.EventSubscriptions, log *slog.Logger, limits Limits) *EventHandler {
	n := limits.EventStreams
	if n <= 0 {
		n = DefaultEventStreams
	}
	timeout := limits.EventSendTimeout
	if timeout <= 0 {
		timeout = DefaultEventSendTimeout
	}
	return &EventHandler{subs: subs, log: log, sendTimeout: timeout, streams: make(chan struct{}, n)}
}

// knownEventTypes are the event types a filter may name.
var knownEventTypes = map[string]order.EventType{
	string(order.EventCreated): order.EventCreated, string(order.EventPaymentStarted): order.EventPaymentStarted,
	string(order.EventPaid): order.EventPaid, string(order.EventCanceled): order.EventCanceled,
}

// eventFilter validates a request and returns its position and filter.
func eventFilter(m *seckillv1.SubscribeRequest) (int64, ports.EventFilter, error) {
	if m.GetFromPosition() < 0 {
		return 0, ports.EventFilter{}, ports.InvalidField("from_position", "must be >= 0 (0 is the beginning of the log)")
	}
	if m.GetActivityId() < 0 {
		return 0, ports.EventFilter{}, ports.InvalidField("activity_id", "must be >= 0 (0 selects every activity)")
	}
	f := ports.EventFilter{ActivityID: m.GetActivityId()}
	for _, name := range m.GetEventTypes() {
		t, ok := knownEventTypes[name]
		if !ok {
			return 0, ports.EventFilter{}, ports.InvalidField("event_types", "unknown event type %q (known: %s, %s, %s, %s)",
				truncate(name, 64), order.EventCreated, order.EventPaymentStarted, order.EventPaid, order.EventCanceled)
		}
		f.Types = append(f.Types, t)
	}
	return m.GetFromPosition(), f, nil
}

// truncate bounds a caller's string quoted back in an error.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Subscribe implements seckillv1connect.EventServiceHandler: it streams
// the subscription until the client ends it, the subscriber is too slow
// or the log fails.
func (h *EventHandler) Subscribe(ctx context.Context, req *connect.Request[seckillv1.SubscribeRequest],
	stream *connect.ServerStream[seckillv1.SubscribeResponse]) (err error) {
	from, f, err := eventFilter(req.Msg)
	if err != nil {
		return h.fail(ctx, req.Spec(), err)
	}
	select {
	case h.streams <- struct{}{}:
		defer func() { <-h.streams }()
	default:
		return exhausted(ReasonOverloaded, "too many event streams are open on this instance, retry later")
	}
	if stopping, ok := ctx.Value(shutdownKey{}).(context.Context); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(stopping, cancel)()
		defer func() {
			if stopping.Err() != nil && err == nil {
				err = connect.NewError(connect.CodeUnavailable,
					errors.New("the service is shutting down: subscribe again with from_position = the last position you handled"))
			}
		}()
	}
	sink := &streamSink{stream: stream, timeout: h.sendTimeout}
	if rw, ok := ctx.Value(responseControllerKey{}).(*streamWriter); ok {
		// The request is read: the server's read timeout, which bounds a
		// slow request, must not cut the long-lived response.
		if err := rw.rc.SetReadDeadline(time.Time{}); err == nil {
			sink.rc, sink.w = rw.rc, rw
		} else {
			h.log.WarnContext(ctx, "event stream without deadlines: the send bound does not apply", "error", err)
		}
	}
	err = h.subs.Subscribe(ctx, from, f, sink)
	if err == nil || (ctx.Err() != nil && !errors.Is(err, ports.ErrSubscriberTooSlow)) {
		return nil // the client ended the stream
	}
	if errors.Is(err, ports.ErrSubscriberTooSlow) {
		id, _ := IdentityFrom(ctx)
		h.log.InfoContext(ctx, "event subscriber cut off: too slow", "user_id", id.UserID,
			"last_position", sink.last, "send_timeout", h.sendTimeout)
	}
	return h.fail(ctx, req.Spec(), err)
}

func (h *EventHandler) fail(ctx context.Context, spec connect.Spec, err error) error {
	return toConnectError(ctx, h.log, spec.Procedure, err)
}

// streamSink sends a subscription's items on the stream, each within the
// send bound. It implements ports.EventBatchSink's Events too: a
// page of events goes out with one flush.
type streamSink struct {
	stream  *connect.ServerStream[seckillv1.SubscribeResponse]
	rc      *http.ResponseController // nil: no deadline (the handler was not mounted by NewHandler)
	w       *streamWriter            // the writer Connect writes to; nil with rc
	timeout time.Duration
	last    int64 // the last position sent
}

// Event implements ports.EventSink.
func (s *streamSink) Event(_ context.Context, e ports.EventRecord) error {
	if err := s.send(&seckillv1.SubscribeResponse{Item: &seckillv1.SubscribeResponse_Event{Event: eventMessage(e)}}); err != nil {
		return fmt.Errorf("send event at position %d: %w", e.Position, err)
	}
	s.last = e.Position
	return nil
}

// Events sends a page of events (in position order) and flushes the
// stream once at its end, instead of once per event. The send bound
// applies as in send: the write deadline is set when the page begins and
// moved on while the page goes out (so that each message, and the final
// flush, has between the bound less sendBoundSlack and the bound to
// complete), and cleared at the end, so that an idle stream is never cut.
func (s *streamSink) Events(ctx context.Context, events []ports.EventRecord) error {
	if s.rc == nil || s.w == nil {
		for _, e := range events {
			if err := s.Event(ctx, e); err != nil {
				return err
			}
		}
		return nil
	}
	s.w.hold = true // Connect's flush after each Send waits for the page's
	defer func() { s.w.hold = false }()
	slack := sendBoundSlack(s.timeout)
	var deadline time.Time
	defer func() { _ = s.rc.SetWriteDeadline(time.Time{}) }()
	for _, e := range events {
		if time.Until(deadline) < s.timeout-slack {
			deadline = time.Now().Add(s.timeout)
			_ = s.rc.SetWriteDeadline(deadline) // supported: checked when the stream began
		}
		err := s.stream.Send(&seckillv1.SubscribeResponse{Item: &seckillv1.SubscribeResponse_Event{Event: eventMessage(e)}})
		if err != nil {
			return fmt.Errorf("send event at position %d: %w", e.Position, s.sendErr(err, deadline))
		}
	}
	if time.Until(deadline) < s.timeout-slack {
		deadline = time.Now().Add(s.timeout)
		_ = s.rc.SetWriteDeadline(deadline)
	}
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("send events up to position %d: %w", events[len(events)-1].Position, s.sendErr(err, deadline))
	}
	s.last = events[len(events)-1].Position
	return nil
}

// sendBoundSlack is how far a page's write deadline may fall short of the
// send bound before it is moved on: a tenth of the bound, at most 100 ms
// (one deadline change per 100 ms of a page instead of two per message).
func sendBoundSlack(timeout time.Duration) time.Duration {
	return min(timeout/10, 100*time.Millisecond)
}

// Checkpoint implements ports.EventSink.
func (s *streamSink) Checkpoint(_ context.Context, c ports.Checkpoint) error {
	if err := s.send(&seckillv1.SubscribeResponse{Item: &seckillv1.SubscribeResponse_Checkpoint{
		Checkpoint: &seckillv1.Checkpoint{Position: c.Position, Live: c.Live}}}); err != nil {
		return fmt.Errorf("send checkpoint at position %d: %w", c.Position, err)
	}
	s.last = c.Position
	return nil
}

// send sends m with a write deadline of the send bound: a subscriber that
// does not read fills the stream's flow-control window, the write blocks
// and the deadline ends it (the stream is reset), which is
// ports.ErrSubscriberTooSlow. The deadline is cleared after each send, so
// an idle stream is never cut.
func (s *streamSink) send(m *seckillv1.SubscribeResponse) error {
	if s.rc == nil {
		return s.stream.Send(m)
	}
	deadline := time.Now().Add(s.timeout)
	_ = s.rc.SetWriteDeadline(deadline) // supported: checked when the stream began
	err := s.stream.Send(m)
	_ = s.rc.SetWriteDeadline(time.Time{})
	if err != nil {
		return s.sendErr(err, deadline)
	}
	return nil
}

// sendErr is err of a write under deadline, as ports.ErrSubscriberTooSlow
// when the deadline ended it.
func (s *streamSink) sendErr(err error, deadline time.Time) error {
	if errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(deadline) {
		return fmt.Errorf("%w: a send did not complete within %s", ports.ErrSubscriberTooSlow, s.timeout)
	}
	return err
}

// eventMessage converts a record of the log to the published contract.
func eventMessage(r ports.EventRecord) *seckillv1.OrderEvent {
	e := r.Event
	m := &seckillv1.OrderEvent{
		Position: r.Position, EventId: r.EventID(), OrderId: e.OrderID,
		ActivityId: r.ActivityID, SkuId: r.SKUID, UserId: r.UserID,
		AggregateVersion: e.Version, EventType: string(e.Type), SchemaVersion: int32(e.SchemaVersion),
		OccurredAt: timestamppb.New(e.OccurredAt), Traceparent: r.Traceparent,
	}
	switch p := e.Payload.(type) {
	case order.Created:
		m.Payload = &seckillv1.OrderEvent_Created{Created: &seckillv1.OrderCreated{
			ReservationId: p.ReservationID, MessageId: p.MessageID, Quantity: p.Quantity,
			ReservedAt: timestamppb.New(p.ReservedAt), ExpiresAt: timestamppb.New(p.ExpiresAt),
			UnitPrice: p.UnitPrice, Currency: p.Currency,
		}}
	case order.PaymentStarted:
		m.Payload = &seckillv1.OrderEvent_PaymentStarted{PaymentStarted: &seckillv1.OrderPaymentStarted{PaymentId: p.PaymentID}}
	case order.Paid:
		m.Payload = &seckillv1.OrderEvent_Paid{Paid: &seckillv1.OrderPaid{PaymentId: p.PaymentID}}
	case order.Canceled:
		m.Payload = &seckillv1.OrderEvent_Canceled{Canceled: &seckillv1.OrderCanceled{Reason: string(p.Reason)}}
	}
	return m
}

// shutdownKey carries the Server's stopping context (canceled when a
// shutdown begins) from the connection to the handler.
type shutdownKey struct{}

// responseControllerKey carries the stream's *streamWriter from
// withResponseController to the handler.
type responseControllerKey struct{}

// streamWriter is the response writer an event stream's Connect handler
// writes to: while hold is set, its Flush (which Connect calls after every
// message) does nothing, so that a page of events goes out in one flush
// (streamSink.Events, through rc); otherwise it flushes. rc controls the
// response underneath (deadlines, the real flush).
type streamWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	hold bool
}

// Flush implements http.Flusher: nothing while hold is set.
func (w *streamWriter) Flush() {
	if !w.hold {
		_ = w.rc.Flush()
	}
}

// Unwrap returns the writer underneath (for http.ResponseController).
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// withResponseController wraps the response in a streamWriter stored in
// the request's context, so the handler can lift the read deadline, bound
// each send and flush a page of events once.
func withResponseController(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &streamWriter{ResponseWriter: w, rc: http.NewResponseController(w)}
		ctx := context.WithValue(r.Context(), responseControllerKey{}, sw)
		next.ServeHTTP(sw, r.WithContext(ctx))
	})
}

// streamGuard applies to streaming calls what the unary interceptors
// apply to unary ones (they do not see streams): the identity and scope
// check of authorize, and the per-RPC count of m (nil: none). Unary calls
// pass through it untouched.
type streamGuard struct{ metrics *RPCMetrics }

// WrapUnary implements connect.Interceptor: unary calls pass.
func (streamGuard) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

// WrapStreamingClient implements connect.Interceptor: client streams pass.
func (streamGuard) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (g streamGuard) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		err := g.guard(ctx, conn, next)
		if m := g.metrics; m != nil {
			m.handled.WithLabelValues(conn.Spec().Procedure, codeOf(err)).Inc()
		}
		return err
	}
}

func (streamGuard) guard(ctx context.Context, conn connect.StreamingHandlerConn, next connect.StreamingHandlerFunc) error {
	id, ok := IdentityFrom(ctx)
	if !ok {
		return connect.NewError(connect.CodeUnauthenticated, errNoIdentity)
	}
	if err := authorize(conn.Spec().Procedure, id); err != nil {
		return err
	}
	return next(ctx, conn)
}
