package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/ports"
)

// The production topology: the values `seckill topology apply` gives the
// broker (the local stack applies them too, see docs/local-stack.md).
const (
	// DefaultTopicQueues is the read and write queue count of the five
	// business topics. Queues are the unit of parallelism per broker; 8
	// still exercises multi-queue ordering and rebalancing on a one-broker
	// box (the spec's 64/32 only add consume-queue files there).
	DefaultTopicQueues = 8
	// DLQTopicQueues is the queue count of the pre-created %DLQ%<group>
	// topics: the broker creates them lazily the same way.
	DLQTopicQueues = 1
	// PermReadWrite is the permission of every topic (2 write | 4 read).
	PermReadWrite = 6
	// DLQReaderMargin is how much larger the dead-letter reader's
	// retryMaxTimes must be than any business group's: a dead-lettered copy
	// arrives with delivery attempt R+3 of its source group R, and the
	// reader forwards it on to %DLQ%<reader> once the attempt exceeds the
	// reader's retryMaxTimes+1 (README.md, verified behaviour 14).
	DLQReaderMargin = 2
)

// RetryMaxTimes returns the group's production retryMaxTimes: a business
// group's ports.Subscription MaxRetries, 32 for GroupDLQReader, and 16 (the
// broker default) for a group not of this package.
//
// The dead-letter reader's 32 leaves it 25 deliveries of its own after the
// business groups' largest 5+2: when service processes crash over and over,
// every crash spends one delivery of each message a process held, and a
// reader out of deliveries would forward the dead letter to %DLQ% of the
// reader itself, where nothing reads it.
func (g Group) RetryMaxTimes() int {
	if s, ok := ports.SubscriptionOf(ports.ConsumerGroup(g)); ok {
		return s.MaxRetries
	}
	if g == GroupDLQReader {
		return 32
	}
	return 16
}

// Topology is the broker's share of the design, with the environment
// prefix: the five business topics (message type, queue count), one
// pre-created %DLQ%<group> topic per business group, the five business
// consumer groups (retryMaxTimes, orderly) and the dead-letter reader
// group. NewTopology builds it from the definitions of config.go; Apply
// makes a broker match it and Check lists where a broker does not.
type Topology struct {
	// Prefix is Config.TopicPrefix, the start of every name below.
	Prefix string
	// Topics lists the business topics in ports.Topics order, then the
	// dead-letter topics in Groups order.
	Topics []TopicSpec
	// Groups lists the business groups in Groups order, then the
	// dead-letter reader.
	Groups []GroupSpec
}

// TopologyOption changes a production value of NewTopology (tests use
// fewer queues and retries; an operator may override a retry count).
type TopologyOption func(*topologyOptions)

type topologyOptions struct {
	queues int
	retry  map[Group]int
}

// WithTopicQueues sets the queue count of the business topics (default
// DefaultTopicQueues).
func WithTopicQueues(n int) TopologyOption { return func(o *topologyOptions) { o.queues = n } }

// WithRetryMaxTimes sets the retryMaxTimes of group g (default
// g.RetryMaxTimes()).
func WithRetryMaxTimes(g Group, n int) TopologyOption {
	return func(o *topologyOptions) { o.retry[g] = n }
}

// WithBusinessRetryMaxTimes sets the retryMaxTimes of the five business
// groups (every group of Groups; not the dead-letter reader).
func WithBusinessRetryMaxTimes(n int) TopologyOption {
	return func(o *topologyOptions) {
		for _, g := range Groups() {
			o.retry[g] = n
		}
	}
}

// validPrefix is what SECKILL_TOPIC_PREFIX may contain.
var validPrefix = regexp.MustCompile(`^[a-zA-Z0-9_-]*$`)

// maxNameLen is the broker's limit of a topic name (TopicValidator).
const maxNameLen = 127

// NewTopology returns the topology under c.TopicPrefix with the
// production values, changed by opts. It fails for a prefix other than
// letters, digits, '_' and '-', a name longer than the broker accepts, a
// queue count below 1, a negative retry count, an option naming a group
// that is not one of this package, and a dead-letter reader whose
// retryMaxTimes is below the largest business group's + DLQReaderMargin.
func NewTopology(c Config, opts ...TopologyOption) (Topology, error) {
	o := topologyOptions{queues: DefaultTopicQueues, retry: map[Group]int{}}
	for _, opt := range opts {
		opt(&o)
	}
	if !validPrefix.MatchString(c.TopicPrefix) {
		return Topology{}, fmt.Errorf("topology: the topic prefix %q may only contain letters, digits, '_' and '-'", c.TopicPrefix)
	}
	if o.queues < 1 {
		return Topology{}, fmt.Errorf("topology: %d topic queues, want at least 1", o.queues)
	}
	all := append(Groups(), GroupDLQReader)
	for g, n := range o.retry {
		if !slices.Contains(all, g) {
			return Topology{}, fmt.Errorf("topology: unknown consumer group %q (groups: %s)", g, groupList(all))
		}
		if n < 0 {
			return Topology{}, fmt.Errorf("topology: retryMaxTimes %d of %s is negative", n, g)
		}
	}
	retry := func(g Group) int {
		if n, ok := o.retry[g]; ok {
			return n
		}
		return g.RetryMaxTimes()
	}

	t := Topology{Prefix: c.TopicPrefix}
	for _, lt := range ports.Topics {
		base, typ, err := TopicBaseName(lt)
		if err != nil {
			return Topology{}, err
		}
		t.Topics = append(t.Topics, TopicSpec{Name: c.TopicPrefix + base, Type: typ, Queues: o.queues, Perm: PermReadWrite})
	}
	maxBusiness := 0
	for _, g := range Groups() {
		name := c.Group(g)
		t.Groups = append(t.Groups, GroupSpec{Name: name, Orderly: g.Orderly(), RetryMaxTimes: retry(g)})
		maxBusiness = max(maxBusiness, retry(g))
		// Pre-created so that the dead-letter reader can subscribe before
		// anything was dead-lettered.
		t.Topics = append(t.Topics, TopicSpec{Name: DLQTopic(name), Type: MessageTypeNormal, Queues: DLQTopicQueues, Perm: PermReadWrite})
	}
	reader := retry(GroupDLQReader)
	if reader < maxBusiness+DLQReaderMargin {
		return Topology{}, fmt.Errorf("topology: retryMaxTimes %d of %s is below the largest business group's %d + %d: dead letters would be dead-lettered again",
			reader, GroupDLQReader, maxBusiness, DLQReaderMargin)
	}
	t.Groups = append(t.Groups, GroupSpec{Name: c.Group(GroupDLQReader), RetryMaxTimes: reader})
	for _, s := range t.Topics {
		if len(s.Name) > maxNameLen {
			return Topology{}, fmt.Errorf("topology: topic name %s is longer than %d characters", s.Name, maxNameLen)
		}
	}
	return t, nil
}

// groupList joins group names for a message.
func groupList(gs []Group) string {
	names := make([]string, len(gs))
	for i, g := range gs {
		names[i] = string(g)
	}
	return strings.Join(names, ", ")
}

// Kinds and fields of a Difference.
const (
	KindTopic = "topic"
	KindGroup = "group"

	// FieldMissing: the broker has no topic or group of that name.
	FieldMissing = "missing"
	// FieldRoute: the broker has the topic but the name server's route of
	// the topic does not name the broker (clients do not find the topic
	// there: not at all when no broker routes it).
	FieldRoute = "route"

	FieldMessageType   = "message.type"
	FieldQueues        = "queues"
	FieldPerm          = "perm"
	FieldRetryMaxTimes = "retryMaxTimes"
	FieldOrderly       = "consumeMessageOrderly"
	FieldConsumeEnable = "consumeEnable"
)

// Difference is one way a broker does not match a Topology.
type Difference struct {
	// Kind is KindTopic or KindGroup.
	Kind string
	// Name is the physical topic or group name.
	Name string
	// Field is FieldMissing, FieldRoute or the setting that differs.
	Field string
	// Want and Got are the setting's value in the topology and on the
	// broker (empty for FieldMissing). For FieldRoute, Want is the name of
	// the broker the route must name and Got the comma-separated names of
	// the brokers it names ("" when the name server has no route).
	Want, Got string
}

// String reads as "topic X: queues is 4, want 8", "group Y: missing",
// "topic X: not routed to broker-a by the name server" (with
// " (routed to broker-b)" when the route names other brokers) or, without
// a broker name, "topic X: not routed by the name server".
func (d Difference) String() string {
	switch d.Field {
	case FieldMissing:
		return d.Kind + " " + d.Name + ": missing"
	case FieldRoute:
		s := d.Kind + " " + d.Name + ": not routed by the name server"
		if d.Want != "" {
			s = d.Kind + " " + d.Name + ": not routed to " + d.Want + " by the name server"
		}
		if d.Got != "" {
			s += " (routed to " + d.Got + ")"
		}
		return s
	}
	return fmt.Sprintf("%s %s: %s is %s, want %s", d.Kind, d.Name, d.Field, d.Got, d.Want)
}

// withDefaults returns s with the zero fields CreateTopic fills in.
func (s TopicSpec) withDefaults() TopicSpec {
	if s.Queues <= 0 {
		s.Queues = 4
	}
	if s.Perm <= 0 {
		s.Perm = PermReadWrite
	}
	if s.Type == "" {
		s.Type = MessageTypeNormal
	}
	return s
}

// withDefaults returns s with the retry count CreateGroup uses.
func (s GroupSpec) withDefaults() GroupSpec {
	if s.RetryMaxTimes < 0 {
		s.RetryMaxTimes = 16
	}
	return s
}

// Check reads the broker's topics and consumer groups through admin (one
// request each) and returns every difference from t, in the order of
// t.Topics and t.Groups: a missing topic or group, a topic's message type,
// queue count (read and write) or perm, a group's retryMaxTimes,
// consumeMessageOrderly or consumeEnable, and, when admin has the name
// server's address, a topic whose route at the name server does not name
// the broker (GET_ROUTEINFO_BY_TOPIC, one request per topic the broker has;
// the broker's name from admin.BrokerName). Checking every master of a
// cluster this way (Admin.Masters, Admin.ForBroker) thus verifies that each
// topic is routed to every master. Topics and groups the topology does not
// name are not looked at. The error is only for a broker or name server
// that could not be read.
func (t Topology) Check(ctx context.Context, admin *Admin) ([]Difference, error) {
	topics, err := admin.Topics(ctx)
	if err != nil {
		return nil, err
	}
	groups, err := admin.Groups(ctx)
	if err != nil {
		return nil, err
	}
	var routes map[string][]string // topic -> routed broker names; nil: not checked
	broker := ""
	if admin.Namesrv() != "" {
		if broker, err = admin.BrokerName(ctx); err != nil {
			return nil, err
		}
		routes = map[string][]string{}
		for _, s := range t.Topics {
			if _, ok := topics[s.Name]; !ok {
				continue
			}
			route, err := admin.TopicRoute(ctx, s.Name)
			if err != nil && !errors.Is(err, ports.ErrNotFound) {
				return nil, err
			}
			names := []string{}
			for _, b := range route {
				names = append(names, b.Name)
			}
			routes[s.Name] = names
		}
	}
	var diffs []Difference
	for _, s := range t.Topics {
		diffs = append(diffs, topicDiffs(s.withDefaults(), topics, broker, routes)...)
	}
	for _, s := range t.Groups {
		diffs = append(diffs, groupDiffs(s.withDefaults(), groups)...)
	}
	return diffs, nil
}

// topicDiffs compares one topic; routes nil means "not checked", else the
// route must name broker.
func topicDiffs(s TopicSpec, topics map[string]TopicInfo, broker string, routes map[string][]string) []Difference {
	got, ok := topics[s.Name]
	if !ok {
		return []Difference{{Kind: KindTopic, Name: s.Name, Field: FieldMissing}}
	}
	var diffs []Difference
	add := func(field, want, got string) {
		if want != got {
			diffs = append(diffs, Difference{Kind: KindTopic, Name: s.Name, Field: field, Want: want, Got: got})
		}
	}
	add(FieldMessageType, string(s.Type), string(got.Type))
	queues := strconv.Itoa(got.ReadQueues)
	if got.WriteQueues != got.ReadQueues {
		queues = fmt.Sprintf("%d read, %d write", got.ReadQueues, got.WriteQueues)
	}
	add(FieldQueues, strconv.Itoa(s.Queues), queues)
	add(FieldPerm, strconv.Itoa(s.Perm), strconv.Itoa(got.Perm))
	if routed := routes[s.Name]; routes != nil && !slices.Contains(routed, broker) {
		diffs = append(diffs, Difference{Kind: KindTopic, Name: s.Name, Field: FieldRoute, Want: broker, Got: strings.Join(routed, ",")})
	}
	return diffs
}

// groupDiffs compares one consumer group.
func groupDiffs(s GroupSpec, groups map[string]GroupInfo) []Difference {
	got, ok := groups[s.Name]
	if !ok {
		return []Difference{{Kind: KindGroup, Name: s.Name, Field: FieldMissing}}
	}
	var diffs []Difference
	add := func(field, want, got string) {
		if want != got {
			diffs = append(diffs, Difference{Kind: KindGroup, Name: s.Name, Field: field, Want: want, Got: got})
		}
	}
	add(FieldRetryMaxTimes, strconv.Itoa(s.RetryMaxTimes), strconv.Itoa(got.RetryMaxTimes))
	add(FieldOrderly, strconv.FormatBool(s.Orderly), strconv.FormatBool(got.Orderly))
	add(FieldConsumeEnable, "true", strconv.FormatBool(got.ConsumeEnable))
	return diffs
}

// RouteWait bounds how long Apply waits for the name server to route the
// topics it created (the broker registers a created topic at once, and
// every topic every 10 s).
var RouteWait = 30 * time.Second

// routePoll is the interval of Apply's route checks.
const routePoll = 250 * time.Millisecond

// Apply makes the broker match t through admin and returns the
// differences it found (nil when the broker already matched: then it
// wrote nothing). It creates or updates only the topics and groups that
// differ, each with its whole configuration (UPDATE_AND_CREATE_TOPIC,
// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: a topic whose route does not name
// the broker is written again, which registers it), reads the broker
// again, and, when admin has the name server's address, waits up to
// RouteWait for the name server to route every topic to the broker.
// Idempotent; topics and groups the topology does not name are left alone;
// only admin's broker is written (apply to each of Admin.Masters for a
// cluster). It fails when a difference remains.
func (t Topology) Apply(ctx context.Context, admin *Admin) ([]Difference, error) {
	if admin.Namesrv() != "" {
		// Ask the broker its name once, not on every check below.
		name, err := admin.BrokerName(ctx)
		if err != nil {
			return nil, err
		}
		admin = admin.ForBroker(BrokerRef{Name: name, Addr: admin.Broker()})
	}
	found, err := t.Check(ctx, admin)
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, nil
	}
	topics, groups := map[string]bool{}, map[string]bool{}
	for _, d := range found {
		if d.Kind == KindTopic {
			topics[d.Name] = true
		} else {
			groups[d.Name] = true
		}
	}
	for _, s := range t.Topics {
		if topics[s.Name] {
			if err := admin.CreateTopic(ctx, s); err != nil {
				return found, err
			}
		}
	}
	for _, s := range t.Groups {
		if groups[s.Name] {
			if err := admin.CreateGroup(ctx, s); err != nil {
				return found, err
			}
		}
	}
	deadline := time.Now().Add(RouteWait)
	for {
		left, err := t.Check(ctx, admin)
		if err != nil {
			return found, err
		}
		if len(left) == 0 {
			return found, nil
		}
		onlyRoutes := !slices.ContainsFunc(left, func(d Difference) bool { return d.Field != FieldRoute })
		if !onlyRoutes || time.Now().After(deadline) {
			return found, &DifferencesError{Differences: left, After: "apply"}
		}
		select {
		case <-ctx.Done():
			return found, fmt.Errorf("topology apply: waiting for the name server's routes: %w (%v)", ctx.Err(),
				&DifferencesError{Differences: left})
		case <-time.After(routePoll):
		}
	}
}

// DifferencesError is a broker that does not match the topology.
type DifferencesError struct {
	Differences []Difference
	// After names the step after which they remain ("apply"), or is empty.
	After string
}

// Error lists the differences on one line.
func (e *DifferencesError) Error() string {
	lines := make([]string, len(e.Differences))
	for i, d := range e.Differences {
		lines[i] = d.String()
	}
	when := ""
	if e.After != "" {
		when = " after " + e.After
	}
	return fmt.Sprintf("topology: %d difference(s)%s: %s", len(e.Differences), when, strings.Join(lines, "; "))
}

// Outside consumer groups: groups of other teams' consumers of the
// ORDER_EVENT topic, registered by `seckill topology add-group`.
const (
	// OutsideGroupRetryMaxTimes is the default retryMaxTimes of an outside
	// group: the broker's default, what Group.RetryMaxTimes gives a group
	// not of this package (brokerplug.OutsideGroupRetries).
	OutsideGroupRetryMaxTimes = brokerplug.OutsideGroupRetries
	// sysGroupPrefix starts the broker's system groups
	// (MixAll.isSysConsumerGroup), which the proxy refuses to serve.
	sysGroupPrefix = "CID_RMQ_SYS_"
)

// CheckOutsideGroupName reports whether name (without the environment
// prefix) may be an outside consumer group: the rule of every broker
// (brokerplug.CheckOutsideGroupName: letters, digits, '_' and '-', which
// leaves out the '%' and '|' the broker uses as separators in its own
// names), and not a name of the broker's system groups (CID_RMQ_SYS_),
// compared without case. The error says which rule the name breaks.
func CheckOutsideGroupName(name string) error {
	if err := brokerplug.CheckOutsideGroupName(name); err != nil {
		return err
	}
	if strings.HasPrefix(strings.ToUpper(name), sysGroupPrefix) {
		return fmt.Errorf("group name %q is reserved: names starting with %s are the broker's system groups", name, sysGroupPrefix)
	}
	return nil
}

// OutsideGroup returns the spec of the outside consumer group name under
// t.Prefix: a NORMAL (concurrent, not orderly) group with retryMaxTimes
// retryMax. It fails for a name CheckOutsideGroupName refuses, a negative
// retryMax, and a name whose dead-letter topic (%DLQ% + prefix + name, which
// the broker creates on the first dead letter) would be longer than the
// broker's topic limit of 127 characters.
func (t Topology) OutsideGroup(name string, retryMax int) (GroupSpec, error) {
	if err := CheckOutsideGroupName(name); err != nil {
		return GroupSpec{}, fmt.Errorf("topology: %w", err)
	}
	if retryMax < 0 {
		return GroupSpec{}, fmt.Errorf("topology: retryMaxTimes %d of %s is negative", retryMax, name)
	}
	physical := t.Prefix + name
	if n := len(DLQTopic(physical)); n > maxNameLen {
		return GroupSpec{}, fmt.Errorf("topology: group %s is too long: its dead-letter topic %s would have %d characters, the broker takes %d",
			physical, DLQTopic(physical), n, maxNameLen)
	}
	return GroupSpec{Name: physical, RetryMaxTimes: retryMax}, nil
}

// OrderEventTopic returns the physical name of the ORDER_EVENT topic in t
// (the topic outside groups consume).
func (t Topology) OrderEventTopic() (string, error) {
	base, _, err := TopicBaseName(ports.TopicOrderEvent)
	if err != nil {
		return "", err
	}
	return t.Prefix + base, nil
}

// ApplyGroup makes the broker of admin hold the consumer group s (an
// OutsideGroup) and returns the differences it found: nil when the group
// was already there with s's settings (then it wrote nothing), a
// FieldMissing difference when it created the group, the differing
// settings when it replaced them (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with
// the whole configuration). The groups are read with
// GET_ALL_SUBSCRIPTIONGROUP_CONFIG, which never creates one. It fails
// before writing anything when the broker has no ORDER_EVENT topic of t
// (seckill topology apply creates it), and when the group still differs
// after the write.
func (t Topology) ApplyGroup(ctx context.Context, admin *Admin, s GroupSpec) ([]Difference, error) {
	topics, err := admin.Topics(ctx)
	if err != nil {
		return nil, err
	}
	topic, err := t.OrderEventTopic()
	if err != nil {
		return nil, err
	}
	if _, ok := topics[topic]; !ok {
		return nil, fmt.Errorf("topology: topic %s is missing on the broker; seckill topology apply creates it: %w", topic, ports.ErrNotFound)
	}
	s = s.withDefaults()
	groups, err := admin.Groups(ctx)
	if err != nil {
		return nil, err
	}
	found := groupDiffs(s, groups)
	if len(found) == 0 {
		return nil, nil
	}
	if err := admin.CreateGroup(ctx, s); err != nil {
		return found, err
	}
	if groups, err = admin.Groups(ctx); err != nil {
		return found, err
	}
	if left := groupDiffs(s, groups); len(left) > 0 {
		return found, &DifferencesError{Differences: left, After: "add-group"}
	}
	return found, nil
}
