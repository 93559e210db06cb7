package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/bootstrap/clikit"
)

// buildBinaries builds seckill-bench and the service binary it starts
// (bootstrap/cmd/seckill) into dir and returns the path of seckill-bench.
func buildBinaries(t *testing.T, ctx context.Context, dir string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), ".", "../../bootstrap/cmd/seckill").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "seckill-bench")
}

// execute runs args like main does and returns what the commands wrote to
// stdout and stderr.
func execute(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = newCLI(&out, &errOut).execute(t.Context(), args)
	return out.String(), errOut.String(), err
}

// nowhere points every endpoint of the configuration at a closed port,
// so any command that did run would fail to connect.
func nowhere(t *testing.T) {
	t.Helper()
	for k, v := range map[string]string{
		"SECKILL_AUTH_SECRET":       "bench-test-secret-0123456789",
		"SECKILL_PG_DSN":            "postgres://nobody:nothing@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
		"SECKILL_REDIS_ADDR":        "127.0.0.1:1",
		"SECKILL_ROCKETMQ_ENDPOINT": "127.0.0.1:1",
		"SECKILL_ROCKETMQ_BROKER":   "127.0.0.1:1",
		"SECKILL_ROCKETMQ_NAMESRV":  "127.0.0.1:1",
		"SECKILL_HTTP_ADDR":         "127.0.0.1:1",
		"SECKILL_STACK_DIR":         "",
		"SECKILL_LOG_LEVEL":         "error",
		"SECKILL_LOCAL_STACK":       "true",
	} {
		t.Setenv(k, v)
	}
}

// commandFlags are flags each command must list in its help.
var commandFlags = map[string][]string{
	"seckill-bench place":      {"-clients", "-duration", "-ceiling-clients", "-beside"},
	"seckill-bench consume":    {"-messages", "-batches", "-concurrency"},
	"seckill-bench timeouts":   {"-units", "-payment-timeout", "-sell-over", "-within"},
	"seckill-bench sale":       {"-stock", "-buyers", "-attempts", "-arrival", "-ceiling-calls", "-out", "-pg-standby"},
	"seckill-bench chaos soak": {"-duration", "-sale-every", "-fault-every", "-faults", "-max-recovery", "-out"},
	"seckill-bench chaos":      {"-scenarios", "-stock", "-buyers", "-private-redis", "-stack"},
	"seckill-bench events":     {"-events", "-rounds", "-live-rate", "-live-duration", "-subscribers"},
}

// TestHelpOfEveryCommand: every command answers --help, -h and
// `seckill-bench help <command>` at once, with success, "Usage" and every
// flag of the command, and runs nothing: the configuration points at
// closed ports, so a command that ran would fail (or hang) instead.
func TestHelpOfEveryCommand(t *testing.T) {
	nowhere(t)
	root := newCLI(io.Discard, io.Discard).rootCmd()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var paths []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		paths = append(paths, c.CommandPath())
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() || s.Name() == "help" {
				walk(s)
			}
		}
	}
	walk(root)
	for path, flags := range commandFlags {
		if !slices.Contains(paths, path) {
			t.Errorf("the tree has no %q: %v", path, paths)
		}
		args := strings.Fields(path)[1:]
		for _, form := range [][]string{append(slices.Clone(args), "--help"), append(slices.Clone(args), "-h"),
			append([]string{"help"}, args...)} {
			start := time.Now()
			out, errOut, err := execute(t, form...)
			took := time.Since(start)
			if err != nil {
				t.Errorf("seckill-bench %s: %v", strings.Join(form, " "), err)
				continue
			}
			if took > 3*time.Second {
				t.Errorf("seckill-bench %s took %s: it did more than print the help", strings.Join(form, " "), took)
			}
			for _, f := range append([]string{"Usage", "--help"}, flags...) {
				if !strings.Contains(out, f) {
					t.Errorf("seckill-bench %s does not list %s:\n%s", strings.Join(form, " "), f, out)
				}
			}
			if errOut != "" {
				t.Errorf("seckill-bench %s wrote to stderr: %q", strings.Join(form, " "), errOut)
			}
		}
	}
	for _, args := range [][]string{{}, {"--help"}, {"-h"}, {"help"}} {
		out, _, err := execute(t, args...)
		if err != nil {
			t.Fatalf("seckill-bench %v: %v", args, err)
		}
		for _, want := range []string{"Usage", "place", "consume", "timeouts", "sale", "chaos", "help"} {
			if !strings.Contains(out, want) {
				t.Fatalf("seckill-bench %v does not name %s:\n%s", args, want, out)
			}
		}
	}
}

// TestHelpFlagSetCommandsKeepTheirFlags: the help of a command shows the
// flags and defaults its flag.FlagSet declares, -h anywhere in the
// arguments asks for it, and nothing of the flag package's usage goes to
// the process's stderr.
func TestHelpFlagSetCommandsKeepTheirFlags(t *testing.T) {
	nowhere(t)
	out, _, err := execute(t, "place", "--clients", "8", "-h")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `(default "16,64,256")`) || !strings.Contains(out, "(default 5s)") || strings.Contains(out, "Usage of") {
		t.Fatalf("place help:\n%s", out)
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"--h"}, {"x", "-help=true"}} {
		if !wantsHelp(args) {
			t.Errorf("wantsHelp(%q) = false", args)
		}
	}
	for _, args := range [][]string{{}, {"--clients", "8"}, {"--", "-h"}, {"--hours"}} {
		if wantsHelp(args) {
			t.Errorf("wantsHelp(%q) = true", args)
		}
	}
}

// TestRejectsBadCommandLines: an unknown command and a bad flag value fail
// at once with a message that names the problem and exit code 2.
func TestRejectsBadCommandLines(t *testing.T) {
	nowhere(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus" for "seckill-bench"`},
		{[]string{"plac"}, `did you mean "place"?`},
		{[]string{"timeouts", "--units", "0"}, "must be > 0"},
		{[]string{"chaos", "--scenarios", "kill-everything"}, `unknown scenario "kill-everything"`},
	} {
		start := time.Now()
		out, _, err := execute(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || clikit.ExitCode(err) != 2 {
			t.Errorf("seckill-bench %s = %v (exit %d), want exit 2 and %q", strings.Join(c.args, " "), err, clikit.ExitCode(err), c.want)
		}
		if out != "" || time.Since(start) > 3*time.Second {
			t.Errorf("seckill-bench %s printed %q in %s", strings.Join(c.args, " "), out, time.Since(start))
		}
	}
	if got := clikit.ExitCode(fmt.Errorf("wrapped: %w", errors.New("failed"))); got != 1 {
		t.Fatalf("exit code of a failure = %d", got)
	}
	if got := commandError(fmt.Errorf("bad value: %w", flag.ErrHelp)); errors.Is(got, flag.ErrHelp) || clikit.ExitCode(got) != 2 {
		t.Fatalf("commandError keeps flag.ErrHelp: %v", got)
	}
}

// TestExitCodesAndServiceBinary runs the built binaries: help exits 0, an
// unknown command 2; sale without a seckill binary beside seckill-bench
// fails before it touches anything and says how to build it.
func TestExitCodesAndServiceBinary(t *testing.T) {
	nowhere(t)
	bin := buildBinaries(t, t.Context(), t.TempDir())
	lone := filepath.Join(t.TempDir(), "seckill-bench")
	if err := os.Link(bin, lone); err != nil {
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(lone, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		bin    string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{bin, []string{"--help"}, 0, "Usage", ""},
		{bin, []string{"sale", "--help"}, 0, "-ceiling-calls", ""},
		{bin, []string{"bogus"}, 2, "", `seckill-bench: unknown command "bogus" for "seckill-bench"`},
		{lone, []string{"sale"}, 1, "", "seckill-bench: no service binary " + filepath.Join(filepath.Dir(lone), "seckill")},
		{lone, []string{"chaos"}, 1, "", "go build -o " + filepath.Dir(lone) + "/ ./bootstrap/cmd/seckill"},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), c.bin, c.args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want exit %d, %q, %q", c.bin,
				strings.Join(c.args, " "), code, stdout.String(), stderr.String(), c.code, c.stdout, c.stderr)
		}
	}
}
