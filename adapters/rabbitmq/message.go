package rabbitmq

import (
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// Headers the adapter sets on every message. AMQP's own properties carry
// only the message id (MessageId), persistence and a second-precision
// timestamp; everything else of ports.OutboundMessage travels in headers.
const (
	hdrTopic        = "seckill-topic"
	hdrTag          = "seckill-tag"
	hdrKeys         = "seckill-keys"
	hdrMessageGroup = "seckill-message-group"
	hdrDeliverAt    = "seckill-deliver-at"
	hdrBorn         = "seckill-born"
	hdrSendID       = "seckill-send-id"
	hdrProps        = "seckill-props"
	// hdrAttempts counts the deliveries this message had before the copy
	// carrying it was published (a retry through a delay tier is a new
	// message to the queue, whose delivery count starts again at 0).
	hdrAttempts = "seckill-attempts"
	// hdrDeliveryCount is the quorum queue's count of earlier deliveries
	// of this message (absent on the first; only kept by queues with a
	// delivery limit).
	hdrDeliveryCount = "x-delivery-count"
)

// buildPublishing maps an outbound message to an AMQP message: persistent,
// MessageId = MessageID, the tag, keys, message group, delivery time,
// born time, a send id and the properties (with message_id) as headers.
func buildPublishing(topic string, msg ports.OutboundMessage, sendID string, now time.Time) amqp.Publishing {
	props := make(amqp.Table, len(msg.Properties)+1)
	for k, v := range msg.Properties {
		props[k] = v
	}
	props[message.PropMessageID] = msg.MessageID
	h := amqp.Table{
		hdrTopic:  topic,
		hdrBorn:   now.UnixMilli(),
		hdrSendID: sendID,
		hdrProps:  props,
	}
	if msg.Tag != "" {
		h[hdrTag] = msg.Tag
	}
	if len(msg.Keys) > 0 {
		keys := make([]any, len(msg.Keys))
		for i, k := range msg.Keys {
			keys[i] = k
		}
		h[hdrKeys] = keys
	}
	if msg.MessageGroup != "" {
		h[hdrMessageGroup] = msg.MessageGroup
	}
	if !msg.DeliverAt.IsZero() {
		h[hdrDeliverAt] = ceilMillis(msg.DeliverAt)
	}
	return amqp.Publishing{
		Headers:      h,
		DeliveryMode: amqp.Persistent,
		MessageId:    msg.MessageID,
		Timestamp:    now,
		Body:         msg.Body,
	}
}

// republishing returns the message of d to publish again (a retry or the
// next hop of a delay): the same body and properties, the broker's own
// x- headers dropped, attempts set, and the delivery time set when
// deliverAt is not zero.
func republishing(d amqp.Delivery, attempts int32, deliverAt time.Time) amqp.Publishing {
	h := make(amqp.Table, len(d.Headers))
	for k, v := range d.Headers {
		if len(k) > 2 && k[:2] == "x-" {
			continue
		}
		h[k] = v
	}
	h[hdrAttempts] = int64(attempts)
	if !deliverAt.IsZero() {
		h[hdrDeliverAt] = ceilMillis(deliverAt)
	}
	return amqp.Publishing{
		Headers:      h,
		DeliveryMode: amqp.Persistent,
		MessageId:    d.MessageId,
		Timestamp:    d.Timestamp,
		Body:         d.Body,
	}
}

// ceilMillis returns t in Unix milliseconds rounded up, so that a
// delivery time read back from its header is never before t.
func ceilMillis(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// intHeader reads an integer header of any AMQP integer type (0 when
// absent or of another type).
func intHeader(h amqp.Table, key string) int64 {
	switch v := h[key].(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case int16:
		return int64(v)
	case int8:
		return int64(v)
	case int:
		return int64(v)
	case uint8:
		return int64(v)
	case uint16:
		return int64(v)
	case uint32:
		return int64(v)
	}
	return 0
}

// stringHeader reads a string header ("" when absent).
func stringHeader(h amqp.Table, key string) string {
	s, _ := h[key].(string)
	return s
}

// deliveryAttempt is the attempt number of d: the deliveries before its
// copy was published, plus the quorum queue's count of this copy's
// earlier deliveries, plus one.
func deliveryAttempt(d amqp.Delivery) int32 {
	return int32(intHeader(d.Headers, hdrAttempts) + intHeader(d.Headers, hdrDeliveryCount) + 1)
}

// deliverAt is d's delivery time (zero when it has none).
func deliverAt(d amqp.Delivery) time.Time {
	ms := intHeader(d.Headers, hdrDeliverAt)
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// toDelivery maps a received message to the port's Delivery. shard is
// the queue's shard index (0 for an unordered group).
func toDelivery(d amqp.Delivery, shard int) ports.Delivery {
	out := ports.Delivery{
		Topic:           stringHeader(d.Headers, hdrTopic),
		Tag:             stringHeader(d.Headers, hdrTag),
		MessageGroup:    stringHeader(d.Headers, hdrMessageGroup),
		Body:            d.Body,
		Properties:      map[string]string{},
		BrokerMessageID: stringHeader(d.Headers, hdrSendID),
		DeliveryAttempt: deliveryAttempt(d),
		Queue:           int32(shard),
	}
	if keys, ok := d.Headers[hdrKeys].([]any); ok {
		for _, k := range keys {
			if s, ok := k.(string); ok {
				out.Keys = append(out.Keys, s)
			}
		}
	}
	if props, ok := d.Headers[hdrProps].(amqp.Table); ok {
		for k, v := range props {
			if s, ok := v.(string); ok {
				out.Properties[k] = s
			}
		}
	}
	if _, ok := out.Properties[message.PropMessageID]; !ok && d.MessageId != "" {
		out.Properties[message.PropMessageID] = d.MessageId
	}
	if ms := intHeader(d.Headers, hdrBorn); ms != 0 {
		out.BornAt = time.UnixMilli(ms)
	} else {
		out.BornAt = d.Timestamp
	}
	out.Properties = maps.Clone(out.Properties)
	return out
}
