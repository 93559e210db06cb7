package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
	"github.com/seckill-dev/seckill/ports"
)

// addGroupHandler adapts a function to ports.BatchHandler.
type addGroupHandler func(ctx context.Context, ds []ports.Delivery) []ports.Decision

// HandleBatch calls f.
func (f addGroupHandler) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	return f(ctx, ds)
}

// TestTopologyAddGroup registers an outside group on every master of a
// test namespace: one "registered" line per master and the group on each
// broker as a concurrent group with the asked retryMaxTimes; a second run
// changes nothing and says so; another --retry-max on one broker updates
// it there only; a namespace without the ORDER_EVENT topic is refused
// (exit 1) and gets no group; a consumer of the group receives a message published to
// the ORDER_EVENT topic after the registration.
func TestTopologyAddGroup(t *testing.T) {
	env := mqtest.NewEnv(t)
	t.Setenv("SECKILL_TOPIC_PREFIX", env.Prefix)
	t.Setenv("SECKILL_ROCKETMQ_BROKER", "")
	const name = "CG_OUTSIDE_VIEW_V1"
	group, topic := env.Prefix+name, env.Topic(ports.TopicOrderEvent)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i, admin := range env.Admins {
			if err := admin.DeleteGroup(ctx, group); err != nil {
				t.Logf("delete %s on %s: %v", group, env.Masters[i], err)
			}
		}
	})
	lines := func(state string) string {
		var want string
		for _, m := range env.Masters {
			want += fmt.Sprintf("%s: group %s: %s (NORMAL, retryMaxTimes 4, for topic %s) on broker %s%s\n", m.Name, group, state, topic, m,
				map[bool]string{true: ": nothing changed"}[state == "already registered"])
		}
		return want
	}

	// A namespace without the ORDER_EVENT topic: refused, nothing created.
	empty := env.Prefix + "NONE_"
	out, _, err := execute(t, "topology", "add-group", "CG_X", "--prefix", empty, "--broker", env.Broker)
	if clikit.ExitCode(err) != 1 || !strings.Contains(err.Error(), "topic "+empty+"PROD_SECKILL_ORDER_EVENT_V1 is missing on the broker") || out != "" {
		t.Fatalf("add-group without the topic: %v\n%s", err, out)
	}
	if groups, err := env.Admin.Groups(t.Context()); err != nil {
		t.Fatal(err)
	} else if _, ok := groups[empty+"CG_X"]; ok {
		t.Fatalf("add-group without the topic created the group")
	}

	out, _, err = execute(t, "topology", "add-group", name, "--retry-max", "4")
	if err != nil || out != lines("registered") {
		t.Fatalf("add-group: %v\n%s\nwant\n%s", err, out, lines("registered"))
	}
	for i, admin := range env.Admins {
		groups, err := admin.Groups(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if g := groups[group]; g.Name != group || g.RetryMaxTimes != 4 || g.Orderly || !g.ConsumeEnable {
			t.Fatalf("group %s on %s after add-group: %+v", group, env.Masters[i], g)
		}
	}
	out, _, err = execute(t, "topology", "add-group", name, "--retry-max", "4")
	if err != nil || out != lines("already registered") {
		t.Fatalf("add-group again: %v\n%s\nwant\n%s", err, out, lines("already registered"))
	}

	out, _, err = execute(t, "topology", "add-group", name, "--retry-max", "6", "--broker", env.Broker)
	want := fmt.Sprintf("group %s: updated (NORMAL, retryMaxTimes 6, for topic %s; retryMaxTimes was 4) on broker %s\n", group, topic, env.Broker)
	if err != nil || out != want {
		t.Fatalf("add-group --retry-max 6 --broker: %v\n%s\nwant\n%s", err, out, want)
	}
	for i, admin := range env.Admins {
		g, err := admin.Groups(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if wantRetries := map[bool]int{true: 6, false: 4}[admin.Broker() == env.Broker]; g[group].RetryMaxTimes != wantRetries {
			t.Fatalf("group %s on %s: retryMaxTimes %d, want %d", group, env.Masters[i], g[group].RetryMaxTimes, wantRetries)
		}
	}

	// A consumer of the group receives what is published after the
	// registration.
	cfg := env.Config
	cfg.SendTimeout = 5 * time.Second
	pub, err := rocketmq.NewPublisher(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := pub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close() }()
	id := "evt_outside_" + env.Prefix
	if _, err := pub.Publish(ctx, ports.OutboundMessage{Topic: ports.TopicOrderEvent, MessageID: id, Tag: "ORDER_PAID",
		Body: []byte(`{"event_type":"ORDER_PAID"}`)}); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 64)
	h := addGroupHandler(func(_ context.Context, ds []ports.Delivery) []ports.Decision {
		out := make([]ports.Decision, len(ds))
		for i, d := range ds {
			select {
			case got <- d.Properties["message_id"]:
			default:
			}
			out[i] = ports.Acked("seen")
		}
		return out
	})
	r, err := rocketmq.NewRunner(cfg, rocketmq.RunnerConfig{Group: group, Subscriptions: map[string]string{topic: "*"}, Concurrency: 1,
		InvisibleDuration: 2 * time.Second, AwaitDuration: time.Second}, h, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case m := <-got:
		t.Logf("received %q", m)
		if m != id {
			t.Fatalf("the group received %q, want %q", m, id)
		}
	case <-ctx.Done():
		t.Fatalf("the group received nothing of %s: %v", topic, ctx.Err())
	}
}

// TestTopologyAddGroupRefusals: a bad or reserved name, a missing or extra
// argument, a negative retry count are usage errors (exit 2) before any
// broker is dialled.
func TestTopologyAddGroupRefusals(t *testing.T) {
	nowhere(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"CG_SECKILL_AUDIT_V1"}, "reserved: names starting with CG_SECKILL_ are the service's own consumer groups"},
		{[]string{"cg_seckill_mine"}, "reserved"},
		{[]string{"CID_RMQ_SYS_X"}, "the broker's system groups"},
		{[]string{"CG%BAD"}, "may only contain letters, digits, '_' and '-'"},
		{[]string{"CG BAD"}, "may only contain"},
		{[]string{""}, "the group name is empty"},
		{[]string{}, "want one argument, the group NAME; got 0"},
		{[]string{"A", "B"}, "got 2"},
		{[]string{"CG_X", "--retry-max", "-1"}, "want at least 0"},
		{[]string{"CG_X", "--timeout", "0s"}, "--timeout must be > 0"},
		{[]string{"CG_X", "--prefix", "a b"}, "may only contain"},
		{[]string{strings.Repeat("G", 123)}, "its dead-letter topic"},
		{[]string{"CG_X", "--broker", "", "--namesrv", ""}, `--namesrv "" needs --broker`},
	} {
		out, _, err := execute(t, append([]string{"topology", "add-group"}, c.args...)...)
		if clikit.ExitCode(err) != 2 || !strings.Contains(err.Error(), c.want) || out != "" {
			t.Errorf("seckill topology add-group %q = %v (exit %d), %q; want exit 2 and %q", c.args, err, clikit.ExitCode(err), out, c.want)
		}
	}

}

// TestTopologyAddGroupOnRabbitMQ: with SECKILL_BROKER=rabbitmq, add-group
// declares the queue NAME (after the prefix) bound to the ORDER_EVENT
// exchange, with its dead-letter queue; a message published to the
// exchange afterwards reaches it; a second run changes nothing and says
// so; a retry count the queue was not declared with is an error naming
// the queue; 0 is a usage error there.
func TestTopologyAddGroupOnRabbitMQ(t *testing.T) {
	t.Setenv("SECKILL_BROKER", "rabbitmq")
	t.Setenv("SECKILL_RABBITMQ_URL", rabbittest.URL(t))
	env := rabbittest.NewEnv(t, ports.Subscriptions())
	t.Setenv("SECKILL_RABBITMQ_PREFIX", env.Config.Prefix)
	const name = "CG_OUTSIDE_VIEW_V1"
	queue, exchange := env.Config.Prefix+name, env.Config.Prefix+"PROD_SECKILL_ORDER_EVENT_V1"
	sub := ports.Subscription{Group: name, Topic: ports.TopicOrderEvent, MaxRetries: 4}
	t.Cleanup(func() { // the namespace's cleanup deletes the queues of the groups it knows
		env.AddGroup(sub)
	})

	line := fmt.Sprintf("queue %s: %%s (quorum, delivery limit 4, dead letters to %s.DLQ), bound to exchange %s on RabbitMQ%%s\n", queue, queue, exchange)
	out, _, err := execute(t, "topology", "add-group", name, "--retry-max", "4")
	if want := fmt.Sprintf(line, "declared", ""); err != nil || out != want {
		t.Fatalf("add-group: %v\n%s\nwant\n%s", err, out, want)
	}
	out, _, err = execute(t, "topology", "add-group", name, "--retry-max", "4")
	if want := fmt.Sprintf(line, "already declared", ": nothing changed"); err != nil || out != want {
		t.Fatalf("add-group again: %v\n%s\nwant\n%s", err, out, want)
	}

	conn, err := amqp.Dial(rabbittest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(t.Context(), exchange, "", true, false, amqp.Publishing{MessageId: "evt_outside", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	env.WaitDepth(t.Context(), queue, 1, 30*time.Second)
	if d, ok := env.Get(queue); !ok || d.MessageId != "evt_outside" {
		t.Fatalf("the queue holds %q (%v), want evt_outside", d.MessageId, ok)
	}

	out, _, err = execute(t, "topology", "add-group", name, "--retry-max", "5")
	if clikit.ExitCode(err) != 1 || !strings.Contains(err.Error(), queue+" exists with other arguments") || out != "" {
		t.Fatalf("add-group with another delivery limit: %v\n%s", err, out)
	}
	out, _, err = execute(t, "topology", "add-group", name, "--retry-max", "0")
	if clikit.ExitCode(err) != 2 || !strings.Contains(err.Error(), "a RabbitMQ delivery limit must be at least 1") || out != "" {
		t.Fatalf("add-group --retry-max 0 on RabbitMQ: %v\n%s", err, out)
	}
}
