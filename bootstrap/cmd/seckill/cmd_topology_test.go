package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokers"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
	"github.com/seckill-dev/seckill/ports"
)

// TestTopologyCommand runs check, apply and show against the local stack
// in a namespace of its own (mqtest: its topics and groups have fewer
// queues and retries than the production topology, on every master):
// check of the broker $SECKILL_ROCKETMQ_BROKER names lists its differences
// without a prefix and exits 1; check of every master (--broker "") lists
// them per master; apply of every master (the variable empty) repairs
// exactly those, one summary line per master; a second apply and check
// find nothing; a retry override is checked as such.
func TestTopologyCommand(t *testing.T) {
	env := mqtest.NewEnv(t)
	t.Setenv("SECKILL_TOPIC_PREFIX", env.Prefix)
	t.Setenv("SECKILL_ROCKETMQ_BROKER", env.Broker)

	out, _, err := execute(t, "topology", "check")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err == nil || clikit.ExitCode(err) != 1 || len(lines) != 11 || !strings.Contains(err.Error(), "11 difference(s) from the topology") ||
		!strings.Contains(err.Error(), "broker "+env.Broker) {
		t.Fatalf("check of the test namespace on %s: %v (exit %d)\n%s", env.Broker, err, clikit.ExitCode(err), out)
	}
	want := "topic " + env.Topic(ports.TopicOrderCreate) + ": queues is 4, want 8"
	if lines[0] != want || !slices.Contains(lines, "group "+env.Group(rocketmq.GroupAudit)+": retryMaxTimes is 2, want 3") {
		t.Fatalf("check lines:\n%s\nwant first %q", out, want)
	}

	// Every master: the same lines, prefixed with each master's name.
	n := len(env.Masters)
	var perMaster []string
	for _, m := range env.Masters {
		for _, l := range lines {
			perMaster = append(perMaster, m.Name+": "+l)
		}
	}
	out, _, err = execute(t, "topology", "check", "--broker", "")
	if clikit.ExitCode(err) != 1 || strings.TrimSpace(out) != strings.Join(perMaster, "\n") ||
		!strings.Contains(err.Error(), strconv.Itoa(11*n)+" difference(s) from the topology") {
		t.Fatalf("check of every master %v: %v\n%s", env.Masters, err, out)
	}

	t.Setenv("SECKILL_ROCKETMQ_BROKER", "")
	out, _, err = execute(t, "topology", "apply")
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	applied := strings.Split(strings.TrimSpace(out), "\n")
	if len(applied) != 12*n || applied[0] != "applied: "+perMaster[0] {
		t.Fatalf("apply on %v:\n%s", env.Masters, out)
	}
	for i, m := range env.Masters {
		if l := applied[12*i+11]; !strings.HasPrefix(l, "topology: 10 topics and 6 groups (prefix \""+env.Prefix+"\", broker "+m.String()+",") ||
			!strings.HasSuffix(l, ") match (11 change(s) applied)") {
			t.Fatalf("apply summary of %s: %q\n%s", m, l, out)
		}
	}
	for _, args := range [][]string{{"apply"}, {"check"}} {
		out, _, err = execute(t, append([]string{"topology"}, args...)...)
		got := strings.Split(strings.TrimSpace(out), "\n")
		if err != nil || len(got) != n {
			t.Fatalf("%s after apply: %v\n%s", args[0], err, out)
		}
		for i, m := range env.Masters {
			if !strings.HasPrefix(got[i], "topology: 10 topics and 6 groups (prefix \""+env.Prefix+"\", broker "+m.String()+",") {
				t.Fatalf("%s after apply, line %d: %q, want %s", args[0], i, got[i], m)
			}
		}
	}
	out, _, err = execute(t, "topology", "check", "--broker", env.Broker)
	if err != nil || !strings.HasPrefix(out, "topology: 10 topics and 6 groups (prefix \""+env.Prefix+"\", broker "+env.Broker+",") ||
		strings.Count(out, "\n") != 1 {
		t.Fatalf("check of %s after apply: %v\n%s", env.Broker, err, out)
	}

	start := time.Now()
	out, _, err = execute(t, "topology", "check", "--retry-max", "CG_SECKILL_AUDIT_V1=4")
	var wantOut string
	for _, m := range env.Masters {
		wantOut += m.Name + ": group " + env.Group(rocketmq.GroupAudit) + ": retryMaxTimes is 3, want 4\n"
	}
	if clikit.ExitCode(err) != 1 || out != wantOut {
		t.Fatalf("check with an override: %v\n%s", err, out)
	}
	t.Logf("check of %d master(s) took %v", n, time.Since(start))

	out, _, err = execute(t, "topology", "show", "--prefix", "X_", "--queues", "2")
	if err != nil || !strings.Contains(out, "X_PROD_SECKILL_ORDER_STATE_FIFO_V1") || !strings.Contains(out, "FIFO    2") ||
		!strings.Contains(out, "X_CG_SECKILL_DLQ_READER_V1") {
		t.Fatalf("show: %v\n%s", err, out)
	}
}

// TestTopologyCommandRefusals: flag values the topology cannot take are
// usage errors (exit 2) before any broker is dialled; an unreachable
// broker fails the command (exit 1) within its timeout.
func TestTopologyCommandRefusals(t *testing.T) {
	nowhere(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"topology", "check", "--retry-max", "CG_SECKILL_AUDIT_V1"}, "want GROUP=N"},
		{[]string{"topology", "apply", "--retry-max", "CG_NOPE=1"}, `unknown consumer group "CG_NOPE"`},
		{[]string{"topology", "apply", "--retry-max", "CG_SECKILL_DLQ_READER_V1=3"}, "dead-lettered again"},
		{[]string{"topology", "check", "--queues", "0"}, "want at least 1"},
		{[]string{"topology", "show", "--prefix", "a b"}, "may only contain"},
		{[]string{"topology", "check", "--timeout", "0s"}, "--timeout must be > 0"},
		{[]string{"topology", "apply", "--broker", "", "--namesrv", ""}, `--namesrv "" needs --broker`},
	} {
		out, _, err := execute(t, c.args...)
		if clikit.ExitCode(err) != 2 || !strings.Contains(err.Error(), c.want) || out != "" {
			t.Errorf("seckill %s = %v (exit %d), %q; want exit 2 and %q", strings.Join(c.args, " "), err, clikit.ExitCode(err), out, c.want)
		}
	}
	for _, args := range [][]string{{}, {"--broker", ""}} { // the broker, then the name server, on a closed port
		start := time.Now()
		_, _, err := execute(t, append([]string{"topology", "check", "--timeout", "2s"}, args...)...)
		if clikit.ExitCode(err) != 1 || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Fatalf("check %v of a closed port: %v after %v", args, err, time.Since(start))
		}
	}
}

// TestTopologyShowOnEveryBroker: show goes through the chosen broker's plug
// for every broker of the registry, with the prefix of --prefix, without
// contacting it; a flag of one broker is unknown to another.
func TestTopologyShowOnEveryBroker(t *testing.T) {
	nowhere(t)
	for _, name := range brokers.Names() {
		t.Run(name, func(t *testing.T) {
			t.Setenv("SECKILL_BROKER", name)
			out, _, err := execute(t, "topology", "show", "--prefix", "SHOW_")
			if err != nil || !strings.Contains(out, "SHOW_PROD_SECKILL_ORDER_EVENT_V1") {
				t.Fatalf("show on %s: %v\n%s", name, err, out)
			}
		})
	}
	t.Setenv("SECKILL_BROKER", "kafka")
	if _, _, err := execute(t, "topology", "show", "--queues", "2"); clikit.ExitCode(err) != 2 || !strings.Contains(err.Error(), "queues") {
		t.Fatalf("show --queues on Kafka: %v (exit %d), want a usage error naming the flag", err, clikit.ExitCode(err))
	}
}
