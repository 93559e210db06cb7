package benchenv

import (
	"errors"
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

// stackProcesses names the broker's processes of the local stack whose
// CPU `bench sale` samples: display name, and either a pid file base name
// under $SECKILL_STACK_DIR/run or an absolute pid file path (the RocketMQ
// cluster mode's, under $SECKILL_ROCKETMQ_CLUSTER_DIR/run); an empty one
// is a process not sampled (reported missing).
func stackProcesses(broker string, s brokerplug.Settings) [][2]string {
	if plug, err := brokers.Lookup(broker); err == nil && len(plug.DevStack()) > 0 {
		return pluggedStackProcesses(plug)
	}
	switch broker {
	case rocketmq.PlugName:
		return rocketMQStackProcesses()
	case rabbitmq.PlugName:
		return rabbitMQStackProcesses(s)
	}
	return [][2]string{{broker + " (not a process of the local stack)", ""}}
}

// pluggedStackProcesses names the processes a plug describes for the
// local stack (brokerplug.DevProcess), by their component names. When
// SECKILL_STACK_BROKER_CLUSTER names the plug (the stack's exports of its
// cluster mode, `seckill-stack up --broker-cluster NAME`, set it) they
// are the cluster's nodes instead (brokerplug.Plug.DevCluster), by
// absolute pid file path under $SECKILL_STACK_DIR/<broker>-cluster/run.
func pluggedStackProcesses(plug brokerplug.Plug) [][2]string {
	var out [][2]string
	if nodes := plug.DevCluster(); len(nodes) > 0 && os.Getenv("SECKILL_STACK_BROKER_CLUSTER") == plug.Name() {
		run := filepath.Join(os.Getenv("SECKILL_STACK_DIR"), plug.Name()+"-cluster", "run")
		if abs, err := filepath.Abs(run); err == nil {
			run = abs
		}
		for _, p := range nodes {
			out = append(out, [2]string{p.Name, filepath.Join(run, p.Name+".pid")})
		}
		return out
	}
	for _, p := range plug.DevStack() {
		out = append(out, [2]string{p.Name, p.Name})
	}
	return out
}

// BrokerStackProcess is the process that scenario target "broker" faults:
// the broker's first stack process (RocketMQ's proxy with its embedded
// broker, the RabbitMQ node, a plug's main process, the first node of a
// plug's cluster mode), as a name and its pid file (a stack component's,
// or an absolute path).
func BrokerStackProcess(broker string, s brokerplug.Settings) (name, pidFile string, err error) {
	procs := stackProcesses(broker, s)
	if len(procs) == 0 || procs[0][1] == "" {
		return "", "", fmt.Errorf("broker %s has no process of the local stack to fault", broker)
	}
	if filepath.IsAbs(procs[0][1]) {
		return procs[0][0], procs[0][1], nil
	}
	dir, err := StackDir()
	if err != nil {
		return "", "", err
	}
	return procs[0][1], filepath.Join(dir, "run", procs[0][1]+".pid"), nil
}

// rocketMQStackProcesses names the local stack's RocketMQ processes: the
// proxy (whose process also runs the embedded broker), the broker and the
// name server, by pid file base name under $SECKILL_STACK_DIR/run. When
// SECKILL_ROCKETMQ_CLUSTER_DIR is set (the stack's RocketMQ cluster mode,
// eval "$(deploy/local/stack.sh env --rocketmq-cluster)") they are the
// cluster's: its proxy, broker-a, broker-b and name server, by absolute
// pid file path under $SECKILL_ROCKETMQ_CLUSTER_DIR/run.
func rocketMQStackProcesses() [][2]string {
	if dir := os.Getenv("SECKILL_ROCKETMQ_CLUSTER_DIR"); dir != "" {
		run, err := filepath.Abs(filepath.Join(dir, "run"))
		if err != nil {
			run = filepath.Join(dir, "run")
		}
		return [][2]string{{"broker proxy", filepath.Join(run, "proxy.pid")}, {"broker-a", filepath.Join(run, "broker-a.pid")},
			{"broker-b", filepath.Join(run, "broker-b.pid")}, {"namesrv", filepath.Join(run, "namesrv.pid")}}
	}
	return [][2]string{{"broker proxy", "proxy"}, {"broker", "broker"}, {"namesrv", "namesrv"}}
}

// rabbitMQStackProcesses names the stack's RabbitMQ node only when it is
// the node the settings' URL points at (it listens on the URL's port): a
// node outside the stack would otherwise be charged the stack's idle node.
func rabbitMQStackProcesses(s brokerplug.Settings) [][2]string {
	pid, err := StackPID("rabbitmq")
	if err != nil {
		return [][2]string{{"rabbitmq", "rabbitmq"}}
	}
	rs, _ := s.(rabbitmq.Settings)
	u, err := url.Parse(rs.URL)
	if err != nil || !listensOn(pid, u.Port()) {
		return [][2]string{{"rabbitmq (the node of SECKILL_RABBITMQ_URL is not the stack's)", ""}}
	}
	return [][2]string{{"rabbitmq", "rabbitmq"}}
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

// StackDir is the local stack's state directory.
func StackDir() (string, error) {
	dir := os.Getenv("SECKILL_STACK_DIR")
	if dir == "" {
		return "", errors.New("SECKILL_STACK_DIR is not set: run through `make chaos` or eval \"$(deploy/local/stack.sh env)\"")
	}
	return dir, nil
}

// StackPID reads the pid the local stack recorded for component.
func StackPID(component string) (int, error) {
	dir, err := StackDir()
	if err != nil {
		return 0, err
	}
	pid, err := PIDFromFile(filepath.Join(dir, "run", component+".pid"))
	if err != nil {
		return 0, fmt.Errorf("pid of %s: %w", component, err)
	}
	return pid, nil
}

// PIDFromFile reads the pid a pid file holds.
func PIDFromFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("%s: %q is not a pid", path, b)
	}
	return pid, nil
}
