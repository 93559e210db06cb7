package rocketmq

import (
	"maps"
	"strconv"
	"strings"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// toDelivery maps a received message to the port's Delivery.
func toDelivery(mv *rmq.MessageView) ports.Delivery {
	d := ports.Delivery{
		Topic:           mv.GetTopic(),
		Keys:            append([]string(nil), mv.GetKeys()...),
		Body:            mv.GetBody(),
		Properties:      maps.Clone(mv.GetProperties()),
		BrokerMessageID: mv.GetMessageId(),
		DeliveryAttempt: mv.GetDeliveryAttempt(),
		Offset:          mv.GetOffset(),
	}
	d.Queue = queueOf(mv.GetReceiptHandle())
	if d.Properties == nil {
		d.Properties = map[string]string{}
	}
	if tag := mv.GetTag(); tag != nil {
		d.Tag = *tag
	}
	if g := mv.GetMessageGroup(); g != nil {
		d.MessageGroup = *g
	}
	if born := mv.GetBornTimestamp(); born != nil {
		d.BornAt = *born
	}
	return d
}

// DeadLetter describes a message received from a dead-letter topic
// %DLQ%<group>.
//
// What the broker keeps (verified on 5.5.0, see README.md): the dead-letter
// copy has the original body, tag, keys, user properties (so message_id),
// born timestamp and broker message id; its topic is %DLQ%<group>. The
// original topic and message id are also stored as system properties
// (RETRY_TOPIC, ORIGIN_MESSAGE_ID), which the proxy does not pass to gRPC
// clients as user properties, and the v5.1.2 Go client drops the
// dead_letter_queue system field, so the source topic is derived here from
// the group (each group of this service consumes one topic).
type DeadLetter struct {
	// SourceGroup is the physical consumer group whose retries ran out.
	SourceGroup string
	// SourceTopic is the physical topic SourceGroup consumes, or "" when
	// the group is not one of this service's groups.
	SourceTopic string
	// LogicalTopic is SourceTopic's logical topic, or "".
	LogicalTopic ports.Topic
	// MessageID is the business message id (the message_id property).
	MessageID string
	// BrokerMessageID is the broker's message id, the same as the
	// original's.
	BrokerMessageID string
	// SourceDeliveries is how many times SourceGroup received the message
	// (its retryMaxTimes+1). It is exact on the dead-letter reader's first
	// delivery; each redelivery to the reader adds one.
	SourceDeliveries int32
	// BornAt is when the producer created the original message.
	BornAt time.Time
}

// ParseDeadLetter reports whether d was received from a dead-letter topic
// and, if so, what it says about the original message. cfg supplies the
// environment prefix that maps groups to topics.
func ParseDeadLetter(cfg Config, d ports.Delivery) (DeadLetter, bool) {
	group, ok := strings.CutPrefix(d.Topic, dlqPrefix)
	if !ok {
		return DeadLetter{}, false
	}
	dl := DeadLetter{
		SourceGroup:     group,
		MessageID:       d.Properties[message.PropMessageID],
		BrokerMessageID: d.BrokerMessageID,
		BornAt:          d.BornAt,
		// The dead-letter copy's reconsume count is the source's last
		// reconsume count + 1 (AbstractSendMessageProcessor), and the
		// source's last pop, the one that forwarded it, had reconsume count
		// = deliveries; delivery attempt = reconsume count + 1.
		SourceDeliveries: d.DeliveryAttempt - 2,
	}
	if base, ok := strings.CutPrefix(group, cfg.TopicPrefix); ok {
		if lt, ok := Group(base).Topic(); ok {
			if name, err := cfg.Topic(lt); err == nil {
				dl.SourceTopic, dl.LogicalTopic = name, lt
			}
		}
	}
	return dl, true
}

// queueOf reads the queue id from a 5.x receipt handle ("startOffset
// retrieveTime invisibleTime reviveQueueId topicType brokerName queueId
// offset commitLogOffset ...", space separated; the client library keeps
// the message's queue unexported). -1 when the handle has another shape.
func queueOf(receiptHandle string) int32 {
	f := strings.Fields(receiptHandle)
	if len(f) < 8 {
		return -1
	}
	q, err := strconv.ParseInt(f[6], 10, 32)
	if err != nil {
		return -1
	}
	return int32(q)
}
