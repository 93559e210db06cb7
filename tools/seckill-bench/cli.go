package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/bootstrap/clikit"
	"github.com/seckill-dev/seckill/tools/internal/benchanswers"
	"github.com/seckill-dev/seckill/tools/internal/benchbroker"
	"github.com/seckill-dev/seckill/tools/internal/benchconsume"
	"github.com/seckill-dev/seckill/tools/internal/benchevents"
	"github.com/seckill-dev/seckill/tools/internal/benchplace"
	"github.com/seckill-dev/seckill/tools/internal/benchsale"
	"github.com/seckill-dev/seckill/tools/internal/benchtimeouts"
	"github.com/seckill-dev/seckill/tools/internal/chaos"
	"github.com/seckill-dev/seckill/tools/internal/clustersale"
	"github.com/seckill-dev/seckill/tools/internal/hotsku"
)

// cli is what the commands share: where they write.
type cli struct {
	stdout, stderr io.Writer
}

// newCLI returns the configuration of a command run from a terminal: its
// output to stdout, its diagnostics and progress to stderr.
func newCLI(stdout, stderr io.Writer) *cli {
	return &cli{stdout: stdout, stderr: stderr}
}

// Command groups of the root command's help.
const (
	groupBench = "bench"
	groupChaos = "chaos"
)

// rootCmd builds the whole command tree.
func (c *cli) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "seckill-bench",
		Short: "The benchmarks and the fault-injection sale of the seckill service",
		Long: `seckill-bench runs the benchmarks of docs/benchmarks.md and the fault-injection sale (chaos)
against the local stack. Each benchmark works in its own namespace (fresh topics and consumer
groups, Redis namespace, database and activity ids), all removed afterwards, so a running
service is not disturbed. sale and chaos start the service as ` + "`seckill serve`" + ` subprocesses: the
seckill binary beside this one (make build-bench builds both into bin/).

Configuration comes from the service's SECKILL_* environment variables (` + "`seckill config`" + `
lists them); eval "$(deploy/local/stack.sh env)" points them at the local stack. Progress goes
to stderr.`,
		Args:          clikit.UnknownCommand,
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetFlagErrorFunc(clikit.FlagError)
	root.AddGroup(
		&cobra.Group{ID: groupBench, Title: "Benchmarks (docs/benchmarks.md):"},
		&cobra.Group{ID: groupChaos, Title: "Fault injection (kills and restarts stack processes):"},
	)
	clikit.AddGroup(root, groupBench, c.benchCmds()...)
	c.addChaosCmds(root)
	return root
}

// benchCmds are the benchmarks of docs/benchmarks.md.
func (c *cli) benchCmds() []*cobra.Command {
	return []*cobra.Command{
		c.flagSetCmd("place", "Measure PlaceOrder through the API beside its ceilings",
			`Measure PlaceOrder through the Connect API at several client counts, beside three
ceilings measured in the same run: the reserve script alone, a bare synchronous send loop
and a naive PostgreSQL row-lock purchase.`, benchplace.Run),
		c.flagSetCmd("consume", "Measure order creation by the order-create consumer",
			`Publish order-create messages for one hot SKU through the real broker, let the
order-create consumer drain them into PostgreSQL and report orders created per second for
each batch size, beside the handler-alone ceiling, with the invariants checked. With --sweep,
orders per second for each fixed consumer concurrency listed, then under the adaptive limiter
with no tuning (--slow delays every transaction). --pg-cpu caps the local stack's PostgreSQL at
that many cores with a CPU cgroup for the run (root; restored at the end); every mode reports
the cores PostgreSQL used.`, benchconsume.Run),
		c.flagSetCmd("broker", "Measure the broker alone: its CPU per message of each kind an order needs",
			`Publish N messages of each kind an accepted order makes the broker carry (the order-create
request, the ORDER_CREATED event, the FIFO state change) from concurrent senders, consume them
with the service's consumer and a handler that only acknowledges, and report the broker's CPU
per message with its idle share subtracted: the broker's floor per order, beside nothing else.`, benchbroker.Run),
		c.flagSetCmd("answers", "Measure the sold-out answer beside the floor of any answer through the same API",
			`Answer PlaceOrder calls of new buyers once a sale is sold out, from the service and from a
bare server with the same Connect handler, codec and HTTP server answering the same SOLD_OUT
error (alone, and after the one Redis round trip of the buyer-state read), each a process of
its own, and report the server's and Redis's CPU per answer, runs interleaved.`, benchanswers.Run),
		c.flagSetCmd("events", "Measure the event subscription: catch-up, live delivery, the sale beside live subscribers",
			`Fill a scratch store with paid orders' events through the write path and sequence them,
then measure a subscriber reading from position 0 to the head (application.EventSubscriptions
directly and EventService/Subscribe over gRPC), the time from commit to a live subscriber while
orders are written at a steady rate, and PlaceOrder's rate with live subscribers beside none.
Every stream is checked: positions strictly increasing, nothing missing.`, benchevents.Run),
		c.flagSetCmd("timeouts", "Measure the payment-timeout wave",
			`Sell units through the real service with a short payment timeout, let every order expire
unpaid and report how late the orders were canceled and the stock released, beside the
PostgreSQL ceiling of the cancel transactions.`, benchtimeouts.Run),
		c.flagSetCmd("sale", "Run a whole sale against one seckill serve and write a report",
			`Run a whole sale against one seckill serve subprocess on a scratch stack: buyers arrive
and place orders through the public API while a sampler records rates, orders, backlog,
latency and CPU; then check the invariants, measure the ceilings and write result.json and
report.html.`, benchsale.Run),
		c.flagSetCmd("hot-sku", "Measure how stock lanes spread one SKU's reservations over the Redis Cluster's masters",
			`Run the reserve ceiling (every call a new buyer of one SKU) on the local stack's Redis
Cluster for each stock lane count, in interleaved rounds, and print the calls per second and
the CPU per call of the busiest master and of all masters (INFO cpu): one SKU's entry rate is
bounded by one core of its busiest master.`, hotsku.Run),
	}
}

// addChaosCmds adds the fault injections (chaos, its soak, cluster-sale)
// and the hidden floor server the answers benchmark starts.
func (c *cli) addChaosCmds(root *cobra.Command) {
	floor := c.flagSetCmd("answer-floor", "Serve the floor of a sold-out answer (started by answers)",
		`Serve OrderService with every PlaceOrder answered sold out, the floor server of the answers
benchmark, until SIGTERM.`, benchanswers.Floor)
	floor.Hidden = true
	root.AddCommand(floor)
	chaosCmd := c.flagSetCmd("chaos", "Sell through two instances while faults are injected; kills and restarts stack processes",
		`Sell through two service instances sharing the local stack while one fault per scenario is
injected (processes killed or paused, connections delayed, black-holed or reset, consumers
crashing), then check every buyer's answers against PostgreSQL and print one row per
scenario. It fails when an invariant is violated. It kills and restarts processes of the
local stack: never run it beside make test. chaos soak runs an hour of sales under faults.`, chaos.Run)
	chaosCmd.AddCommand(c.flagSetCmd("soak", "An hour of sales on two instances with a fault every five minutes; resource trends and a report",
		`Run sales for an hour (a new activity every two minutes, with payments, buyer cancels and
timeouts) on two service instances, a Redis of its own and the local stack's PostgreSQL and
broker, inject one fault of a rotating list every five minutes, check I1-I7 on every activity
at rest, measure the recovery after each fault (until the first order placed after it is
created) and sample the service's RSS, goroutines, open files, PostgreSQL connections and
Redis memory and keys. It writes result.json and report.html and fails on a violation, a
recovery over --max-recovery or a resource that grows. It kills and restarts processes of
the local stack: never run it beside make test.`, chaos.Soak))
	clikit.AddGroup(root, groupChaos, chaosCmd,
		c.flagSetCmd("cluster-sale", "Sell one hot SKU through several API and worker instances on the Redis and RocketMQ clusters; kills one of each and a broker",
			`Run a hot-SKU sale on the distributed shape: API instances (seckill serve --role api) behind a
client-side spread, worker instances (--role workers), the local stack's Redis Cluster and
its two-broker RocketMQ cluster (make cluster-sale brings both up). Mid-sale one API
instance, one worker instance and one broker are killed and brought back; half the orders
are paid, the others time out. It prints the invariants I1-I7, the share of the work per
instance and Redis master, and the CPU per acknowledged order of every process. It fails
when an invariant is violated. It kills and restarts a broker of the local stack's RocketMQ
cluster: never run it beside make test.`, clustersale.Run),
	)
}

// execute runs the command line args (without the program name) with ctx.
func (c *cli) execute(ctx context.Context, args []string) error {
	root := c.rootCmd()
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// commandError keeps the errors of a command's run as they are, except
// that an error wrapping flag.ErrHelp (the commands' "bad usage" marker:
// a flag the flag set rejects, a bad value) becomes a usageError: cobra
// would otherwise print the help and report success.
func commandError(err error) error {
	if err != nil && errors.Is(err, flag.ErrHelp) {
		return clikit.NewUsageError(err.Error())
	}
	return err
}

// entryFunc is a command that parses its own flags with a flag.FlagSet.
type entryFunc func(ctx context.Context, args []string, stdout io.Writer) error

// flagSetCmd wires entry as a command whose flags entry parses itself
// (DisableFlagParsing): its arguments go to entry as they are, one or two
// dashes alike. -h, -help or --help anywhere in them shows the help,
// whose flag list is what entry's flag.FlagSet prints for -h, and runs
// nothing.
func (c *cli) flagSetCmd(use, short, long string, entry entryFunc) *cobra.Command {
	cmd := &cobra.Command{
		Use:                use + " [flags]",
		Short:              short,
		Long:               long,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if wantsHelp(args) {
				return writeFlagSetHelp(cmd, entry)
			}
			return commandError(entry(cmd.Context(), args, c.stdout))
		},
	}
	cmd.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		if err := writeFlagSetHelp(cmd, entry); err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "seckill-bench:", err)
		}
	})
	return cmd
}

// wantsHelp reports whether args ask for help the way the flag package
// reads it: -h or -help with one or two dashes, with or without a value,
// before a "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if name == "h" || name == "help" {
			return true
		}
	}
	return false
}

// writeFlagSetHelp writes the help of a flagSetCmd: its description and
// usage line, then the flags as entry's flag.FlagSet lists them.
func writeFlagSetHelp(cmd *cobra.Command, entry entryFunc) error {
	flags, err := flagSetDefaults(entry)
	if err != nil {
		return fmt.Errorf("%s: list the flags: %w", cmd.CommandPath(), err)
	}
	w := cmd.OutOrStdout()
	desc := cmd.Long
	if desc == "" {
		desc = cmd.Short
	}
	fmt.Fprintf(w, "%s\n\nUsage:\n  %s\n\nFlags (one or two dashes):\n%s  -h, --help\n    \thelp for %s\n",
		strings.TrimSpace(desc), cmd.UseLine(), flags, cmd.Name())
	return nil
}

// flagSetDefaults returns the flag list that entry's flag.FlagSet prints
// for -h. The flag set prints it to os.Stderr (no other output can be
// set from outside the entry), so os.Stderr is a pipe for the duration of
// the call. entry gets a canceled context, and it must answer
// flag.ErrHelp: the entries parse their flags before they do anything,
// so -h runs nothing.
func flagSetDefaults(entry entryFunc) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("pipe: %w", err)
	}
	defer func() { _ = r.Close() }()
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		read <- b
	}()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	runErr := func() error {
		stderr := os.Stderr
		os.Stderr = w
		defer func() { os.Stderr = stderr }()
		return entry(ctx, []string{"-h"}, io.Discard)
	}()
	_ = w.Close()
	out := string(<-read)
	if !errors.Is(runErr, flag.ErrHelp) {
		return "", fmt.Errorf("-h did not answer with the flags (%v)", runErr)
	}
	// Drop the flag package's "Usage of <name>:" line.
	if first, rest, ok := strings.Cut(out, "\n"); ok && strings.HasPrefix(first, "Usage of ") {
		out = rest
	}
	return out, nil
}
