package benchsale

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// TestSaleProcessesReadPidFiles: the processes a sale meters are the
// service, the load generator and the broker's processes whose pid files
// (absolute paths, as of the RocketMQ cluster mode) exist; those without
// one, and the stack's redis and postgres when SECKILL_STACK_DIR has no
// pid file for them, are named in the note.
func TestSaleProcessesReadPidFiles(t *testing.T) {
	t.Setenv("SECKILL_STACK_DIR", t.TempDir())
	run := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(os.Getpid())
	for _, name := range []string{"proxy", "broker-a", "broker-b"} { // namesrv.pid missing
		if err := os.WriteFile(filepath.Join(run, name+".pid"), []byte(pid+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	broker := [][2]string{{"broker proxy", filepath.Join(run, "proxy.pid")}, {"broker-a", filepath.Join(run, "broker-a.pid")},
		{"broker-b", filepath.Join(run, "broker-b.pid")}, {"namesrv", filepath.Join(run, "namesrv.pid")}}
	procs, note := saleProcesses(1, broker)
	var names []string
	for _, p := range procs {
		names = append(names, p.Name)
		if p.Name == "broker-a" && p.PID != os.Getpid() {
			t.Errorf("broker-a pid %d, want %d", p.PID, os.Getpid())
		}
	}
	if !slices.Equal(names, []string{"service", "load generator", "broker proxy", "broker-a", "broker-b"}) ||
		note != "not measured (no pid file under $SECKILL_STACK_DIR/run, or not the process in use): namesrv, redis, postgres" {
		t.Fatalf("saleProcesses: %v; note %q", names, note)
	}
}
