package devstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RedisClusterGroup is the `down` name of the Redis Cluster: its nodes and
// the cluster itself.
const RedisClusterGroup = "redis-cluster"

// NewRedisClusterNodes returns the nodes of the stack's Redis Cluster
// (adapters/redis/README.md, "Redis Cluster"): the masters redis-c1,
// redis-c2, ... on Config.RedisClusterPorts, then in the replica mode one
// replica per master, redis-r1, redis-r2, ... on
// Config.RedisClusterReplicaPorts, each in <state>/redis-cluster/<port>
// with `cluster-enabled yes`, its bus on port - 10000 and no persistence
// of the data (nodes.conf, the cluster's topology, survives restarts).
func NewRedisClusterNodes(cfg Config, log *Logger) []*Redis {
	var nodes []*Redis
	for i, port := range cfg.RedisClusterPorts {
		nodes = append(nodes, newClusterNode(cfg, log, fmt.Sprintf("redis-c%d", i+1), port))
	}
	for i, port := range cfg.RedisClusterReplicaPorts {
		nodes = append(nodes, newClusterNode(cfg, log, fmt.Sprintf("redis-r%d", i+1), port))
	}
	return nodes
}

func newClusterNode(cfg Config, log *Logger, name string, port int) *Redis {
	return NewRedisNode(cfg, log, RedisSpec{
		Name:  name,
		Group: RedisClusterGroup,
		Dir:   filepath.Join(cfg.RedisClusterDir(), strconv.Itoa(port)),
		Port:  port,
		ExtraConf: []string{
			"# Redis Cluster node (deploy/devstack NewRedisClusterNodes).",
			"cluster-enabled yes",
			"cluster-config-file nodes.conf",
			// The default bus port (port + 10000) does not exist above 55535.
			fmt.Sprintf("cluster-port %d", port-10000),
			"cluster-node-timeout 5000",
			"cluster-require-full-coverage yes",
			// Test data only: nothing persisted but nodes.conf.
			"appendonly no",
		},
		ExtraPorts: []int{port - 10000},
	})
}

// Processless is implemented by a Component that has no process of its
// own but works on the processes of its dependencies (the Redis Cluster:
// it joins its nodes). Its PID and Adopt return 0, Stop does nothing
// (its dependencies stop their processes), and Up calls Start whenever it
// is not healthy, which must be idempotent.
type Processless interface {
	Component
	// Processless marks the component.
	Processless()
}

// RedisCluster is the Redis Cluster made of its nodes (components of their
// own, on which it depends): Start creates the cluster once (`redis-cli
// --cluster create ... --cluster-replicas 0`, when no node has a slot or
// knows another node) and waits until it is healthy. Healthy: every node
// is ours and its CLUSTER INFO says cluster_state:ok, all 16384 slots
// assigned and ok, and that it knows all the nodes.
type RedisCluster struct {
	cfg   Config
	log   *Logger
	nodes []*Redis
	// Timeout bounds Start's wait for a healthy cluster.
	Timeout time.Duration
}

// NewRedisCluster returns the cluster of nodes (NewRedisClusterNodes).
func NewRedisCluster(cfg Config, log *Logger, nodes []*Redis) *RedisCluster {
	return &RedisCluster{cfg: cfg, log: log, nodes: nodes, Timeout: 30 * time.Second}
}

// Processless implements Processless.
func (c *RedisCluster) Processless() {}

// Name implements Component.
func (c *RedisCluster) Name() string { return RedisClusterGroup }

// Group implements Component.
func (c *RedisCluster) Group() string { return RedisClusterGroup }

// DependsOn implements Component: the nodes.
func (c *RedisCluster) DependsOn() []string {
	names := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		names[i] = n.Name()
	}
	return names
}

// PIDFile implements Component: there is none ("").
func (c *RedisCluster) PIDFile() string { return "" }

// DataDir implements Component: <state>/redis-cluster, the parent of the
// nodes' directories.
func (c *RedisCluster) DataDir() string { return c.cfg.RedisClusterDir() }

// PID implements Component: 0, no process of its own.
func (c *RedisCluster) PID() int { return 0 }

// Adopt implements Component: 0, nothing to adopt.
func (c *RedisCluster) Adopt(context.Context) (int, error) { return 0, nil }

// Grace implements Component: Up does not use it for a Processless
// component (Start waits for the cluster to converge).
func (c *RedisCluster) Grace() time.Duration { return 0 }

// Stop implements Component: nothing (the nodes stop their processes).
func (c *RedisCluster) Stop(context.Context) error { return nil }

// Purge implements Component: <state>/redis-cluster, with the directories
// of nodes on ports no longer configured.
func (c *RedisCluster) Purge() error { return removeAll(c.cfg.RedisClusterDir()) }

// Addrs are the nodes' addresses, comma-separated.
func (c *RedisCluster) Addrs() string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", n.spec.Port)
	}
	return strings.Join(addrs, ",")
}

// clusterInfo returns the fields of CLUSTER INFO on node.
func clusterInfo(ctx context.Context, node *Redis) (map[string]string, error) {
	reply, err := redisCommand(ctx, node.spec.Port, "CLUSTER", "INFO")
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER INFO: %w", node.Name(), err)
	}
	info := map[string]string{}
	for _, line := range strings.Split(reply, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			info[k] = v
		}
	}
	return info, nil
}

// unhealthy returns why node's CLUSTER INFO is not that of a healthy
// cluster of n nodes, or "".
func unhealthy(info map[string]string, n int) string {
	want := [][2]string{
		{"cluster_state", "ok"}, {"cluster_slots_assigned", "16384"}, {"cluster_slots_ok", "16384"},
		{"cluster_known_nodes", strconv.Itoa(n)},
	}
	for _, kv := range want {
		if info[kv[0]] != kv[1] {
			return fmt.Sprintf("%s:%s (want %s)", kv[0], info[kv[0]], kv[1])
		}
	}
	return ""
}

// Healthy implements Component.
func (c *RedisCluster) Healthy(ctx context.Context) error {
	for _, n := range c.nodes {
		if n.PID() == 0 {
			return fmt.Errorf("%s: node %s is not running", c.Name(), n.Name())
		}
		info, err := clusterInfo(ctx, n)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Name(), err)
		}
		if why := unhealthy(info, len(c.nodes)); why != "" {
			return fmt.Errorf("%s: node %s (127.0.0.1:%d): %s", c.Name(), n.Name(), n.spec.Port, why)
		}
	}
	if len(c.cfg.RedisClusterReplicaPorts) > 0 {
		return c.replicasKnown(ctx)
	}
	return nil
}

// replicasKnown checks that the first master's node table (what the
// clients' CLUSTER SLOTS and a failover go by) shows every replica with
// its master, each replica of another master: right after REPLICATE the
// other nodes learn it only by gossip.
func (c *RedisCluster) replicasKnown(ctx context.Context) error {
	out, err := redisCommand(ctx, c.cfg.RedisClusterPorts[0], "CLUSTER", "NODES")
	if err != nil {
		return fmt.Errorf("%s: CLUSTER NODES: %w", c.Name(), err)
	}
	followed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 7 && strings.Contains(f[2], "slave") && f[3] != "-" && f[7] == "connected" {
			followed[f[3]] = true
		}
	}
	if want := len(c.cfg.RedisClusterReplicaPorts); len(followed) != want {
		return fmt.Errorf("%s: the node table shows %d masters with a connected replica, want %d", c.Name(), len(followed), want)
	}
	return nil
}

// Start implements Component: create the cluster when none of the nodes
// belongs to one yet, then wait until it is healthy (a restarted node
// rejoins by itself from its nodes.conf).
func (c *RedisCluster) Start(ctx context.Context) error {
	t0 := time.Now()
	fresh := 0
	for _, n := range c.nodes {
		info, err := clusterInfo(ctx, n)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Name(), err)
		}
		if info["cluster_slots_assigned"] == "0" && info["cluster_known_nodes"] == "1" {
			fresh++
		}
	}
	switch {
	case fresh == len(c.nodes):
		if err := c.create(ctx); err != nil {
			return err
		}
		if err := c.attachReplicas(ctx); err != nil {
			return err
		}
	case fresh > 0:
		return fmt.Errorf("%s: %d of the %d nodes belong to no cluster while the others do (a node's data dir was lost?); "+
			"recreate it: deploy/local/stack.sh down --purge %s && deploy/local/stack.sh up", c.Name(), fresh, len(c.nodes), RedisClusterGroup)
	default:
		c.log.Infof("%s: nodes %s already joined; waiting for a healthy cluster", c.Name(), c.Addrs())
	}
	var last error
	if !poll(ctx, c.Timeout, 100*time.Millisecond, func() bool { last = c.Healthy(ctx); return last == nil }) {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", c.Name(), ctx.Err())
		}
		return fmt.Errorf("%s: not healthy after %s: %w (logs: %s/redis-c*.log; to recreate it: deploy/local/stack.sh down --purge %s)",
			c.Name(), c.Timeout, last, c.cfg.LogDir(), RedisClusterGroup)
	}
	c.log.Infof("%s: healthy, %d nodes %s (%s)", c.Name(), len(c.nodes), c.Addrs(), since(t0))
	return nil
}

// create runs redis-cli --cluster create on the nodes; its output goes to
// <state>/logs/redis-cluster.out.
func (c *RedisCluster) create(ctx context.Context) error {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return fmt.Errorf("%s: %w (Debian package redis-tools, installed with redis-server)", c.Name(), err)
	}
	args := []string{"--cluster", "create"}
	args = append(args, strings.Split(c.cfg.RedisClusterAddrs(), ",")...) // the masters; attachReplicas adds the replicas
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	outFile := filepath.Join(c.cfg.LogDir(), c.Name()+".out")
	c.log.Infof("%s: creating the cluster: redis-cli %s (output: %s)", c.Name(), strings.Join(args, " "), outFile)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	_ = os.WriteFile(outFile, out, 0o644)
	if err != nil {
		c.log.Raw(tailFile(outFile, 20))
		return fmt.Errorf("%s: redis-cli --cluster create failed: %w; see %s", c.Name(), err, outFile)
	}
	return nil
}

// attachReplicas makes replica i (Config.RedisClusterReplicaPorts) meet
// the cluster and replicate master i: redis-cli's own --cluster-replicas
// places replicas by host, and on one host it left masters without one.
func (c *RedisCluster) attachReplicas(ctx context.Context) error {
	for i, port := range c.cfg.RedisClusterReplicaPorts {
		master := c.cfg.RedisClusterPorts[i]
		id, err := redisCommand(ctx, master, "CLUSTER", "MYID")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER MYID on %d: %w", c.Name(), master, err)
		}
		if _, err := redisCommand(ctx, port, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(master), strconv.Itoa(master-10000)); err != nil {
			return fmt.Errorf("%s: CLUSTER MEET from %d: %w", c.Name(), port, err)
		}
		// REPLICATE needs the master in the replica's node table first.
		var last error
		if !poll(ctx, 30*time.Second, 100*time.Millisecond, func() bool {
			_, last = redisCommand(ctx, port, "CLUSTER", "REPLICATE", id)
			return last == nil
		}) {
			return fmt.Errorf("%s: CLUSTER REPLICATE %s on %d: %w", c.Name(), id, port, last)
		}
		c.log.Infof("%s: 127.0.0.1:%d replicates 127.0.0.1:%d", c.Name(), port, master)
	}
	return nil
}

// Status implements Component.
func (c *RedisCluster) Status(ctx context.Context) StatusInfo {
	ports := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		ports[i] = strconv.Itoa(n.spec.Port)
	}
	info := StatusInfo{Ports: strings.Join(ports, ",")}
	if err := c.Healthy(ctx); err != nil {
		info.Detail = err.Error()
	} else {
		info.Detail = fmt.Sprintf("%d masters, %d replicas, cluster_state:ok, 16384 slots ok; SECKILL_REDIS_CLUSTER_ADDRS",
			len(c.cfg.RedisClusterPorts), len(c.cfg.RedisClusterReplicaPorts))
	}
	return info
}

// redisCommand sends one command to 127.0.0.1:port and returns the reply
// (a status, bulk string or integer; an error reply is an error), bounded
// by 3 s and ctx.
func redisCommand(ctx context.Context, port int, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		req += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, req); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < -1 || n > 1<<20 {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		if n == -1 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}
