package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckill-dev/seckill/bootstrap/clikit"
	"github.com/seckill-dev/seckill/deploy/devstack"
)

// run executes the command line args with a private, empty state dir and
// cache, and returns stdout, stderr and the exit status.
func run(t *testing.T, env map[string]string, args ...string) (string, string, int) {
	t.Helper()
	dir := t.TempDir()
	vars := map[string]string{
		"HOME":               dir,
		"SECKILL_STACK_DIR":  filepath.Join(dir, "stack"),
		"SECKILL_CACHE_DIR":  filepath.Join(dir, "cache"),
		"SECKILL_STACK_REPO": dir,
	}
	for k, v := range env {
		vars[k] = v
	}
	var stdout, stderr bytes.Buffer
	c := newCLI(&stdout, &stderr, func(k string) string { return vars[k] })
	c.exec = func(argv0 string, argv, env []string) error {
		stdout.WriteString(strings.Join(argv, " ") + "\n")
		for _, kv := range env {
			if strings.HasPrefix(kv, "NAMESRV_ADDR=") {
				stdout.WriteString(kv + "\n")
			}
		}
		return nil
	}
	err := c.execute(context.Background(), args)
	if err != nil {
		stderr.WriteString("seckill-stack: " + err.Error() + "\n")
	}
	return stdout.String(), stderr.String(), clikit.ExitCode(err)
}

func TestHelpAndUsage(t *testing.T) {
	out, _, code := run(t, nil, "--help")
	if code != 0 || !strings.Contains(out, "up ") || !strings.Contains(out, "mqadmin") {
		t.Fatalf("help: exit %d\n%s", code, out)
	}
	if _, errOut, code := run(t, nil, "upp"); code != 2 || !strings.Contains(errOut, `unknown command "upp"`) {
		t.Fatalf("unknown command: exit %d, %s", code, errOut)
	}
	if _, _, code := run(t, nil, "up", "--bogus"); code != 2 {
		t.Fatalf("up --bogus: exit %d, want 2", code)
	}
	if _, errOut, code := run(t, nil, "down", "bogus"); code != 1 || !strings.Contains(errOut, "unknown argument for down: bogus") {
		t.Fatalf("down bogus: exit %d, %s", code, errOut)
	}
}

func TestWithoutAStack(t *testing.T) {
	out, errOut, code := run(t, nil, "env")
	if code != 1 || out != "" || !strings.Contains(errOut, "is not running (or not healthy)") {
		t.Fatalf("env: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = run(t, nil, "status")
	if code != 1 || !strings.HasPrefix(out, "no stack in ") {
		t.Fatalf("status: exit %d, stdout %q", code, out)
	}
	out, errOut, code = run(t, nil, "down", "--purge")
	if code != 0 || out != "" || !strings.Contains(errOut, "nothing to stop") {
		t.Fatalf("down: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := run(t, nil, "mqadmin", "clusterList"); code != 1 || !strings.Contains(errOut, "RocketMQ is not downloaded yet") {
		t.Fatalf("mqadmin without jars: exit %d, %s", code, errOut)
	}
}

func TestRocketMQClusterWithoutAStack(t *testing.T) {
	out, errOut, code := run(t, nil, "env", "--rocketmq-cluster")
	if code != 1 || out != "" || !strings.Contains(errOut, "is not running (or not healthy)") {
		t.Fatalf("env --rocketmq-cluster: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = run(t, map[string]string{"SECKILL_STACK_ROCKETMQ_CLUSTER": "1"}, "status")
	if code != 1 || !strings.HasPrefix(out, "no stack in ") || !strings.Contains(out, "RocketMQ cluster mode (") {
		t.Fatalf("status with SECKILL_STACK_ROCKETMQ_CLUSTER=1: exit %d, stdout %q", code, out)
	}
	out, errOut, code = run(t, nil, "down", "--rocketmq-cluster", "--purge")
	if code != 0 || out != "" || !strings.Contains(errOut, "nothing to stop") || !strings.Contains(errOut, "rocketmq-cluster") {
		t.Fatalf("down --rocketmq-cluster: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestBrokerClusterWithoutAStack(t *testing.T) {
	out, errOut, code := run(t, nil, "env", "--broker-cluster", "kafka")
	if code != 1 || out != "" || !strings.Contains(errOut, "is not running (or not healthy)") {
		t.Fatalf("env --broker-cluster kafka: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = run(t, map[string]string{"SECKILL_STACK_BROKER_CLUSTER": "kafka"}, "status")
	if code != 1 || !strings.HasPrefix(out, "no stack in ") || !strings.Contains(out, "kafka cluster mode (") {
		t.Fatalf("status with SECKILL_STACK_BROKER_CLUSTER=kafka: exit %d, stdout %q", code, out)
	}
	out, errOut, code = run(t, nil, "down", "--broker-cluster", "kafka", "--purge")
	if code != 0 || out != "" || !strings.Contains(errOut, "nothing to stop") || !strings.Contains(errOut, "kafka-cluster") {
		t.Fatalf("down --broker-cluster kafka: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, broker := range []string{"rabbitmq", "nope"} {
		_, errOut, code = run(t, nil, "down", "--broker-cluster="+broker)
		if code == 0 || !strings.Contains(errOut, "--broker-cluster") {
			t.Errorf("down --broker-cluster=%s: exit %d, stderr %q: want an error naming the flag", broker, code, errOut)
		}
	}
}

func TestMQAdminRunsTheToolsJVM(t *testing.T) {
	cache := t.TempDir()
	lib := filepath.Join(cache, "rocketmq", "9.9.9", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"../.complete", "rocketmq-namesrv-9.9.9.jar", "rocketmq-broker-9.9.9.jar", "rocketmq-proxy-9.9.9.jar", "rocketmq-tools-9.9.9.jar"} {
		if err := os.WriteFile(filepath.Join(lib, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(cache, "rocketmq", "current-version"), []byte("9.9.9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	java := filepath.Join(cache, "bin", "java")
	if err := os.MkdirAll(filepath.Dir(java), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(java, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, map[string]string{"SECKILL_CACHE_DIR": cache, "JAVA_HOME": cache, "SECKILL_NAMESRV_PORT": "9877"}, "mqadmin", "topicList", "-n", "x")
	if code != 0 {
		t.Fatalf("mqadmin: exit %d, %s", code, errOut)
	}
	if !strings.HasPrefix(out, java+" ") || !strings.Contains(out, devstack.AdminMain+" topicList -n x\n") || !strings.Contains(out, "-cp "+lib+"/*") ||
		!strings.Contains(out, "NAMESRV_ADDR=127.0.0.1:9877\n") {
		t.Fatalf("mqadmin command:\n%s", out)
	}
}
