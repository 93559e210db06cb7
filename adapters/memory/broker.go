package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// SendMode is how the Broker answers a Publish to a topic (a test
// facility for the three send outcomes of ports.Publisher).
type SendMode int

// The send modes.
const (
	// SendConfirm stores the message and confirms it (the default).
	SendConfirm SendMode = iota
	// SendUnknown stores the message but fails with ports.ErrSendUnknown,
	// as when the broker's answer is lost.
	SendUnknown
	// SendLost fails with ports.ErrSendUnknown without storing the
	// message, as when the request is lost on its way.
	SendLost
	// SendReject fails with ports.ErrSendRejected without storing the
	// message.
	SendReject
)

// Defaults of BrokerConfig.
const (
	// DefaultMaxDeliveryAttempts is RocketMQ's default: 16 deliveries,
	// then the message goes to the group's dead-letter queue.
	DefaultMaxDeliveryAttempts = 16
)

// BrokerConfig configures a Broker. Clock is required.
type BrokerConfig struct {
	// Clock stamps BornAt and decides when delayed and retried messages
	// become deliverable.
	Clock ports.Clock
	// TopicPrefix is prepended to the logical topic to form
	// Delivery.Topic, as the real adapter's environment prefix.
	TopicPrefix string
	// MaxDeliveryAttempts is how many deliveries to one consumer group a
	// message gets before it is dead-lettered for that group. 0 means
	// DefaultMaxDeliveryAttempts.
	MaxDeliveryAttempts int32
	// InvisibleDuration is how long a message that was not acknowledged
	// stays invisible when its decision has no RetryAfter. The default 0
	// makes it deliverable again on the next Deliver call.
	InvisibleDuration time.Duration
	// NoDelay makes a broker without delayed delivery
	// (brokerplug.Features.DelayedDelivery false): a message with
	// DeliverAt is refused with ports.ErrSendRejected.
	NoDelay bool
	// NoDeliveryCount makes a broker without a delivery count
	// (brokerplug.Features.DeliveryCount false): every delivery reports
	// DeliveryAttempt 0. The broker still counts for its own
	// MaxDeliveryAttempts.
	NoDeliveryCount bool
}

// Broker is an in-memory broker: it implements ports.Publisher, stores
// confirmed messages per topic, and delivers them to consumer groups when a
// test calls Deliver or Drain, with RocketMQ's redelivery semantics: a
// message not acknowledged by a group is delivered to it again (attempt
// counter + 1) after RetryAfter (or InvisibleDuration), up to
// MaxDeliveryAttempts, then dead-lettered for that group; a message with
// DeliverAt is not delivered before the clock reaches it; messages of one
// FIFO message group are delivered one at a time, in publish order, each
// only after the previous one was acknowledged (or dead-lettered). Every
// group receives every stored message of its topic. Safe for concurrent
// use.
type Broker struct {
	cfg BrokerConfig

	mu    sync.Mutex
	seq   int64
	modes map[ports.Topic]modeEntry
	// script holds the modes of the next publishes per topic, in order
	// (SetModeSequence); it takes precedence over modes.
	script map[ports.Topic][]SendMode
	topics map[ports.Topic][]*storedMsg
	sends  map[ports.Topic]int
	subs   map[subKey]map[int64]*consumeState
	dlq    map[subKey][]ports.Delivery
}

type modeEntry struct {
	mode      SendMode
	remaining int // 0: until changed
}

type storedMsg struct {
	seq      int64
	msg      ports.OutboundMessage
	brokerID string
	bornAt   time.Time
}

type subKey struct {
	topic ports.Topic
	group string
}

type consumeState struct {
	attempts  int32
	acked     bool
	dead      bool
	inflight  bool
	visibleAt time.Time
}

var _ ports.Publisher = (*Broker)(nil)

// NewBroker returns an empty broker. A nil cfg.Clock panics.
func NewBroker(cfg BrokerConfig) *Broker {
	if cfg.Clock == nil {
		panic("memory.NewBroker: nil clock")
	}
	if cfg.MaxDeliveryAttempts <= 0 {
		cfg.MaxDeliveryAttempts = DefaultMaxDeliveryAttempts
	}
	return &Broker{
		cfg:    cfg,
		modes:  map[ports.Topic]modeEntry{},
		script: map[ports.Topic][]SendMode{},
		topics: map[ports.Topic][]*storedMsg{},
		sends:  map[ports.Topic]int{},
		subs:   map[subKey]map[int64]*consumeState{},
		dlq:    map[subKey][]ports.Delivery{},
	}
}

// SetMode makes every later Publish to topic answer with mode (test
// facility).
func (b *Broker) SetMode(topic ports.Topic, mode SendMode) { b.SetModeFor(topic, mode, 0) }

// SetModeFor makes the next n Publish calls to topic answer with mode, and
// the ones after them confirm (test facility). n = 0 means until changed.
func (b *Broker) SetModeFor(topic ports.Topic, mode SendMode, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.modes[topic] = modeEntry{mode: mode, remaining: n}
}

// SetModeSequence makes the next len(modes) Publish calls to topic answer
// with modes, one each in order; later ones answer as SetMode says (test
// facility).
func (b *Broker) SetModeSequence(topic ports.Topic, modes ...SendMode) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.script[topic] = append([]SendMode(nil), modes...)
}

// Publish stores msg and confirms it, unless the topic's SendMode says
// otherwise (see SendMode). A canceled context fails with
// ports.ErrSendUnknown and stores nothing. Invalid messages fail with
// ports.ErrSendRejected: an unknown topic, an empty MessageID, an empty
// body (RocketMQ's proxy refuses one too), a MessageGroup outside the FIFO
// topic or a DeliverAt outside the DELAY topic. The stored message gets
// the message_id property and a broker message id that differs on every
// publish.
func (b *Broker) Publish(ctx context.Context, msg ports.OutboundMessage) (ports.SendReceipt, error) {
	if err := ctx.Err(); err != nil {
		return ports.SendReceipt{}, fmt.Errorf("memory broker publish %s: %w: %w", msg.MessageID, ports.ErrSendUnknown, err)
	}
	if b.cfg.NoDelay && !msg.DeliverAt.IsZero() {
		return ports.SendReceipt{}, fmt.Errorf("memory broker publish %s to %s: %w: this broker does not delay messages", msg.MessageID, msg.Topic, ports.ErrSendRejected)
	}
	if err := validateOutbound(msg); err != nil {
		return ports.SendReceipt{}, fmt.Errorf("memory broker publish %s to %s: %w: %s", msg.MessageID, msg.Topic, ports.ErrSendRejected, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sends[msg.Topic]++
	mode := SendConfirm
	if seq := b.script[msg.Topic]; len(seq) > 0 {
		mode, b.script[msg.Topic] = seq[0], seq[1:]
	} else if m, ok := b.modes[msg.Topic]; ok {
		mode = m.mode
		switch {
		case m.remaining == 1:
			delete(b.modes, msg.Topic)
		case m.remaining > 1:
			m.remaining--
			b.modes[msg.Topic] = m
		}
	}
	switch mode {
	case SendReject:
		return ports.SendReceipt{}, fmt.Errorf("memory broker publish %s to %s: %w (injected)", msg.MessageID, msg.Topic, ports.ErrSendRejected)
	case SendLost:
		return ports.SendReceipt{}, fmt.Errorf("memory broker publish %s to %s: %w (injected, not stored)", msg.MessageID, msg.Topic, ports.ErrSendUnknown)
	}
	b.seq++
	m := cloneMessage(msg)
	if m.Properties == nil {
		m.Properties = map[string]string{}
	}
	m.Properties[message.PropMessageID] = m.MessageID
	sm := &storedMsg{seq: b.seq, msg: m, brokerID: "mem-" + strconv.FormatInt(b.seq, 10), bornAt: b.cfg.Clock.Now()}
	b.topics[msg.Topic] = append(b.topics[msg.Topic], sm)
	if mode == SendUnknown {
		return ports.SendReceipt{}, fmt.Errorf("memory broker publish %s to %s: %w (injected, stored)", msg.MessageID, msg.Topic, ports.ErrSendUnknown)
	}
	return ports.SendReceipt{BrokerMessageID: sm.brokerID}, nil
}

func validateOutbound(m ports.OutboundMessage) error {
	switch {
	case !slices.Contains(ports.Topics, m.Topic):
		return fmt.Errorf("unknown topic %q", m.Topic)
	case m.MessageID == "":
		return fmt.Errorf("empty message id")
	case len(m.Body) == 0:
		return fmt.Errorf("empty body")
	case m.MessageGroup != "" && m.Topic != ports.TopicOrderStateFIFO:
		return fmt.Errorf("message group on non-FIFO topic")
	case !m.DeliverAt.IsZero() && m.Topic != ports.TopicOrderTimeout:
		return fmt.Errorf("deliver-at on non-DELAY topic")
	}
	return nil
}

// Messages returns copies of the messages stored for topic, in publish
// order (test facility).
func (b *Broker) Messages(topic ports.Topic) []ports.OutboundMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]ports.OutboundMessage, 0, len(b.topics[topic]))
	for _, sm := range b.topics[topic] {
		out = append(out, cloneMessage(sm.msg))
	}
	return out
}

// Sends returns how many Publish calls with a valid message reached
// topic, whatever their SendMode outcome (test facility).
func (b *Broker) Sends(topic ports.Topic) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sends[topic]
}

// Pending returns how many stored messages of topic group has neither
// acknowledged nor dead-lettered (test facility).
func (b *Broker) Pending(topic ports.Topic, group string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	states := b.subs[subKey{topic, group}]
	n := 0
	for _, sm := range b.topics[topic] {
		if st := states[sm.seq]; st == nil || (!st.acked && !st.dead) {
			n++
		}
	}
	return n
}

// DeadLetters returns the deliveries group gave up on, with their last
// attempt number (test facility).
func (b *Broker) DeadLetters(topic ports.Topic, group string) []ports.Delivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]ports.Delivery, 0, len(b.dlq[subKey{topic, group}]))
	for _, d := range b.dlq[subKey{topic, group}] {
		out = append(out, cloneDelivery(d))
	}
	return out
}

func (b *Broker) delivery(sm *storedMsg, attempt int32) ports.Delivery {
	return ports.Delivery{
		Topic:           b.cfg.TopicPrefix + string(sm.msg.Topic),
		Tag:             sm.msg.Tag,
		Keys:            slices.Clone(sm.msg.Keys),
		MessageGroup:    sm.msg.MessageGroup,
		Body:            slices.Clone(sm.msg.Body),
		Properties:      maps.Clone(sm.msg.Properties),
		BrokerMessageID: sm.brokerID,
		DeliveryAttempt: b.reportedAttempt(attempt),
		BornAt:          sm.bornAt,
	}
}

// reportedAttempt is the DeliveryAttempt a delivery of attempt reports:
// attempt, or 0 for a broker without a delivery count.
func (b *Broker) reportedAttempt(attempt int32) int32 {
	if b.cfg.NoDeliveryCount {
		return 0
	}
	return attempt
}

func cloneDelivery(d ports.Delivery) ports.Delivery {
	d.Keys = slices.Clone(d.Keys)
	d.Body = slices.Clone(d.Body)
	d.Properties = maps.Clone(d.Properties)
	return d
}

// cloneMessage copies the slices and map of m.
func cloneMessage(m ports.OutboundMessage) ports.OutboundMessage {
	m.Keys = slices.Clone(m.Keys)
	m.Body = slices.Clone(m.Body)
	m.Properties = maps.Clone(m.Properties)
	return m
}
