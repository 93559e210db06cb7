package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/migrations"
)

// execute runs args like main does and returns what the commands wrote to
// stdout and stderr.
func execute(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = newCLI(&out, &errOut).execute(t.Context(), args)
	return out.String(), errOut.String(), err
}

// nowhere points every endpoint of the configuration at a closed port and
// gives the commands a valid admin token, so any command that did run
// would get past its checks and then fail to connect.
func nowhere(t *testing.T) {
	t.Helper()
	const key = "cli-test-secret-0123456789"
	tok, err := api.MintToken([]byte(key), 9, true, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"SECKILL_AUTH_SECRET":       key,
		"SECKILL_OPERATOR_TOKEN":    tok,
		"SECKILL_LOCAL_STACK":       "true",
		"SECKILL_PG_DSN":            "postgres://nobody:nothing@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
		"SECKILL_REDIS_ADDR":        "127.0.0.1:1",
		"SECKILL_ROCKETMQ_ENDPOINT": "127.0.0.1:1",
		"SECKILL_ROCKETMQ_BROKER":   "127.0.0.1:1",
		"SECKILL_ROCKETMQ_NAMESRV":  "127.0.0.1:1",
		"SECKILL_HTTP_ADDR":         "127.0.0.1:1",
		"SECKILL_STACK_DIR":         "",
		"SECKILL_LOG_LEVEL":         "error",
	} {
		t.Setenv(k, v)
	}
}

// commandTree returns every available command of the tree, help and
// completion included, root first.
func commandTree() []*cobra.Command {
	root := newCLI(io.Discard, io.Discard).rootCmd()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var all []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		all = append(all, c)
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() || s.Name() == "help" {
				walk(s)
			}
		}
	}
	walk(root)
	return all
}

// TestHelpOfEveryCommand: every command path answers --help, -h and
// `seckill help <path>` at once, with success, "Usage" and every flag of
// the command, and runs nothing: the configuration points at closed ports
// with a valid operator token, so a command that ran would fail (or
// hang) instead.
func TestHelpOfEveryCommand(t *testing.T) {
	nowhere(t)
	tree := commandTree()
	if len(tree) < 20 {
		t.Fatalf("only %d commands in the tree", len(tree))
	}
	var paths []string
	for _, c := range tree {
		path := c.CommandPath()
		paths = append(paths, path)
		var want []string
		c.InitDefaultHelpFlag()
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				want = append(want, "--"+f.Name)
			}
		})
		want = append(want, "--help")
		args := strings.Fields(path)[1:]
		for _, form := range [][]string{append(slices.Clone(args), "--help"), append(slices.Clone(args), "-h"),
			append([]string{"help"}, args...)} {
			start := time.Now()
			out, errOut, err := execute(t, form...)
			took := time.Since(start)
			if err != nil {
				t.Errorf("seckill %s: %v", strings.Join(form, " "), err)
				continue
			}
			if took > 3*time.Second {
				t.Errorf("seckill %s took %s: it did more than print the help", strings.Join(form, " "), took)
			}
			if !strings.Contains(out, "Usage") {
				t.Errorf("seckill %s prints no Usage:\n%s", strings.Join(form, " "), out)
			}
			for _, f := range want {
				if !strings.Contains(out, f) {
					t.Errorf("seckill %s does not list %s:\n%s", strings.Join(form, " "), f, out)
				}
			}
			if errOut != "" {
				t.Errorf("seckill %s wrote to stderr: %q", strings.Join(form, " "), errOut)
			}
		}
	}
	for _, want := range []string{
		"seckill serve", "seckill migrate up", "seckill migrate down", "seckill migrate redo", "seckill migrate status",
		"seckill token", "seckill reconcile", "seckill projection rebuild", "seckill dlq list", "seckill dlq replay",
		"seckill activity list", "seckill activity show", "seckill activity create", "seckill activity update",
		"seckill activity pause", "seckill activity resume", "seckill activity close", "seckill activity add-stock",
		"seckill activity remove-stock",
		"seckill help", "seckill version", "seckill config", "seckill completion bash", "seckill completion zsh",
		"seckill completion fish", "seckill completion powershell",
	} {
		if !slices.Contains(paths, want) {
			t.Errorf("the tree has no %q: %v", want, paths)
		}
	}
	// The benchmarks and chaos are tools/seckill-bench.
	for _, gone := range []string{"seckill bench", "seckill chaos"} {
		if slices.Contains(paths, gone) {
			t.Errorf("the service's tree has %q", gone)
		}
	}
}

// TestCLIRootHelpAndHelpCommand: `seckill`, `seckill --help` and `seckill
// help` print the command tree; `seckill help <command>` that command's
// help.
func TestCLIRootHelpAndHelpCommand(t *testing.T) {
	for _, args := range [][]string{{}, {"--help"}, {"-h"}, {"help"}} {
		out, _, err := execute(t, args...)
		if err != nil {
			t.Fatalf("seckill %v: %v", args, err)
		}
		for _, want := range []string{"Usage", "serve", "migrate", "token", "reconcile", "projection", "dlq",
			"topology", "version", "config", "completion", "help"} {
			if !strings.Contains(out, want) {
				t.Fatalf("seckill %v does not name %s:\n%s", args, want, out)
			}
		}
	}
	out, _, err := execute(t, "help", "reconcile")
	if err != nil || !strings.Contains(out, "seckill reconcile [flags]") || !strings.Contains(out, "--token") {
		t.Fatalf("seckill help reconcile: %v\n%s", err, out)
	}
}

// TestVersionCommand: `seckill version` and `seckill --version` print the
// build's module version (here "(devel)"), revision, dirty flag and Go
// version.
func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, _, err := execute(t, args...)
		if err != nil {
			t.Fatalf("seckill %v: %v", args, err)
		}
		for _, want := range []string{"seckill ", "revision:", "dirty:", "go:       " + runtime.Version()} {
			if !strings.Contains(out, want) {
				t.Fatalf("seckill %v does not print %q:\n%s", args, want, out)
			}
		}
	}
}

// TestVersionFormats renders a stamped build, a dirty one and a binary
// without build information.
func TestVersionFormats(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/seckill-dev/seckill", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"}}}
	got := formatVersion(info, "linux/amd64")
	want := "seckill v1.2.3\n  module:   github.com/seckill-dev/seckill\n  revision: 0123abc (2026-11-30T10:00:00Z)\n" +
		"  dirty:    yes (uncommitted changes)\n  go:       go1.99.1 linux/amd64\n"
	if got != want {
		t.Fatalf("stamped build:\n%s\nwant\n%s", got, want)
	}
	info.Settings[2].Value = "false"
	if got := formatVersion(info, "linux/amd64"); !strings.Contains(got, "dirty:    no\n") {
		t.Fatalf("clean build:\n%s", got)
	}
	got = formatVersion(nil, "linux/amd64")
	if !strings.HasPrefix(got, "seckill (devel)\n") || !strings.Contains(got, "revision: unknown") || !strings.Contains(got, runtime.Version()) {
		t.Fatalf("no build information:\n%s", got)
	}
}

// TestCLICompletionScripts: `seckill completion <shell>` prints a script
// for each of cobra's shells.
func TestCLICompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		out, _, err := execute(t, "completion", shell)
		if err != nil || !strings.Contains(out, "seckill") || len(out) < 1000 {
			t.Fatalf("seckill completion %s: %v, %d bytes", shell, err, len(out))
		}
	}
}

// TestCLIRejectsBadCommandLines: an unknown command, subcommand or flag,
// a missing subcommand and a bad flag value of a command that parses its
// own flags fail at once with a message that names the problem and
// exit code 2; nothing runs.
func TestCLIRejectsBadCommandLines(t *testing.T) {
	nowhere(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus" for "seckill"`},
		{[]string{"serv"}, `did you mean "serve"?`},
		{[]string{"bench", "place"}, `unknown command "bench" for "seckill"`},
		{[]string{"chaos"}, `unknown command "chaos" for "seckill"`},
		{[]string{"migrate", "sideways"}, `unknown command "sideways" for "seckill migrate"`},
		{[]string{"migrate"}, "seckill migrate needs a command: down, redo, status, up"},
		{[]string{"dlq"}, "seckill dlq needs a command: list, replay"},
		{[]string{"topology"}, "seckill topology needs a command: add-group, apply, check, show"},
		{[]string{"topology", "fix"}, `unknown command "fix" for "seckill topology"`},
		{[]string{"token", "--nope"}, "unknown flag: --nope"},
		{[]string{"token", "--ttl", "forever"}, `invalid argument "forever" for "--ttl"`},
		{[]string{"reconcile", "extra"}, `unknown command "extra" for "seckill reconcile"`},
	} {
		start := time.Now()
		out, _, err := execute(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || clikit.ExitCode(err) != 2 {
			t.Errorf("seckill %s = %v (exit %d), want exit 2 and %q", strings.Join(c.args, " "), err, clikit.ExitCode(err), c.want)
		}
		if out != "" || time.Since(start) > 3*time.Second {
			t.Errorf("seckill %s printed %q in %s", strings.Join(c.args, " "), out, time.Since(start))
		}
	}
	if got := clikit.ExitCode(fmt.Errorf("wrapped: %w", errors.New("failed"))); got != 1 {
		t.Fatalf("exit code of a failure = %d", got)
	}
}

// TestCLIExitCodes runs the built binary: help exits 0, an unknown
// command 2 with a message on stderr.
func TestCLIExitCodes(t *testing.T) {
	nowhere(t)
	bin := filepath.Join(t.TempDir(), "seckill")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"--help"}, 0, "Usage", ""},
		{[]string{"reconcile", "--help"}, 0, "--token", ""},
		{[]string{"chaos"}, 2, "", `seckill: unknown command "chaos" for "seckill"`},
		{[]string{"version"}, 0, "(devel)", ""},
		{[]string{"bogus"}, 2, "", `seckill: unknown command "bogus" for "seckill"`},
		{[]string{"reconcile"}, 1, "", "seckill:"},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), bin, c.args...)
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
			t.Errorf("seckill %s: exit %d, stdout %q, stderr %q; want exit %d, %q, %q",
				strings.Join(c.args, " "), code, stdout.String(), stderr.String(), c.code, c.stdout, c.stderr)
		}
	}
}

// TestCLILegacySingleDashFlags: the single-dash long flags the flag
// package accepted still work, values that look like flags stay values,
// and the commands that parse their own flags get their arguments as
// they are.
func TestCLILegacySingleDashFlags(t *testing.T) {
	root := newCLI(io.Discard, io.Discard).rootCmd()
	for _, c := range []struct{ in, want []string }{
		{[]string{"token", "-user", "5", "-admin", "-ttl=1h"}, []string{"token", "--user", "5", "--admin", "--ttl=1h"}},
		{[]string{"dlq", "replay", "-reason", "-id", "-id", "3"}, []string{"dlq", "replay", "--reason", "-id", "--id", "3"}},
		{[]string{"reconcile", "-help"}, []string{"reconcile", "--help"}},
		{[]string{"token", "-h", "--", "-user"}, []string{"token", "-h", "--", "-user"}},
	} {
		if got := legacyLongFlags(root, c.in); !slices.Equal(got, c.want) {
			t.Errorf("legacyLongFlags(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	const key = "cli-test-secret-0123456789"
	t.Setenv("SECKILL_AUTH_SECRET", key)
	out, _, err := execute(t, "token", "-user", "5", "-admin", "-ttl", "1h")
	if err != nil {
		t.Fatal(err)
	}
	auth, err := api.NewAuthenticator([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	id, err := auth.Verify(strings.TrimSpace(out))
	if err != nil || id.UserID != 5 || !id.Admin {
		t.Fatalf("token of `token -user 5 -admin`: %+v, %v", id, err)
	}
}

// TestConfigCommandListsEveryVariable: `seckill config` and `seckill
// serve --print-config` list every variable of config.Settings and of the
// commands with its meaning, secrets masked, and serve nothing; an
// invalid configuration is listed and then refused.
func TestConfigCommandListsEveryVariable(t *testing.T) {
	nowhere(t)
	t.Setenv("SECKILL_REDIS_PASSWORD", "redis-pass-456")
	t.Setenv("SECKILL_PG_DSN", "postgres://app:hunter2hunter2@db.example:5432/seckill")
	settings, err := config.Settings(os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := execute(t, "config")
	if err != nil {
		t.Fatal(err)
	}
	printed, _, err := execute(t, "serve", "--print-config")
	if err != nil || printed != out {
		t.Fatalf("serve --print-config: %v\n%s", err, printed)
	}
	lines := strings.Split(out, "\n")
	for _, s := range settings {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, s.Key+" ") })
		if i < 0 || !strings.HasSuffix(lines[i], s.Meaning) {
			t.Errorf("%s is not listed with its meaning %q", s.Key, s.Meaning)
		}
	}
	for _, s := range commandSettings() {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, s.key+" ") })
		if i < 0 || !strings.HasSuffix(lines[i], s.meaning) {
			t.Errorf("%s is not listed with its meaning %q", s.key, s.meaning)
		}
	}
	// Without --broker or a value, seckill topology works on every master:
	// the broker variable has no default.
	if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "SECKILL_ROCKETMQ_BROKER ") }); i >= 0 &&
		(!strings.Contains(lines[i], ` "" `) || !strings.Contains(lines[i], "every master")) {
		t.Errorf("SECKILL_ROCKETMQ_BROKER is listed as %q, want no default and every master without it", lines[i])
	}
	for _, secret := range []string{"redis-pass", "hunter2", "cli-test-secret", os.Getenv("SECKILL_OPERATOR_TOKEN")} {
		if strings.Contains(out, secret) {
			t.Errorf("seckill config leaks %q", secret)
		}
	}
	if !strings.Contains(out, "db.example") || !strings.Contains(out, "SECKILL_SEND_TIMEOUT ") {
		t.Fatalf("listing:\n%s", out)
	}
	t.Setenv("SECKILL_SEND_TIMEOUT", "fast")
	out, _, err = execute(t, "config")
	if err == nil || !strings.Contains(err.Error(), "SECKILL_SEND_TIMEOUT") || !strings.Contains(out, "fast") {
		t.Fatalf("invalid configuration: %v\n%s", err, out)
	}
}

// TestCLIProgressLines: the progress of a long command is a line every
// interval on stderr and a final one, nothing after stop returns, and
// nothing at all for a run shorter than the interval.
func TestCLIProgressLines(t *testing.T) {
	var errOut syncBuffer
	c := newCLI(io.Discard, &errOut)
	c.progressEvery = 5 * time.Millisecond
	stop := c.progress("reconcile")
	time.Sleep(40 * time.Millisecond)
	stop()
	got := errOut.String()
	if !strings.Contains(got, "seckill reconcile: running, ") || !strings.HasSuffix(strings.TrimSpace(got), "s") ||
		!strings.Contains(got, "seckill reconcile: finished after ") {
		t.Fatalf("progress lines:\n%s", got)
	}
	time.Sleep(20 * time.Millisecond)
	if errOut.String() != got {
		t.Fatalf("progress written after stop:\n%s", errOut.String())
	}
	var quiet syncBuffer
	c = newCLI(io.Discard, &quiet)
	c.progress("projection rebuild")()
	if quiet.String() != "" {
		t.Fatalf("a short run printed %q", quiet.String())
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestMigrateUpDownRedoStatus applies every migration to an empty scratch
// database, rolls the newest back, redoes the one before, checks the
// version after each step, and applies the rest again.
func TestMigrateUpDownRedoStatus(t *testing.T) {
	dsn := pgtest.NewEmptyDatabase(t)
	t.Setenv("SECKILL_PG_DSN", dsn)
	t.Setenv("SECKILL_LOG_LEVEL", "error")
	files, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil || len(files) < 2 {
		t.Fatalf("migrations %v, %v", files, err)
	}
	latest := len(files)
	newest, previous := files[latest-1], files[latest-2]
	step := func(args ...string) string {
		t.Helper()
		out, _, err := execute(t, append([]string{"migrate"}, args...)...)
		if err != nil {
			t.Fatalf("seckill migrate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	version := func(want int) {
		t.Helper()
		out := step("status")
		if !strings.HasSuffix(out, fmt.Sprintf("database version: %d\n", want)) {
			t.Fatalf("status, want version %d:\n%s", want, out)
		}
	}
	if out := step("up"); !strings.HasPrefix(out, fmt.Sprintf("migrations applied: %d\n", latest)) {
		t.Fatalf("up:\n%s", out)
	}
	version(latest)
	out := step("down")
	if !strings.Contains(out, "down "+newest) || !strings.HasSuffix(out, fmt.Sprintf("database version: %d\n", latest-1)) {
		t.Fatalf("down:\n%s", out)
	}
	version(latest - 1)
	if st := step("status"); !strings.Contains(st, "pending") || !strings.Contains(st, newest) {
		t.Fatalf("status after down:\n%s", st)
	}
	out = step("redo")
	if !strings.Contains(out, "down "+previous) || !strings.Contains(out, "up "+previous) ||
		!strings.HasSuffix(out, fmt.Sprintf("database version: %d\n", latest-1)) {
		t.Fatalf("redo:\n%s", out)
	}
	version(latest - 1)
	if out := step("up"); !strings.Contains(out, "migrations applied: 1\n  "+newest) {
		t.Fatalf("up after redo:\n%s", out)
	}
	version(latest)
	if out := step("up"); out != "migrations applied: 0\n" {
		t.Fatalf("up when current:\n%s", out)
	}
}

// TestMigrateDownOfAnEmptyDatabase: down with nothing to roll back fails
// with a message.
func TestMigrateDownOfAnEmptyDatabase(t *testing.T) {
	t.Setenv("SECKILL_PG_DSN", pgtest.NewEmptyDatabase(t))
	t.Setenv("SECKILL_LOG_LEVEL", "error")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := newCLI(&out, io.Discard).execute(ctx, []string{"migrate", "down"})
	if err == nil || clikit.ExitCode(err) != 1 || !strings.Contains(err.Error(), "migrate down") {
		t.Fatalf("down of an empty database: %v\n%s", err, out.String())
	}
}
