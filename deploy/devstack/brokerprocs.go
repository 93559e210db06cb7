package devstack

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/brokers"
	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
)

// BrokerProcess is a process of the local stack that runs (part of) a
// broker, as the tools that meter or fault the stack see it.
type BrokerProcess struct {
	// Name is the process's name in reports ("broker proxy", "kafka-n1").
	Name string
	// Component is the stack's name of the process, the X of the chaos
	// scenarios kill-X and pause-X ("proxy", "kafka-n1").
	Component string
	// PIDFile is the absolute path of its pid file; empty for a process
	// the stack does not run for these settings (reported, not metered).
	PIDFile string
}

// BrokerProcesses returns the processes of the local stack in stateDir
// that run broker for settings s, the broker's main process first (the
// one a fault of "the broker" stops). getenv tells which mode the stack's
// exports chose: SECKILL_STACK_BROKER_CLUSTER naming a plug selects its
// cluster mode's nodes (brokerplug.Plug.DevCluster, in
// <state>/<broker>-cluster), SECKILL_ROCKETMQ_CLUSTER_DIR the RocketMQ
// cluster mode's processes. Otherwise they are the processes a plug
// describes for the stack (brokerplug.Plug.DevStack), or the stack's own
// components of RocketMQ (the proxy, whose process also runs the
// embedded broker, the broker and the name server) and RabbitMQ (its node,
// only when it is the node s points at: a node elsewhere would be charged
// the stack's idle one). A broker the stack does not run gets one process
// without a pid file.
func BrokerProcesses(getenv func(string) string, stateDir, broker string, s brokerplug.Settings) []BrokerProcess {
	run := absRun(stateDir)
	plug, err := brokers.Lookup(broker)
	switch {
	case err == nil && len(plug.DevCluster()) > 0 && getenv("SECKILL_STACK_BROKER_CLUSTER") == broker:
		return devProcesses(plug.DevCluster(), absRun(filepath.Join(stateDir, broker+"-cluster")))
	case err == nil && len(plug.DevStack()) > 0:
		return devProcesses(plug.DevStack(), run)
	case broker == rocketmq.PlugName:
		return rocketMQProcesses(getenv, run)
	case broker == rabbitmq.PlugName:
		return rabbitMQProcesses(run, s)
	}
	return []BrokerProcess{{Name: broker + " (not a process of the local stack)"}}
}

// absRun is dir's run/ directory (pid files), absolute when it can be.
func absRun(dir string) string {
	run := filepath.Join(dir, "run")
	if abs, err := filepath.Abs(run); err == nil {
		return abs
	}
	return run
}

// devProcesses are the processes of a plug's DevProcess list, their pid
// files in run.
func devProcesses(specs []brokerplug.DevProcess, run string) []BrokerProcess {
	out := make([]BrokerProcess, len(specs))
	for i, p := range specs {
		out[i] = BrokerProcess{Name: p.Name, Component: p.Name, PIDFile: filepath.Join(run, p.Name+".pid")}
	}
	return out
}

// rocketMQProcesses are the stack's RocketMQ processes, or those of its
// RocketMQ cluster mode when SECKILL_ROCKETMQ_CLUSTER_DIR is set (eval
// "$(deploy/local/stack.sh env --rocketmq-cluster)"): its proxy, broker-a,
// broker-b and name server.
func rocketMQProcesses(getenv func(string) string, run string) []BrokerProcess {
	names := [][2]string{{"broker proxy", "proxy"}, {"broker", "broker"}, {"namesrv", "namesrv"}}
	if dir := getenv("SECKILL_ROCKETMQ_CLUSTER_DIR"); dir != "" {
		run = absRun(dir)
		names = [][2]string{{"broker proxy", "proxy"}, {"broker-a", "broker-a"}, {"broker-b", "broker-b"}, {"namesrv", "namesrv"}}
	}
	out := make([]BrokerProcess, len(names))
	for i, n := range names {
		out[i] = BrokerProcess{Name: n[0], Component: n[1], PIDFile: filepath.Join(run, n[1]+".pid")}
	}
	return out
}

// rabbitMQProcesses is the stack's RabbitMQ node when it listens on the
// port of the settings' URL.
func rabbitMQProcesses(run string, s brokerplug.Settings) []BrokerProcess {
	node := BrokerProcess{Name: "rabbitmq", Component: "rabbitmq", PIDFile: filepath.Join(run, "rabbitmq.pid")}
	pid := readPID(node.PIDFile)
	if pid == 0 {
		return []BrokerProcess{node}
	}
	rs, _ := s.(rabbitmq.Settings)
	u, err := url.Parse(rs.URL)
	if err != nil || !listensOn(pid, u.Port()) {
		return []BrokerProcess{{Name: "rabbitmq (the node of SECKILL_RABBITMQ_URL is not the stack's)", Component: "rabbitmq"}}
	}
	return []BrokerProcess{node}
}

// listensOn reports whether process pid holds a TCP socket listening on
// port (decimal), from /proc/net/tcp{,6} and /proc/<pid>/fd.
func listensOn(pid int, port string) bool {
	p, err := strconv.Atoi(port)
	if err != nil {
		return false
	}
	want := fmt.Sprintf(":%04X", p)
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if l, err := os.Readlink(dir + "/" + fd.Name()); err == nil && inodes[l] {
			return true
		}
	}
	return false
}
