package devstack

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	// DefaultNamesrvJavaOpts are the name server's heap and GC flags unless
	// SECKILL_NAMESRV_JAVA_OPTS replaces them.
	DefaultNamesrvJavaOpts = "-Xms128m -Xmx256m -XX:MaxDirectMemorySize=128m -XX:+UseSerialGC"
	// DefaultProxyJavaOpts are the proxy's unless SECKILL_PROXY_JAVA_OPTS
	// replaces them.
	DefaultProxyJavaOpts = "-Xms512m -Xmx1g -XX:MaxDirectMemorySize=512m -XX:+UseG1GC"
	// DefaultBrokerJavaOpts are those of each standalone broker of the
	// RocketMQ cluster mode unless SECKILL_BROKER_JAVA_OPTS replaces them.
	DefaultBrokerJavaOpts = "-Xms256m -Xmx512m -XX:MaxDirectMemorySize=1g -XX:+UseG1GC"
	// DefaultClusterProxyJavaOpts are those of the CLUSTER-mode proxy (no
	// broker inside) unless SECKILL_CLUSTER_PROXY_JAVA_OPTS replaces them.
	DefaultClusterProxyJavaOpts = "-Xms256m -Xmx512m -XX:MaxDirectMemorySize=256m -XX:+UseG1GC"
	// DefaultAdminJavaOpts are mqadmin's (fixed).
	DefaultAdminJavaOpts = "-Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
)

// Config is everything the stack needs to know: where its state lives, the
// ports, the programs and the options. ConfigFromEnv fills it the way
// deploy/local/stack.sh always has (SECKILL_* overrides, see
// docs/local-stack.md); tests build one with private ports and a temporary
// state directory. Paths must be absolute.
type Config struct {
	// StateDir holds every file of the stack (the layout is fixed: run/,
	// logs/, pg/, redis/, rocketmq/, bin/ and the marker .seckill-stack).
	StateDir string
	// CacheDir holds what downloads produced: rocketmq/<version>/lib.
	CacheDir string
	// RepoDir is the checkout the seckill binary is built from and whose
	// deploy/local holds the RocketMQ config templates. Empty: the binary in
	// <state>/bin is used as it is and RocketMQ cannot be started.
	RepoDir string

	// PGPort, RedisPort, NamesrvPort, ProxyPort (gRPC), RemotingPort (the
	// proxy's remoting), BrokerPort and BrokerMetricsPort (the broker's
	// Prometheus exporter) are the ports on 127.0.0.1; the broker also uses
	// BrokerPort-2 and BrokerPort+1.
	PGPort, RedisPort, NamesrvPort, ProxyPort, RemotingPort, BrokerPort, BrokerMetricsPort int
	// RedisClusterPorts are the client ports of the Redis Cluster's
	// masters (at least 3); each node's cluster bus listens on its port -
	// 10000 (the default bus port, port + 10000, does not exist above
	// 55535).
	RedisClusterPorts []int
	// RedisClusterReplicaPorts are the client ports of one replica per
	// master of the Redis Cluster, in the masters' order (the replica mode,
	// SECKILL_STACK_REDIS_REPLICAS=1); empty: masters only.
	RedisClusterReplicaPorts []int
	// PGStandby is the PostgreSQL standby mode (SECKILL_STACK_PG_STANDBY):
	// "" none, "sync" a synchronous standby (the primary's commits wait
	// for it), "async" an asynchronous one. PGStandbyPort is its port.
	PGStandby     string
	PGStandbyPort int
	// RabbitMQ is the optional RabbitMQ node's part (rabbitmq.go).
	RabbitMQ RabbitMQConfig
	// StackBrokers are the brokers Up starts besides RocketMQ: the names
	// of SECKILL_STACK_BROKERS (comma-separated; "all" selects every
	// broker plug's processes) and SECKILL_BROKER's (see BrokerSelected).
	StackBrokers []string

	// The RocketMQ cluster mode (RocketMQClusterStack), started on request
	// beside the rest in <state>/rocketmq-cluster: its name server, the
	// CLUSTER-mode proxy's gRPC and remoting ports, and broker-a's and
	// broker-b's listen ports (each also uses port-2 and port+1) and
	// Prometheus exporter ports.
	ClusterNamesrvPort, ClusterProxyPort, ClusterRemotingPort int
	ClusterBrokerPorts, ClusterMetricsPorts                   [2]int
	// BinDir holds the service binary (`seckill topology`); empty:
	// <state>/bin. The cluster's config points at the main state dir's.
	BinDir string

	// TopicPrefix starts every topic and group name (SECKILL_TOPIC_PREFIX).
	TopicPrefix string
	// InvisibleDuration is exported as SECKILL_INVISIBLE_DURATION: 10 s,
	// the service's default. Shorter loses messages to a RocketMQ 5.5.0
	// defect after a consumer dies (docs/local-stack.md, "A consumer that
	// dies can take a message with it").
	InvisibleDuration string
	// TopologyArgs are extra flags of `seckill topology apply|check`.
	TopologyArgs []string
	// Deprecated names the set environment variables that are no longer
	// read; Up warns about each.
	Deprecated []string

	// PGBinDir holds initdb, postgres and pg_ctl; empty: FindPGBinDir.
	PGBinDir string
	// PGOSUser is the OS user PostgreSQL runs as when we are root; empty:
	// postgres if it exists, else seckill-pg (created).
	PGOSUser string
	// Java is the java binary; empty: $JAVA_HOME/bin/java, else PATH.
	Java string
	// RocketMQVersion pins the RocketMQ version; empty: the cache's
	// current-version.
	RocketMQVersion string
	// NamesrvJavaOpts, ProxyJavaOpts replace the heap and GC flags;
	// RMQJavaOpts are appended to every RocketMQ JVM.
	NamesrvJavaOpts, ProxyJavaOpts, RMQJavaOpts []string
	// BrokerJavaOpts and ClusterProxyJavaOpts replace the heap and GC flags
	// of the cluster mode's brokers and proxy.
	BrokerJavaOpts, ClusterProxyJavaOpts []string
}

// ConfigFromEnv returns the Config that getenv (os.Getenv in the command)
// describes, with the defaults of the local stack: state dir
// ${XDG_CACHE_HOME:-$HOME/.cache}/seckill/stack, ports 55432, 56379, 9876,
// 8081, 8080, 10911 and 5557. repoDir is Config.RepoDir. An override that
// is not a port number is an error.
func ConfigFromEnv(getenv func(string) string, repoDir string) (Config, error) {
	cache := getenv("XDG_CACHE_HOME")
	if cache == "" {
		home := getenv("HOME")
		if home == "" {
			return Config{}, errors.New("neither XDG_CACHE_HOME nor HOME is set: cannot place the state dir")
		}
		cache = filepath.Join(home, ".cache")
	}
	c := Config{
		StateDir:          orDefault(getenv("SECKILL_STACK_DIR"), filepath.Join(cache, "seckill", "stack")),
		CacheDir:          orDefault(getenv("SECKILL_CACHE_DIR"), filepath.Join(cache, "seckill")),
		RepoDir:           repoDir,
		TopicPrefix:       getenv("SECKILL_TOPIC_PREFIX"),
		InvisibleDuration: orDefault(getenv("SECKILL_INVISIBLE_DURATION"), "10s"),
		TopologyArgs:      strings.Fields(getenv("SECKILL_TOPOLOGY_ARGS")),
		PGBinDir:          getenv("SECKILL_PG_BINDIR"),
		PGOSUser:          getenv("SECKILL_PG_OS_USER"),
		RocketMQVersion:   getenv("SECKILL_ROCKETMQ_VERSION"),
		NamesrvJavaOpts:   strings.Fields(orDefault(getenv("SECKILL_NAMESRV_JAVA_OPTS"), DefaultNamesrvJavaOpts)),
		ProxyJavaOpts:     strings.Fields(orDefault(getenv("SECKILL_PROXY_JAVA_OPTS"), DefaultProxyJavaOpts)),
		RMQJavaOpts:       strings.Fields(getenv("SECKILL_RMQ_JAVA_OPTS")),
		BrokerJavaOpts:    strings.Fields(orDefault(getenv("SECKILL_BROKER_JAVA_OPTS"), DefaultBrokerJavaOpts)),
		ClusterProxyJavaOpts: strings.Fields(orDefault(getenv("SECKILL_CLUSTER_PROXY_JAVA_OPTS"),
			DefaultClusterProxyJavaOpts)),
	}
	if jh := getenv("JAVA_HOME"); jh != "" {
		c.Java = filepath.Join(jh, "bin", "java")
	}
	ports := []struct {
		dst  *int
		name string
		def  int
	}{
		{&c.PGPort, "SECKILL_PG_PORT", 55432},
		{&c.PGStandbyPort, "SECKILL_PG_STANDBY_PORT", 55433},
		{&c.RedisPort, "SECKILL_REDIS_PORT", 56379},
		{&c.NamesrvPort, "SECKILL_NAMESRV_PORT", 9876},
		{&c.ProxyPort, "SECKILL_PROXY_PORT", 8081},
		{&c.RemotingPort, "SECKILL_PROXY_REMOTING_PORT", 8080},
		{&c.BrokerPort, "SECKILL_BROKER_PORT", 10911},
		{&c.BrokerMetricsPort, "SECKILL_BROKER_METRICS_PORT", 5557},
		{&c.ClusterNamesrvPort, "SECKILL_CLUSTER_NAMESRV_PORT", 9976},
		{&c.ClusterProxyPort, "SECKILL_CLUSTER_PROXY_PORT", 8181},
		{&c.ClusterRemotingPort, "SECKILL_CLUSTER_PROXY_REMOTING_PORT", 8180},
		{&c.ClusterBrokerPorts[0], "SECKILL_CLUSTER_BROKER_A_PORT", 10951},
		{&c.ClusterBrokerPorts[1], "SECKILL_CLUSTER_BROKER_B_PORT", 10961},
		{&c.ClusterMetricsPorts[0], "SECKILL_CLUSTER_BROKER_A_METRICS_PORT", 5558},
		{&c.ClusterMetricsPorts[1], "SECKILL_CLUSTER_BROKER_B_METRICS_PORT", 5559},
	}
	for _, p := range ports {
		*p.dst = p.def
		if v := getenv(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || n > 65535 {
				return Config{}, fmt.Errorf("%s=%q is not a port number", p.name, v)
			}
			*p.dst = n
		}
	}
	c.RedisClusterPorts = []int{57001, 57002, 57003}
	if v := getenv("SECKILL_REDIS_CLUSTER_PORTS"); v != "" {
		ports, err := parseClusterPorts(v)
		if err != nil {
			return Config{}, fmt.Errorf("SECKILL_REDIS_CLUSTER_PORTS=%q: %w", v, err)
		}
		c.RedisClusterPorts = ports
	}
	if err := modesFromEnv(getenv, &c); err != nil {
		return Config{}, err
	}
	c.StackBrokers = stackBrokersFromEnv(getenv)
	if err := rabbitMQFromEnv(getenv, &c); err != nil {
		return Config{}, err
	}
	for _, name := range []string{"SECKILL_TOPIC_QUEUES", "SECKILL_EXTRA_GROUPS"} {
		if getenv(name) != "" {
			c.Deprecated = append(c.Deprecated, name)
		}
	}
	return c, nil
}

// modesFromEnv reads the optional failover modes: a replica per Redis
// Cluster master (SECKILL_STACK_REDIS_REPLICAS=1, on
// SECKILL_REDIS_CLUSTER_REPLICA_PORTS, default 57004,57005,...) and a
// PostgreSQL standby (SECKILL_STACK_PG_STANDBY=sync|async).
//
// A mode not set in the environment is the one the state dir's last Up
// ran with (ModesFile), so `env`, `status` and `down` see the standby and
// the replicas without repeating the variables; "none" (or 0) turns a
// mode off.
func modesFromEnv(getenv func(string) string, c *Config) error {
	saved := readModes(c.ModesFile())
	mode := func(name string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return saved[name]
	}
	switch v := mode("SECKILL_STACK_PG_STANDBY"); v {
	case "", "none":
	case "sync", "async":
		c.PGStandby = v
	default:
		return fmt.Errorf("SECKILL_STACK_PG_STANDBY=%q: want sync, async or none", v)
	}
	switch v := mode("SECKILL_STACK_REDIS_REPLICAS"); v {
	case "", "0", "none":
		return nil
	case "1":
	default:
		return fmt.Errorf("SECKILL_STACK_REDIS_REPLICAS=%q: want 1 (a replica per master) or nothing", v)
	}
	last := slices.Max(c.RedisClusterPorts)
	for i := range c.RedisClusterPorts {
		c.RedisClusterReplicaPorts = append(c.RedisClusterReplicaPorts, last+1+i)
	}
	if v := getenv("SECKILL_REDIS_CLUSTER_REPLICA_PORTS"); v != "" {
		ports, err := parseClusterPorts(v)
		if err != nil || len(ports) != len(c.RedisClusterPorts) {
			return fmt.Errorf("SECKILL_REDIS_CLUSTER_REPLICA_PORTS=%q: want one port per master (%d): %v", v, len(c.RedisClusterPorts), err)
		}
		c.RedisClusterReplicaPorts = ports
	}
	return nil
}

// ModesFile is <state>/modes, the failover modes of the last Up
// (SaveModes), one NAME=VALUE line each.
func (c Config) ModesFile() string { return filepath.Join(c.StateDir, "modes") }

// SaveModes records c's failover modes in ModesFile.
func (c Config) SaveModes() error {
	replicas := "none"
	if len(c.RedisClusterReplicaPorts) > 0 {
		replicas = "1"
	}
	text := fmt.Sprintf("SECKILL_STACK_PG_STANDBY=%s\nSECKILL_STACK_REDIS_REPLICAS=%s\n", orDefault(c.PGStandby, "none"), replicas)
	if err := os.WriteFile(c.ModesFile(), []byte(text), 0o644); err != nil {
		return fmt.Errorf("devstack: record the modes: %w", err)
	}
	return nil
}

// readModes reads a ModesFile; a missing or unreadable file is no modes.
func readModes(path string) map[string]string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	return m
}

// parseClusterPorts reads at least 3 distinct ports separated by spaces or
// commas, each in 10001-65535 (its bus port, port - 10000, must exist).
func parseClusterPorts(v string) ([]int, error) {
	var ports []int
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 10000 || n > 65535 {
			return nil, fmt.Errorf("%q is not a port in 10001-65535 (the cluster bus uses port - 10000)", f)
		}
		for _, p := range ports {
			if p == n {
				return nil, fmt.Errorf("port %d given twice", n)
			}
		}
		ports = append(ports, n)
	}
	if len(ports) < 3 {
		return nil, errors.New("a Redis Cluster needs at least 3 masters (3 ports)")
	}
	return ports, nil
}

// DeprecatedFromEnviron adds to c.Deprecated the set SECKILL_RETRY_MAX_*
// variables of environ (os.Environ()), which are no longer read.
func (c *Config) DeprecatedFromEnviron(environ []string) {
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SECKILL_RETRY_MAX_") && v != "" {
			c.Deprecated = append(c.Deprecated, k)
		}
	}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Paths of the state directory. They are part of the stack's contract:
// seckill-bench chaos, deploy/local/observe.sh and tests find files there.

// RunDir is <state>/run, where the pid files are.
func (c Config) RunDir() string { return filepath.Join(c.StateDir, "run") }

// LogDir is <state>/logs.
func (c Config) LogDir() string { return filepath.Join(c.StateDir, "logs") }

// Marker is the file that marks a state directory as the stack's own.
func (c Config) Marker() string { return filepath.Join(c.StateDir, ".seckill-stack") }

// PGRoot is <state>/pg, PostgreSQL's part of the state.
func (c Config) PGRoot() string { return filepath.Join(c.StateDir, "pg") }

// PGData is the PostgreSQL cluster directory.
func (c Config) PGData() string { return filepath.Join(c.PGRoot(), "data") }

// PGSocketDir is the directory of PostgreSQL's unix socket: <state>/pg/run,
// or a short private directory under /tmp when the socket path would exceed
// the kernel's ~107-byte limit.
func (c Config) PGSocketDir() string {
	dir := filepath.Join(c.PGRoot(), "run")
	if len(filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(c.PGPort))) <= 100 {
		return dir
	}
	sum := sha256.Sum256([]byte(c.StateDir))
	return fmt.Sprintf("/tmp/seckill-pg-%d-%s", os.Getuid(), hex.EncodeToString(sum[:])[:12])
}

// PGDSN is the connection string the stack exports. With a standby it
// names both servers with target_session_attrs=read-write: the client
// connects to whichever accepts writes, so it follows a promotion.
func (c Config) PGDSN() string {
	if c.PGStandby != "" {
		return fmt.Sprintf("postgres://seckill:seckill@127.0.0.1:%d,127.0.0.1:%d/seckill?sslmode=disable&target_session_attrs=read-write",
			c.PGPort, c.PGStandbyPort)
	}
	return c.pgDSNAt(c.PGPort)
}

// pgDSNAt is the connection string of the one server on port.
func (c Config) pgDSNAt(port int) string {
	return fmt.Sprintf("postgres://seckill:seckill@127.0.0.1:%d/seckill?sslmode=disable", port)
}

// PGStandbyData is the standby's cluster directory.
func (c Config) PGStandbyData() string { return filepath.Join(c.PGRoot(), "standby") }

// RedisDir is <state>/redis.
func (c Config) RedisDir() string { return filepath.Join(c.StateDir, "redis") }

// RedisClusterDir is <state>/redis-cluster; node P runs in its
// subdirectory P.
func (c Config) RedisClusterDir() string { return filepath.Join(c.StateDir, "redis-cluster") }

// RedisClusterAddrs is the comma-separated list of the cluster's seed
// addresses, as exported in SECKILL_REDIS_CLUSTER_ADDRS.
func (c Config) RedisClusterAddrs() string {
	addrs := make([]string, len(c.RedisClusterPorts))
	for i, p := range c.RedisClusterPorts {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return strings.Join(addrs, ",")
}

// RMQHome is <state>/rocketmq, the RocketMQ JVMs' home and working directory.
func (c Config) RMQHome() string { return filepath.Join(c.StateDir, "rocketmq") }

// RMQLogs is where the RocketMQ JVMs write their own logs.
func (c Config) RMQLogs() string { return filepath.Join(c.RMQHome(), "logs", "rocketmqlogs") }

// SeckillBin is the service binary the stack builds for `seckill topology`.
func (c Config) SeckillBin() string {
	if c.BinDir != "" {
		return filepath.Join(c.BinDir, "seckill")
	}
	return filepath.Join(c.StateDir, "bin", "seckill")
}

// RocketMQClusterDir is <state>/rocketmq-cluster, the state dir of the
// RocketMQ cluster mode.
func (c Config) RocketMQClusterDir() string { return filepath.Join(c.StateDir, "rocketmq-cluster") }

// RocketMQCluster is the Config of the RocketMQ cluster mode's own stack:
// state dir RocketMQClusterDir, its name server, proxy and broker-a ports in
// NamesrvPort, ProxyPort, RemotingPort, BrokerPort and BrokerMetricsPort,
// the service binary of the main state dir.
func (c Config) RocketMQCluster() Config {
	cc := c
	cc.StateDir = c.RocketMQClusterDir()
	cc.BinDir = filepath.Dir(c.SeckillBin())
	cc.NamesrvPort, cc.ProxyPort, cc.RemotingPort = c.ClusterNamesrvPort, c.ClusterProxyPort, c.ClusterRemotingPort
	cc.BrokerPort, cc.BrokerMetricsPort = c.ClusterBrokerPorts[0], c.ClusterMetricsPorts[0]
	cc.ProxyJavaOpts = c.ClusterProxyJavaOpts
	return cc
}

// ClusterExports are Exports with the RocketMQ variables pointing at the
// RocketMQ cluster mode (the CLUSTER-mode proxy, its name server, broker-a,
// and both brokers' exporters in SECKILL_ROCKETMQ_METRICS_URL, broker-a's
// first: a topic's backlog is split between the brokers, and
// rocketmq.LagCollector adds up what each exporter reports), then
// SECKILL_ROCKETMQ_BROKERS (both brokers' addresses),
// SECKILL_ROCKETMQ_CLUSTER_DIR (its state dir: pid files in run/, logs in
// logs/ and broker-X/logs/rocketmqlogs) and
// SECKILL_STACK_ROCKETMQ_CLUSTER=1, so that a later `up` from the shell
// that evaluated them (a chaos run ending an outage) brings the cluster
// mode's processes up too.
func (c Config) ClusterExports() []Export {
	cc := c.RocketMQCluster()
	out := c.Exports()
	for i, e := range out {
		switch e.Name {
		case "SECKILL_ROCKETMQ_ENDPOINT", "SECKILL_ROCKETMQ_NAMESRV", "SECKILL_ROCKETMQ_BROKER":
			for _, ce := range cc.Exports() {
				if ce.Name == e.Name {
					out[i] = ce
				}
			}
		case "SECKILL_ROCKETMQ_METRICS_URL":
			out[i].Value = fmt.Sprintf("http://127.0.0.1:%d/metrics,http://127.0.0.1:%d/metrics",
				c.ClusterMetricsPorts[0], c.ClusterMetricsPorts[1])
		}
	}
	return append(out,
		Export{"SECKILL_ROCKETMQ_BROKERS", fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", c.ClusterBrokerPorts[0], c.ClusterBrokerPorts[1])},
		Export{"SECKILL_ROCKETMQ_CLUSTER_DIR", cc.StateDir},
		Export{"SECKILL_STACK_ROCKETMQ_CLUSTER", "1"})
}

// Export is one line `export NAME='VALUE'` of the stack's environment:
// Name is the variable, Value its value, printed between single quotes as
// it is.
type Export struct{ Name, Value string }

// Exports are the variables a client of the stack needs, in the order `up`
// and `env` print them.
func (c Config) Exports() []Export {
	return []Export{
		{"SECKILL_PG_DSN", c.PGDSN()},
		{"SECKILL_REDIS_ADDR", fmt.Sprintf("127.0.0.1:%d", c.RedisPort)},
		{"SECKILL_ROCKETMQ_ENDPOINT", fmt.Sprintf("127.0.0.1:%d", c.ProxyPort)},
		{"SECKILL_ROCKETMQ_NAMESRV", fmt.Sprintf("127.0.0.1:%d", c.NamesrvPort)},
		{"SECKILL_ROCKETMQ_BROKER", fmt.Sprintf("127.0.0.1:%d", c.BrokerPort)},
		{"SECKILL_ROCKETMQ_METRICS_URL", fmt.Sprintf("http://127.0.0.1:%d/metrics", c.BrokerMetricsPort)},
		{"SECKILL_TOPIC_PREFIX", c.TopicPrefix},
		{"SECKILL_STACK_DIR", c.StateDir},
		// This proxy accepts invisible durations from 1 s (minInvisibleTimeMillsForRecv), so the messages a
		// crashed consumer held come back after 4 s instead of the service's 10 s default (docs/operations.md).
		{"SECKILL_INVISIBLE_DURATION", c.InvisibleDuration},
		// The Redis Cluster of adapters/redis/clustertest (adapters/redis/README.md, "Redis Cluster").
		{"SECKILL_REDIS_CLUSTER_ADDRS", c.RedisClusterAddrs()},
		// The service accepts its public development secret and an operations listener without a token only
		// on this stack (docs/operations.md, "Listeners, secrets and limits").
		{"SECKILL_LOCAL_STACK", "true"},
	}
}

// stackBrokersFromEnv reads SECKILL_STACK_BROKERS and SECKILL_BROKER.
func stackBrokersFromEnv(getenv func(string) string) []string {
	var out []string
	for _, b := range strings.Split(getenv("SECKILL_STACK_BROKERS"), ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	if b := strings.TrimSpace(getenv("SECKILL_BROKER")); b != "" {
		out = append(out, b)
	}
	return out
}

// BrokerSelected reports whether Up starts the processes of the broker
// named name: it is in StackBrokers, or StackBrokers says "all".
func (c Config) BrokerSelected(name string) bool {
	return slices.Contains(c.StackBrokers, name) || slices.Contains(c.StackBrokers, "all")
}
