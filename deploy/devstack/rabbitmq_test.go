package devstack

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// rabbitConfig is privateConfig with RabbitMQ on free ports.
func rabbitConfig(t *testing.T, selected bool) Config {
	t.Helper()
	cfg := privateConfig(t)
	cfg.RabbitMQ = RabbitMQConfig{Selected: selected, Port: freePort(t), DistPort: freePort(t), EpmdPort: freePort(t)}
	return cfg
}

// TestRabbitMQNotSelected: an unselected RabbitMQ that does not run is
// left alone by Up and does not make the stack unhealthy; no URL exported.
func TestRabbitMQNotSelected(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cfg := rabbitConfig(t, false)
	epmd, node := NewRabbitMQ(cfg, testLogger(t))
	s, err := New(cfg, testLogger(t), []Component{epmd, node}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if epmd.PID() != 0 || node.PID() != 0 || portOpen(ctx, cfg.RabbitMQ.Port) || portOpen(ctx, cfg.RabbitMQ.EpmdPort) {
		t.Fatal("Up started an unselected RabbitMQ")
	}
	if err := s.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	var out, st bytes.Buffer
	if err := s.Env(ctx, &out); err != nil || strings.Contains(out.String(), "SECKILL_RABBITMQ_URL") {
		t.Fatalf("Env = %v:\n%s", err, out.String())
	}
	if err := s.Status(ctx, &st); err != nil || !strings.Contains(st.String(), rabbitMQNotSelected) {
		t.Fatalf("Status = %v:\n%s", err, st.String())
	}
}

// TestRabbitMQUpAdoptDownPurge runs a real RabbitMQ node with its own epmd
// on private ports in a temporary state dir: started by Up, healthy over
// AMQP, loopback only, adopted by a second Up, stopped by pid (beam.smp and
// epmd gone), purged.
func TestRabbitMQUpAdoptDownPurge(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cfg := rabbitConfig(t, true)
	log := testLogger(t)
	epmd, node := NewRabbitMQ(cfg, log)
	stopOnCleanup(t, node)
	stopOnCleanup(t, epmd)
	s, err := New(cfg, log, []Component{epmd, node}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if err := node.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := epmd.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	beam, epmdPID := node.PID(), epmd.PID()
	if beam == 0 || epmdPID == 0 || beam != readPID(cfg.RabbitMQDir()+"/rabbit.pid") {
		t.Fatalf("pids: beam %d (rabbit.pid %d), epmd %d", beam, readPID(cfg.RabbitMQDir()+"/rabbit.pid"), epmdPID)
	}
	for _, port := range []int{cfg.RabbitMQ.Port, cfg.RabbitMQ.DistPort} {
		if got := listenerPID(port); got != beam {
			t.Fatalf("port %d: listener %d, want beam %d", port, got, beam)
		}
	}
	if got := listenerPID(cfg.RabbitMQ.EpmdPort); got != epmdPID {
		t.Fatalf("epmd port: listener %d, want %d", got, epmdPID)
	}
	assertLoopbackOnly(t, cfg.RabbitMQ.Port, cfg.RabbitMQ.DistPort, cfg.RabbitMQ.EpmdPort)
	var out bytes.Buffer
	if err := s.Env(ctx, &out); err != nil || !strings.Contains(out.String(), "export SECKILL_RABBITMQ_URL='"+cfg.RabbitMQURL()+"'\n") {
		t.Fatalf("Env = %v:\n%s", err, out.String())
	}

	// A second Up adopts both, even with the node's pid file lost.
	if err := os.Remove(node.PIDFile()); err != nil {
		t.Fatal(err)
	}
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if node.PID() != beam || epmd.PID() != epmdPID {
		t.Fatalf("second Up: pids %d/%d, want %d/%d", node.PID(), epmd.PID(), beam, epmdPID)
	}

	if err := s.Down(ctx, false, []string{"rabbitmq"}); err != nil {
		t.Fatal(err)
	}
	if alive(beam) || alive(epmdPID) {
		t.Fatalf("after Down: beam alive %v, epmd alive %v", alive(beam), alive(epmdPID))
	}
	if _, err := os.Stat(cfg.RabbitMQDir() + "/mnesia"); err != nil {
		t.Fatalf("Down without purge lost the data: %v", err)
	}
	if err := s.Down(ctx, true, []string{"rabbitmq-epmd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.RabbitMQDir()); !os.IsNotExist(err) {
		t.Fatalf("after purge: %v", err)
	}
}

// assertLoopbackOnly fails when a listener on one of ports is bound to an
// address other than 127.0.0.1 or ::1 (read from /proc/net/tcp{,6}).
func assertLoopbackOnly(t *testing.T, ports ...int) {
	t.Helper()
	want := map[int]bool{}
	for _, p := range ports {
		want[p] = true
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[3] != "0A" {
				continue
			}
			addr, hexPort, _ := strings.Cut(fields[1], ":")
			var port int
			for _, c := range hexPort {
				port = port*16 + strings.IndexRune("0123456789ABCDEF", c)
			}
			if !want[port] {
				continue
			}
			// 127.0.0.1 and ::1 as the kernel prints them (little-endian words).
			if addr != "0100007F" && addr != "00000000000000000000000001000000" {
				t.Errorf("port %d listens on %s (%s), not loopback", port, addr, f)
			}
		}
	}
}
