package ports

import "fmt"

// The broker-neutral topology: the one definition of the topics' fixed
// names and kinds and of the consumer groups (which topic each consumes,
// in order or not, how often a message is redelivered before it is
// dead-lettered). Every broker adapter builds its own resources (RocketMQ
// topics and groups, RabbitMQ exchanges and queues) from these values and
// adds only what is its own (queue counts, delay tiers, its dead-letter
// reader).

// TopicKind is how a topic delivers its messages.
type TopicKind string

// The topic kinds.
const (
	// TopicNormal delivers each message as soon as it is published, in no
	// particular order.
	TopicNormal TopicKind = "NORMAL"
	// TopicDelayed delivers each message at its DeliverAt.
	TopicDelayed TopicKind = "DELAY"
	// TopicOrdered delivers the messages of one MessageGroup in publish
	// order, one at a time.
	TopicOrdered TopicKind = "FIFO"
)

// TopicSpec is the broker-neutral definition of a logical topic.
type TopicSpec struct {
	// Topic is the logical topic.
	Topic Topic
	// Name is the topic's fixed physical name, without the environment
	// prefix an adapter may add.
	Name string
	// Kind is how the topic delivers.
	Kind TopicKind
}

// topicSpecs lists every logical topic, in Topics order.
var topicSpecs = []TopicSpec{
	{TopicOrderCreate, "PROD_SECKILL_ORDER_CREATE_V1", TopicNormal},
	{TopicOrderTimeout, "PROD_SECKILL_ORDER_TIMEOUT_V1", TopicDelayed},
	{TopicOrderEvent, "PROD_SECKILL_ORDER_EVENT_V1", TopicNormal},
	{TopicInventoryCompensate, "PROD_SECKILL_INVENTORY_COMPENSATE_V1", TopicNormal},
	{TopicOrderStateFIFO, "PROD_SECKILL_ORDER_STATE_FIFO_V1", TopicOrdered},
}

// TopicSpecs returns the definition of every logical topic, in Topics
// order. The slice is a copy.
func TopicSpecs() []TopicSpec { return append([]TopicSpec(nil), topicSpecs...) }

// SpecOf returns the definition of logical topic t, or an error for a
// topic that is not one of Topics.
func SpecOf(t Topic) (TopicSpec, error) {
	for _, s := range topicSpecs {
		if s.Topic == t {
			return s, nil
		}
	}
	return TopicSpec{}, fmt.Errorf("unknown logical topic %q", t)
}

// ConsumerGroup is the fixed base name of a consumer group (without the
// environment prefix an adapter may add). Every group receives every
// message of its topic, at least once, shared among the group's running
// consumers.
type ConsumerGroup string

// The business consumer groups.
const (
	GroupOrderCreate         ConsumerGroup = "CG_SECKILL_ORDER_CREATE_PG_V1"
	GroupOrderTimeout        ConsumerGroup = "CG_SECKILL_ORDER_TIMEOUT_V1"
	GroupInventoryCompensate ConsumerGroup = "CG_SECKILL_INVENTORY_COMPENSATE_V1"
	GroupOrderProjection     ConsumerGroup = "CG_SECKILL_ORDER_QUERY_PROJECTION_V1"
	GroupAudit               ConsumerGroup = "CG_SECKILL_AUDIT_V1"
)

// Subscription is the broker-neutral definition of a business consumer
// group.
type Subscription struct {
	// Group is the consumer group.
	Group ConsumerGroup
	// Topic is the one logical topic the group consumes.
	Topic Topic
	// Ordered is true when the group consumes in message-group order (the
	// FIFO topic): one message of a group at a time, the next only after
	// the previous was acknowledged or dead-lettered.
	Ordered bool
	// MaxRetries is how many times a message the group did not
	// acknowledge is redelivered; once exhausted, the message is
	// dead-lettered (kept with its message id for listing and replay).
	MaxRetries int
}

// subscriptions lists the business groups.
var subscriptions = []Subscription{
	{GroupOrderCreate, TopicOrderCreate, false, 5},
	{GroupOrderTimeout, TopicOrderTimeout, false, 5},
	{GroupInventoryCompensate, TopicInventoryCompensate, false, 8},
	{GroupOrderProjection, TopicOrderStateFIFO, true, 5},
	{GroupAudit, TopicOrderEvent, false, 3},
}

// Subscriptions returns the definition of every business consumer group,
// in a fixed order. The slice is a copy.
func Subscriptions() []Subscription { return append([]Subscription(nil), subscriptions...) }

// SubscriptionOf returns the definition of business group g; false for
// any other name.
func SubscriptionOf(g ConsumerGroup) (Subscription, bool) {
	for _, s := range subscriptions {
		if s.Group == g {
			return s, true
		}
	}
	return Subscription{}, false
}
