package devstack

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/seckill-dev/seckill/adapters/kafka"
	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
)

// TestBrokerProcessesRocketMQ: the default stack's proxy, broker and name
// server by their pid files under <state>/run; with
// SECKILL_ROCKETMQ_CLUSTER_DIR, the cluster mode's four processes under
// its run/.
func TestBrokerProcessesRocketMQ(t *testing.T) {
	state, cluster := t.TempDir(), t.TempDir()
	got := BrokerProcesses(env(nil), state, rocketmq.PlugName, nil)
	run := filepath.Join(state, "run")
	want := []BrokerProcess{{"broker proxy", "proxy", filepath.Join(run, "proxy.pid")}, {"broker", "broker", filepath.Join(run, "broker.pid")},
		{"namesrv", "namesrv", filepath.Join(run, "namesrv.pid")}}
	if !slices.Equal(got, want) {
		t.Fatalf("default stack: %v, want %v", got, want)
	}
	got = BrokerProcesses(env(map[string]string{"SECKILL_ROCKETMQ_CLUSTER_DIR": cluster}), state, rocketmq.PlugName, nil)
	run = filepath.Join(cluster, "run")
	want = []BrokerProcess{{"broker proxy", "proxy", filepath.Join(run, "proxy.pid")}, {"broker-a", "broker-a", filepath.Join(run, "broker-a.pid")},
		{"broker-b", "broker-b", filepath.Join(run, "broker-b.pid")}, {"namesrv", "namesrv", filepath.Join(run, "namesrv.pid")}}
	if !slices.Equal(got, want) {
		t.Fatalf("cluster mode: %v, want %v", got, want)
	}
}

// TestBrokerProcessesPlugged: a plug's processes are those it describes
// for the stack, or its cluster mode's nodes when
// SECKILL_STACK_BROKER_CLUSTER names it.
func TestBrokerProcessesPlugged(t *testing.T) {
	state := t.TempDir()
	got := BrokerProcesses(env(nil), state, kafka.PlugName, nil)
	if want := []BrokerProcess{{"kafka", "kafka", filepath.Join(state, "run", "kafka.pid")}}; !slices.Equal(got, want) {
		t.Fatalf("default stack: %v, want %v", got, want)
	}
	got = BrokerProcesses(env(map[string]string{"SECKILL_STACK_BROKER_CLUSTER": kafka.PlugName}), state, kafka.PlugName, nil)
	run := filepath.Join(state, "kafka-cluster", "run")
	want := []BrokerProcess{{"kafka-n1", "kafka-n1", filepath.Join(run, "kafka-n1.pid")}, {"kafka-n2", "kafka-n2", filepath.Join(run, "kafka-n2.pid")},
		{"kafka-n3", "kafka-n3", filepath.Join(run, "kafka-n3.pid")}}
	if !slices.Equal(got, want) {
		t.Fatalf("cluster mode: %v, want %v", got, want)
	}
}

// TestBrokerProcessesRabbitMQ: the stack's node is metered only when it
// listens on the port of the settings' URL (this process stands in for
// the node, listening on a port of its own).
func TestBrokerProcessesRabbitMQ(t *testing.T) {
	state := t.TempDir()
	run := filepath.Join(state, "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "rabbitmq.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	port := ln.Addr().(*net.TCPAddr).Port
	ours := rabbitmq.Settings{URL: "amqp://guest:guest@127.0.0.1:" + strconv.Itoa(port) + "/"}
	got := BrokerProcesses(env(nil), state, rabbitmq.PlugName, ours)
	if want := []BrokerProcess{{"rabbitmq", "rabbitmq", filepath.Join(run, "rabbitmq.pid")}}; !slices.Equal(got, want) {
		t.Fatalf("the stack's node: %v, want %v", got, want)
	}
	elsewhere := rabbitmq.Settings{URL: "amqp://guest:guest@127.0.0.1:" + strconv.Itoa(port+1) + "/"}
	if got := BrokerProcesses(env(nil), state, rabbitmq.PlugName, elsewhere); len(got) != 1 || got[0].PIDFile != "" {
		t.Fatalf("a node elsewhere: %v, want one process without a pid file", got)
	}
}

// TestListensOn: the check finds this process's own listener by port,
// and only that port.
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
