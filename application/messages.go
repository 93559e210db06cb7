package application

import (
	"fmt"
	"strconv"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// Producer is the producer name carried in every message envelope.
const Producer = "seckill"

// Failure classes of compensation tasks (seed 004 4.1).
const (
	ClassBusinessReject = "BUSINESS_REJECT"
	ClassOrderCanceled  = "ORDER_CANCELED"
	ClassReconcile      = "RECONCILE"
)

// CompensationPolicy bounds the retries of a compensation task.
type CompensationPolicy struct {
	MaxAttempts int32
	Window      time.Duration
}

func envelope(eventType, messageID, key string, now time.Time, trace message.TraceContext) message.Envelope {
	return message.Envelope{
		SchemaVersion: message.SchemaV1,
		EventType:     eventType,
		MessageID:     messageID,
		MessageKey:    key,
		CreatedAt:     now.UTC(),
		Producer:      Producer,
		Trace:         trace,
	}
}

// orderCreateMessage builds the OrderCreateRequested message of a
// reservation. Its message id is the reservation's, fixed at reservation
// time, so every resend carries the same id.
func orderCreateMessage(r reservation.Snapshot, retryCount int32, now time.Time, trace message.TraceContext) (ports.OutboundMessage, error) {
	m := message.OrderCreateRequested{
		Envelope:              envelope(message.TypeOrderCreateRequested, r.MessageID, r.ReservationID, now, trace),
		RequestID:             r.RequestID,
		ReservationID:         r.ReservationID,
		OrderID:               r.OrderID,
		ActivityID:            r.ActivityID,
		SKUID:                 r.SKUID,
		UserID:                r.UserID,
		Quantity:              1,
		ReservationCreatedAt:  r.CreatedAt,
		ReservationValidUntil: r.ValidUntil,
	}
	m.RetryCount = retryCount
	body, err := m.Encode()
	if err != nil {
		return ports.OutboundMessage{}, fmt.Errorf("encode order-create message: %w", err)
	}
	return ports.OutboundMessage{
		Topic:      ports.TopicOrderCreate,
		MessageID:  r.MessageID,
		Tag:        message.TagCreateOrder,
		Keys:       []string{r.ReservationID, r.OrderID, r.RequestID},
		Body:       body,
		Properties: m.Properties(),
	}, nil
}

// orderMessages builds the outbox rows of one committed order change: the
// domain events for downstream consumers (ORDER_EVENT topic) and one state
// change for the query projection (FIFO, grouped by order id). messageID
// derives the deterministic ids: the same change always yields the same
// message ids.
func orderMessages(s order.Snapshot, events []order.Event, now time.Time, trace message.TraceContext) ([]ports.OutboundMessage, error) {
	state := orderState(s)
	state.PreviousVersion = s.Version - int64(len(events))
	var out []ports.OutboundMessage
	for _, e := range events {
		var typ string
		switch e.Type {
		case order.EventCreated:
			typ = message.TypeOrderCreated
		case order.EventPaid:
			typ = message.TypeOrderPaid
		case order.EventCanceled:
			typ = message.TypeOrderCanceled
		default:
			continue // PaymentStarted is internal to PayOrder
		}
		id := derivedID(s.OrderID, "event", e.Version)
		m := message.OrderEvent{Envelope: envelope(typ, id, s.OrderID, now, trace), OrderState: state}
		body, err := m.Encode()
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", typ, err)
		}
		out = append(out, ports.OutboundMessage{
			Topic: ports.TopicOrderEvent, MessageID: id, Tag: typ, Keys: []string{s.OrderID},
			Body: body, Properties: props(id, s.OrderID, s.ReservationID, typ, trace),
		})
	}
	st, err := stateChanged(state, now, trace)
	if err != nil {
		return nil, err
	}
	return append(out, st), nil
}

// stateChanged builds the FIFO projection message of an order state.
func stateChanged(state message.OrderState, now time.Time, trace message.TraceContext) (ports.OutboundMessage, error) {
	id := derivedID(state.OrderID, "state", state.AggregateVersion)
	m := message.OrderStateChanged{Envelope: envelope(message.TypeOrderStateChanged, id, state.OrderID, now, trace), OrderState: state}
	body, err := m.Encode()
	if err != nil {
		return ports.OutboundMessage{}, fmt.Errorf("encode state change: %w", err)
	}
	return ports.OutboundMessage{
		Topic: ports.TopicOrderStateFIFO, MessageID: id, Tag: message.TagOrderStateChanged,
		Keys: []string{state.OrderID}, MessageGroup: state.OrderID, Body: body,
		Properties: props(id, state.OrderID, state.ReservationID, message.TypeOrderStateChanged, trace),
	}, nil
}

// timeoutMessage builds the delayed payment-timeout check of a new order,
// due at its expires_at.
func timeoutMessage(s order.Snapshot, now time.Time, trace message.TraceContext) (ports.OutboundMessage, error) {
	id := derivedID(s.OrderID, "timeout", 1)
	m := message.CancelOrderIfUnpaid{
		Envelope:      envelope(message.TypeCancelOrderIfUnpaid, id, s.OrderID, now, trace),
		OrderID:       s.OrderID,
		ReservationID: s.ReservationID,
		ActivityID:    s.ActivityID,
		SKUID:         s.SKUID,
		UserID:        s.UserID,
		DeliverAt:     s.ExpiresAt,
	}
	body, err := m.Encode()
	if err != nil {
		return ports.OutboundMessage{}, fmt.Errorf("encode timeout: %w", err)
	}
	return ports.OutboundMessage{
		Topic: ports.TopicOrderTimeout, MessageID: id, Tag: message.TagCancelIfUnpaid,
		Keys: []string{s.OrderID}, DeliverAt: s.ExpiresAt, Body: body,
		Properties: props(id, s.OrderID, s.ReservationID, message.TypeCancelOrderIfUnpaid, trace),
	}, nil
}

// releaseMessage builds the compensation task that gives a reservation's
// stock back in Redis. Its id derives from the reservation, so however
// many paths ask for the release, the compensation consumer's inbox and
// the Lua guard see one task.
func releaseMessage(ref releaseRef, reason reservation.ReleaseReason, class string, p CompensationPolicy, now time.Time, trace message.TraceContext) (ports.OutboundMessage, error) {
	id := derivedID(ref.ReservationID, "release", 1)
	m := message.ReleaseReservation{
		Envelope:      envelope(message.TypeReleaseReservation, id, ref.ReservationID, now, trace),
		ReservationID: ref.ReservationID,
		OrderID:       ref.OrderID,
		ActivityID:    ref.ActivityID,
		SKUID:         ref.SKUID,
		UserID:        ref.UserID,
		Reason:        string(reason),
		FailureClass:  class,
		MaxAttempts:   p.MaxAttempts,
		RetryUntil:    now.Add(p.Window).UTC(),
	}
	body, err := m.Encode()
	if err != nil {
		return ports.OutboundMessage{}, fmt.Errorf("encode release: %w", err)
	}
	return ports.OutboundMessage{
		Topic: ports.TopicInventoryCompensate, MessageID: id, Tag: message.TagReleaseReservation,
		Keys: []string{ref.ReservationID, ref.OrderID}, Body: body,
		Properties: props(id, ref.OrderID, ref.ReservationID, message.TypeReleaseReservation, trace),
	}, nil
}

// releaseRef identifies the reservation a release applies to.
type releaseRef struct {
	ReservationID, OrderID    string
	ActivityID, SKUID, UserID int64
}

func orderState(s order.Snapshot) message.OrderState {
	return message.OrderState{
		OrderID:          s.OrderID,
		ReservationID:    s.ReservationID,
		ActivityID:       s.ActivityID,
		SKUID:            s.SKUID,
		UserID:           s.UserID,
		Status:           string(s.Status),
		Reason:           string(s.CancelReason),
		PaymentID:        s.PaymentID,
		AggregateVersion: s.Version,
		CreatedAt:        s.CreatedAt,
		UpdatedAt:        s.UpdatedAt,
		ExpiresAt:        s.ExpiresAt,
		PaidAt:           s.PaidAt,
		CanceledAt:       s.CanceledAt,
	}
}

func props(messageID, orderID, reservationID, eventType string, trace message.TraceContext) map[string]string {
	p := map[string]string{
		message.PropMessageID:     messageID,
		message.PropOrderID:       orderID,
		message.PropReservationID: reservationID,
		message.PropSchemaVersion: strconv.Itoa(message.SchemaV1),
		message.PropEventType:     eventType,
	}
	if trace.Traceparent != "" {
		p[message.PropTraceparent] = trace.Traceparent
	}
	return p
}

// derivedID makes the message id of a fact derived from an aggregate:
// deterministic, so re-running the same transaction after a crash yields
// the same ids and consumers' inboxes absorb the duplicate.
func derivedID(aggregateID, kind string, version int64) string {
	return fmt.Sprintf("evt_%s_%s_%d", aggregateID, kind, version)
}
