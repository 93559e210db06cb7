package devstack

import (
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigFromEnvDefaults(t *testing.T) {
	cfg, err := ConfigFromEnv(env(map[string]string{"HOME": "/home/u"}), "/repo")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StateDir != "/home/u/.cache/seckill/stack" || cfg.CacheDir != "/home/u/.cache/seckill" {
		t.Fatalf("dirs %s %s", cfg.StateDir, cfg.CacheDir)
	}
	got := []int{cfg.PGPort, cfg.RedisPort, cfg.NamesrvPort, cfg.ProxyPort, cfg.RemotingPort, cfg.BrokerPort, cfg.BrokerMetricsPort}
	want := []int{55432, 56379, 9876, 8081, 8080, 10911, 5557}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ports %v, want %v", got, want)
		}
	}
	if cfg.PGSocketDir() != "/home/u/.cache/seckill/stack/pg/run" || cfg.RunDir() != "/home/u/.cache/seckill/stack/run" {
		t.Fatalf("paths %s %s", cfg.PGSocketDir(), cfg.RunDir())
	}
	var lines []string
	for _, e := range cfg.Exports() {
		lines = append(lines, e.Name+"="+e.Value)
	}
	wantExports := strings.Join([]string{
		"SECKILL_PG_DSN=postgres://seckill:seckill@127.0.0.1:55432/seckill?sslmode=disable",
		"SECKILL_REDIS_ADDR=127.0.0.1:56379",
		"SECKILL_ROCKETMQ_ENDPOINT=127.0.0.1:8081",
		"SECKILL_ROCKETMQ_NAMESRV=127.0.0.1:9876",
		"SECKILL_ROCKETMQ_BROKER=127.0.0.1:10911",
		"SECKILL_ROCKETMQ_METRICS_URL=http://127.0.0.1:5557/metrics",
		"SECKILL_TOPIC_PREFIX=",
		"SECKILL_STACK_DIR=/home/u/.cache/seckill/stack",
		"SECKILL_INVISIBLE_DURATION=10s",
		"SECKILL_REDIS_CLUSTER_ADDRS=127.0.0.1:57001,127.0.0.1:57002,127.0.0.1:57003",
		"SECKILL_LOCAL_STACK=true",
	}, "\n")
	if strings.Join(lines, "\n") != wantExports {
		t.Fatalf("exports:\n%s\nwant:\n%s", strings.Join(lines, "\n"), wantExports)
	}
}

func TestConfigFromEnvOverrides(t *testing.T) {
	long := "/tmp/" + strings.Repeat("x", 100)
	cfg, err := ConfigFromEnv(env(map[string]string{
		"HOME": "/home/u", "XDG_CACHE_HOME": "/xdg", "SECKILL_STACK_DIR": long, "SECKILL_PG_PORT": "55433",
		"SECKILL_BROKER_PORT": "10921", "SECKILL_TOPOLOGY_ARGS": "--queues 4  --retry-max A=5", "SECKILL_EXTRA_GROUPS": "x",
		"SECKILL_PROXY_JAVA_OPTS": "-Xmx2g",
	}), "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CacheDir != "/xdg/seckill" || cfg.PGPort != 55433 || cfg.BrokerPort != 10921 {
		t.Fatalf("%+v", cfg)
	}
	if strings.Join(cfg.TopologyArgs, "|") != "--queues|4|--retry-max|A=5" || strings.Join(cfg.ProxyJavaOpts, "|") != "-Xmx2g" {
		t.Fatalf("args %q %q", cfg.TopologyArgs, cfg.ProxyJavaOpts)
	}
	if len(cfg.Deprecated) != 1 || cfg.Deprecated[0] != "SECKILL_EXTRA_GROUPS" {
		t.Fatalf("deprecated %v", cfg.Deprecated)
	}
	if dir := cfg.PGSocketDir(); !strings.HasPrefix(dir, "/tmp/seckill-pg-") || len(dir) > 40 {
		t.Fatalf("socket dir for a long state dir: %s", dir)
	}
	if _, err := ConfigFromEnv(env(map[string]string{"HOME": "/h", "SECKILL_REDIS_PORT": "x"}), ""); err == nil {
		t.Fatal("a bad port was accepted")
	}
	cfg, err = ConfigFromEnv(env(map[string]string{"HOME": "/h", "SECKILL_REDIS_CLUSTER_PORTS": "47001, 47002 47003,47004"}), "")
	if err != nil || cfg.RedisClusterAddrs() != "127.0.0.1:47001,127.0.0.1:47002,127.0.0.1:47003,127.0.0.1:47004" {
		t.Fatalf("cluster ports: %v, %v", cfg.RedisClusterPorts, err)
	}
	for _, bad := range []string{"57001 57002", "57001 57001 57002", "9000 57001 57002", "a b c"} {
		if _, err := ConfigFromEnv(env(map[string]string{"HOME": "/h", "SECKILL_REDIS_CLUSTER_PORTS": bad}), ""); err == nil {
			t.Fatalf("SECKILL_REDIS_CLUSTER_PORTS=%q was accepted", bad)
		}
	}
}

func TestConfigFromEnvFailoverModes(t *testing.T) {
	cfg, err := ConfigFromEnv(env(map[string]string{"HOME": "/home/u", "SECKILL_STACK_PG_STANDBY": "sync",
		"SECKILL_STACK_REDIS_REPLICAS": "1"}), "/repo")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PGStandby != "sync" || cfg.PGStandbyPort != 55433 {
		t.Fatalf("standby %q on %d", cfg.PGStandby, cfg.PGStandbyPort)
	}
	if got := cfg.PGDSN(); got != "postgres://seckill:seckill@127.0.0.1:55432,127.0.0.1:55433/seckill?sslmode=disable&target_session_attrs=read-write" {
		t.Fatalf("DSN %s", got)
	}
	if got := cfg.RedisClusterReplicaPorts; len(got) != 3 || got[0] != 57004 || got[2] != 57006 {
		t.Fatalf("replica ports %v", got)
	}
	for _, bad := range []map[string]string{{"SECKILL_STACK_PG_STANDBY": "yes"}, {"SECKILL_STACK_REDIS_REPLICAS": "2"},
		{"SECKILL_STACK_REDIS_REPLICAS": "1", "SECKILL_REDIS_CLUSTER_REPLICA_PORTS": "57004,57005"}} {
		bad["HOME"] = "/home/u"
		if _, err := ConfigFromEnv(env(bad), "/repo"); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
