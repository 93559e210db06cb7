package rocketmq_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

// TestAdminMasters runs against the local stack (single node or the
// RocketMQ cluster mode): the name server lists the broker of
// SECKILL_ROCKETMQ_BROKER among its masters (and exactly the brokers of
// SECKILL_ROCKETMQ_BROKERS when that is set); each master tells its own
// name; a topic of a test namespace is routed to every master; an admin of
// the name server only refuses broker commands; a name server that does
// not answer is an error.
func TestAdminMasters(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := rocketmq.NewAdmin("", os.Getenv(mqtest.EnvNamesrv), 5*time.Second)
	masters, err := ns.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var addrs, names []string
	for _, m := range masters {
		addrs, names = append(addrs, m.Addr), append(names, m.Name)
	}
	t.Logf("masters: %v", masters)
	if !slices.Contains(addrs, env.Broker) || !slices.IsSorted(names) {
		t.Fatalf("masters %v: want sorted by name, with %s", masters, env.Broker)
	}
	if list := os.Getenv("SECKILL_ROCKETMQ_BROKERS"); list != "" {
		want := strings.Split(list, ",")
		slices.Sort(want)
		got := slices.Sorted(slices.Values(addrs))
		if !slices.Equal(got, want) {
			t.Fatalf("master addresses %v, want SECKILL_ROCKETMQ_BROKERS %v", got, want)
		}
	}
	if !slices.Equal(env.Masters, masters) {
		t.Errorf("mqtest masters %v, want %v", env.Masters, masters)
	}
	for _, m := range masters {
		// NewAdmin does not know the name: the broker is asked.
		if name, err := rocketmq.NewAdmin(m.Addr, "", 0).BrokerName(ctx); err != nil || name != m.Name {
			t.Errorf("BrokerName of %s = %q, %v", m, name, err)
		}
		if name, err := ns.ForBroker(m).BrokerName(ctx); err != nil || name != m.Name {
			t.Errorf("BrokerName of ForBroker(%s) = %q, %v", m, name, err)
		}
	}
	route, err := ns.TopicRoute(ctx, env.Topic(ports.TopicOrderCreate))
	if err != nil || !slices.Equal(route, masters) {
		t.Errorf("route of the test topic = %v, %v; want every master %v", route, err, masters)
	}
	if _, err := ns.TopicRoute(ctx, env.Prefix+"NO_SUCH_TOPIC"); !errors.Is(err, ports.ErrNotFound) {
		t.Errorf("route of a missing topic: %v, want ErrNotFound", err)
	}
	if _, err := ns.Topics(ctx); err == nil || !strings.Contains(err.Error(), "no broker address") {
		t.Errorf("Topics of an admin without broker: %v", err)
	}
	if _, err := rocketmq.NewAdmin("", "", 0).Masters(ctx); err == nil {
		t.Error("Masters without a name server address: no error")
	}
	if _, err := rocketmq.NewAdmin("", "127.0.0.1:1", time.Second).Masters(ctx); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Masters of a closed port: %v", err)
	}
}
