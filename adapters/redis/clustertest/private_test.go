package clustertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// privateCluster is a Redis Cluster of three masters started by one test:
// redis-server processes on free loopback ports, each in a directory of
// the test's temp dir, with AOF (appendfsync always) so that a master can
// be restarted on its own data or on an older copy of it. The test owns the
// processes: they are stopped by PID when it ends. Tests that restart a
// master use one instead of the stack's cluster, which other tests share.
type privateCluster struct {
	t           *testing.T
	nodes       []*privateNode
	nodeTimeout int // cluster-node-timeout, ms
}

// privateNode is one redis-server process of a privateCluster.
type privateNode struct {
	port, busPort int
	dir, conf     string
	cmd           *exec.Cmd
	c             *goredis.Client // a plain client of the node
	replicaOf     *privateNode    // the master it was started to follow; nil for a master
	dead          bool            // killed by the test and not started again
}

func (n *privateNode) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// aofDir is the node's AOF directory (Redis 7: base, increments and
// manifest).
func (n *privateNode) aofDir() string { return filepath.Join(n.dir, "appendonlydir") }

// freePort returns a loopback TCP port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPrivateCluster starts three masters and joins them into a cluster
// (16384 slots in three ranges); it fails the test when redis-server is
// not installed.
func startPrivateCluster(t *testing.T) *privateCluster {
	t.Helper()
	return startCluster(t, false)
}

// startPrivateClusterWithReplicas starts a private cluster whose three
// masters each have one replica (three more redis-server processes, each
// given its master with CLUSTER REPLICATE), with a node timeout of 2 s so
// that the cluster promotes a replica within seconds of its master's
// death; it returns once every replica's link to its master is up.
func startPrivateClusterWithReplicas(t *testing.T) *privateCluster {
	t.Helper()
	return startCluster(t, true)
}

func startCluster(t *testing.T, replicas bool) *privateCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed: the local stack installs it (deploy/local/stack.sh up)")
	}
	pc := &privateCluster{t: t, nodeTimeout: 5000}
	if replicas {
		pc.nodeTimeout = 2000
	}
	root := t.TempDir()
	for i := range 3 {
		pc.nodes = append(pc.nodes, pc.newNode(filepath.Join(root, strconv.Itoa(i))))
	}
	ctx := ctxT(t)
	ranges := [][2]int64{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, n := range pc.nodes {
		c := pc.client(n)
		if err := c.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			t.Fatalf("node %s: set config epoch: %v", n.addr(), err)
		}
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err(); err != nil {
			t.Fatalf("node %s: add slots: %v", n.addr(), err)
		}
	}
	first := pc.client(pc.nodes[0])
	for _, n := range pc.nodes[1:] {
		pc.meet(first, n)
	}
	pc.waitHealthy()
	if replicas {
		pc.addReplicas(root)
	}
	return pc
}

// newNode writes the configuration of a cluster node in dir and starts it.
func (pc *privateCluster) newNode(dir string) *privateNode {
	t := pc.t
	t.Helper()
	n := &privateNode{port: freePort(t), busPort: freePort(t), dir: dir}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	n.conf = filepath.Join(n.dir, "redis.conf")
	conf := strings.Join([]string{
		"port " + strconv.Itoa(n.port), "bind 127.0.0.1", "protected-mode no", "dir " + n.dir,
		"logfile " + filepath.Join(n.dir, "redis.log"), "daemonize no", `save ""`,
		"cluster-enabled yes", "cluster-config-file nodes.conf", "cluster-port " + strconv.Itoa(n.busPort),
		"cluster-node-timeout " + strconv.Itoa(pc.nodeTimeout), "cluster-require-full-coverage no",
		"appendonly yes", "appendfsync always", "appenddirname appendonlydir",
	}, "\n") + "\n"
	if err := os.WriteFile(n.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	pc.start(n)
	return n
}

// meet introduces n to the cluster through the node behind c.
func (pc *privateCluster) meet(c *goredis.Client, n *privateNode) {
	pc.t.Helper()
	if err := c.Do(ctxT(pc.t), "CLUSTER", "MEET", "127.0.0.1", n.port, n.busPort).Err(); err != nil {
		pc.t.Fatalf("cluster meet %s: %v", n.addr(), err)
	}
}

// addReplicas starts one replica for each master and waits until every
// replica's link to its master is up and the cluster is healthy.
func (pc *privateCluster) addReplicas(root string) {
	t := pc.t
	t.Helper()
	ctx := ctxT(t)
	masters := slices.Clone(pc.nodes)
	first := pc.client(masters[0])
	for i, m := range masters {
		id, err := pc.client(m).Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("node %s: cluster myid: %v", m.addr(), err)
		}
		r := pc.newNode(filepath.Join(root, "replica-"+strconv.Itoa(i)))
		r.replicaOf = m
		pc.nodes = append(pc.nodes, r)
		pc.meet(first, r)
		// The replica must know its master before it can follow it.
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := pc.client(r).Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s of %s: cluster replicate: %v", r.addr(), m.addr(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, r := range pc.nodes[len(masters):] {
		for !strings.Contains(pc.info(r, "replication"), "master_link_status:up") {
			if time.Now().After(deadline) {
				t.Fatalf("replica %s: no link to its master %s within 30 s", r.addr(), r.replicaOf.addr())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	pc.waitHealthy()
}

// info returns a section of INFO of node n ("" when it does not answer).
func (pc *privateCluster) info(n *privateNode, section string) string {
	info, err := pc.client(n).Info(context.Background(), section).Result()
	if err != nil {
		return ""
	}
	return info
}

// replica returns the replica started for master m.
func (pc *privateCluster) replica(m *privateNode) *privateNode {
	for _, n := range pc.nodes {
		if n.replicaOf == m {
			return n
		}
	}
	pc.t.Fatalf("master %s has no replica", m.addr())
	return nil
}

// kill ends node n's process with SIGKILL, by its PID, and waits for it.
func (pc *privateCluster) kill(n *privateNode) {
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.dead = true
}

// start runs redis-server on n's configuration and waits until it answers
// PING; the process is killed (by PID) when the test ends.
func (pc *privateCluster) start(n *privateNode) {
	t := pc.t
	t.Helper()
	cmd := exec.Command("redis-server", n.conf)
	cmd.Dir = n.dir
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server %s: %v", n.addr(), err)
	}
	n.cmd = cmd
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := pc.client(n)
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server %s does not answer PING; log %s", n.addr(), filepath.Join(n.dir, "redis.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// client returns a plain client of node n (one per node), closed when the
// test ends.
func (pc *privateCluster) client(n *privateNode) *goredis.Client {
	if n.c == nil {
		n.c = goredis.NewClient(&goredis.Options{Addr: n.addr(), MaxRetries: -1})
		c := n.c
		pc.t.Cleanup(func() { _ = c.Close() })
	}
	return n.c
}

// addrs are the seed addresses of the cluster.
func (pc *privateCluster) addrs() []string {
	out := make([]string, len(pc.nodes))
	for i, n := range pc.nodes {
		out[i] = n.addr()
	}
	return out
}

// node returns the node listening on addr.
func (pc *privateCluster) node(addr string) *privateNode {
	for _, n := range pc.nodes {
		if n.addr() == addr {
			return n
		}
	}
	pc.t.Fatalf("no node of the private cluster listens on %s", addr)
	return nil
}

// waitHealthy waits until every live node sees cluster_state:ok with all
// slots and every node of the cluster.
func (pc *privateCluster) waitHealthy() {
	t := pc.t
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		bad := ""
		alive := 0
		for _, n := range pc.nodes {
			if !n.dead {
				alive++
			}
		}
		for _, n := range pc.nodes {
			if n.dead {
				continue
			}
			info, err := pc.client(n).ClusterInfo(context.Background()).Result()
			if err != nil {
				bad = fmt.Sprintf("%s: %v", n.addr(), err)
				break
			}
			for _, want := range []string{"cluster_state:ok", "cluster_slots_ok:16384", "cluster_known_nodes:" + strconv.Itoa(len(pc.nodes))} {
				if !strings.Contains(info, want) {
					bad = n.addr() + ": no " + want
				}
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the private cluster is not healthy: %s", bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// copyAOF copies n's AOF directory (taken while the node runs: with
// appendfsync always every acknowledged write is in it) to a new directory
// and returns its path.
func (pc *privateCluster) copyAOF(n *privateNode) string {
	t := pc.t
	t.Helper()
	dst := filepath.Join(t.TempDir(), "appendonlydir")
	if err := os.CopyFS(dst, os.DirFS(n.aofDir())); err != nil {
		t.Fatalf("copy the AOF of %s: %v", n.addr(), err)
	}
	return dst
}

// restart kills n with SIGKILL and starts it again on the same port and
// nodes.conf (same node id and hash slots) with the AOF directory from
// (a copy taken earlier by copyAOF), or with no data when from is "".
func (pc *privateCluster) restart(n *privateNode, from string) {
	t := pc.t
	t.Helper()
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	if err := os.RemoveAll(n.aofDir()); err != nil {
		t.Fatal(err)
	}
	if from != "" {
		if err := os.CopyFS(n.aofDir(), os.DirFS(from)); err != nil {
			t.Fatalf("restore the AOF of %s: %v", n.addr(), err)
		}
	}
	pc.start(n)
	pc.waitHealthy()
}
