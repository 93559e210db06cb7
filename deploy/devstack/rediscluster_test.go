package devstack

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeClusterPort returns a free port P in 31000-31999 whose cluster bus
// port P-10000 is free too, both never handed out before in this process.
func freeClusterPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		port := 31000 + rand.IntN(1000)
		if handedOut.claim(port, port-10000) {
			return port
		}
	}
	t.Fatal("no free cluster port pair in 31000-31999 after 100 tries")
	return 0
}

// TestRedisClusterUpRestartPurge runs the stack's Redis Cluster on private
// ports: created by the first Up, adopted by the second, a killed node
// restarted and rejoined without a new create, `down --purge redis-c2`
// taking the whole group, and a fresh create after the purge.
func TestRedisClusterUpRestartPurge(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cfg := privateConfig(t)
	log := testLogger(t)
	nodes := NewRedisClusterNodes(cfg, log)
	cluster := NewRedisCluster(cfg, log, nodes)
	var comps []Component
	for _, n := range nodes {
		comps = append(comps, n)
		stopOnCleanup(t, n)
	}
	comps = append(comps, cluster)
	s, err := New(cfg, log, comps, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Healthy(ctx); err == nil {
		t.Fatal("cluster healthy before Up")
	}
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	createOut := filepath.Join(cfg.LogDir(), "redis-cluster.out")
	if !fileContains(createOut, "[OK] All 16384 slots covered") {
		t.Fatalf("redis-cli --cluster create output:\n%s", tailFile(createOut, 20))
	}
	for i, n := range nodes {
		port := cfg.RedisClusterPorts[i]
		if n.Name() != fmt.Sprintf("redis-c%d", i+1) || n.Group() != RedisClusterGroup {
			t.Fatalf("node %d: %s in group %s", i, n.Name(), n.Group())
		}
		if cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", n.PID())); cwd != filepath.Join(cfg.RedisClusterDir(), strconv.Itoa(port)) {
			t.Fatalf("%s runs in %s", n.Name(), cwd)
		}
		if listenerPID(port-10000) != n.PID() {
			t.Fatalf("%s: bus port %d not served by pid %d", n.Name(), port-10000, n.PID())
		}
		info, err := clusterInfo(ctx, n)
		if err != nil || info["cluster_size"] != "3" {
			t.Fatalf("%s: CLUSTER INFO %v, %v", n.Name(), info, err)
		}
	}
	var out bytes.Buffer
	if err := s.Env(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if want := "export SECKILL_REDIS_CLUSTER_ADDRS='" + cfg.RedisClusterAddrs() + "'\n"; !strings.Contains(out.String(), want) {
		t.Fatalf("env lacks %q:\n%s", want, out.String())
	}

	// The second Up adopts everything and does not create again.
	first := pids(comps)
	created, err := os.Stat(createOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if again := pids(comps); !maps.Equal(again, first) {
		t.Fatalf("second Up changed the pids: %v, then %v", first, again)
	}
	if st, _ := os.Stat(createOut); !st.ModTime().Equal(created.ModTime()) {
		t.Fatal("second Up ran redis-cli --cluster create again")
	}

	// A killed node is restarted and rejoins from its nodes.conf.
	killed := nodes[1].PID()
	if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitGone(ctx, killed, 5*time.Second) {
		t.Fatalf("killed node %d still alive", killed)
	}
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if pid := nodes[1].PID(); pid == 0 || pid == killed || nodes[0].PID() != first["redis-c1"] || nodes[2].PID() != first["redis-c3"] {
		t.Fatalf("after Up: pids %v (killed %d)", pids(comps), killed)
	}
	if err := cluster.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(createOut); !st.ModTime().Equal(created.ModTime()) {
		t.Fatal("Up after a node restart ran redis-cli --cluster create again")
	}
	out.Reset()
	if err := s.Status(ctx, &out); err != nil {
		t.Fatalf("Status: %v\n%s", err, out.String())
	}
	ports := fmt.Sprintf("%d,%d,%d", cfg.RedisClusterPorts[0], cfg.RedisClusterPorts[1], cfg.RedisClusterPorts[2])
	if !strings.Contains(out.String(), fmt.Sprintf("%-13s %-8s %-38s %-8s", "redis-cluster", "-", ports, "yes")) {
		t.Fatalf("status:\n%s", out.String())
	}

	// down --purge redis-c2 takes the whole group: all nodes stopped, their data gone.
	if err := s.Down(ctx, true, []string{"redis-c2"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.PID() != 0 {
			t.Fatalf("%s still running after down", n.Name())
		}
	}
	if _, err := os.Stat(cfg.RedisClusterDir()); !os.IsNotExist(err) {
		t.Fatalf("cluster dir after purge: %v", err)
	}
	// A fresh Up creates a new cluster.
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Down(ctx, false, nil); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(nodes, func(n *Redis) bool { return n.PID() != 0 }) {
		t.Fatal("a node survived down")
	}
}
