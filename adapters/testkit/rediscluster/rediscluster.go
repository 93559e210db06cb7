// Package rediscluster starts a private Redis Cluster for tests and
// drills that kill, restart or fail over its nodes without touching the
// local stack's cluster, which other tests share: three masters (16384
// slots in three ranges) on free loopback ports, each redis-server in a
// directory of its own with AOF (appendfsync always), so a master can be
// restarted on its own data or on an older copy of it; optionally one
// replica per master. The caller owns the processes: Kill and Close stop
// them by PID, and Close removes the directory. It has no dependency on
// testing, so chaos drills use it as tests do.
package rediscluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Options configure Start.
type Options struct {
	// Replicas starts one replica per master (CLUSTER REPLICATE) and
	// returns once every replica's link to its master is up.
	Replicas bool
	// NodeTimeout is cluster-node-timeout: how long a master may not
	// answer before the cluster fails it over to its replica. Zero means
	// 2 s with replicas and 5 s without.
	NodeTimeout time.Duration
}

// Cluster is a running private cluster.
type Cluster struct {
	root        string
	nodeTimeout time.Duration
	nodes       []*Node
}

// Node is one redis-server process of a Cluster.
type Node struct {
	// Port and BusPort are the node's client and cluster-bus ports.
	Port, BusPort int
	// Dir is its working directory (nodes.conf, appendonlydir, redis.log).
	Dir  string
	conf string
	cmd  *exec.Cmd
	c    *goredis.Client
	// ReplicaOf is the master the node was started to follow; nil for a
	// master.
	ReplicaOf *Node
	dead      bool
}

// Addr is the node's loopback address.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port)) }

// AOFDir is the node's AOF directory (Redis 7: base, increments and
// manifest).
func (n *Node) AOFDir() string { return filepath.Join(n.Dir, "appendonlydir") }

// Client is a plain client of the node alone (one per node, closed by
// Close).
func (n *Node) Client() *goredis.Client {
	if n.c == nil {
		n.c = goredis.NewClient(&goredis.Options{Addr: n.Addr(), MaxRetries: -1})
	}
	return n.c
}

// Start starts the masters, joins them into a cluster and, with
// o.Replicas, a replica for each; it returns once the cluster is healthy.
// On an error everything started is stopped and removed.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("rediscluster: redis-server is not installed (deploy/local/stack.sh up installs it)")
	}
	root, err := os.MkdirTemp("", "seckill-rediscluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{root: root, nodeTimeout: o.NodeTimeout}
	if c.nodeTimeout <= 0 {
		c.nodeTimeout = map[bool]time.Duration{true: 2 * time.Second, false: 5 * time.Second}[o.Replicas]
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for i := range 3 {
		n, err := c.newNode(ctx, strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	ranges := [][2]int64{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, n := range c.nodes {
		if err := n.Client().Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return nil, fmt.Errorf("rediscluster: node %s: set config epoch: %w", n.Addr(), err)
		}
		if err := n.Client().Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err(); err != nil {
			return nil, fmt.Errorf("rediscluster: node %s: add slots: %w", n.Addr(), err)
		}
	}
	for _, n := range c.nodes[1:] {
		if err := c.meet(ctx, n); err != nil {
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	if o.Replicas {
		if err := c.addReplicas(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Seeds are the masters' addresses, the seed nodes of a cluster client.
func (c *Cluster) Seeds() []string {
	var out []string
	for _, n := range c.nodes {
		if n.ReplicaOf == nil {
			out = append(out, n.Addr())
		}
	}
	return out
}

// Node returns the node listening on addr, or nil.
func (c *Cluster) Node(addr string) *Node {
	for _, n := range c.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// Replica returns the replica started for master m, or nil.
func (c *Cluster) Replica(m *Node) *Node {
	for _, n := range c.nodes {
		if n.ReplicaOf == m {
			return n
		}
	}
	return nil
}

// Info returns a section of INFO of node n ("" when it does not answer).
func (c *Cluster) Info(ctx context.Context, n *Node, section string) string {
	info, err := n.Client().Info(ctx, section).Result()
	if err != nil {
		return ""
	}
	return info
}

// Kill ends node n's process with SIGKILL, by its PID, and reaps it; the
// node counts as gone for WaitHealthy until Restart.
func (c *Cluster) Kill(n *Node) {
	if n.cmd != nil && n.cmd.ProcessState == nil {
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
	}
	n.dead = true
}

// WaitPromoted waits until node n (a replica) reports role:master, for at
// most 60 s or until ctx ends.
func (c *Cluster) WaitPromoted(ctx context.Context, n *Node) error {
	return poll(ctx, fmt.Sprintf("replica %s promoted", n.Addr()), func() bool {
		return strings.Contains(c.Info(ctx, n, "replication"), "role:master")
	})
}

// Restart kills n and starts it again on the same port and nodes.conf
// (same node id and hash slots) with the AOF directory from (a copy taken
// earlier by CopyAOF), or with no data when from is "", and waits until
// the cluster is healthy.
func (c *Cluster) Restart(ctx context.Context, n *Node, from string) error {
	c.Kill(n)
	if err := os.RemoveAll(n.AOFDir()); err != nil {
		return err
	}
	if from != "" {
		if err := os.CopyFS(n.AOFDir(), os.DirFS(from)); err != nil {
			return fmt.Errorf("rediscluster: restore the AOF of %s: %w", n.Addr(), err)
		}
	}
	if err := c.start(ctx, n); err != nil {
		return err
	}
	return c.WaitHealthy(ctx)
}

// CopyAOF copies n's AOF directory (taken while the node runs: with
// appendfsync always every acknowledged write is in it) to a new
// directory under the cluster's and returns its path.
func (c *Cluster) CopyAOF(n *Node) (string, error) {
	dst, err := os.MkdirTemp(c.root, "aof-")
	if err != nil {
		return "", err
	}
	dst = filepath.Join(dst, "appendonlydir")
	if err := os.CopyFS(dst, os.DirFS(n.AOFDir())); err != nil {
		return "", fmt.Errorf("rediscluster: copy the AOF of %s: %w", n.Addr(), err)
	}
	return dst, nil
}

// Close kills every node by PID, closes the node clients and removes the
// cluster's directory.
func (c *Cluster) Close() {
	for _, n := range c.nodes {
		c.Kill(n)
		if n.c != nil {
			_ = n.c.Close()
		}
	}
	_ = os.RemoveAll(c.root)
}

// WaitHealthy waits until every live node sees cluster_state:ok with all
// slots and every node of the cluster, for at most 60 s or until ctx ends.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	bad := ""
	err := poll(ctx, "the private cluster is healthy", func() bool {
		bad = ""
		for _, n := range c.nodes {
			if n.dead {
				continue
			}
			info, err := n.Client().ClusterInfo(ctx).Result()
			if err != nil {
				bad = fmt.Sprintf("%s: %v", n.Addr(), err)
				return false
			}
			for _, want := range []string{"cluster_state:ok", "cluster_slots_ok:16384", "cluster_known_nodes:" + strconv.Itoa(len(c.nodes))} {
				if !strings.Contains(info, want) {
					bad = n.Addr() + ": no " + want
					return false
				}
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("%w (%s)", err, bad)
	}
	return nil
}

// newNode writes the configuration of a cluster node in a directory of
// its own and starts it.
func (c *Cluster) newNode(ctx context.Context, name string) (*Node, error) {
	n := &Node{Dir: filepath.Join(c.root, name)}
	ports, err := freePorts(ctx, 2)
	if err != nil {
		return nil, err
	}
	n.Port, n.BusPort = ports[0], ports[1]
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return nil, err
	}
	n.conf = filepath.Join(n.Dir, "redis.conf")
	conf := strings.Join([]string{
		"port " + strconv.Itoa(n.Port), "bind 127.0.0.1", "protected-mode no", "dir " + n.Dir,
		"logfile " + filepath.Join(n.Dir, "redis.log"), "daemonize no", `save ""`,
		"cluster-enabled yes", "cluster-config-file nodes.conf", "cluster-port " + strconv.Itoa(n.BusPort),
		"cluster-node-timeout " + strconv.FormatInt(c.nodeTimeout.Milliseconds(), 10), "cluster-require-full-coverage no",
		"appendonly yes", "appendfsync always", "appenddirname appendonlydir",
	}, "\n") + "\n"
	if err := os.WriteFile(n.conf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := c.start(ctx, n); err != nil {
		return nil, err
	}
	return n, nil
}

// start runs redis-server on n's configuration (not bound to ctx: it
// lives until Kill) and waits until it answers PING.
func (c *Cluster) start(ctx context.Context, n *Node) error {
	cmd := exec.CommandContext(context.WithoutCancel(ctx), "redis-server", n.conf)
	cmd.Dir = n.Dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("rediscluster: start redis-server %s: %w", n.Addr(), err)
	}
	n.cmd, n.dead = cmd, false
	err := poll(ctx, fmt.Sprintf("redis-server %s answers PING", n.Addr()), func() bool {
		return n.Client().Ping(ctx).Err() == nil
	})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(n.Dir, "redis.log"))
		return fmt.Errorf("%w; the end of its log:\n%s", err, log[max(0, len(log)-1000):])
	}
	return nil
}

// meet introduces n to the cluster through its first node.
func (c *Cluster) meet(ctx context.Context, n *Node) error {
	if err := c.nodes[0].Client().Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.Port, n.BusPort).Err(); err != nil {
		return fmt.Errorf("rediscluster: cluster meet %s: %w", n.Addr(), err)
	}
	return nil
}

// addReplicas starts one replica for each master and waits until every
// replica's link to its master is up and the cluster is healthy.
func (c *Cluster) addReplicas(ctx context.Context) error {
	masters := slices.Clone(c.nodes)
	for i, m := range masters {
		id, err := m.Client().Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("rediscluster: node %s: cluster myid: %w", m.Addr(), err)
		}
		r, err := c.newNode(ctx, "replica-"+strconv.Itoa(i))
		if err != nil {
			return err
		}
		r.ReplicaOf = m
		c.nodes = append(c.nodes, r)
		if err := c.meet(ctx, r); err != nil {
			return err
		}
		// The replica must know its master before it can follow it.
		err = poll(ctx, fmt.Sprintf("replica %s follows %s", r.Addr(), m.Addr()), func() bool {
			return r.Client().Do(ctx, "CLUSTER", "REPLICATE", id).Err() == nil
		})
		if err != nil {
			return err
		}
	}
	for _, r := range c.nodes[len(masters):] {
		err := poll(ctx, fmt.Sprintf("replica %s links to its master %s", r.Addr(), r.ReplicaOf.Addr()), func() bool {
			return strings.Contains(c.Info(ctx, r, "replication"), "master_link_status:up")
		})
		if err != nil {
			return err
		}
	}
	return c.WaitHealthy(ctx)
}

// freePorts returns n distinct loopback TCP ports nobody listens on right
// now (all held open until all are chosen, so none is chosen twice).
func freePorts(ctx context.Context, n int) ([]int, error) {
	var out []int
	for range n {
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// poll calls cond every 50 ms until it holds, for at most 60 s or until
// ctx ends.
func poll(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("rediscluster: never happened within 60 s: %s", what)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
