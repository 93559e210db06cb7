package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/tools/internal/chaos"
)

// TestChaosSubset is the bounded part of `make chaos` that `make test`
// runs: a sale on two service instances while one instance is killed, the
// consumers crash at random points between receive and acknowledge, Redis
// comes back from an older copy of its data, PostgreSQL fails over to its
// synchronous standby (streaming, and lagging in replay), and the Redis
// Cluster master of the sale's SKU is replaced by its replica (killed, and
// by a manual CLUSTER FAILOVER). The Redis scenarios use a redis-server of
// their own (--private-redis), the failovers a PostgreSQL pair and a Redis
// Cluster of their own, and the instances are the scenario's, so nothing
// of the shared stack is killed. The command fails
// when an invariant column of its table is not 0; the test also reads the
// table so a scenario that did not run fails too.
func TestChaosSubset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin := buildBinaries(t, ctx, t.TempDir())
	scenarios := []string{"kill-service", "restore-redis", "crash-consumers", "failover-postgres", "lagfailover-postgres",
		"failover-rediscluster", "switchover-rediscluster"}
	cmd := exec.CommandContext(ctx, bin, "chaos", "--private-redis", "--scenarios", strings.Join(scenarios, ","),
		"--stock", "300", "--buyers", "900", "--clients", "8", "--down", "3s", "--settle", "60s", "--crashes", "30")
	// The end-to-end tests' send bound (500 ms) instead of production's
	// 50 ms: make test runs packages in parallel on two cores, and a send
	// that times out twice leaves an acknowledged reservation whose message
	// may not be in the broker; if restore-redis then takes that
	// reservation from Redis, nothing can send it (docs/operations.md,
	// "Redis that comes back with less than it acknowledged"). make chaos
	// keeps the production bound.
	cmd.Env = append(os.Environ(), "SECKILL_SEND_TIMEOUT=500ms")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("seckill-bench chaos: %v\n%s", err, out)
	}
	rows := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 11 {
			rows[f[0]] = f[1:]
		}
	}
	for _, name := range scenarios {
		r, ok := rows[name]
		if !ok {
			t.Fatalf("no table row for %s:\n%s", name, out)
		}
		acknowledged, _ := strconv.Atoi(r[0])
		created, _ := strconv.Atoi(r[1])
		released, _ := strconv.Atoi(r[2])
		if acknowledged == 0 || created+released != acknowledged {
			t.Errorf("%s: acknowledged %d, created %d, released %d: every acknowledged reservation must end as one order or one release\n%s",
				name, acknowledged, created, released, out)
		}
		for i, col := range []string{"oversell", "lost", "dup-users", "dup-effect", "drift"} {
			if r[3+i] != "0" {
				t.Errorf("%s: %s = %s\n%s", name, col, r[3+i], out)
			}
		}
	}
	if crashes, _ := strconv.Atoi(rows["crash-consumers"][9]); crashes == 0 {
		t.Errorf("crash-consumers crashed no consumer\n%s", out)
	}
	t.Logf("\n%s", out)
}

// TestChaosSoakShort runs `chaos soak` for a minute and a half: three
// sales (payments, buyer cancels, timeouts) on two service instances, a
// Redis of the soak's own killed while the second sale's buyers arrive
// and a service instance killed while the third's wait for their
// timeouts. The command fails when an activity's invariants are violated
// or a fault gets no order through afterwards; the test also reads its
// lines and result.json so an activity or a fault that never ran fails
// too. It asserts no recovery time (--max-recovery 0) and no resource
// trend (a run under 20 minutes is too short to tell): the hour-long soak
// measures those.
func TestChaosSoakShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := buildBinaries(t, ctx, dir)
	out := filepath.Join(dir, "soak")
	cmd := exec.CommandContext(ctx, bin, "chaos", "soak", "--duration", "90s", "--sale-every", "30s", "--fault-every", "40s",
		"--faults", "kill-redis,kill-service", "--stock", "100", "--buyers", "300", "--clients", "8", "--spread", "20s",
		"--payment-timeout", "20s", "--settle", "90s", "--down", "3s", "--sample-every", "5s", "--max-recovery", "0", "--out", out)
	cmd.Env = append(os.Environ(), "SECKILL_SEND_TIMEOUT=500ms")
	text, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("seckill-bench chaos soak: %v\n%s", err, text)
	}
	b, err := os.ReadFile(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res chaos.SoakResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	var sales, paid, buyerCancels int64
	for _, a := range res.Activities {
		if a.Error != "" || a.Violations != 0 || len(a.Invariants) != 7 {
			t.Errorf("activity %d: error %q, %d violations, %d invariants checked\n%s", a.ID, a.Error, a.Violations, len(a.Invariants), text)
		}
		if !a.Probe {
			sales++
			paid += a.Paid
			buyerCancels += a.BuyerCancels
		}
	}
	if sales != 3 || paid == 0 || buyerCancels == 0 {
		t.Errorf("%d sales, %d orders paid, %d canceled by their buyer: want 3 sales with both\n%s", sales, paid, buyerCancels, text)
	}
	if len(res.Faults) != 2 || res.Faults[0].Name != "kill-redis" || res.Faults[1].Name != "kill-service" {
		t.Errorf("faults %+v: want kill-redis then kill-service\n%s", res.Faults, text)
	}
	if len(res.Samples) == 0 || len(res.Trends) != len(chaos.SoakMeasures) {
		t.Errorf("%d samples, %d trends\n%s", len(res.Samples), len(res.Trends), text)
	}
	for _, tr := range res.Trends {
		if tr.Verdict != chaos.TrendShort {
			t.Errorf("%s: verdict %q on a 90 s run, want %q", tr.Name, tr.Verdict, chaos.TrendShort)
		}
	}
	t.Logf("\n%s", text)
}
