package benchenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/deploy/devstack"
)

// BrokerProcesses are the local stack's processes that run broker for
// settings s, its main process first (devstack.BrokerProcesses, in the
// mode the stack's exports in this process's environment chose: a plug's
// cluster mode, the RocketMQ cluster mode or the default stack).
func BrokerProcesses(broker string, s brokerplug.Settings) []devstack.BrokerProcess {
	return devstack.BrokerProcesses(os.Getenv, os.Getenv("SECKILL_STACK_DIR"), broker, s)
}

// stackProcesses names the broker's processes of the local stack whose
// CPU `bench sale` samples: display name and the absolute path of the pid
// file; an empty path is a process not sampled (reported missing).
func stackProcesses(broker string, s brokerplug.Settings) [][2]string {
	var out [][2]string
	for _, p := range BrokerProcesses(broker, s) {
		out = append(out, [2]string{p.Name, p.PIDFile})
	}
	return out
}

// BrokerStackProcess is the process that scenario target "broker" faults:
// the broker's main stack process (RocketMQ's proxy with its embedded
// broker, the RabbitMQ node, a plug's main process, the first node of a
// plug's cluster mode), as its component name and its pid file.
func BrokerStackProcess(broker string, s brokerplug.Settings) (component, pidFile string, err error) {
	procs := BrokerProcesses(broker, s)
	if len(procs) == 0 || procs[0].PIDFile == "" {
		return "", "", fmt.Errorf("broker %s has no process of the local stack to fault", broker)
	}
	return procs[0].Component, procs[0].PIDFile, nil
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
