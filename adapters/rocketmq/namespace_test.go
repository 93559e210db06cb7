package rocketmq_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
)

// TestNamespaceOnEveryMaster runs against the local stack (single node or
// the cluster mode): a plug namespace's topics and groups (the five
// topics, the six groups and the five %DLQ% topics) exist on every master
// the name server lists, its groups take the redeliveries asked for, and
// Close deletes them there.
func TestNamespaceOnEveryMaster(t *testing.T) {
	t.Parallel()
	namesrv := os.Getenv(mqtest.EnvNamesrv)
	if namesrv == "" {
		t.Fatal("SECKILL_ROCKETMQ_NAMESRV is not set: run make test, or eval \"$(deploy/local/stack.sh env)\"")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := rocketmq.Settings{Endpoint: os.Getenv(mqtest.EnvEndpoint), Namesrv: namesrv}
	prefix := "NSTEST" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10) + "_"
	ns, err := rocketmq.Plug{}.NewNamespace(ctx, s, brokerplug.NamespaceOptions{Prefix: prefix, Redeliveries: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Settings().(rocketmq.Settings); got.TopicPrefix != prefix || ns.Prefix() != prefix ||
		!slices.Contains(ns.Env(), "SECKILL_TOPIC_PREFIX="+prefix) {
		t.Fatalf("namespace settings %+v, prefix %q, env %v: want the prefix %s everywhere", got, ns.Prefix(), ns.Env(), prefix)
	}
	admin := rocketmq.NewAdmin("", namesrv, 5*time.Second)
	masters, err := admin.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rocketmq.Config{TopicPrefix: prefix}
	want, err := rocketmq.NewTopology(cfg)
	if err != nil {
		t.Fatal(err)
	}
	orderCreate := cfg.Group(rocketmq.GroupOrderCreate)
	for _, m := range masters {
		a := admin.ForBroker(m)
		topics, err := a.Topics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		groups, err := a.Groups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range want.Topics {
			if _, ok := topics[spec.Name]; !ok {
				t.Errorf("%s: topic %s missing", m, spec.Name)
			}
		}
		if len(want.Topics) != 10 || len(want.Groups) != 6 {
			t.Errorf("the topology has %d topics and %d groups, want 10 (five and their dead letters) and 6", len(want.Topics), len(want.Groups))
		}
		if g, ok := groups[orderCreate]; !ok || g.RetryMaxTimes != 3 {
			t.Errorf("%s: group %s = %+v (found %v), want retryMaxTimes 3", m, orderCreate, g, ok)
		}
	}
	if err := ns.Close(ctx); err != nil {
		t.Logf("close: %v", err) // a %RETRY% topic that never existed
	}
	for _, m := range masters {
		groups, err := admin.ForBroker(m).Groups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := groups[orderCreate]; ok {
			t.Errorf("%s: group %s still there after Close", m, orderCreate)
		}
	}
}
