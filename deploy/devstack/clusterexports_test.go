package devstack

import (
	"strings"
	"testing"
)

// TestClusterExportsListEveryBrokersExporter: the cluster mode's exports
// point the RocketMQ variables at the cluster (its proxy, name server and
// broker-a), list both brokers' exporters in SECKILL_ROCKETMQ_METRICS_URL
// (a topic's backlog is split between them), add SECKILL_ROCKETMQ_BROKERS,
// SECKILL_ROCKETMQ_CLUSTER_DIR and SECKILL_STACK_ROCKETMQ_CLUSTER=1 (a
// later up keeps the cluster mode), and leave the other variables as the
// single-node stack exports them.
func TestClusterExportsListEveryBrokersExporter(t *testing.T) {
	cfg, err := ConfigFromEnv(env(map[string]string{"HOME": "/home/u"}), "/repo")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range cfg.ClusterExports() {
		lines = append(lines, e.Name+"="+e.Value)
	}
	want := strings.Join([]string{
		"SECKILL_PG_DSN=postgres://seckill:seckill@127.0.0.1:55432/seckill?sslmode=disable",
		"SECKILL_REDIS_ADDR=127.0.0.1:56379",
		"SECKILL_ROCKETMQ_ENDPOINT=127.0.0.1:8181",
		"SECKILL_ROCKETMQ_NAMESRV=127.0.0.1:9976",
		"SECKILL_ROCKETMQ_BROKER=127.0.0.1:10951",
		"SECKILL_ROCKETMQ_METRICS_URL=http://127.0.0.1:5558/metrics,http://127.0.0.1:5559/metrics",
		"SECKILL_TOPIC_PREFIX=",
		"SECKILL_STACK_DIR=/home/u/.cache/seckill/stack",
		"SECKILL_INVISIBLE_DURATION=10s",
		"SECKILL_REDIS_CLUSTER_ADDRS=127.0.0.1:57001,127.0.0.1:57002,127.0.0.1:57003",
		"SECKILL_LOCAL_STACK=true",
		"SECKILL_ROCKETMQ_BROKERS=127.0.0.1:10951,127.0.0.1:10961",
		"SECKILL_ROCKETMQ_CLUSTER_DIR=/home/u/.cache/seckill/stack/rocketmq-cluster",
		"SECKILL_STACK_ROCKETMQ_CLUSTER=1",
	}, "\n")
	if got := strings.Join(lines, "\n"); got != want {
		t.Fatalf("cluster exports:\n%s\nwant:\n%s", got, want)
	}

	cfg, err = ConfigFromEnv(env(map[string]string{"HOME": "/h",
		"SECKILL_CLUSTER_BROKER_A_METRICS_PORT": "45558", "SECKILL_CLUSTER_BROKER_B_METRICS_PORT": "45559"}), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range cfg.ClusterExports() {
		if e.Name == "SECKILL_ROCKETMQ_METRICS_URL" && e.Value != "http://127.0.0.1:45558/metrics,http://127.0.0.1:45559/metrics" {
			t.Fatalf("SECKILL_ROCKETMQ_METRICS_URL=%s with the exporter ports moved", e.Value)
		}
	}
}
