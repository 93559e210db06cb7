package kafka

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
)

// The dev stack's Kafka: one KRaft node (broker and controller in one
// JVM) on loopback, its client port the default of SECKILL_KAFKA_BROKERS.
const (
	devVersion        = "4.4.0"
	devClientPort     = 59092
	devControllerPort = 59093
	// devNodeClusterID is the single node's cluster id, fixed so that a
	// second format never runs against other data (a KRaft directory
	// formatted once keeps its id; formatting it again fails).
	devNodeClusterID = "c2Vja2lsbC1rYWZrYS0xAA"
)

// DevStack describes the dev stack's Kafka: Apache Kafka from Maven
// Central (the broker is the kafka_2.13 artifact; it ships no logging
// binding, so log4j-slf4j-impl is added), its storage formatted once
// (kafka.tools.StorageTool format --standalone), then kafka.Kafka with
// a 512 MiB heap. It is ready when both listeners accept connections.
func (Plug) DevStack() []brokerplug.DevProcess {
	props := strings.NewReplacer("{{client}}", strconv.Itoa(devClientPort),
		"{{controller}}", strconv.Itoa(devControllerPort)).Replace(devServerProperties)
	p := devNode("kafka", props, []int{devClientPort, devControllerPort})
	p.Setup.Args = append(p.Setup.Args, "--standalone")
	p.Env = []string{"SECKILL_KAFKA_BROKERS=127.0.0.1:" + strconv.Itoa(devClientPort)}
	return []brokerplug.DevProcess{p}
}

// The cluster mode's nodes: node i (1..3) listens for clients on
// devClusterClientPort + 100*i and for its controller quorum on the next
// port. The ports lie below Linux's ephemeral range (32768 and up) and
// below the 20000-31999 the stack's tests pick from: the cluster starts
// while other tests hold thousands of client connections, one of which
// could otherwise sit on a node's port.
const (
	devClusterNodes      = 3
	devClusterClientPort = 19092
	// devClusterID is the cluster mode's cluster id, fixed as the single
	// node's is.
	devClusterID = "c2Vja2lsbC1rYWZrYS0zAA"
)

// DevCluster describes the cluster mode's Kafka: three KRaft nodes, each
// broker and controller, of one cluster with a static controller quorum
// (a majority, two nodes, keeps it running). Topics the plug creates get
// three replicas and need two in sync (SECKILL_KAFKA_REPLICATION=3 in the
// exports, min.insync.replicas=2), so a confirmed send survives the loss
// of any one node, and the cluster keeps taking sends with one node down.
func (Plug) DevCluster() []brokerplug.DevProcess {
	var voters, seeds []string
	for i := 1; i <= devClusterNodes; i++ {
		client := devClusterClientPort + 100*i
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i, client+1))
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", client))
	}
	var out []brokerplug.DevProcess
	for i := 1; i <= devClusterNodes; i++ {
		client := devClusterClientPort + 100*i
		props := strings.NewReplacer("{{node}}", strconv.Itoa(i), "{{client}}", strconv.Itoa(client),
			"{{controller}}", strconv.Itoa(client+1), "{{voters}}", strings.Join(voters, ",")).Replace(devClusterProperties)
		p := devNode(fmt.Sprintf("kafka-n%d", i), props, []int{client, client + 1})
		p.Setup.Args[2] = devClusterID
		// The last node to stop has lost its quorum and cannot finish a
		// controlled shutdown: it is killed after 20 s, and its log is
		// recovered at its next start.
		p.StopTimeout = 20 * time.Second
		if i == 1 {
			p.Env = []string{"SECKILL_KAFKA_BROKERS=" + strings.Join(seeds, ","), "SECKILL_KAFKA_REPLICATION=3"}
		}
		out = append(out, p)
	}
	return out
}

// devNode is one Kafka node of name configured by props, its storage
// formatted once (with the single node's cluster id; the cluster mode
// sets its own), listening on ports.
func devNode(name, props string, ports []int) brokerplug.DevProcess {
	dir := brokerplug.DirPlaceholder
	return brokerplug.DevProcess{
		Name:  name,
		Maven: []string{"org.apache.kafka:kafka_2.13:" + devVersion, "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5"},
		Main:  "kafka.Kafka",
		JVMOptions: []string{"-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
			"-Djava.awt.headless=true", "-Dlog4j2.shutdownHookEnabled=false",
			"-Dlog4j2.configurationFile=" + dir + "/log4j2.properties"},
		Args:  []string{dir + "/server.properties"},
		Files: []brokerplug.DevFile{{Name: "server.properties", Content: props}, {Name: "log4j2.properties", Content: devLog4j}},
		Setup: &brokerplug.DevSetup{Main: "kafka.tools.StorageTool",
			Args:    []string{"format", "-t", devNodeClusterID, "-c", dir + "/server.properties"},
			Creates: dir + "/data/meta.properties"},
		Ports:        ports,
		StartTimeout: 60 * time.Second,
	}
}

// devClusterProperties is a cluster node's configuration ({{node}},
// {{client}}, {{controller}} and {{voters}} filled in per node): three
// replicas and two in sync for every topic, the internal ones included;
// a replica that stops fetching leaves the in-sync set after 5 s (not the
// default 30 s), so sends go on soon after a node is lost.
const devClusterProperties = `# Written by the local stack on every start.
process.roles=broker,controller
node.id={{node}}
listeners=PLAINTEXT://127.0.0.1:{{client}},CONTROLLER://127.0.0.1:{{controller}}
advertised.listeners=PLAINTEXT://127.0.0.1:{{client}}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
controller.quorum.voters={{voters}}
log.dirs={{dir}}/data
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
replica.lag.time.max.ms=5000
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
log.cleaner.dedupe.buffer.size=8388608
`

// devServerProperties is the node's configuration: a single node, so
// every internal topic has one replica; no topic is created implicitly
// (the plug creates its own); the log cleaner's buffer is small, so the
// heap stays small.
const devServerProperties = `# Written by the local stack on every start.
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:{{client}},CONTROLLER://127.0.0.1:{{controller}}
advertised.listeners=PLAINTEXT://127.0.0.1:{{client}}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
controller.quorum.bootstrap.servers=127.0.0.1:{{controller}}
log.dirs={{dir}}/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
log.cleaner.dedupe.buffer.size=8388608
`

// devLog4j sends the broker's log to <dir>/logs/server.log, and its
// errors also to standard output, whose end the stack shows when a node
// exits during its start (the reason it gave up).
const devLog4j = `name=seckill-kafka
status=warn
appender.console.type=Console
appender.console.name=STDOUT
appender.console.layout.type=PatternLayout
appender.console.layout.pattern=[%d] %p %m (%c)%n
appender.console.filter.threshold.type=ThresholdFilter
appender.console.filter.threshold.level=ERROR
appender.file.type=File
appender.file.name=FILE
appender.file.fileName={{dir}}/logs/server.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=INFO
rootLogger.appenderRef.file.ref=FILE
rootLogger.appenderRef.console.ref=STDOUT
logger.kafka-request.name=kafka.request.logger
logger.kafka-request.level=WARN
logger.state-change.name=state.change.logger
logger.state-change.level=WARN
`
