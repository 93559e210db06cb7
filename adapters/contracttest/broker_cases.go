package contracttest

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// nackOnce leaves the first delivery of a message unacknowledged (the
// broker redelivers it after its own redelivery delay) and acknowledges
// the later ones.
func nackOnce(d ports.Delivery) ports.Decision {
	if d.DeliveryAttempt <= 1 {
		return ports.Decision{Outcome: "transient"}
	}
	return ports.Acked("contract")
}

// testDeliveredToEachGroup: a confirmed publish is delivered to every
// consumer group subscribed to its topic, each as attempt 1, with the
// message_id property set to its MessageID and its tag, keys, body and
// user properties as published.
func testDeliveredToEachGroup(t *testing.T, b *brokerRun) {
	b.consume(ports.TopicOrderEvent, "a", ackAll)
	b.consume(ports.TopicOrderEvent, "b", ackAll)
	id := "evt_" + uniq()
	msg := ports.OutboundMessage{
		Topic: ports.TopicOrderEvent, MessageID: id, Tag: "ORDER_CREATED",
		Keys: []string{"ord_" + id, "rsv_" + id}, Body: []byte(`{"order_id":"ord_` + id + `"}`),
		Properties: map[string]string{"schema_version": "1", "note": "two words"},
	}
	b.publish(msg)
	b.waitFor("the message in both groups", func() bool {
		return len(b.records("a", id)) > 0 && len(b.records("b", id)) > 0
	})
	topics := map[string]bool{}
	for _, g := range []string{"a", "b"} {
		r := b.records(g, id)[0]
		d := r.d
		topics[d.Topic] = true
		switch {
		case d.Tag != msg.Tag:
			t.Errorf("group %s: tag %q, want %q", g, d.Tag, msg.Tag)
		case !sameSet(d.Keys, msg.Keys):
			t.Errorf("group %s: keys %v, want %v", g, d.Keys, msg.Keys)
		case !bytes.Equal(d.Body, msg.Body):
			t.Errorf("group %s: body %q, want %q", g, d.Body, msg.Body)
		case d.DeliveryAttempt != 1:
			t.Errorf("group %s: first delivery has attempt %d, want 1", g, d.DeliveryAttempt)
		case d.MessageGroup != "":
			t.Errorf("group %s: message group %q on a NORMAL topic", g, d.MessageGroup)
		case d.Topic == "" || d.BornAt.IsZero():
			t.Errorf("group %s: topic %q born %v, want both set", g, d.Topic, d.BornAt)
		}
		for k, v := range msg.Properties {
			if got, ok := d.Properties[k]; !ok || got != v {
				t.Errorf("group %s: property %s = %q (present %v), want %q; properties %v", g, k, got, ok, v, d.Properties)
			}
		}
	}
	if len(topics) != 1 {
		t.Errorf("the groups received the message from different topics: %v", slices.Collect(maps.Keys(topics)))
	}
}

// testAckMeansNoRedelivery: an acknowledging decision settles the message
// for its group: it is not delivered to the group again. The proof waits
// for a message published after the acknowledged one was handled and left
// unacknowledged twice: by its third delivery, the acknowledged message
// would have come back if it were going to.
func testAckMeansNoRedelivery(t *testing.T, b *brokerRun) {
	acked, barrier := "evt_acked_"+uniq(), "evt_barrier_"+uniq()
	b.consume(ports.TopicOrderCreate, "a", func(d ports.Delivery) ports.Decision {
		if d.Properties[message.PropMessageID] == barrier && d.DeliveryAttempt < 3 {
			return ports.Decision{Outcome: "transient"}
		}
		return ports.Acked("contract")
	})
	b.publish(ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: acked, Tag: "CREATE_ORDER", Body: []byte("acked")})
	b.waitFor("the acknowledged message", func() bool { return len(b.records("a", acked)) > 0 })
	b.publish(ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: barrier, Tag: "CREATE_ORDER", Body: []byte("barrier")})
	b.waitFor("the barrier's third delivery", func() bool { return b.maxAttempt("a", barrier) >= 3 })
	if rs := b.records("a", acked); len(rs) != 1 {
		t.Fatalf("the acknowledged message was delivered %d times, want once:%s", len(rs), describeRecords(rs))
	}
}

// testNoAckMeansRedelivery: a non-acknowledging decision (no RetryAfter)
// makes the broker deliver the message to the group again, as it was
// published, with a larger DeliveryAttempt.
func testNoAckMeansRedelivery(t *testing.T, b *brokerRun) {
	id := "evt_" + uniq()
	b.consume(ports.TopicOrderCreate, "a", nackOnce)
	body := []byte(`{"n":1}`)
	b.publish(ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: id, Tag: "CREATE_ORDER", Body: body})
	b.waitFor("the redelivery", func() bool { return len(b.records("a", id)) >= 2 })
	rs := b.records("a", id)
	first, second := rs[0].d, rs[1].d
	if first.DeliveryAttempt != 1 || second.DeliveryAttempt <= first.DeliveryAttempt {
		t.Errorf("deliveries%s: want attempt 1, then a larger one", describeRecords(rs))
	}
	if !bytes.Equal(second.Body, body) || second.Tag != "CREATE_ORDER" || rs[1].id != id {
		t.Errorf("redelivery: body %q tag %q message_id %q, want the published message", second.Body, second.Tag, rs[1].id)
	}
}

// testRetryAfterDelaysRedelivery: a non-acknowledging decision with
// RetryAfter brings the message back no earlier than RetryAfter after the
// decision (less the broker's timer precision), by the broker's clock;
// of two messages deferred together, the one with the shorter RetryAfter
// comes back first.
func testRetryAfterDelaysRedelivery(t *testing.T, b *brokerRun) {
	const soonAfter, lateAfter = time.Second, 6 * time.Second
	soon, late := "evt_soon_"+uniq(), "evt_late_"+uniq()
	b.consume(ports.TopicOrderCreate, "a", func(d ports.Delivery) ports.Decision {
		switch {
		case d.DeliveryAttempt > 1:
			return ports.Acked("contract")
		case d.Properties[message.PropMessageID] == soon:
			return ports.RetryLater("transient", soonAfter)
		case d.Properties[message.PropMessageID] == late:
			return ports.RetryLater("transient", lateAfter)
		}
		return ports.Acked("contract")
	})
	b.publish(ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: soon, Body: []byte("soon")})
	b.publish(ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: late, Body: []byte("late")})
	b.waitFor("both redeliveries", func() bool {
		return len(b.records("a", soon)) >= 2 && len(b.records("a", late)) >= 2
	})
	for _, c := range []struct {
		id    string
		after time.Duration
	}{{soon, soonAfter}, {late, lateAfter}} {
		rs := b.records("a", c.id)
		if waited := rs[1].at.Sub(rs[0].at); waited < c.after-b.opts.TimerPrecision {
			t.Errorf("%s: redelivered %v after a RetryAfter of %v (timer precision %v)", c.id, waited, c.after, b.opts.TimerPrecision)
		}
		if rs[1].d.DeliveryAttempt <= rs[0].d.DeliveryAttempt {
			t.Errorf("%s: deliveries%s, want a larger attempt on the redelivery", c.id, describeRecords(rs))
		}
	}
	order := b.records("a", soon, late)
	var redelivered []string
	for _, r := range order {
		if r.d.DeliveryAttempt > 1 {
			redelivered = append(redelivered, r.id)
		}
	}
	if len(redelivered) < 2 || redelivered[0] != soon {
		t.Errorf("redeliveries in order %v, want %s (RetryAfter %v) before %s (RetryAfter %v)", redelivered, soon, soonAfter, late, lateAfter)
	}
}

// testMessageGroupOrder: messages of one message group on the FIFO topic
// are delivered in publish order, each group independently: the first
// deliveries of a group's messages come in publish order, and after a
// message of a group was left unacknowledged the group continues from it,
// so the last deliveries come in publish order too. (A broker may deliver
// acknowledged messages again while it redelivers the group or its queue;
// the consumer is idempotent.)
func testMessageGroupOrder(t *testing.T, b *brokerRun) {
	const groups, perGroup = 3, 5
	run := uniq()
	name := func(g, i int) string { return fmt.Sprintf("st_%s_g%d_%d", run, g, i) }
	failing := name(0, 2)
	b.consume(ports.TopicOrderStateFIFO, "a", func(d ports.Delivery) ports.Decision {
		if d.Properties[message.PropMessageID] == failing {
			return nackOnce(d)
		}
		return ports.Acked("contract")
	})
	var all []string
	for i := range perGroup {
		for g := range groups {
			id := name(g, i)
			all = append(all, id)
			b.publish(ports.OutboundMessage{
				Topic: ports.TopicOrderStateFIFO, MessageID: id, Tag: "ORDER_STATE_CHANGED",
				MessageGroup: fmt.Sprintf("ord_%s_%d", run, g), Body: []byte(id),
			})
		}
	}
	// positions returns, per message, the log positions of its first and
	// last delivery, and whether one was acknowledged.
	positions := func() (first, last map[string]int, acked map[string]bool) {
		first, last, acked = map[string]int{}, map[string]int{}, map[string]bool{}
		for pos, r := range b.records("a") {
			if _, ok := first[r.id]; !ok {
				first[r.id] = pos
			}
			last[r.id] = pos
			acked[r.id] = acked[r.id] || r.ack
		}
		return first, last, acked
	}
	ordered := func(pos map[string]int, g int) bool {
		for i := 1; i < perGroup; i++ {
			if pos[name(g, i)] <= pos[name(g, i-1)] {
				return false
			}
		}
		return true
	}
	b.waitFor("every message acknowledged, each group's last deliveries in publish order", func() bool {
		_, last, acked := positions()
		for _, id := range all {
			if !acked[id] {
				return false
			}
		}
		if b.maxAttempt("a", failing) < 2 {
			return false
		}
		for g := range groups {
			if !ordered(last, g) {
				return false
			}
		}
		return true
	})
	first, _, _ := positions()
	for g := range groups {
		if !ordered(first, g) {
			var ids []string
			for _, r := range b.records("a") {
				if r.d.MessageGroup == fmt.Sprintf("ord_%s_%d", run, g) {
					ids = append(ids, r.id)
				}
			}
			t.Errorf("message group %d: first deliveries out of publish order: %v", g, ids)
		}
	}
	for _, r := range b.records("a", all...) {
		if r.d.MessageGroup == "" {
			t.Fatalf("delivery of %s without its message group", r.id)
		}
	}
}

// testInvalidMessageRejected: a message the ports define as invalid (an
// unknown logical topic, no MessageID, no body, a MessageGroup outside the
// FIFO topic, a DeliverAt outside the DELAY topic) is refused with
// ports.ErrSendRejected, never ports.ErrSendUnknown, and nothing of it is
// delivered: a valid message published after the refusals is delivered,
// and redelivered once, alone.
func testInvalidMessageRejected(t *testing.T, b *brokerRun) {
	barrier := "evt_barrier_" + uniq()
	b.consume(ports.TopicOrderEvent, "a", nackOnce)
	base := func(id string) ports.OutboundMessage {
		return ports.OutboundMessage{Topic: ports.TopicOrderEvent, MessageID: id, Tag: "ORDER_CREATED", Body: []byte("{}")}
	}
	cases := map[string]func(m *ports.OutboundMessage){
		"unknown topic":           func(m *ports.OutboundMessage) { m.Topic = "CONTRACT_NO_SUCH_TOPIC" },
		"no message id":           func(m *ports.OutboundMessage) { m.MessageID = "" },
		"empty body":              func(m *ports.OutboundMessage) { m.Body = nil },
		"message group on NORMAL": func(m *ports.OutboundMessage) { m.MessageGroup = "ord_1" },
		"deliver-at on NORMAL":    func(m *ports.OutboundMessage) { m.DeliverAt = b.ns.Now().Add(time.Minute) },
		"message group and delay": func(m *ports.OutboundMessage) {
			m.Topic, m.MessageGroup, m.DeliverAt = ports.TopicOrderTimeout, "ord_1", b.ns.Now().Add(time.Minute)
		},
		"deliver-at on FIFO, group": func(m *ports.OutboundMessage) {
			m.Topic, m.MessageGroup, m.DeliverAt = ports.TopicOrderStateFIFO, "ord_1", b.ns.Now().Add(time.Minute)
		},
	}
	for _, what := range slices.Sorted(maps.Keys(cases)) {
		m := base("evt_invalid_" + uniq())
		cases[what](&m)
		b.publishRejected(what, m)
	}
	b.publish(base(barrier))
	b.waitFor("the barrier's redelivery", func() bool { return b.maxAttempt("a", barrier) >= 2 })
	for _, r := range b.records("a") {
		if r.id != barrier {
			t.Errorf("a refused message was delivered: %s#%d body %q", r.id, r.d.DeliveryAttempt, r.d.Body)
		}
	}
}

// testSameMessageIDTwice: publishing one message (one MessageID) twice
// may deliver it twice, at least once: delivery is at-least-once and
// deduplication by the message_id property is the consumer's. Every
// delivery carries the published message_id, tag and body.
func testSameMessageIDTwice(t *testing.T, b *brokerRun) {
	dup, barrier := "evt_dup_"+uniq(), "evt_barrier_"+uniq()
	b.consume(ports.TopicOrderCreate, "a", func(d ports.Delivery) ports.Decision {
		if d.Properties[message.PropMessageID] == barrier {
			return nackOnce(d)
		}
		return ports.Acked("contract")
	})
	msg := ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: dup, Tag: "CREATE_ORDER", Keys: []string{"rsv_" + dup}, Body: []byte(`{"dup":true}`)}
	b.publish(msg)
	b.publish(msg)
	b.publish(ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: barrier, Body: []byte("barrier")})
	b.waitFor("the duplicate and the barrier's redelivery", func() bool {
		return len(b.records("a", dup)) > 0 && b.maxAttempt("a", barrier) >= 2
	})
	rs := b.records("a", dup)
	if len(rs) > 2 {
		t.Errorf("a message published twice and acknowledged was delivered %d times:%s", len(rs), describeRecords(rs))
	}
	for _, r := range rs {
		if r.id != dup || r.d.Tag != msg.Tag || !bytes.Equal(r.d.Body, msg.Body) || !sameSet(r.d.Keys, msg.Keys) {
			t.Errorf("delivery of the twice-published message: message_id %q tag %q keys %v body %q, want %q %q %v %q",
				r.id, r.d.Tag, r.d.Keys, r.d.Body, dup, msg.Tag, msg.Keys, msg.Body)
		}
	}
	t.Logf("a message published twice was delivered %d time(s)", len(rs))
}

// testDelayedDelivery: a broker with DelayedDelivery delivers a message
// published to the DELAY topic with a DeliverAt no earlier than then (less
// its timer precision); a broker without it refuses the publish with
// ports.ErrSendRejected, so the core never counts on a delay the broker
// does not make.
func testDelayedDelivery(t *testing.T, b *brokerRun) {
	const delay = 3 * time.Second
	id := "evt_delayed_" + uniq()
	at := b.ns.Now().Add(delay)
	msg := ports.OutboundMessage{Topic: ports.TopicOrderTimeout, MessageID: id, Keys: []string{"ord_" + id},
		DeliverAt: at, Body: []byte("delayed")}
	if !b.opts.Features.DelayedDelivery {
		b.publishRejected("a message with DeliverAt to a broker without delayed delivery", msg)
		return
	}
	b.consume(ports.TopicOrderTimeout, "a", ackAll)
	b.publish(msg)
	b.waitFor("the delayed message", func() bool { return len(b.records("a", id)) >= 1 })
	if r := b.records("a", id)[0]; r.at.Before(at.Add(-b.opts.TimerPrecision)) {
		t.Errorf("%s delivered at %v, %v before its DeliverAt %v (timer precision %v)", id, r.at, at.Sub(r.at), at, b.opts.TimerPrecision)
	}
}
