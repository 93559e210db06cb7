package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests start real processes (Redis, PostgreSQL, a RocketMQ name
// server) on private ports in temporary state dirs, and look at the running
// local stack read-only. They need what `make test` provides: the stack's
// programs installed and its exports (SECKILL_STACK_DIR, ...) in the
// environment.

// testTimeout bounds each test's work; the waits inside are bounded too.
const testTimeout = 2 * time.Minute

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// handedOut remembers every port a picker below returned in this test
// process, so that no two components of one test (or of two parallel tests)
// are given the same port: a port is only checked free, not held, until its
// component binds it. A clean-clone run once gave redis-c2 and redis-r1 the
// same port that way. It is the test binary's only shared state.
var handedOut = portLedger{taken: map[int]bool{}}

type portLedger struct {
	mu    sync.Mutex
	taken map[int]bool
}

// claim marks every port of ports as handed out and reports true, or marks
// none and reports false when one of them was handed out already or is in
// use now.
func (l *portLedger) claim(ports ...int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range ports {
		if l.taken[p] || !listenable(p) {
			return false
		}
	}
	for _, p := range ports {
		l.taken[p] = true
	}
	return true
}

// listenable reports whether nothing listens on port right now.
func listenable(port int) bool {
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// freePort returns a TCP port nothing uses right now and no other picker
// returned before, below Linux's ephemeral range (32768 and up), so that
// the client connections of tests running beside these do not take it
// before the component listens on it.
func freePort(t *testing.T) int {
	t.Helper()
	for range 100 {
		port := 20000 + rand.IntN(12000)
		if handedOut.claim(port) {
			return port
		}
	}
	t.Fatal("no free port in 20000-31999 after 100 tries")
	return 0
}

// repoDir is the checkout's root (the tests run in deploy/devstack).
func repoDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// privateConfig is a stack in a temporary state dir on free ports, with the
// real download cache (for the RocketMQ jars).
func privateConfig(t *testing.T) Config {
	t.Helper()
	cfg, err := ConfigFromEnv(os.Getenv, repoDir(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = filepath.Join(t.TempDir(), "stack")
	cfg.PGPort, cfg.RedisPort, cfg.NamesrvPort = freePort(t), freePort(t), freePort(t)
	cfg.ProxyPort, cfg.RemotingPort, cfg.BrokerPort, cfg.BrokerMetricsPort = freePort(t), freePort(t), freePort(t), freePort(t)
	cfg.RedisClusterPorts = []int{freeClusterPort(t), freeClusterPort(t), freeClusterPort(t)}
	// No failover mode the real state dir may have recorded.
	cfg.PGStandby, cfg.RedisClusterReplicaPorts = "", nil
	return cfg
}

// testLogger writes the stack's progress lines to the test log.
func testLogger(t *testing.T) *Logger { return NewLogger(testWriter{t}, false) }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// stopOnCleanup stops c at the end of the test, by pid as always.
func stopOnCleanup(t *testing.T, c Component) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("cleanup: stop %s: %v", c.Name(), err)
		}
	})
}

func TestRedisStartHealthyStop(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cfg := privateConfig(t)
	s, err := New(cfg, testLogger(t), []Component{NewRedis(cfg, testLogger(t))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.initStateDir(); err != nil {
		t.Fatal(err)
	}
	r := NewRedis(cfg, testLogger(t))
	stopOnCleanup(t, r)
	if pid := r.PID(); pid != 0 {
		t.Fatalf("PID before Start = %d, want 0", pid)
	}
	if err := r.Healthy(ctx); err == nil {
		t.Fatal("Healthy before Start = nil, want an error")
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pid := r.PID()
	if pid == 0 || pid != readPID(filepath.Join(cfg.RunDir(), "redis.pid")) {
		t.Fatalf("PID after Start = %d, pid file says %d", pid, readPID(r.PIDFile()))
	}
	if err := r.Healthy(ctx); err != nil {
		t.Fatalf("Healthy after Start: %v", err)
	}
	if cwd, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); cwd != cfg.RedisDir() {
		t.Fatalf("redis runs in %s, want its data dir %s", cwd, cfg.RedisDir())
	}
	if got := r.Status(ctx); got.RSSKB == 0 || got.Ports != strconv.Itoa(cfg.RedisPort) {
		t.Fatalf("Status = %+v", got)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("pid %d still alive after Stop", pid)
	}
	if _, err := os.Stat(r.PIDFile()); !os.IsNotExist(err) {
		t.Fatalf("pid file after Stop: %v, want it removed", err)
	}
	if err := r.Healthy(ctx); err == nil {
		t.Fatal("Healthy after Stop = nil, want an error")
	}
}

// TestRedisNode starts a second redis-server beside the stack's, as the
// nodes of a Redis Cluster would be: its own name, directory, port, pid
// file and configuration lines.
func TestRedisNode(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cfg := privateConfig(t)
	log := testLogger(t)
	node := NewRedisNode(cfg, log, RedisSpec{Name: "redis-c1", Group: "redis-cluster",
		Dir: filepath.Join(cfg.StateDir, "redis-cluster", "1"), Port: freePort(t), ExtraConf: []string{"maxmemory 64mb"}})
	s, err := New(cfg, log, []Component{node}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, node)
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if node.PIDFile() != filepath.Join(cfg.RunDir(), "redis-c1.pid") || node.PID() == 0 {
		t.Fatalf("pid file %s, pid %d", node.PIDFile(), node.PID())
	}
	if !fileContains(filepath.Join(node.DataDir(), "redis.conf"), "\nmaxmemory 64mb\n") {
		t.Fatal("redis.conf lacks the extra line")
	}
	if err := s.Down(ctx, true, []string{"redis-cluster"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(node.DataDir()); !os.IsNotExist(err) {
		t.Fatalf("node dir after purge: %v", err)
	}
}

// pids reads the pid file of every component.
func pids(cs []Component) map[string]int {
	m := map[string]int{}
	for _, c := range cs {
		m[c.Name()] = readPID(c.PIDFile())
	}
	return m
}

func TestStackUpAdoptsAndDownPurges(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cfg := privateConfig(t)
	log := testLogger(t)
	pg, redis := NewPostgres(cfg, log), NewRedis(cfg, log)
	s, err := New(cfg, log, []Component{pg, redis}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, pg)
	stopOnCleanup(t, redis)
	t.Cleanup(func() { _ = os.RemoveAll(cfg.PGSocketDir()) })

	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	first := pids(s.Components())
	for name, pid := range first {
		if pid == 0 || !alive(pid) {
			t.Fatalf("%s: pid %d after Up", name, pid)
		}
	}
	if _, err := os.Stat(cfg.Marker()); err != nil {
		t.Fatalf("marker: %v", err)
	}

	// A second Up adopts: same processes.
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if again := pids(s.Components()); again["postgres"] != first["postgres"] || again["redis"] != first["redis"] {
		t.Fatalf("second Up changed the pids: %v, then %v", first, again)
	}

	// A lost pid file: the process on the port is ours and is adopted.
	if err := os.Remove(redis.PIDFile()); err != nil {
		t.Fatal(err)
	}
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readPID(redis.PIDFile()); got != first["redis"] {
		t.Fatalf("redis pid file after adoption = %d, want %d", got, first["redis"])
	}

	var out bytes.Buffer
	if err := s.Status(ctx, &out); err != nil {
		t.Fatalf("Status: %v\n%s", err, out.String())
	}
	for _, c := range s.Components() {
		if !strings.Contains(out.String(), fmt.Sprintf("%-13s %d", c.Name(), first[c.Name()])) {
			t.Fatalf("status lacks %s with pid %d:\n%s", c.Name(), first[c.Name()], out.String())
		}
	}
	out.Reset()
	if err := s.Env(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "export SECKILL_PG_DSN='"+cfg.PGDSN()+"'\n") {
		t.Fatalf("env:\n%s", out.String())
	}

	// down --purge redis: Redis stopped and its data gone, PostgreSQL untouched.
	if err := s.Down(ctx, true, []string{"redis"}); err != nil {
		t.Fatal(err)
	}
	if alive(first["redis"]) {
		t.Fatal("redis alive after down redis")
	}
	if _, err := os.Stat(cfg.RedisDir()); !os.IsNotExist(err) {
		t.Fatalf("redis dir after purge: %v", err)
	}
	if pg.PID() != first["postgres"] {
		t.Fatal("down redis touched postgres")
	}
	if err := s.Env(ctx, &bytes.Buffer{}); !errors.Is(err, ErrNotHealthy) {
		t.Fatalf("Env with redis down = %v, want ErrNotHealthy", err)
	}

	// down --purge: everything stopped, the state dir gone.
	if err := s.Down(ctx, true, nil); err != nil {
		t.Fatal(err)
	}
	if alive(first["postgres"]) {
		t.Fatal("postgres alive after down")
	}
	if _, err := os.Stat(cfg.StateDir); !os.IsNotExist(err) {
		t.Fatalf("state dir after down --purge: %v", err)
	}
	// Without a stack, down does nothing and succeeds.
	if err := s.Down(ctx, false, nil); err != nil {
		t.Fatal(err)
	}
}

// notOurs starts a process that is not the stack's (sleep, in another
// directory) and stops it at the end of the test.
func notOurs(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "120")
	cmd.Dir = t.TempDir()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

func TestNeverTouchesProcessesNotOurs(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cfg := privateConfig(t)
	log := testLogger(t)
	redis := NewRedis(cfg, log)
	s, err := New(cfg, log, []Component{redis}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, redis)
	if err := s.initStateDir(); err != nil {
		t.Fatal(err)
	}

	// A pid file naming a process that is not ours: not ours, not stopped, not kept.
	other := notOurs(t)
	if err := writePID(redis.PIDFile(), other); err != nil {
		t.Fatal(err)
	}
	if pid := redis.PID(); pid != 0 {
		t.Fatalf("PID with a foreign pid file = %d, want 0", pid)
	}
	if err := s.Down(ctx, false, nil); err != nil {
		t.Fatal(err)
	}
	if !alive(other) {
		t.Fatal("Down stopped a process that is not ours")
	}
	if _, err := os.Stat(redis.PIDFile()); !os.IsNotExist(err) {
		t.Fatalf("foreign pid file after Down: %v, want it removed", err)
	}

	// Up with the foreign pid file again starts our own Redis beside it.
	if err := writePID(redis.PIDFile(), other); err != nil {
		t.Fatal(err)
	}
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if pid := redis.PID(); pid == 0 || pid == other || !alive(other) {
		t.Fatalf("after Up: redis pid %d, foreign %d alive=%v", pid, other, alive(other))
	}
	if err := s.Down(ctx, false, nil); err != nil {
		t.Fatal(err)
	}

	// A port held by a process that is not ours: Up refuses, names the holder and leaves it alone.
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(cfg.RedisPort))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = s.Up(ctx)
	if err == nil || !strings.Contains(err.Error(), "already in use by a process this script did not start") ||
		!strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("Up with the port taken = %v", err)
	}
	if pid, _ := redis.Adopt(ctx); pid != 0 {
		t.Fatalf("Adopt took over a listener that is not ours (pid %d)", pid)
	}
}

func TestNameServerStartHealthyStop(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cfg := privateConfig(t)
	log := testLogger(t)
	n := NewNameServer(cfg, log)
	s, err := New(cfg, log, []Component{n}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, n)
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	pid := n.PID()
	if pid == 0 {
		t.Fatal("no name server pid after Up")
	}
	if err := n.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	// The name server answers the remoting protocol; no broker is registered with it.
	registered, err := BrokerRegistered(ctx, cfg)
	if err != nil || registered {
		t.Fatalf("BrokerRegistered on a name server without a broker = %v, %v", registered, err)
	}
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if alive(pid) || n.Healthy(ctx) == nil {
		t.Fatalf("name server pid %d alive after Stop", pid)
	}
}

// runningConfig is the Config of the local stack `make test` runs against,
// read from its exports.
func runningConfig(t *testing.T) Config {
	t.Helper()
	if os.Getenv("SECKILL_STACK_DIR") == "" {
		t.Fatal(`SECKILL_STACK_DIR is not set: run make test or eval "$(deploy/local/stack.sh env)"`)
	}
	cfg, err := ConfigFromEnv(os.Getenv, repoDir(t))
	if err != nil {
		t.Fatal(err)
	}
	port := func(name string) int {
		addr := strings.TrimPrefix(os.Getenv(name), "http://")
		addr, _, _ = strings.Cut(addr, "/")
		_, p, err := net.SplitHostPort(addr)
		n, err2 := strconv.Atoi(p)
		if err != nil || err2 != nil {
			t.Fatalf("%s=%q: no port", name, os.Getenv(name))
		}
		return n
	}
	cfg.RedisPort = port("SECKILL_REDIS_ADDR")
	cfg.ProxyPort = port("SECKILL_ROCKETMQ_ENDPOINT")
	cfg.NamesrvPort = port("SECKILL_ROCKETMQ_NAMESRV")
	cfg.BrokerPort = port("SECKILL_ROCKETMQ_BROKER")
	cfg.BrokerMetricsPort = port("SECKILL_ROCKETMQ_METRICS_URL")
	if u := os.Getenv("SECKILL_RABBITMQ_URL"); u != "" { // amqp://user:pass@127.0.0.1:PORT/
		_, hostPort, _ := strings.Cut(u, "@")
		hostPort, _, _ = strings.Cut(hostPort, "/")
		_, p, err := net.SplitHostPort(hostPort)
		n, err2 := strconv.Atoi(p)
		if err != nil || err2 != nil {
			t.Fatalf("SECKILL_RABBITMQ_URL=%q: no port", u)
		}
		cfg.RabbitMQ.Port = n
	}
	cfg.RedisClusterPorts = nil
	for _, addr := range strings.Split(os.Getenv("SECKILL_REDIS_CLUSTER_ADDRS"), ",") {
		_, p, err := net.SplitHostPort(addr)
		n, err2 := strconv.Atoi(p)
		if err != nil || err2 != nil {
			t.Fatalf("SECKILL_REDIS_CLUSTER_ADDRS=%q: no port in %q", os.Getenv("SECKILL_REDIS_CLUSTER_ADDRS"), addr)
		}
		cfg.RedisClusterPorts = append(cfg.RedisClusterPorts, n)
	}
	return cfg
}

// TestRunningStackIsAdopted looks at the running stack without changing
// it: each component finds its process through the pid file, owns it, and
// finds it healthy; Adopt returns it without rewriting anything.
func TestRunningStackIsAdopted(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cfg := runningConfig(t)
	s := Default(cfg, testLogger(t))
	for _, c := range s.Components() {
		if skipped(c) { // RabbitMQ, when the stack runs without it
			continue
		}
		if _, ok := c.(Processless); ok {
			if err := c.Healthy(ctx); err != nil {
				t.Fatalf("%s: %v", c.Name(), err)
			}
			continue
		}
		before, err := os.ReadFile(c.PIDFile())
		if err != nil {
			t.Fatalf("%s: %v", c.Name(), err)
		}
		pid := c.PID()
		if pid == 0 || pid != readPID(c.PIDFile()) {
			t.Fatalf("%s: PID %d, pid file %q", c.Name(), pid, before)
		}
		if err := c.Healthy(ctx); err != nil {
			t.Fatalf("%s: %v", c.Name(), err)
		}
		if got, err := c.Adopt(ctx); err != nil || got != pid {
			t.Fatalf("%s: Adopt = %d, %v; want %d", c.Name(), got, err, pid)
		}
		if after, _ := os.ReadFile(c.PIDFile()); !bytes.Equal(before, after) {
			t.Fatalf("%s: Adopt rewrote the pid file: %q, then %q", c.Name(), before, after)
		}
		if c.Status(ctx).RSSKB == 0 {
			t.Fatalf("%s: no RSS", c.Name())
		}
	}
	registered, err := BrokerRegistered(ctx, cfg)
	if err != nil || !registered {
		t.Fatalf("BrokerRegistered on the running stack = %v, %v", registered, err)
	}
	if err := s.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestListenerPIDFindsUs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := listenerPID(l.Addr().(*net.TCPAddr).Port); got != os.Getpid() {
		t.Fatalf("listenerPID = %d, want %d", got, os.Getpid())
	}
	if (Owner{Dir: "/nonexistent", Needle: "x"}).Owns(os.Getpid()) {
		t.Fatal("Owns with another directory = true")
	}
	if alive(0) || alive(1<<22+7) {
		t.Fatal("alive of impossible pids = true")
	}
}
