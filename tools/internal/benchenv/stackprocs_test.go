package benchenv

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/seckill-dev/seckill/adapters/kafka"
)

// TestRocketMQStackProcesses: without SECKILL_ROCKETMQ_CLUSTER_DIR the
// processes are the default stack's pid file names; with it, the cluster's
// four pid files by absolute path.
func TestRocketMQStackProcesses(t *testing.T) {
	t.Setenv("SECKILL_STACK_DIR", t.TempDir())
	t.Setenv("SECKILL_ROCKETMQ_CLUSTER_DIR", "")
	if got := rocketMQStackProcesses(); !slices.Equal(got, [][2]string{{"broker proxy", "proxy"}, {"broker", "broker"}, {"namesrv", "namesrv"}}) {
		t.Fatalf("default stack: %v", got)
	}
	dir := t.TempDir()
	t.Setenv("SECKILL_ROCKETMQ_CLUSTER_DIR", dir)
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(os.Getpid())
	for _, name := range []string{"proxy", "broker-a", "broker-b"} { // namesrv.pid missing
		if err := os.WriteFile(filepath.Join(dir, "run", name+".pid"), []byte(pid+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := rocketMQStackProcesses()
	want := [][2]string{{"broker proxy", filepath.Join(dir, "run", "proxy.pid")}, {"broker-a", filepath.Join(dir, "run", "broker-a.pid")},
		{"broker-b", filepath.Join(dir, "run", "broker-b.pid")}, {"namesrv", filepath.Join(dir, "run", "namesrv.pid")}}
	if !slices.Equal(got, want) {
		t.Fatalf("cluster mode: %v, want %v", got, want)
	}
}

// TestListensOn: the check that the stack's RabbitMQ node is the one in
// use finds this process's own listener by port, and only that port.
func TestListensOn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	port := ln.Addr().(*net.TCPAddr).Port
	if !listensOn(os.Getpid(), strconv.Itoa(port)) {
		t.Errorf("listensOn(self, %d) = false", port)
	}
	if listensOn(os.Getpid(), strconv.Itoa(port+1)) || listensOn(os.Getpid(), "x") {
		t.Errorf("listensOn found a port this process does not listen on")
	}
}

// TestPluggedClusterProcesses: with SECKILL_STACK_BROKER_CLUSTER naming
// the Kafka plug, the broker's processes are its cluster mode's three
// nodes by absolute pid file path, and scenario target "broker" faults
// the first node; without it, the single node of the default stack.
func TestPluggedClusterProcesses(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SECKILL_STACK_DIR", dir)
	t.Setenv("SECKILL_STACK_BROKER_CLUSTER", "")
	name, file, err := BrokerStackProcess(kafka.PlugName, nil)
	if err != nil || name != "kafka" || file != filepath.Join(dir, "run", "kafka.pid") {
		t.Fatalf("default stack: %q %q %v", name, file, err)
	}
	t.Setenv("SECKILL_STACK_BROKER_CLUSTER", kafka.PlugName)
	run := filepath.Join(dir, "kafka-cluster", "run")
	want := [][2]string{{"kafka-n1", filepath.Join(run, "kafka-n1.pid")}, {"kafka-n2", filepath.Join(run, "kafka-n2.pid")},
		{"kafka-n3", filepath.Join(run, "kafka-n3.pid")}}
	if got := stackProcesses(kafka.PlugName, nil); !slices.Equal(got, want) {
		t.Fatalf("cluster mode: %v, want %v", got, want)
	}
	if name, file, err = BrokerStackProcess(kafka.PlugName, nil); err != nil || name != "kafka-n1" || file != want[0][1] {
		t.Fatalf("cluster mode: faults %q %q %v, want kafka-n1", name, file, err)
	}
}
