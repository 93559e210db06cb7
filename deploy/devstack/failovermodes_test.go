package devstack

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPostgresStandbyMode runs the stack's PostgreSQL with its standby on
// private ports in the sync mode: Up takes the standby with pg_basebackup
// and the primary streams to it synchronously; the exported DSN names both
// servers and writes reach the primary, whose commit is on the standby; a
// second Up adopts both; down --purge postgres takes the standby too.
func TestPostgresStandbyMode(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cfg := privateConfig(t)
	cfg.PGStandby, cfg.PGStandbyPort = "sync", freePort(t)
	log := testLogger(t)
	primary, standby := NewPostgres(cfg, log), NewPostgresStandby(cfg, log)
	s, err := New(cfg, log, []Component{primary, standby}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, standby)
	stopOnCleanup(t, primary)
	t.Cleanup(func() { _ = os.RemoveAll(cfg.PGSocketDir()) })
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	if dsn := cfg.PGDSN(); !strings.Contains(dsn, "target_session_attrs=read-write") || !strings.Contains(dsn, ","+"127.0.0.1:") {
		t.Fatalf("exported DSN %s: want both servers and target_session_attrs=read-write", dsn)
	}
	conn, err := pgx.Connect(ctx, cfg.PGDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, `CREATE TABLE standby_probe (v int); INSERT INTO standby_probe VALUES (7)`); err != nil {
		t.Fatal(err)
	}
	if port := conn.PgConn().Conn().RemoteAddr().String(); !strings.HasSuffix(port, ":"+strconv.Itoa(cfg.PGPort)) {
		t.Fatalf("the DSN connected to %s, want the primary on %d", port, cfg.PGPort)
	}
	replica, err := pgx.Connect(ctx, cfg.pgDSNAt(cfg.PGStandbyPort))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = replica.Close(context.WithoutCancel(ctx)) }()
	var v int
	var inRecovery bool
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := replica.QueryRow(ctx, `SELECT v, pg_is_in_recovery() FROM standby_probe`).Scan(&v, &inRecovery)
		if err == nil && v == 7 && inRecovery {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby never showed the primary's commit: %v (v %d, in recovery %v)", err, v, inRecovery)
		}
		time.Sleep(100 * time.Millisecond)
	}
	first := pids(s.Components())
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if again := pids(s.Components()); again["postgres-standby"] != first["postgres-standby"] || again["postgres"] != first["postgres"] {
		t.Fatalf("second Up restarted a server: %v then %v", first, again)
	}
	if err := s.Down(ctx, true, []string{"postgres"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.PGStandbyData()); !os.IsNotExist(err) {
		t.Fatalf("standby data after down --purge postgres: %v", err)
	}
}

// TestRedisClusterReplicaMode runs the stack's Redis Cluster with one
// replica per master on private ports: three masters, each with one
// replica, and every slot served.
func TestRedisClusterReplicaMode(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cfg := privateConfig(t)
	cfg.RedisClusterReplicaPorts = []int{freeClusterPort(t), freeClusterPort(t), freeClusterPort(t)}
	log := testLogger(t)
	nodes := NewRedisClusterNodes(cfg, log)
	if len(nodes) != 6 || nodes[3].Name() != "redis-r1" {
		t.Fatalf("%d nodes, the fourth %s: want 3 masters and redis-r1..3", len(nodes), nodes[3].Name())
	}
	cluster := NewRedisCluster(cfg, log, nodes)
	comps := []Component{}
	for _, n := range nodes {
		comps = append(comps, n)
		stopOnCleanup(t, n)
	}
	s, err := New(cfg, log, append(comps, cluster), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := redisCommand(ctx, cfg.RedisClusterPorts[0], "CLUSTER", "NODES")
	if err != nil {
		t.Fatal(err)
	}
	masters, replicas := map[string]bool{}, map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		switch {
		case strings.Contains(f[2], "master"):
			masters[f[0]] = true
		case strings.Contains(f[2], "slave"):
			replicas[f[0]] = f[3]
		}
	}
	if len(masters) != 3 || len(replicas) != 3 {
		t.Fatalf("%d masters and %d replicas, want 3 and 3:\n%s", len(masters), len(replicas), out)
	}
	served := map[string]bool{}
	for _, m := range replicas {
		served[m] = true
	}
	if len(served) != 3 {
		t.Fatalf("the replicas follow %d distinct masters, want one each:\n%s", len(served), out)
	}
}
