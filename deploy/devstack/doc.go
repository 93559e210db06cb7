// Package devstack runs the local development stack of the seckill service:
// private PostgreSQL, Redis, Redis Cluster (three masters) and RocketMQ 5
// processes (a name server and a proxy with the broker embedded) on 127.0.0.1, with all their state in one
// directory outside the repository. The seckill-stack command
// (tools/seckill-stack) is its command line, and
// deploy/local/stack.sh installs the packages and jars it needs and then
// runs that command.
//
// A Component is one supervised process: it has a name, its own pid file
// under <state>/run and its own data directory, and it can be started,
// probed for health and stopped. A Stack brings its components up in
// dependency order (components whose dependencies are healthy start
// concurrently), adopts a process that already runs and is ours instead of
// starting a second one, then ensures its Resources (for RocketMQ: the
// broker registered with the name server and the topics and groups of
// `seckill topology apply`). Down stops components in reverse dependency
// order and may purge their data.
// RocketMQClusterStack is a second stack, started on request in
// <state>/rocketmq-cluster: a name server, two standalone brokers and a
// proxy in CLUSTER mode.
//
// The rule that protects other processes on the machine: a process is
// signaled only when it is the one recorded in our pid file (or found
// listening on our port) and it is ours, meaning /proc/<pid>/cwd is the
// component's directory and /proc/<pid>/cmdline contains the component's
// program. Nothing is ever looked up or killed by name.
//
// To add a component (for example a RabbitMQ server or the nodes of a Redis
// Cluster), write a type that implements Component, usually by embedding
// Process for the pid file, ownership and stop logic, add it to the list
// that Default returns, add its exports to Stack.Exports and its
// SECKILL_*_PORT overrides to ConfigFromEnv; docs/local-stack.md walks
// through it.
package devstack
