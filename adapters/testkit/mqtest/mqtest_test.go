package mqtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

func TestNewEnvCreatesTopicsAndGroups(t *testing.T) {
	t.Parallel()
	start := time.Now()
	env := mqtest.NewEnv(t, mqtest.WithRetryMaxTimes(3))
	t.Logf("NewEnv took %v", time.Since(start))
	ctx := context.Background()
	for _, lt := range ports.Topics {
		_, typ, err := rocketmq.TopicBaseName(lt)
		if err != nil {
			t.Fatal(err)
		}
		info, err := env.Admin.Topic(ctx, env.Topic(lt))
		if err != nil {
			t.Fatalf("topic %s: %v", lt, err)
		}
		if info.Type != typ || info.ReadQueues != 4 || info.WriteQueues != 4 || info.Perm != 6 {
			t.Errorf("topic %s = %+v, want type %s, 4 queues, perm 6", lt, info, typ)
		}
	}
	for _, g := range rocketmq.Groups() {
		info, err := env.Admin.Group(ctx, env.Group(g))
		if err != nil {
			t.Fatalf("group %s: %v", g, err)
		}
		if info.Orderly != g.Orderly() || info.RetryMaxTimes != 3 || !info.ConsumeEnable {
			t.Errorf("group %s = %+v", g, info)
		}
		if _, err := env.Admin.Topic(ctx, rocketmq.DLQTopic(env.Group(g))); err != nil {
			t.Errorf("dead-letter topic of %s: %v", g, err)
		}
	}
	reader, err := env.Admin.Group(ctx, env.Group(rocketmq.GroupDLQReader))
	if err != nil || reader.RetryMaxTimes != mqtest.DLQReaderRetryMaxTimes {
		t.Errorf("dead-letter reader group = %+v, %v", reader, err)
	}
	if diffs, err := env.Topology.Check(ctx, env.Admin); err != nil || len(diffs) != 0 {
		t.Errorf("Topology.Check of the new namespace = %v, %v", diffs, err)
	}
	if env.Topology.Prefix != env.Prefix || len(env.Topology.Topics) != 10 || len(env.Topology.Groups) != 6 {
		t.Errorf("Topology = %+v", env.Topology)
	}
	extra := env.CreateTopic("EXTRA", rocketmq.MessageTypeFIFO, 2)
	if info, err := env.Admin.Topic(ctx, extra); err != nil || info.Type != rocketmq.MessageTypeFIFO || info.ReadQueues != 2 {
		t.Errorf("extra topic = %+v, %v", info, err)
	}
	g := env.CreateGroup("G_EXTRA", true, 1)
	if info, err := env.Admin.Group(ctx, g); err != nil || !info.Orderly || info.RetryMaxTimes != 1 {
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
