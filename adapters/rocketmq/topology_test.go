package rocketmq_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

// TestTopologyProductionValues: NewTopology lists the five business topics
// with their types and 8 queues, a one-queue %DLQ% topic per business
// group, the business groups with their production retry counts (only the
// projection orderly) and the dead-letter reader, every name prefixed.
func TestTopologyProductionValues(t *testing.T) {
	top, err := rocketmq.NewTopology(rocketmq.Config{TopicPrefix: "P_"})
	if err != nil {
		t.Fatal(err)
	}
	if top.Prefix != "P_" || len(top.Topics) != 10 || len(top.Groups) != 6 {
		t.Fatalf("topology = %+v", top)
	}
	for i, lt := range ports.Topics {
		base, typ, _ := rocketmq.TopicBaseName(lt)
		want := rocketmq.TopicSpec{Name: "P_" + base, Type: typ, Queues: 8, Perm: 6}
		if top.Topics[i] != want {
			t.Errorf("topic %d = %+v, want %+v", i, top.Topics[i], want)
		}
	}
	retries := map[rocketmq.Group]int{rocketmq.GroupOrderCreate: 5, rocketmq.GroupOrderTimeout: 5,
		rocketmq.GroupInventoryCompensate: 8, rocketmq.GroupOrderProjection: 5, rocketmq.GroupAudit: 3}
	for i, g := range rocketmq.Groups() {
		want := rocketmq.GroupSpec{Name: "P_" + string(g), Orderly: g == rocketmq.GroupOrderProjection, RetryMaxTimes: retries[g]}
		if top.Groups[i] != want {
			t.Errorf("group %d = %+v, want %+v", i, top.Groups[i], want)
		}
		dlq := rocketmq.TopicSpec{Name: "%DLQ%P_" + string(g), Type: rocketmq.MessageTypeNormal, Queues: 1, Perm: 6}
		if top.Topics[5+i] != dlq {
			t.Errorf("dead-letter topic %d = %+v, want %+v", i, top.Topics[5+i], dlq)
		}
	}
	if reader := top.Groups[5]; reader != (rocketmq.GroupSpec{Name: "P_CG_SECKILL_DLQ_READER_V1", RetryMaxTimes: 32}) {
		t.Errorf("reader = %+v", reader)
	}

	small, err := rocketmq.NewTopology(rocketmq.Config{}, rocketmq.WithTopicQueues(2),
		rocketmq.WithBusinessRetryMaxTimes(1), rocketmq.WithRetryMaxTimes(rocketmq.GroupAudit, 4))
	if err != nil {
		t.Fatal(err)
	}
	if small.Topics[0].Queues != 2 || small.Topics[5].Queues != 1 || small.Groups[0].RetryMaxTimes != 1 ||
		small.Groups[4].RetryMaxTimes != 4 || small.Groups[5].RetryMaxTimes != 32 {
		t.Errorf("options not applied: %+v", small)
	}

	for _, c := range []struct {
		cfg  rocketmq.Config
		opts []rocketmq.TopologyOption
		want string
	}{
		{rocketmq.Config{TopicPrefix: "bad prefix"}, nil, "may only contain"},
		{rocketmq.Config{}, []rocketmq.TopologyOption{rocketmq.WithTopicQueues(0)}, "want at least 1"},
		{rocketmq.Config{}, []rocketmq.TopologyOption{rocketmq.WithRetryMaxTimes("CG_NOPE", 1)}, `unknown consumer group "CG_NOPE"`},
		{rocketmq.Config{}, []rocketmq.TopologyOption{rocketmq.WithRetryMaxTimes(rocketmq.GroupAudit, -1)}, "negative"},
		{rocketmq.Config{}, []rocketmq.TopologyOption{rocketmq.WithBusinessRetryMaxTimes(31)}, "dead-lettered again"},
		{rocketmq.Config{TopicPrefix: strings.Repeat("x", 90)}, nil, "longer than 127"},
	} {
		if _, err := rocketmq.NewTopology(c.cfg, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewTopology(%q) = %v, want %q", c.cfg.TopicPrefix, err, c.want)
		}
	}
}

// TestTopologyApplyCheckRepair runs against the local stack in a namespace
// of its own: the test topology of mqtest checks clean; the production
// topology under the same prefix differs from it in exactly the queue and
// retry counts; Apply repairs them, a second Apply writes nothing; then a
// deleted group, a changed retry count, a changed queue count, a changed
// message type, a deleted topic and a lost route are each reported exactly
// by Check and repaired by Apply.
func TestTopologyApplyCheckRepair(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	check := func(top rocketmq.Topology) []string {
		t.Helper()
		diffs, err := top.Check(ctx, env.Admin)
		if err != nil {
			t.Fatalf("check: %v", err)
		}
		return diffStrings(diffs)
	}
	if got := check(env.Topology); len(got) != 0 {
		t.Fatalf("mqtest's own topology: %q", got)
	}

	prod, err := rocketmq.NewTopology(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, s := range prod.Topics[:5] {
		want = append(want, "topic "+s.Name+": queues is 4, want 8")
	}
	for _, s := range prod.Groups {
		was := mqtest.DefaultRetryMaxTimes
		if s.Name == env.Group(rocketmq.GroupDLQReader) {
			was = mqtest.DLQReaderRetryMaxTimes
		}
		want = append(want, "group "+s.Name+": retryMaxTimes is "+strconv.Itoa(was)+", want "+strconv.Itoa(s.RetryMaxTimes))
	}
	if got := check(prod); !slices.Equal(got, want) {
		t.Fatalf("production vs test topology:\n got %q\nwant %q", got, want)
	}
	apply := func(want []string) {
		t.Helper()
		start := time.Now()
		applied, err := prod.Apply(ctx, env.Admin)
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
		if got := diffStrings(applied); !slices.Equal(got, want) {
			t.Fatalf("apply repaired\n %q\nwant %q", got, want)
		}
		if got := check(prod); len(got) != 0 {
			t.Fatalf("check after apply: %q", got)
		}
		t.Logf("apply of %d difference(s) took %v", len(want), time.Since(start))
	}
	apply(want)
	apply(nil) // idempotent: nothing left to write

	audit, create := env.Group(rocketmq.GroupAudit), env.Group(rocketmq.GroupOrderCreate)
	fifo, event := env.Topic(ports.TopicOrderStateFIFO), env.Topic(ports.TopicOrderEvent)
	timeout := env.Topic(ports.TopicOrderTimeout)
	must(t, env.Admin.DeleteGroup(ctx, audit))
	must(t, env.Admin.CreateGroup(ctx, rocketmq.GroupSpec{Name: create, RetryMaxTimes: 16}))
	must(t, env.Admin.CreateTopic(ctx, rocketmq.TopicSpec{Name: fifo, Type: rocketmq.MessageTypeFIFO, Queues: 2}))
	must(t, env.Admin.CreateTopic(ctx, rocketmq.TopicSpec{Name: event, Type: rocketmq.MessageTypeDelay, Queues: 8}))
	must(t, env.Admin.DeleteTopic(ctx, timeout))
	want = []string{
		"topic " + timeout + ": missing",
		"topic " + event + ": message.type is DELAY, want NORMAL",
		"topic " + fifo + ": queues is 2, want 8",
		"group " + create + ": retryMaxTimes is 16, want 5",
		"group " + audit + ": missing",
	}
	if got := check(prod); !slices.Equal(got, want) {
		t.Fatalf("after breaking five things:\n got %q\nwant %q", got, want)
	}
	apply(want)

	// A topic the broker has but the name server does not route to it. The
	// broker re-registers every topic every 10 s, so a check that races
	// with that finds nothing: try again. In the cluster mode the other
	// broker may have registered the topic again in between: then the
	// route names it only.
	name, err := env.Admin.BrokerName(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dlq := rocketmq.DLQTopic(audit)
	for attempt := 1; ; attempt++ {
		must(t, rocketmq.DeleteRouteForTest(ctx, env.Admin, dlq))
		got := check(prod)
		if len(got) == 0 && attempt < 3 {
			continue
		}
		if want := "topic " + dlq + ": not routed to " + name + " by the name server"; len(got) != 1 || !strings.HasPrefix(got[0], want) {
			t.Fatalf("after deleting a route: %q, want %q", got, want)
		}
		apply(got)
		break
	}
}

// TestDifferenceString: how each kind of difference reads.
func TestDifferenceString(t *testing.T) {
	for _, c := range []struct {
		d    rocketmq.Difference
		want string
	}{
		{rocketmq.Difference{Kind: rocketmq.KindTopic, Name: "T", Field: rocketmq.FieldQueues, Want: "8", Got: "4"}, "topic T: queues is 4, want 8"},
		{rocketmq.Difference{Kind: rocketmq.KindGroup, Name: "G", Field: rocketmq.FieldMissing}, "group G: missing"},
		{rocketmq.Difference{Kind: rocketmq.KindTopic, Name: "T", Field: rocketmq.FieldRoute}, "topic T: not routed by the name server"},
		{rocketmq.Difference{Kind: rocketmq.KindTopic, Name: "T", Field: rocketmq.FieldRoute, Want: "broker-a"}, "topic T: not routed to broker-a by the name server"},
		{rocketmq.Difference{Kind: rocketmq.KindTopic, Name: "T", Field: rocketmq.FieldRoute, Want: "broker-b", Got: "broker-a"},
			"topic T: not routed to broker-b by the name server (routed to broker-a)"},
	} {
		if got := c.d.String(); got != c.want {
			t.Errorf("%+v = %q, want %q", c.d, got, c.want)
		}
	}
}

func diffStrings(diffs []rocketmq.Difference) []string {
	var out []string
	for _, d := range diffs {
		out = append(out, d.String())
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestTopologyOutsideGroup: OutsideGroup gives a concurrent group under the
// prefix with the asked retry count and refuses an empty name, characters
// outside the rule, the service's and the broker's reserved names (any
// case), a negative retry count and a name whose dead-letter topic would
// exceed the broker's 127 characters (122 with %DLQ% is the longest).
func TestTopologyOutsideGroup(t *testing.T) {
	top, err := rocketmq.NewTopology(rocketmq.Config{TopicPrefix: "P_"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := top.OutsideGroup("CG_VIEW-1", 4)
	if err != nil || g != (rocketmq.GroupSpec{Name: "P_CG_VIEW-1", RetryMaxTimes: 4}) {
		t.Fatalf("OutsideGroup = %+v, %v", g, err)
	}
	if topic, err := top.OrderEventTopic(); err != nil || topic != "P_PROD_SECKILL_ORDER_EVENT_V1" {
		t.Fatalf("OrderEventTopic = %q, %v", topic, err)
	}
	if _, err := top.OutsideGroup(strings.Repeat("G", 120), 0); err != nil { // 2 + 120 + 5 = 127
		t.Fatalf("a name of the longest length: %v", err)
	}
	for _, c := range []struct {
		name    string
		retries int
		want    string
	}{
		{"", 1, "empty"},
		{"CG%X", 1, "may only contain"},
		{"CG|X", 1, "may only contain"},
		{"CG.X", 1, "may only contain"},
		{"CG_SECKILL_AUDIT_V1", 1, "the service's own consumer groups"},
		{"Cg_Seckill_x", 1, "the service's own consumer groups"},
		{"CID_RMQ_SYS_X", 1, "the broker's system groups"},
		{"CG_X", -1, "negative"},
		{strings.Repeat("G", 121), 1, "would have 128 characters, the broker takes 127"},
	} {
		if _, err := top.OutsideGroup(c.name, c.retries); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("OutsideGroup(%q, %d) = %v, want %q", c.name, c.retries, err, c.want)
		}
	}
}
