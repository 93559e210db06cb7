// Package message defines the versioned integration messages the service
// exchanges over the broker, their JSON encoding and their validation.
//
// Every message shares an Envelope: schema_version (the structure's version,
// not a business version), event_type, the business message_id (the inbox
// idempotency key, fixed for the life of the business event and kept on
// resends and replays), message_key, created_at, retry_count (application
// resends), replay_count/replay_id (operator replays) and a W3C trace
// context. Decoding never panics: it returns an error matching ErrMalformed,
// ErrUnsupportedSchema or ErrInvalid, which consumers use to quarantine bad
// input after a single attempt.
//
// The package imports only the standard library.
package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// SchemaV1 is the only schema version this build produces and accepts.
const SchemaV1 = 1

// Event types carried in the envelope's event_type field.
const (
	TypeOrderCreateRequested = "ORDER_CREATE_REQUESTED"
	TypeCancelOrderIfUnpaid  = "CANCEL_ORDER_IF_UNPAID"
	TypeCancelOrdersIfUnpaid = "CANCEL_ORDERS_IF_UNPAID"
	TypeReleaseReservation   = "RELEASE_RESERVATION"
	TypeOrderCreated         = "ORDER_CREATED"
	TypeOrderPaid            = "ORDER_PAID"
	TypeOrderCanceled        = "ORDER_CANCELED"
	TypeOrderStateChanged    = "ORDER_STATE_CHANGED"
)

// Tags: the broker-side classification of each message (low cardinality).
const (
	TagCreateOrder        = "CREATE_ORDER"
	TagCancelIfUnpaid     = "CANCEL_IF_UNPAID"
	TagReleaseReservation = "RELEASE_RESERVATION"
	TagOrderStateChanged  = "ORDER_STATE_CHANGED"
)

// Property names set on broker messages besides the body (spec 12).
const (
	PropMessageID     = "message_id"
	PropRequestID     = "request_id"
	PropReservationID = "reservation_id"
	PropOrderID       = "order_id"
	PropSchemaVersion = "schema_version"
	PropTraceparent   = "traceparent"
	PropReplayID      = "replay_id"
	PropReplayCount   = "replay_count"
	PropEventType     = "event_type"
)

// Decoding errors. Consumers map them to quarantine classes.
var (
	// ErrMalformed: the body is not a JSON object of the expected shape.
	ErrMalformed = errors.New("message: malformed")
	// ErrUnsupportedSchema: schema_version or event_type is not supported.
	ErrUnsupportedSchema = errors.New("message: unsupported schema")
	// ErrInvalid: a field is missing or out of range.
	ErrInvalid = errors.New("message: invalid field")
)

// Class returns the quarantine/error class for a decoding error:
// INVALID_JSON, UNSUPPORTED_SCHEMA, INVALID_EVENT, or "" for other errors.
func Class(err error) string {
	switch {
	case errors.Is(err, ErrMalformed):
		return "INVALID_JSON"
	case errors.Is(err, ErrUnsupportedSchema):
		return "UNSUPPORTED_SCHEMA"
	case errors.Is(err, ErrInvalid):
		return "INVALID_EVENT"
	}
	return ""
}

// TraceContext is the W3C trace context carried across the broker.
type TraceContext struct {
	TraceID     string `json:"trace_id,omitempty"`
	SpanID      string `json:"span_id,omitempty"`
	Traceparent string `json:"traceparent,omitempty"`
}

// Envelope holds the fields every message has.
type Envelope struct {
	SchemaVersion int          `json:"schema_version"`
	EventType     string       `json:"event_type"`
	MessageID     string       `json:"message_id"`
	MessageKey    string       `json:"message_key"`
	CreatedAt     time.Time    `json:"created_at"`
	RetryCount    int32        `json:"retry_count"`
	ReplayCount   int32        `json:"replay_count"`
	ReplayID      string       `json:"replay_id,omitempty"`
	Producer      string       `json:"producer,omitempty"`
	Trace         TraceContext `json:"trace"`
}

func (e Envelope) validate(eventType string) error {
	switch {
	case e.SchemaVersion != SchemaV1:
		return fmt.Errorf("%w: schema_version %d", ErrUnsupportedSchema, e.SchemaVersion)
	case e.EventType != eventType:
		return fmt.Errorf("%w: event_type %q, want %q", ErrUnsupportedSchema, e.EventType, eventType)
	case e.MessageID == "" || len(e.MessageID) > 128:
		return fmt.Errorf("%w: message_id must be 1..128 characters", ErrInvalid)
	case len(e.MessageKey) > 128:
		return fmt.Errorf("%w: message_key longer than 128 characters", ErrInvalid)
	case e.CreatedAt.IsZero():
		return fmt.Errorf("%w: created_at is missing", ErrInvalid)
	case e.RetryCount < 0 || e.ReplayCount < 0:
		return fmt.Errorf("%w: negative retry_count or replay_count", ErrInvalid)
	}
	return nil
}

// PeekEnvelope decodes only the envelope of body, for routing, replay and
// dead-letter bookkeeping. It checks that body is a JSON object but does not
// validate the envelope.
func PeekEnvelope(body []byte) (Envelope, error) {
	var e Envelope
	if err := decodeObject(body, &e); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// WithReplay returns body with replay_id set and replay_count incremented,
// leaving every other field (message_id first of all) unchanged. It fails
// with ErrMalformed when body is not a JSON object.
func WithReplay(body []byte, replayID string) ([]byte, int32, error) {
	var fields map[string]json.RawMessage
	if err := decodeObject(body, &fields); err != nil {
		return nil, 0, err
	}
	var count int32
	if raw, ok := fields["replay_count"]; ok {
		if err := json.Unmarshal(raw, &count); err != nil {
			return nil, 0, fmt.Errorf("%w: replay_count: %v", ErrMalformed, err)
		}
	}
	count++
	fields["replay_count"], _ = json.Marshal(count)
	fields["replay_id"], _ = json.Marshal(replayID)
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return out, count, nil
}

// decodeObject unmarshals a JSON object into v, mapping every failure to
// ErrMalformed. Trailing data after the object is rejected.
func decodeObject(body []byte, v any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after object", ErrMalformed)
	}
	return nil
}

func encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode message: %w", err)
	}
	return b, nil
}
