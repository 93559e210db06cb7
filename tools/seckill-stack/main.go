// Command seckill-stack runs the local development stack of the seckill
// service (package deploy/devstack): a private PostgreSQL, Redis, Redis
// Cluster and RocketMQ 5 on 127.0.0.1 with all state in one directory.
//
//	seckill-stack up [--quiet]    start what is not running, apply the topology, print exports
//	seckill-stack env             the export lines of a running stack (exit 1 if not healthy)
//	seckill-stack status          one line per component (exit 1 if anything is not healthy)
//	seckill-stack down [--purge] [postgres|redis|redis-cluster|rocketmq]...
//	seckill-stack mqadmin ARGS    RocketMQ's mqadmin against the local name server
//
// With --rocketmq-cluster (or SECKILL_STACK_ROCKETMQ_CLUSTER=1) up, env and
// status also cover the RocketMQ cluster mode (a name server, broker-a,
// broker-b and a CLUSTER-mode proxy in <state>/rocketmq-cluster) and the
// RocketMQ export lines point at it; down --rocketmq-cluster stops only it.
//
// `up` prints only `export ...` lines on stdout; progress goes to stderr.
// deploy/local/stack.sh installs the packages and the RocketMQ jars this
// command needs, builds it and runs it with the same arguments;
// docs/local-stack.md describes the stack.
package main

import (
	"os"

	"github.com/seckill-dev/seckill/bootstrap/clikit"
)

func main() {
	clikit.Main("seckill-stack", newCLI(os.Stdout, os.Stderr, os.Getenv).execute)
}
