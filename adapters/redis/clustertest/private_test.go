package clustertest

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/testkit/rediscluster"
)

// privateCluster is a Redis Cluster of three masters started by one test
// (adapters/testkit/rediscluster), optionally with a replica per master:
// tests that restart, kill or fail over a master use one instead of the
// stack's cluster, which other tests share. Its methods fail the test on
// an error; the processes are stopped by PID when the test ends.
type privateCluster struct {
	t *testing.T
	*rediscluster.Cluster
}

// privateNode is one redis-server process of a privateCluster.
type privateNode = rediscluster.Node

// startPrivateCluster starts three masters and joins them into a cluster
// (16384 slots in three ranges).
func startPrivateCluster(t *testing.T) *privateCluster {
	t.Helper()
	return startCluster(t, rediscluster.Options{})
}

// startPrivateClusterWithReplicas starts a private cluster whose three
// masters each have one replica, with a node timeout of 2 s so that the
// cluster promotes a replica within seconds of its master's death; it
// returns once every replica's link to its master is up.
func startPrivateClusterWithReplicas(t *testing.T) *privateCluster {
	t.Helper()
	return startCluster(t, rediscluster.Options{Replicas: true})
}

func startCluster(t *testing.T, o rediscluster.Options) *privateCluster {
	t.Helper()
	c, err := rediscluster.Start(ctxT(t), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &privateCluster{t: t, Cluster: c}
}

// client returns the plain client of node n.
func (pc *privateCluster) client(n *privateNode) *goredis.Client { return n.Client() }

// addrs are the seed addresses of the cluster.
func (pc *privateCluster) addrs() []string { return pc.Seeds() }

// node returns the node listening on addr.
func (pc *privateCluster) node(addr string) *privateNode {
	n := pc.Node(addr)
	if n == nil {
		pc.t.Fatalf("no node of the private cluster listens on %s", addr)
	}
	return n
}

// replica returns the replica started for master m.
func (pc *privateCluster) replica(m *privateNode) *privateNode {
	r := pc.Replica(m)
	if r == nil {
		pc.t.Fatalf("master %s has no replica", m.Addr())
	}
	return r
}

// kill ends node n's process with SIGKILL, by its PID.
func (pc *privateCluster) kill(n *privateNode) { pc.Kill(n) }

// copyAOF copies n's AOF directory and returns its path.
func (pc *privateCluster) copyAOF(n *privateNode) string {
	pc.t.Helper()
	dir, err := pc.CopyAOF(n)
	if err != nil {
		pc.t.Fatal(err)
	}
	return dir
}

// restart kills n and starts it again on the AOF directory from (a copy
// taken by copyAOF), or with no data when from is "".
func (pc *privateCluster) restart(n *privateNode, from string) {
	pc.t.Helper()
	if err := pc.Restart(ctxT(pc.t), n, from); err != nil {
		pc.t.Fatal(err)
	}
}

// waitPromoted waits until replica n reports role:master.
func (pc *privateCluster) waitPromoted(n *privateNode) {
	pc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pc.WaitPromoted(ctx, n); err != nil {
		pc.t.Fatal(err)
	}
}
