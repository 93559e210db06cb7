package rabbitmq

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-dev/seckill/ports"
)

// Fixed names of the adapter's own resources (after Config.Prefix).
const (
	// unroutableName is the alternate exchange of every topic exchange and
	// the quorum queue bound to it: a message no group queue is bound for
	// is kept there (and counted) instead of being dropped.
	unroutableName = "SECKILL_UNROUTABLE"
	// redeliverName is the direct exchange the delay tiers dead-letter
	// into: it routes a message by its routing key, a group queue's name
	// (a retry, a re-parked delay) or a topic exchange's name (a delayed
	// publish, through an exchange-to-exchange binding).
	redeliverName = "SECKILL_REDELIVER"
	// deadName is the direct exchange the group queues dead-letter into;
	// it routes to the group's dead-letter queue.
	deadName = "SECKILL_DEAD"
	// dlqSuffix ends a group's dead-letter queue name.
	dlqSuffix = ".DLQ"
)

// Delay tiers: one quorum queue per TTL, 125 ms doubling up to 4096 s
// (about 68 minutes). A delay is served by a chain of tiers (the largest
// tier not above what remains, recomputed from the absolute delivery time
// at each hop), so a message never arrives before its time and at most
// about one smallest tier plus one hop later (README.md, "Delays").
const (
	smallestTier = 125 * time.Millisecond
	tierCount    = 16
)

// Tiers returns the delay tiers, shortest first.
func Tiers() []time.Duration {
	out := make([]time.Duration, tierCount)
	for i := range out {
		out[i] = smallestTier << i
	}
	return out
}

// tierFor returns the tier to park a message in when remaining is left
// until its delivery time: the largest tier not above remaining, or the
// smallest one when remaining is below it.
func tierFor(remaining time.Duration) time.Duration {
	t := smallestTier
	for _, d := range Tiers() {
		if d <= remaining {
			t = d
		}
	}
	return t
}

// TopicSpec is a logical topic as RabbitMQ holds it: an exchange (fanout
// for NORMAL and DELAY topics, direct with one routing key per shard for
// the FIFO topic) whose alternate exchange keeps unroutable messages.
type TopicSpec struct {
	ports.TopicSpec
	// Exchange is the exchange's name (prefix + the topic's fixed name).
	Exchange string
}

// GroupSpec is a consumer group as RabbitMQ holds it: durable quorum
// queues bound to its topic's exchange (one, or Config.FIFOShards with
// single-active-consumer for an ordered group), each with a delivery
// limit of the group's MaxRetries and dead-lettering (at-least-once) into
// the group's dead-letter queue.
type GroupSpec struct {
	ports.Subscription
	// Name is the physical group name (prefix + group), the name the
	// inbox and the dead-letter table record.
	Name string
	// Exchange is the topic exchange the queues are bound to.
	Exchange string
	// Queues are the group's queues; shard i of an ordered group is
	// Queues[i], bound with routing key strconv.Itoa(i).
	Queues []string
	// DLQ is the group's dead-letter queue.
	DLQ string
}

// Topology is the one definition of what a RabbitMQ virtual host must
// hold for the service under one prefix, built from the broker-neutral
// definitions of ports (ports.TopicSpecs, ports.Subscriptions) and the
// adapter's own settings (shards, delay tiers, queue bound). Declare
// creates it idempotently.
type Topology struct {
	Prefix         string
	Shards         int
	MaxQueueLength int
	Topics         []TopicSpec
	Groups         []GroupSpec
}

// NewTopology returns the topology of cfg with the business groups of
// ports.Subscriptions, or with subs when given (tests add groups of their
// own with the same rules).
func NewTopology(cfg Config, subs ...ports.Subscription) (Topology, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Topology{}, err
	}
	if len(subs) == 0 {
		subs = ports.Subscriptions()
	}
	t := Topology{Prefix: cfg.Prefix, Shards: cfg.FIFOShards, MaxQueueLength: cfg.MaxQueueLength}
	for _, s := range ports.TopicSpecs() {
		t.Topics = append(t.Topics, TopicSpec{TopicSpec: s, Exchange: cfg.Prefix + s.Name})
	}
	for _, s := range subs {
		g, err := t.group(s)
		if err != nil {
			return Topology{}, err
		}
		t.Groups = append(t.Groups, g)
	}
	return t, nil
}

// group builds the GroupSpec of s.
func (t Topology) group(s ports.Subscription) (GroupSpec, error) {
	topic, err := t.Topic(s.Topic)
	if err != nil {
		return GroupSpec{}, err
	}
	if s.Ordered != (topic.Kind == ports.TopicOrdered) {
		return GroupSpec{}, fmt.Errorf("topology: group %s is ordered=%v on the %s topic %s", s.Group, s.Ordered, topic.Kind, s.Topic)
	}
	if s.MaxRetries < 1 {
		return GroupSpec{}, fmt.Errorf("topology: group %s has MaxRetries %d, want at least 1", s.Group, s.MaxRetries)
	}
	name := t.Prefix + string(s.Group)
	g := GroupSpec{Subscription: s, Name: name, Exchange: topic.Exchange, DLQ: name + dlqSuffix}
	if s.Ordered {
		for i := range t.Shards {
			g.Queues = append(g.Queues, fmt.Sprintf("%s.%02d", name, i))
		}
	} else {
		g.Queues = []string{name}
	}
	return g, nil
}

// Topic returns the spec of logical topic lt.
func (t Topology) Topic(lt ports.Topic) (TopicSpec, error) {
	for _, s := range t.Topics {
		if s.Topic == lt {
			return s, nil
		}
	}
	return TopicSpec{}, fmt.Errorf("unknown logical topic %q", lt)
}

// Group returns the spec of group g, false when the topology has none.
func (t Topology) Group(g ports.ConsumerGroup) (GroupSpec, bool) {
	for _, s := range t.Groups {
		if s.Group == g {
			return s, true
		}
	}
	return GroupSpec{}, false
}

// WithGroup returns t with the group of s added (or replaced).
func (t Topology) WithGroup(s ports.Subscription) (Topology, error) {
	g, err := t.group(s)
	if err != nil {
		return t, err
	}
	t.Groups = slices.DeleteFunc(slices.Clone(t.Groups), func(x GroupSpec) bool { return x.Group == s.Group })
	t.Groups = append(t.Groups, g)
	return t, nil
}

// Unroutable is the name of the alternate exchange and of its queue.
func (t Topology) Unroutable() string { return t.Prefix + unroutableName }

// Redeliver is the name of the exchange the delay tiers dead-letter into.
func (t Topology) Redeliver() string { return t.Prefix + redeliverName }

// Dead is the name of the exchange the group queues dead-letter into.
func (t Topology) Dead() string { return t.Prefix + deadName }

// Tier is the name of delay tier d's exchange and queue.
func (t Topology) Tier(d time.Duration) string {
	return t.Prefix + "SECKILL_DELAY_" + strconv.FormatInt(d.Milliseconds(), 10) + "MS"
}

// ShardOf returns the shard of message group mg: FNV-1a of mg modulo the
// shard count. Every publisher of an environment must agree on it.
func (t Topology) ShardOf(mg string) int {
	h := uint32(2166136261)
	for i := 0; i < len(mg); i++ {
		h ^= uint32(mg[i])
		h *= 16777619
	}
	return int(h % uint32(t.Shards))
}

// quorum returns the arguments every queue of the topology shares.
func quorum(extra amqp.Table) amqp.Table {
	args := amqp.Table{"x-queue-type": "quorum"}
	for k, v := range extra {
		args[k] = v
	}
	return args
}

// groupQueueArgs returns the arguments of a group's queue: a delivery
// limit (without one RabbitMQ 3.10 neither counts deliveries nor keeps a
// requeued message at the head), at-least-once dead-lettering into the
// group's dead-letter queue (which needs reject-publish overflow), and
// single-active-consumer for an ordered group.
func (t Topology) groupQueueArgs(g GroupSpec) amqp.Table {
	args := quorum(amqp.Table{
		"x-delivery-limit":          int64(g.MaxRetries),
		"x-dead-letter-exchange":    t.Dead(),
		"x-dead-letter-routing-key": g.DLQ,
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
	})
	if g.Ordered {
		args["x-single-active-consumer"] = true
	}
	if t.MaxQueueLength > 0 {
		args["x-max-length"] = int64(t.MaxQueueLength)
	}
	return args
}

// tierArgs returns the arguments of the delay tier of ttl milliseconds:
// the TTL and at-least-once dead-lettering into the redeliver exchange.
func (t Topology) tierArgs(ttl int64) amqp.Table {
	return quorum(amqp.Table{
		"x-message-ttl":          ttl,
		"x-dead-letter-exchange": t.Redeliver(),
		"x-dead-letter-strategy": "at-least-once",
		"x-overflow":             "reject-publish",
	})
}

// Declare creates the topology on ch: the unroutable, redeliver and dead
// exchanges, the delay tiers, the topic exchanges and every group (see
// DeclareGroup). Declarations are idempotent; a resource that exists with
// other arguments fails with PRECONDITION_FAILED (406), which closes ch.
func (t Topology) Declare(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(t.Unroutable(), amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare %s: %w", t.Unroutable(), err)
	}
	if _, err := ch.QueueDeclare(t.Unroutable(), true, false, false, false, quorum(nil)); err != nil {
		return fmt.Errorf("declare queue %s: %w", t.Unroutable(), err)
	}
	if err := ch.QueueBind(t.Unroutable(), "", t.Unroutable(), false, nil); err != nil {
		return fmt.Errorf("bind %s: %w", t.Unroutable(), err)
	}
	for _, name := range []string{t.Redeliver(), t.Dead()} {
		if err := ch.ExchangeDeclare(name, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare %s: %w", name, err)
		}
	}
	for _, d := range Tiers() {
		name := t.Tier(d)
		if err := ch.ExchangeDeclare(name, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare %s: %w", name, err)
		}
		if _, err := ch.QueueDeclare(name, true, false, false, false, t.tierArgs(d.Milliseconds())); err != nil {
			return fmt.Errorf("declare queue %s: %w", name, err)
		}
		if err := ch.QueueBind(name, "", name, false, nil); err != nil {
			return fmt.Errorf("bind %s: %w", name, err)
		}
	}
	for _, s := range t.Topics {
		kind := amqp.ExchangeFanout
		if s.Kind == ports.TopicOrdered {
			kind = amqp.ExchangeDirect
		}
		if err := ch.ExchangeDeclare(s.Exchange, kind, true, false, false, false, amqp.Table{"alternate-exchange": t.Unroutable()}); err != nil {
			return fmt.Errorf("declare %s: %w", s.Exchange, err)
		}
		if err := ch.ExchangeBind(s.Exchange, s.Exchange, t.Redeliver(), false, nil); err != nil {
			return fmt.Errorf("bind %s to %s: %w", s.Exchange, t.Redeliver(), err)
		}
	}
	for _, g := range t.Groups {
		if err := t.DeclareGroup(ch, g); err != nil {
			return err
		}
	}
	return nil
}

// DeclareGroup creates group g's dead-letter queue and queues and binds
// them (idempotent): each queue to its topic exchange (shard i with key i)
// and to the redeliver exchange under its own name (retries and delays
// come back that way), the dead-letter queue to the dead exchange.
func (t Topology) DeclareGroup(ch *amqp.Channel, g GroupSpec) error {
	if _, err := ch.QueueDeclare(g.DLQ, true, false, false, false, quorum(nil)); err != nil {
		return fmt.Errorf("declare queue %s: %w", g.DLQ, err)
	}
	if err := ch.QueueBind(g.DLQ, g.DLQ, t.Dead(), false, nil); err != nil {
		return fmt.Errorf("bind %s: %w", g.DLQ, err)
	}
	args := t.groupQueueArgs(g)
	for i, q := range g.Queues {
		if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
			return fmt.Errorf("declare queue %s: %w", q, err)
		}
		key := ""
		if g.Ordered {
			key = strconv.Itoa(i)
		}
		if err := ch.QueueBind(q, key, g.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind %s to %s: %w", q, g.Exchange, err)
		}
		if err := ch.QueueBind(q, q, t.Redeliver(), false, nil); err != nil {
			return fmt.Errorf("bind %s to %s: %w", q, t.Redeliver(), err)
		}
	}
	return nil
}

// Delete removes every exchange and queue of the topology, messages
// included (tests clean up their namespaces with it). Missing resources
// are not an error.
func (t Topology) Delete(ch *amqp.Channel) error {
	var errs []error
	for _, g := range t.Groups {
		for _, q := range append(slices.Clone(g.Queues), g.DLQ) {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, d := range Tiers() {
		if _, err := ch.QueueDelete(t.Tier(d), false, false, false); err != nil {
			errs = append(errs, err)
		}
		if err := ch.ExchangeDelete(t.Tier(d), false, false); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range t.Topics {
		if err := ch.ExchangeDelete(s.Exchange, false, false); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := ch.QueueDelete(t.Unroutable(), false, false, false); err != nil {
		errs = append(errs, err)
	}
	for _, name := range []string{t.Unroutable(), t.Redeliver(), t.Dead()} {
		if err := ch.ExchangeDelete(name, false, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
