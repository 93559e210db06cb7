package application

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// Backoff bounds for redelivery of failed messages: the first retries are
// quick (transient hiccups), later ones back off exponentially (spec 17.3).
const (
	retryBase = time.Second
	retryMax  = 60 * time.Second
)

// retryDelay returns the delay before delivery attempt+1.
func retryDelay(attempt int32) time.Duration {
	d := retryBase
	for i := int32(1); i < attempt && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

// retry returns a non-acknowledging decision with exponential backoff.
func retry(d ports.Delivery, outcome string) ports.Decision {
	return ports.RetryLater(outcome, retryDelay(d.DeliveryAttempt))
}

// classify names an error for logs and metrics.
func classify(err error) string {
	switch {
	case errors.Is(err, ports.ErrTransient):
		return "transient"
	case errors.Is(err, ports.ErrConcurrencyConflict):
		return "conflict"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "unknown"
}

// quarantine isolates a message that can never be processed as is
// (undecodable, unsupported schema, invalid fields, unknown references)
// after one attempt instead of the broker's full retry budget: it is stored
// in the quarantine and, in the same transaction, as an OPEN dead letter of
// group (so it is alerted on, listed and replayable after a fix), then
// acknowledged. If storing fails the message is retried instead: it must
// never be lost.
func quarantine(ctx context.Context, uow ports.UnitOfWork, log *slog.Logger, group string, topic ports.Topic, d ports.Delivery, messageID, class string, cause error) ports.Decision {
	q := ports.QuarantinedMessage{
		ConsumerGroup: group, Topic: d.Topic, MessageID: messageID, BrokerMessageID: d.BrokerMessageID,
		ErrorClass: class, Reason: cause.Error(), Body: d.Body, Properties: d.Properties,
		DeliveryAttempt: d.DeliveryAttempt,
	}
	rec := deadLetterRecord(group, topic, d, messageID, class, cause.Error(), d.DeliveryAttempt)
	err := uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		if err := tx.Quarantine(ctx, q); err != nil {
			return err
		}
		_, _, err := tx.RecordDeadLetter(ctx, rec)
		return err
	})
	if err != nil {
		log.ErrorContext(ctx, "quarantine failed, message will be retried", "message_id", messageID,
			"topic", d.Topic, "delivery_attempt", d.DeliveryAttempt, "error_class", class, "error", err)
		return retry(d, "transient")
	}
	log.WarnContext(ctx, "message quarantined", "message_id", messageID, "broker_message_id", d.BrokerMessageID,
		"topic", d.Topic, "delivery_attempt", d.DeliveryAttempt, "error_class", class, "reason", cause.Error())
	return ports.Decision{Ack: true, Outcome: "quarantined", Reason: class}
}

// deadLetterRecord builds the stored form of a delivery that becomes a
// dead letter of group. The key is the business message id (messageID,
// else the message_id property, else the envelope's), or the broker's id
// for a body without one. SeenAt is left zero: the store records its own
// time of arrival.
func deadLetterRecord(group string, topic ports.Topic, d ports.Delivery, messageID, class, lastError string, attempts int32) ports.DeadLetterRecord {
	if messageID == "" {
		messageID = d.Properties[message.PropMessageID]
	}
	if messageID == "" {
		if env, err := message.PeekEnvelope(d.Body); err == nil {
			messageID = env.MessageID
		}
	}
	if messageID == "" {
		messageID = "broker:" + d.BrokerMessageID
	}
	return ports.DeadLetterRecord{ConsumerGroup: group, Topic: topic, MessageID: messageID, BrokerMessageID: d.BrokerMessageID,
		Tag: d.Tag, Keys: d.Keys, MessageGroup: d.MessageGroup, ErrorClass: class, LastError: lastError,
		Attempts: attempts, Body: d.Body, Properties: d.Properties}
}
