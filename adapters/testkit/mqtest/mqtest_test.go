package mqtest_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

// TestNewEnvCreatesTopicsAndGroups: the namespace's topics and groups, the
// extra ones included, exist with the asked settings on every master the
// name server lists (one on the single-node stack, two in the cluster
// mode), and its topology checks clean on each (routes included).
func TestNewEnvCreatesTopicsAndGroups(t *testing.T) {
	t.Parallel()
	start := time.Now()
	env := mqtest.NewEnv(t, mqtest.WithRetryMaxTimes(3))
	t.Logf("NewEnv took %v on %v", time.Since(start), env.Masters)
	ctx := context.Background()
	if len(env.Masters) == 0 || len(env.Admins) != len(env.Masters) {
		t.Fatalf("masters %v, %d admins", env.Masters, len(env.Admins))
	}
	if want := os.Getenv("SECKILL_ROCKETMQ_BROKERS"); want != "" && len(env.Masters) != len(strings.Split(want, ",")) {
		t.Errorf("masters %v, want the brokers of SECKILL_ROCKETMQ_BROKERS %s", env.Masters, want)
	}
	if !slices.ContainsFunc(env.Masters, func(b rocketmq.BrokerRef) bool { return b.Addr == env.Broker }) || env.Admin.Broker() != env.Broker {
		t.Errorf("masters %v, admin of %s: want %s among them", env.Masters, env.Admin.Broker(), env.Broker)
	}
	extra := env.CreateTopic("EXTRA", rocketmq.MessageTypeFIFO, 2)
	extraGroup := env.CreateGroup("G_EXTRA", true, 1)
	for i, admin := range env.Admins {
		t.Run(env.Masters[i].Name, func(t *testing.T) { checkBroker(ctx, t, env, admin, extra, extraGroup) })
	}
}

// checkBroker checks the namespace of env on one broker.
func checkBroker(ctx context.Context, t *testing.T, env *mqtest.Env, admin *rocketmq.Admin, extra, extraGroup string) {
	for _, lt := range ports.Topics {
		_, typ, err := rocketmq.TopicBaseName(lt)
		if err != nil {
			t.Fatal(err)
		}
		info, err := admin.Topic(ctx, env.Topic(lt))
		if err != nil {
			t.Fatalf("topic %s: %v", lt, err)
		}
		if info.Type != typ || info.ReadQueues != 4 || info.WriteQueues != 4 || info.Perm != 6 {
			t.Errorf("topic %s = %+v, want type %s, 4 queues, perm 6", lt, info, typ)
		}
	}
	for _, g := range rocketmq.Groups() {
		info, err := admin.Group(ctx, env.Group(g))
		if err != nil {
			t.Fatalf("group %s: %v", g, err)
		}
		if info.Orderly != g.Orderly() || info.RetryMaxTimes != 3 || !info.ConsumeEnable {
			t.Errorf("group %s = %+v", g, info)
		}
		if _, err := admin.Topic(ctx, rocketmq.DLQTopic(env.Group(g))); err != nil {
			t.Errorf("dead-letter topic of %s: %v", g, err)
		}
	}
	reader, err := admin.Group(ctx, env.Group(rocketmq.GroupDLQReader))
	if err != nil || reader.RetryMaxTimes != mqtest.DLQReaderRetryMaxTimes {
		t.Errorf("dead-letter reader group = %+v, %v", reader, err)
	}
	if diffs, err := env.Topology.Check(ctx, admin); err != nil || len(diffs) != 0 {
		t.Errorf("Topology.Check of the new namespace = %v, %v", diffs, err)
	}
	if env.Topology.Prefix != env.Prefix || len(env.Topology.Topics) != 10 || len(env.Topology.Groups) != 6 {
		t.Errorf("Topology = %+v", env.Topology)
	}
	if info, err := admin.Topic(ctx, extra); err != nil || info.Type != rocketmq.MessageTypeFIFO || info.ReadQueues != 2 {
		t.Errorf("extra topic = %+v, %v", info, err)
	}
	if info, err := admin.Group(ctx, extraGroup); err != nil || !info.Orderly || info.RetryMaxTimes != 1 {
		t.Errorf("extra group = %+v, %v", info, err)
	}
}

func TestEnvsAreDistinct(t *testing.T) {
	t.Parallel()
	a, b := mqtest.NewEnv(t), mqtest.NewEnv(t)
	if a.Prefix == b.Prefix || a.Topic(ports.TopicOrderCreate) == b.Topic(ports.TopicOrderCreate) {
		t.Fatalf("two environments share names: %q %q", a.Prefix, b.Prefix)
	}
}
