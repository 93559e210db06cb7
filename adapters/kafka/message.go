package kafka

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// Record headers. Everything of ports.OutboundMessage but the body and the
// key travels in headers; a user property p is the header "p:"+p.
const (
	hdrMessageID = "message_id"
	hdrTag       = "tag"
	hdrKey       = "key" // one header per key
	hdrGroup     = "message_group"
	hdrBorn      = "born_at" // Unix milliseconds
	hdrTopic     = "topic"   // the physical topic the message was published to
	hdrPropPfx   = "p:"
	// hdrAttempt is the delivery attempt of a retry copy (absent: 1).
	hdrAttempt = "attempt"
	// hdrDue is when a retry copy is due, Unix milliseconds.
	hdrDue = "due"
	// hdrOriginGroup and hdrDeliveries name, on a dead letter, the group
	// whose redeliveries ran out and how often it received the message.
	hdrOriginGroup = "dlq_group"
	hdrDeliveries  = "dlq_deliveries"
)

// maxRecordBytes bounds a record's body and headers: the broker's default
// message.max.bytes is about 1 MiB.
const maxRecordBytes = 1 << 20

// buildRecord maps msg to a record of topic: key = MessageGroup when set
// (the partition key of the FIFO topic), else MessageID.
func buildRecord(topic string, msg ports.OutboundMessage, now time.Time) *kgo.Record {
	key := msg.MessageGroup
	if key == "" {
		key = msg.MessageID
	}
	h := []kgo.RecordHeader{
		{Key: hdrMessageID, Value: []byte(msg.MessageID)},
		{Key: hdrTopic, Value: []byte(topic)},
		{Key: hdrBorn, Value: []byte(strconv.FormatInt(now.UnixMilli(), 10))},
	}
	if msg.Tag != "" {
		h = append(h, kgo.RecordHeader{Key: hdrTag, Value: []byte(msg.Tag)})
	}
	if msg.MessageGroup != "" {
		h = append(h, kgo.RecordHeader{Key: hdrGroup, Value: []byte(msg.MessageGroup)})
	}
	for _, k := range msg.Keys {
		h = append(h, kgo.RecordHeader{Key: hdrKey, Value: []byte(k)})
	}
	for k, v := range msg.Properties {
		h = append(h, kgo.RecordHeader{Key: hdrPropPfx + k, Value: []byte(v)})
	}
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: msg.Body, Headers: h}
}

// recordSize is the bytes of r's key, value and headers.
func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// header returns the last value of header k of r ("" when absent).
func header(r *kgo.Record, k string) string {
	v := ""
	for _, h := range r.Headers {
		if h.Key == k {
			v = string(h.Value)
		}
	}
	return v
}

// intHeader returns header k as an integer (0 when absent or malformed).
func intHeader(r *kgo.Record, k string) int64 {
	n, err := strconv.ParseInt(header(r, k), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// attemptOf is the delivery attempt a record carries (1 for an original).
func attemptOf(r *kgo.Record) int32 {
	if n := intHeader(r, hdrAttempt); n > 0 && n < 1<<31 {
		return int32(n)
	}
	return 1
}

// dueOf is when a retry copy is due (zero for an original).
func dueOf(r *kgo.Record) time.Time {
	if ms := intHeader(r, hdrDue); ms > 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// brokerID names a record by its coordinates.
func brokerID(topic string, partition int32, offset int64) string {
	return fmt.Sprintf("%s/%d/%d", topic, partition, offset)
}

// toDelivery maps a record to the port's Delivery; attempt is its
// delivery attempt. Topic is the topic the message was published to (for
// a retry copy: its origin topic).
func toDelivery(r *kgo.Record, attempt int32) ports.Delivery {
	d := ports.Delivery{
		Topic:           header(r, hdrTopic),
		Tag:             header(r, hdrTag),
		MessageGroup:    header(r, hdrGroup),
		Body:            r.Value,
		Properties:      map[string]string{},
		BrokerMessageID: brokerID(r.Topic, r.Partition, r.Offset),
		DeliveryAttempt: attempt,
		Queue:           r.Partition,
		Offset:          r.Offset,
		BornAt:          r.Timestamp,
	}
	if d.Topic == "" {
		d.Topic = r.Topic
	}
	for _, h := range r.Headers {
		switch {
		case h.Key == hdrKey:
			d.Keys = append(d.Keys, string(h.Value))
		case strings.HasPrefix(h.Key, hdrPropPfx):
			d.Properties[h.Key[len(hdrPropPfx):]] = string(h.Value)
		}
	}
	d.Properties[message.PropMessageID] = header(r, hdrMessageID)
	if ms := intHeader(r, hdrBorn); ms > 0 {
		d.BornAt = time.UnixMilli(ms)
	}
	return d
}

// copyRecord returns a copy of r for topic with the headers set replacing
// their earlier values; key and value are kept.
func copyRecord(r *kgo.Record, topic string, set map[string]string) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, len(r.Headers)+len(set))
	for _, x := range r.Headers {
		if _, ok := set[x.Key]; !ok {
			h = append(h, x)
		}
	}
	for k, v := range set {
		h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: h}
}
