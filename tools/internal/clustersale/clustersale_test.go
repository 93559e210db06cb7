package clustersale

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	redisadapter "github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/deploy/devstack"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
)

// TestClusterSale is the bounded part of `make cluster-sale` that `make
// test` runs: a hot-SKU sale through three API instances and two worker
// instances on the stack's Redis Cluster and a two-broker RocketMQ
// cluster, with one API instance, one worker instance and one broker
// killed mid-sale and brought back, half the orders paid and the rest
// timed out; the hot SKU's stock is split over three Redis slots (stock
// lanes). The RocketMQ cluster is the test's own (started on free
// ports in a temporary directory, stopped by PID when the test ends), so
// the broker it kills is nobody else's. Every invariant must hold and
// every instance must have done a share of the work.
func TestClusterSale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	if os.Getenv("SECKILL_REDIS_CLUSTER_ADDRS") == "" {
		t.Fatal("SECKILL_REDIS_CLUSTER_ADDRS is not set: run `make test` or eval \"$(deploy/local/stack.sh up)\"")
	}
	dir := t.TempDir()
	exe := buildService(t, ctx, dir)
	cs, ccfg := startPrivateRocketMQCluster(t, ctx)

	proxy := fmt.Sprintf("127.0.0.1:%d", ccfg.ClusterProxyPort)
	t.Setenv("SECKILL_BROKER", "rocketmq")
	t.Setenv("SECKILL_ROCKETMQ_ENDPOINT", proxy)
	t.Setenv("SECKILL_ROCKETMQ_NAMESRV", fmt.Sprintf("127.0.0.1:%d", ccfg.ClusterNamesrvPort))
	t.Setenv("SECKILL_ROCKETMQ_BROKER", fmt.Sprintf("127.0.0.1:%d", ccfg.ClusterBrokerPorts[0]))
	t.Setenv("SECKILL_ROCKETMQ_METRICS_URL", fmt.Sprintf("http://127.0.0.1:%d/metrics,http://127.0.0.1:%d/metrics", ccfg.ClusterMetricsPorts[0], ccfg.ClusterMetricsPorts[1]))
	// The end-to-end tests' send bound: make test runs packages in
	// parallel on two cores.
	t.Setenv("SECKILL_SEND_TIMEOUT", "500ms")
	cfg, log, err := benchenv.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	clusterDir := ccfg.RocketMQClusterDir()
	var progress bytes.Buffer
	run := clusterSaleRun{
		opts: clusterSaleOptions{stock: 600, lanes: 3, buyers: 1800, clients: 16, apis: 3, workers: 2,
			faults: []string{faultAPI, faultWorkers, faultBroker}, down: 3 * time.Second, settle: 120 * time.Second,
			paymentTimeout: 8 * time.Second, payShare: 0.5},
		config: cfg, log: log, exe: exe,
		redisAddrs: redisadapter.SplitAddrs(os.Getenv("SECKILL_REDIS_CLUSTER_ADDRS")),
		broker: &brokerFault{Name: "broker-b", pidFile: filepath.Join(clusterDir, "run", "broker-b.pid"),
			// Brought back as a supervisor would: up to three starts, the
			// logs of a failed one kept in the test's output.
			restart: func(ctx context.Context) error {
				var err error
				for attempt := 1; attempt <= 3; attempt++ {
					if err = cs.Up(ctx); err == nil {
						return nil
					}
					t.Logf("restart %d of broker-b failed: %v\n%s\n%s", attempt, err, logTail(filepath.Join(clusterDir, "logs", "broker-b.out")),
						logTail(filepath.Join(clusterDir, "broker-b", "logs", "rocketmqlogs", "broker.log")))
				}
				return err
			}},
		stackProcs: clusterStackProcs(os.Getenv("SECKILL_STACK_DIR"), clusterDir, true),
		progress:   &progress,
	}
	res, err := runClusterSale(ctx, run)
	var report bytes.Buffer
	res.Write(&report, run)
	if err != nil {
		t.Fatalf("cluster sale: %v\n%s\n%s", err, progress.String(), report.String())
	}
	t.Logf("\n%s\n%s", progress.String(), report.String())
	if n := res.violations(); n > 0 {
		t.Errorf("%d invariant violation(s)", n)
	}
	if res.acknowledged < run.opts.stock || res.created+res.released != res.acknowledged {
		t.Errorf("acknowledged %d (stock %d), orders %d, rejected %d: the stock must sell and every acknowledgement end as one order or one rejection",
			res.acknowledged, run.opts.stock, res.created, res.released)
	}
	if res.paid == 0 || res.timedOut == 0 {
		t.Errorf("paid %d, canceled by timeout %d: both paths must be exercised", res.paid, res.timedOut)
	}
	for _, in := range res.apis {
		if in.accepted.Load() == 0 {
			t.Errorf("%s acknowledged nothing: the client-side spread did not reach it", in.Name)
		}
	}
	for _, in := range res.workers {
		if all, _ := in.deliveries(); all == 0 {
			t.Errorf("%s handled no delivery", in.Name)
		}
	}
	if !strings.Contains(progress.String(), "killed broker-b") || !strings.Contains(progress.String(), "broker-b is back") {
		t.Errorf("broker-b was not killed and brought back:\n%s", progress.String())
	}
}

// startPrivateRocketMQCluster starts the dev stack's RocketMQ cluster mode
// (name server, broker-a, broker-b, the CLUSTER-mode proxy, the topology
// applied on both brokers) on free ports in a directory of the test's own,
// stopped by PID when the test ends.
func startPrivateRocketMQCluster(t *testing.T, ctx context.Context) (*devstack.Stack, devstack.Config) {
	t.Helper()
	repo, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := devstack.ConfigFromEnv(os.Getenv, repo)
	if err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = filepath.Join(t.TempDir(), "stack")
	cfg.TopicPrefix, cfg.TopologyArgs = "", nil
	taken := map[int]bool{} // the ports already given to a process of this cluster
	cfg.ClusterNamesrvPort, cfg.ClusterProxyPort, cfg.ClusterRemotingPort = freeTCPPort(t, taken), freeTCPPort(t, taken), freeTCPPort(t, taken)
	cfg.ClusterBrokerPorts = [2]int{freeBrokerTriple(t, taken), freeBrokerTriple(t, taken)}
	cfg.ClusterMetricsPorts = [2]int{freeTCPPort(t, taken), freeTCPPort(t, taken)}
	var logBuf bytes.Buffer
	cs := devstack.RocketMQClusterStack(cfg, devstack.NewLogger(&logBuf, false))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := cs.Down(stopCtx, true, nil); err != nil {
			t.Errorf("stop the private RocketMQ cluster: %v", err)
		}
	})
	t0 := time.Now()
	if err := cs.Up(ctx); err != nil {
		t.Fatalf("private RocketMQ cluster: %v\n%s", err, logBuf.String())
	}
	t.Logf("private RocketMQ cluster up in %s (proxy 127.0.0.1:%d)", time.Since(t0).Round(time.Second), cfg.ClusterProxyPort)
	return cs, cfg
}

// freeTCPPort returns a loopback port that was free a moment ago, below
// Linux's ephemeral range (32768-60999): the broker killed by the test must
// bind its ports again when it comes back, and a port of the ephemeral
// range may meanwhile be the local port of any outgoing connection.
func freeTCPPort(t *testing.T, taken map[int]bool) int {
	t.Helper()
	return freePorts(t, taken)
}

// freeBrokerTriple returns a port p with p-2 and p+1 free too: a broker
// listens on all three (its fast-remoting and HA ports).
func freeBrokerTriple(t *testing.T, taken map[int]bool) int {
	t.Helper()
	return freePorts(t, taken, -2, 1)
}

// freePorts returns a random port p in [20000, 32000) such that p and p+d
// for every d in also are free on 127.0.0.1 and not in taken, and adds
// them to taken: two brokers' triples chosen one after the other never
// share a port (broker-b's HA port was once broker-a's fast-remoting port).
func freePorts(t *testing.T, taken map[int]bool, also ...int) int {
	t.Helper()
	var lc net.ListenConfig
	for range 200 {
		p := 20000 + rand.IntN(12000)
		ports := make([]int, 0, 1+len(also))
		for _, d := range append([]int{0}, also...) {
			ports = append(ports, p+d)
		}
		ok := true
		for _, q := range ports {
			if taken[q] {
				ok = false
				break
			}
			l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			for _, q := range ports {
				taken[q] = true
			}
			return p
		}
	}
	t.Fatal("no free port below the ephemeral range after 200 tries")
	return 0
}

// logTail returns the last 4 KiB of the file at path (for a failure's
// message), or why it could not be read.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return path + ":\n" + string(b)
}

// buildService builds the service binary (bootstrap/cmd/seckill) into dir
// and returns its path.
func buildService(t *testing.T, ctx context.Context, dir string) string {
	t.Helper()
	exe := filepath.Join(dir, benchenv.ServiceName)
	out, err := exec.CommandContext(ctx, "go", "build", "-o", exe, "../../../bootstrap/cmd/seckill").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}
