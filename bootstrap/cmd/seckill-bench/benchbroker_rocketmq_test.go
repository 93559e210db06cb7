package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// TestRocketMQStackProcesses: without SECKILL_ROCKETMQ_CLUSTER_DIR the
// processes are the default stack's pid file names; with it, the cluster's
// four pid files by absolute path, which saleProcesses reads.
func TestRocketMQStackProcesses(t *testing.T) {
	t.Setenv("SECKILL_STACK_DIR", t.TempDir())
	t.Setenv("SECKILL_ROCKETMQ_CLUSTER_DIR", "")
	var e rocketMQNamespace
	if got := e.StackProcesses(); !slices.Equal(got, [][2]string{{"broker proxy", "proxy"}, {"broker", "broker"}, {"namesrv", "namesrv"}}) {
		t.Fatalf("default stack: %v", got)
	}
	dir := t.TempDir()
	t.Setenv("SECKILL_ROCKETMQ_CLUSTER_DIR", dir)
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(os.Getpid())
	for _, name := range []string{"proxy", "broker-a", "broker-b"} { // namesrv.pid missing
		if err := os.WriteFile(filepath.Join(dir, "run", name+".pid"), []byte(pid+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := e.StackProcesses()
	want := [][2]string{{"broker proxy", filepath.Join(dir, "run", "proxy.pid")}, {"broker-a", filepath.Join(dir, "run", "broker-a.pid")},
		{"broker-b", filepath.Join(dir, "run", "broker-b.pid")}, {"namesrv", filepath.Join(dir, "run", "namesrv.pid")}}
	if !slices.Equal(got, want) {
		t.Fatalf("cluster mode: %v, want %v", got, want)
	}
	procs, note := saleProcesses(1, got)
	var names []string
	for _, p := range procs {
		names = append(names, p.name)
		if p.name == "broker-a" && p.pid != os.Getpid() {
			t.Errorf("broker-a pid %d, want %d", p.pid, os.Getpid())
		}
	}
	if !slices.Equal(names, []string{"service", "load generator", "broker proxy", "broker-a", "broker-b"}) ||
		note != "not measured (no pid file under $SECKILL_STACK_DIR/run, or not the process in use): namesrv, redis, postgres" {
		t.Fatalf("saleProcesses: %v; note %q", names, note)
	}
}

// TestRocketMQNamespaceOnEveryMaster runs against the local stack (single
// node or the cluster mode): the bench namespace's topics and groups exist
// (the five topics, six groups and their six %DLQ% topics) on every master
// the name server lists, and Close deletes them there.
func TestRocketMQNamespaceOnEveryMaster(t *testing.T) {
	namesrv := os.Getenv("SECKILL_ROCKETMQ_NAMESRV")
	if namesrv == "" {
		t.Fatal("SECKILL_ROCKETMQ_NAMESRV is not set: run make test, or eval \"$(deploy/local/stack.sh env)\"")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "BENCHTEST" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10) + "_"
	e, err := newRocketMQNamespace(ctx, config.Config{}, prefix, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	masters, err := rocketmq.NewAdmin("", namesrv, 0).Masters(ctx)
	if err != nil || !slices.Equal(masters, e.masters) || len(e.topics) != 11 || len(e.groups) != 6 {
		t.Fatalf("masters %v (%v), namespace on %v with %d topics, %d groups", masters, err, e.masters, len(e.topics), len(e.groups))
	}
	for _, a := range e.admins {
		topics, err := a.Topics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		groups, err := a.Groups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range e.topics {
			if _, ok := topics[name]; !ok {
				t.Errorf("%s: topic %s missing", a.Broker(), name)
			}
		}
		for _, name := range e.groups {
			if _, ok := groups[name]; !ok {
				t.Errorf("%s: group %s missing", a.Broker(), name)
			}
		}
	}
	e.Close()
	for _, a := range e.admins {
		topics, err := a.Topics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := topics[e.topics[0]]; ok {
			t.Errorf("%s: topic %s still there after Close", a.Broker(), e.topics[0])
		}
	}
}
