package application

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// coalesceTimeouts replaces the payment-timeout rows among items that
// belong to one activity and fall due in the same second (their
// DeliverAt rounded up to the second) by one CancelOrdersIfUnpaid trigger
// due at that second, standing for all of their rows: published, they are
// marked published together; failed, they are deferred together. A
// delay message per order costs the broker a send, a store write, a timer
// wheel slot, a receive and an ack each; a sale creates thousands of
// orders a second whose deadlines share a few seconds.
//
// The trigger changes nothing the consumer decides: each check keeps its
// own envelope, so the order's message id stays the inbox key of its
// check (a trigger and a single message for the same order, after a crash
// between publish and mark, count once), and PostgreSQL still decides
// every cancel. A check is delivered less than a second after its own
// deadline at most. A group of one row, and a row whose body does not
// decode (the consumer quarantines it), are sent as they are. A trigger's
// message id is derived from its first row's outbox id, so a republish
// of the same claimed rows (a crash before marking) repeats it.
func (r *RelayOutbox) coalesceTimeouts(ctx context.Context, items []relayItem) []relayItem {
	type due struct {
		activity int64
		at       time.Time
	}
	groups := map[due][]int{}                       // item indexes
	checks := map[int]message.CancelOrderIfUnpaid{} // the decoded timeout rows, by item index
	var order []due
	for i, it := range items {
		if it.msg.Topic != ports.TopicOrderTimeout {
			continue
		}
		c, err := message.DecodeCancelOrderIfUnpaid(it.msg.Body)
		if err != nil {
			continue
		}
		checks[i] = c
		k := due{activity: c.ActivityID, at: ceilSecond(c.DeliverAt)}
		if groups[k] == nil {
			order = append(order, k)
		}
		if len(groups[k]) < message.MaxTimeoutChecks {
			groups[k] = append(groups[k], i)
		}
	}
	merged := make(map[int]bool, len(items))
	var triggers []relayItem
	for _, k := range order {
		idx := groups[k]
		if len(idx) < 2 {
			continue
		}
		t := relayItem{}
		cs := make([]message.CancelOrderIfUnpaid, len(idx))
		for n, i := range idx {
			cs[n] = checks[i]
			t.ids = append(t.ids, items[i].ids...)
			t.attempts = max(t.attempts, items[i].attempts)
		}
		msg, err := timeoutTrigger(k.activity, k.at, t.ids[0], cs, r.clock.Now())
		if err != nil { // never expected: each check decoded valid
			r.log.WarnContext(ctx, "payment-timeout trigger not built, rows sent one by one", "activity_id", k.activity, "error", err)
			continue
		}
		t.msg = msg
		for _, i := range idx {
			merged[i] = true
		}
		triggers = append(triggers, t)
	}
	if len(triggers) == 0 {
		return items
	}
	out := make([]relayItem, 0, len(items)-len(merged)+len(triggers))
	for i, it := range items {
		if !merged[i] {
			out = append(out, it)
		}
	}
	return append(out, triggers...)
}

// timeoutTrigger builds the CancelOrdersIfUnpaid of checks, due at at;
// firstRow (the lowest outbox id it stands for) names it.
func timeoutTrigger(activity int64, at time.Time, firstRow int64, checks []message.CancelOrderIfUnpaid, now time.Time) (ports.OutboundMessage, error) {
	id := fmt.Sprintf("evt_timeouts_%d_%d_%d", activity, at.Unix(), firstRow)
	key := strconv.FormatInt(activity, 10)
	m := message.CancelOrdersIfUnpaid{Envelope: envelope(message.TypeCancelOrdersIfUnpaid, id, key, now, message.TraceContext{}),
		ActivityID: activity, DeliverAt: at, Checks: checks}
	body, err := m.Encode()
	if err != nil {
		return ports.OutboundMessage{}, fmt.Errorf("encode payment-timeout trigger: %w", err)
	}
	return ports.OutboundMessage{
		Topic: ports.TopicOrderTimeout, MessageID: id, Tag: message.TagCancelIfUnpaid,
		Keys: []string{key}, DeliverAt: at, Body: body,
		Properties: map[string]string{
			message.PropMessageID:     id,
			message.PropSchemaVersion: strconv.Itoa(message.SchemaV1),
			message.PropEventType:     message.TypeCancelOrdersIfUnpaid,
		},
	}, nil
}

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	if s := t.Truncate(time.Second); !s.Equal(t) {
		return s.Add(time.Second)
	}
	return t
}
