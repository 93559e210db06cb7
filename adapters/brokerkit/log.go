package brokerkit

import (
	"context"
	"log/slog"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// LogPublish writes the producer log line of one publish ("mq publish",
// the fields of the operations guide): debug when confirmed, warn when
// unknown, error on a definite failure.
func LogPublish(log *slog.Logger, msg ports.OutboundMessage, topic, outcome, class, brokerID string, elapsed time.Duration, err error) {
	level := slog.LevelDebug
	switch outcome {
	case OutcomeUnknown:
		level = slog.LevelWarn
	case OutcomeDefiniteFailure:
		level = slog.LevelError
	}
	ctx := context.Background()
	if !log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("message_id", msg.MessageID),
		slog.String("topic", topic),
		slog.String("tag", msg.Tag),
		slog.String("send_outcome", outcome),
		slog.String("broker_message_id", brokerID),
		slog.Float64("send_latency_ms", float64(elapsed.Microseconds())/1000),
	}
	for _, k := range []string{message.PropReservationID, message.PropRequestID, message.PropOrderID} {
		if v := msg.Properties[k]; v != "" {
			attrs = append(attrs, slog.String(k, v))
		}
	}
	if err != nil {
		attrs = append(attrs, slog.String("error_class", class), slog.String("error", err.Error()))
	}
	log.LogAttrs(ctx, level, "mq publish", attrs...)
}

// LogDecision writes the consumer log line of one delivery ("mq consume"):
// warn when settling failed (err), debug when acknowledged and logAcks is
// off, info otherwise. result is how the decision was settled.
func LogDecision(log *slog.Logger, d ports.Delivery, dec ports.Decision, result string, acked, logAcks bool, err error) {
	level := slog.LevelInfo
	switch {
	case err != nil:
		level = slog.LevelWarn
	case acked && !logAcks:
		level = slog.LevelDebug
	}
	ctx := context.Background()
	if !log.Enabled(ctx, level) {
		return
	}
	extra := []slog.Attr{slog.String("decision", dec.Outcome), slog.String("ack_result", result)}
	if dec.Inbox != "" {
		extra = append(extra, slog.String("inbox_result", dec.Inbox))
	}
	if dec.Effect != "" {
		extra = append(extra, slog.String("order_result", dec.Effect))
	}
	if dec.TxLatency > 0 {
		extra = append(extra, slog.Int64("tx_latency_ms", dec.TxLatency.Milliseconds()))
	}
	if dec.Reason != "" {
		extra = append(extra, slog.String("reason", dec.Reason))
	}
	if dec.RetryAfter > 0 {
		extra = append(extra, slog.Duration("retry_after", dec.RetryAfter))
	}
	if err != nil {
		extra = append(extra, slog.String("error", err.Error()))
	}
	log.LogAttrs(ctx, level, "mq consume", DeliveryAttrs(d, extra...)...)
}

// DeliveryAttrs returns the identifying log fields of a delivery followed
// by extra.
func DeliveryAttrs(d ports.Delivery, extra ...slog.Attr) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("message_id", d.Properties[message.PropMessageID]),
		slog.String("topic", d.Topic),
		slog.Int("queue", int(d.Queue)),
		slog.Int64("offset", d.Offset),
		slog.Int("delivery_attempt", int(d.DeliveryAttempt)),
		slog.String("broker_message_id", d.BrokerMessageID),
		slog.String("schema_version", d.Properties[message.PropSchemaVersion]),
	}
	for _, k := range []string{message.PropReservationID, message.PropOrderID} {
		if v := d.Properties[k]; v != "" {
			attrs = append(attrs, slog.String(k, v))
		}
	}
	if id := TraceIDOf(d.Properties[message.PropTraceparent]); id != "" {
		attrs = append(attrs, slog.String("trace_id", id))
	}
	return append(attrs, extra...)
}
