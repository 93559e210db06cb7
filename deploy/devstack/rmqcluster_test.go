package devstack

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rmqmd "github.com/apache/rocketmq-clients/golang/v5/metadata"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
)

// freeBrokerPort returns a free port P whose neighbours P-2 (fast
// remoting) and P+1 (HA) are free too, all three never handed out before in
// this process.
func freeBrokerPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		p := 20002 + rand.IntN(11996)
		if handedOut.claim(p, p-2, p+1) {
			return p
		}
	}
	t.Fatal("no free broker port triple after 100 tries")
	return 0
}

// queryRoute asks the proxy on port for topic's route over gRPC and
// returns the broker names of its message queues.
func queryRoute(ctx context.Context, port int, topic string) ([]string, error) {
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}))) //nolint:gosec // as the client library
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, rmqmd.LanguageKey, rmqmd.LanguageValue, rmqmd.ProtocolKey, rmqmd.ProtocolValue,
		rmqmd.VersionKey, rmqmd.VersionValue, rmqmd.ClintID, fmt.Sprintf("devstack-test@%d", os.Getpid()), rmqmd.RequestID, "1")
	resp, err := v2.NewMessagingServiceClient(conn).QueryRoute(ctx, &v2.QueryRouteRequest{
		Topic:     &v2.Resource{Name: topic},
		Endpoints: &v2.Endpoints{Scheme: v2.AddressScheme_IPv4, Addresses: []*v2.Address{{Host: "127.0.0.1", Port: int32(port)}}},
	})
	if err != nil {
		return nil, err
	}
	if resp.GetStatus().GetCode() != v2.Code_OK {
		return nil, fmt.Errorf("QueryRoute: %v %s", resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
	}
	var brokers []string
	for _, q := range resp.GetMessageQueues() {
		if name := q.GetBroker().GetName(); !slices.Contains(brokers, name) {
			brokers = append(brokers, name)
		}
	}
	slices.Sort(brokers)
	return brokers, nil
}

// TestRocketMQClusterMode brings the RocketMQ cluster mode up in a
// temporary state dir on private ports (four JVMs: the only such test),
// checks that both brokers are registered with its name server, the
// topology is on both and the CLUSTER-mode proxy routes a topic over both,
// then tears it down.
func TestRocketMQClusterMode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cfg := privateConfig(t)
	cfg.TopicPrefix, cfg.TopologyArgs = "", nil
	cfg.ClusterNamesrvPort, cfg.ClusterProxyPort, cfg.ClusterRemotingPort = freePort(t), freePort(t), freePort(t)
	cfg.ClusterBrokerPorts = [2]int{freeBrokerPort(t), freeBrokerPort(t)}
	cfg.ClusterMetricsPorts = [2]int{freePort(t), freePort(t)}
	log := testLogger(t)
	cs := RocketMQClusterStack(cfg, log)
	for _, c := range cs.Components() {
		stopOnCleanup(t, c)
	}
	t0 := time.Now()
	if err := cs.Up(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up in %s", since(t0))
	if got := cfg.RocketMQClusterDir(); cs.cfg.StateDir != got || !cs.Exists() {
		t.Fatalf("cluster state dir %s, want %s", cs.cfg.StateDir, got)
	}
	if ok, err := ClusterBrokersRegistered(ctx, cfg); err != nil || !ok {
		t.Fatalf("ClusterBrokersRegistered = %v, %v", ok, err)
	}
	for _, c := range cs.Components() {
		if err := c.Healthy(ctx); err != nil {
			t.Fatal(err)
		}
		if b, ok := c.(*Broker); ok {
			if cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", b.PID())); cwd != filepath.Join(cfg.RocketMQClusterDir(), b.Name()) {
				t.Fatalf("%s runs in %s", b.Name(), cwd)
			}
		}
	}
	var brokers []string
	var err error
	if !poll(ctx, 30*time.Second, 500*time.Millisecond, func() bool {
		brokers, err = queryRoute(ctx, cfg.ClusterProxyPort, "PROD_SECKILL_ORDER_CREATE_V1")
		return err == nil && len(brokers) == 2
	}) {
		t.Fatalf("proxy route of PROD_SECKILL_ORDER_CREATE_V1: brokers %v, %v", brokers, err)
	}
	if strings.Join(brokers, ",") != "broker-a,broker-b" {
		t.Fatalf("route brokers %v", brokers)
	}
	ok, detail := cs.resources[0].Check(ctx)
	if !ok || matchingSummaries(detail) != 2 {
		t.Fatalf("resources: %v %s", ok, detail)
	}
	checkClusterTopology(ctx, t, cfg, cs)
	exports := map[string]string{}
	for _, e := range cfg.ClusterExports() {
		exports[e.Name] = e.Value
	}
	if exports["SECKILL_ROCKETMQ_ENDPOINT"] != fmt.Sprintf("127.0.0.1:%d", cfg.ClusterProxyPort) ||
		exports["SECKILL_ROCKETMQ_BROKERS"] != fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", cfg.ClusterBrokerPorts[0], cfg.ClusterBrokerPorts[1]) ||
		exports["SECKILL_ROCKETMQ_METRICS_URL"] != fmt.Sprintf("http://127.0.0.1:%d/metrics,http://127.0.0.1:%d/metrics", cfg.ClusterMetricsPorts[0], cfg.ClusterMetricsPorts[1]) ||
		exports["SECKILL_PG_DSN"] != cfg.PGDSN() {
		t.Fatalf("cluster exports %v", exports)
	}
	t1 := time.Now()
	if err := cs.Down(ctx, true, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster down in %s", since(t1))
	if _, err := os.Stat(cfg.RocketMQClusterDir()); !os.IsNotExist(err) {
		t.Fatalf("cluster state dir after down --purge: %v", err)
	}
}

// checkClusterTopology: up applied the topology with one `seckill topology
// apply` for both brokers (its output in topology.out repairs both, with a
// summary line each); the name server lists exactly the two brokers as
// masters; one more apply without --broker, of a prefix of its own, puts
// every topic and group on both brokers, and the topology checks clean on
// each (routes to both included).
func checkClusterTopology(ctx context.Context, t *testing.T, cfg Config, cs *Stack) {
	t.Helper()
	out, err := os.ReadFile(filepath.Join(cs.cfg.RMQHome(), "topology.out"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"broker-a", "broker-b"} {
		if !strings.Contains(string(out), "applied: "+b+": topic PROD_SECKILL_ORDER_CREATE_V1: missing\n") {
			t.Errorf("topology.out does not repair %s:\n%s", b, out)
		}
	}
	if n := matchingSummaries(string(out)); n != 4 { // apply and check, two brokers each
		t.Errorf("topology.out has %d summary lines, want 4:\n%s", n, out)
	}

	namesrv := fmt.Sprintf("127.0.0.1:%d", cfg.ClusterNamesrvPort)
	ns := rocketmq.NewAdmin("", namesrv, 5*time.Second)
	masters, err := ns.Masters(ctx)
	want := []rocketmq.BrokerRef{{Name: "broker-a", Addr: fmt.Sprintf("127.0.0.1:%d", cfg.ClusterBrokerPorts[0])},
		{Name: "broker-b", Addr: fmt.Sprintf("127.0.0.1:%d", cfg.ClusterBrokerPorts[1])}}
	if err != nil || !slices.Equal(masters, want) {
		t.Fatalf("masters %v, %v; want %v", masters, err, want)
	}

	const prefix = "DEVSTACK_"
	cmd := exec.CommandContext(ctx, cs.cfg.SeckillBin(), "topology", "apply", "--namesrv", namesrv, "--prefix", prefix, "--queues", "2")
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SECKILL_ROCKETMQ_BROKER=") }),
		"SECKILL_BROKER=rocketmq")
	out, err = cmd.CombinedOutput()
	if err != nil || matchingSummaries(string(out)) != 2 {
		t.Fatalf("seckill topology apply without --broker: %v\n%s", err, out)
	}
	top, err := rocketmq.NewTopology(rocketmq.Config{TopicPrefix: prefix}, rocketmq.WithTopicQueues(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range masters {
		admin := ns.ForBroker(m)
		topics, err := admin.Topics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		groups, err := admin.Groups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range top.Topics {
			if _, ok := topics[s.Name]; !ok {
				t.Errorf("%s: topic %s missing", m, s.Name)
			}
		}
		for _, s := range top.Groups {
			if _, ok := groups[s.Name]; !ok {
				t.Errorf("%s: group %s missing", m, s.Name)
			}
		}
		if diffs, err := top.Check(ctx, admin); err != nil || len(diffs) != 0 {
			t.Errorf("%s: check: %v, %v", m, diffs, err)
		}
	}
}

// matchingSummaries counts the summary lines (or, in a status detail, the
// summaries) of the full topology that say a broker matches:
// "10 topics and 6 groups (prefix ..., broker ...) match".
func matchingSummaries(out string) int {
	return len(regexp.MustCompile(`10 topics and 6 groups \(prefix "[^"]*", broker [^)]*\) match`).FindAllString(out, -1))
}
