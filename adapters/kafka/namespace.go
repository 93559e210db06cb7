package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/ports"
)

// Suffixes of a group's own topics.
const (
	retrySuffix = ".RETRY"
	dlqSuffix   = ".DLQ"
	// dlqReaderGroup is the dead-letter reader's group (after the prefix),
	// the RabbitMQ adapter's name.
	dlqReaderGroup = "SECKILL_DLQ_READER"
)

// topicName returns the physical topic of spec under prefix.
func topicName(prefix string, spec ports.TopicSpec) string { return prefix + spec.Name }

// retryTopic and dlqTopic return group g's retry and dead-letter topics.
func retryTopic(prefix string, g ports.ConsumerGroup) string { return prefix + string(g) + retrySuffix }
func dlqTopic(prefix string, g ports.ConsumerGroup) string   { return prefix + string(g) + dlqSuffix }

// serviceTopics lists every topic of the service under prefix: the
// logical topics and each group's retry and dead-letter topics.
func serviceTopics(prefix string, subs []ports.Subscription) []string {
	var out []string
	for _, spec := range ports.TopicSpecs() {
		out = append(out, topicName(prefix, spec))
	}
	for _, sub := range subs {
		out = append(out, retryTopic(prefix, sub.Group), dlqTopic(prefix, sub.Group))
	}
	return out
}

// newAdmin returns an admin client on s's brokers; the caller closes it.
func newAdmin(s Settings) (*kgo.Client, *kadm.Client, error) {
	// A short metadata cache, so that awaitTopics sees a creation soon.
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("kafka admin client: %w", err)
	}
	return cl, kadm.NewClient(cl), nil
}

// createTopics creates every missing topic of topics with s's partitions
// and replication; an existing topic is left as it is.
func createTopics(ctx context.Context, s Settings, topics []string) error {
	cl, adm, err := newAdmin(s)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := adm.CreateTopics(ctx, int32(s.Partitions), int16(s.Replication), nil, topics...)
	if err != nil {
		return fmt.Errorf("create kafka topics: %w", err)
	}
	var errs []error
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("create topic %s: %w", r.Topic, r.Err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return awaitTopics(ctx, adm, topics)
}

// awaitTopics waits until the broker's metadata lists every topic of
// topics with its partitions (a creation is visible asynchronously), or
// ctx ends.
func awaitTopics(ctx context.Context, adm *kadm.Client, topics []string) error {
	for {
		details, err := adm.ListTopics(ctx, topics...)
		missing := len(topics)
		if err == nil {
			missing = 0
			for _, t := range topics {
				if d, ok := details[t]; !ok || d.Err != nil || len(d.Partitions) == 0 {
					missing++
				}
			}
		}
		if missing == 0 {
			return nil
		}
		if !brokerkit.Sleep(ctx, 100*time.Millisecond) {
			return fmt.Errorf("%d created topics not visible in the metadata: %w", missing, ctx.Err())
		}
	}
}

// NewNamespace creates every topic of the service under o.Prefix (the
// logical topics, every business group's retry and dead-letter topic).
// o.Redeliveries reaches the namespace's settings (SECKILL_KAFKA_REDELIVERIES).
func (Plug) NewNamespace(ctx context.Context, ps brokerplug.Settings, o brokerplug.NamespaceOptions) (brokerplug.Namespace, error) {
	s, ok := ps.(Settings)
	if !ok {
		return nil, fmt.Errorf("kafka namespace: settings of type %T", ps)
	}
	s.Prefix = o.Prefix
	if o.Redeliveries > 0 {
		s.Redeliveries = o.Redeliveries
	}
	if err := s.validated(); err != nil {
		return nil, err
	}
	if err := createTopics(ctx, s, serviceTopics(s.Prefix, ports.Subscriptions())); err != nil {
		return nil, fmt.Errorf("kafka namespace %s: %w", o.Prefix, err)
	}
	return &namespace{s: s}, nil
}

// namespace is a Kafka namespace: the topics and groups under a prefix.
type namespace struct{ s Settings }

func (n *namespace) Prefix() string                { return n.s.Prefix }
func (n *namespace) Settings() brokerplug.Settings { return n.s }

// Env returns SECKILL_BROKER, the brokers, the prefix and, when set, the
// redelivery bound.
func (n *namespace) Env() []string {
	env := []string{"SECKILL_BROKER=" + PlugName, "SECKILL_KAFKA_BROKERS=" + n.s.Target(), "SECKILL_KAFKA_PREFIX=" + n.s.Prefix}
	if n.s.Redeliveries > 0 {
		env = append(env, fmt.Sprintf("SECKILL_KAFKA_REDELIVERIES=%d", n.s.Redeliveries))
	}
	return env
}

// Close deletes every topic and consumer group whose name starts with the
// namespace's prefix (those a test's own groups created included); it
// returns the failed deletions joined. An empty prefix deletes nothing.
func (n *namespace) Close(ctx context.Context) error {
	if n.s.Prefix == "" {
		return errors.New("kafka namespace: refusing to delete the topics of an empty prefix")
	}
	cl, adm, err := newAdmin(n.s)
	if err != nil {
		return err
	}
	defer cl.Close()
	return errors.Join(deleteGroups(ctx, adm, n.s.Prefix), deleteTopics(ctx, adm, n.s.Prefix))
}

// deleteTopics deletes the topics starting with prefix.
func deleteTopics(ctx context.Context, adm *kadm.Client, prefix string) error {
	details, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list kafka topics: %w", err)
	}
	var names []string
	for _, t := range details.Names() {
		if strings.HasPrefix(t, prefix) {
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		return nil
	}
	resp, err := adm.DeleteTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("delete kafka topics: %w", err)
	}
	var errs []error
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("delete topic %s: %w", r.Topic, r.Err))
		}
	}
	return errors.Join(errs...)
}

// deleteGroups deletes the consumer groups starting with prefix.
func deleteGroups(ctx context.Context, adm *kadm.Client, prefix string) error {
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("list kafka groups: %w", err)
	}
	var names []string
	for _, g := range listed.Groups() {
		if strings.HasPrefix(g, prefix) {
			names = append(names, g)
		}
	}
	if len(names) == 0 {
		return nil
	}
	resp, err := adm.DeleteGroups(ctx, names...)
	if err != nil {
		return fmt.Errorf("delete kafka groups: %w", err)
	}
	var errs []error
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.GroupIDNotFound) {
			errs = append(errs, fmt.Errorf("delete group %s: %w", r.Group, r.Err))
		}
	}
	return errors.Join(errs...)
}
