package main

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/seckill-dev/seckill/bootstrap/clikit"
)

// cli is what the commands share: where they write, and how often the
// long-running administrative commands report their progress.
type cli struct {
	stdout, stderr io.Writer
	// progressEvery is the interval of the progress lines of reconcile
	// and projection rebuild (0: none).
	progressEvery time.Duration
}

// newCLI returns the configuration of a command run from a terminal: its
// output to stdout, its diagnostics and progress to stderr.
func newCLI(stdout, stderr io.Writer) *cli {
	return &cli{stdout: stdout, stderr: stderr, progressEvery: 2 * time.Second}
}

// Command groups of the root command's help.
const (
	groupService = "service"
	groupOperate = "operate"
)

// rootCmd builds the whole command tree.
func (c *cli) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "seckill",
		Short: "The flash-sale order service and its operations",
		Long: `seckill is the flash-sale order service: one binary whose commands serve the API with
every worker, migrate the database, mint local tokens, reconcile, rebuild the query view
and operate the dead-letter queue. The benchmarks and the fault-injection sale are a binary
of their own, seckill-bench.

Configuration comes from SECKILL_* environment variables; ` + "`seckill config`" + ` lists them with
their defaults, current values and meanings. Commands that change state (reconcile,
projection rebuild, dlq replay) run as the operator of an admin token, --token or
$` + envOperatorToken + `, and are audited under that user.`,
		Args:          clikit.UnknownCommand,
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       strings.TrimSuffix(versionText(), "\n"),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetFlagErrorFunc(clikit.FlagError)
	root.AddGroup(
		&cobra.Group{ID: groupService, Title: "Service:"},
		&cobra.Group{ID: groupOperate, Title: "Operations (state-changing ones are audited):"},
	)
	clikit.AddGroup(root, groupService, c.serveCmd(), c.migrateCmd(), c.configCmd())
	clikit.AddGroup(root, groupOperate, c.tokenCmd(), c.reconcileCmd(), c.projectionCmd(), c.dlqCmd(), c.activityCmd(), c.topologyCmd())
	root.AddCommand(c.versionCmd())
	return root
}

// execute runs the command line args (without the program name) with ctx.
func (c *cli) execute(ctx context.Context, args []string) error {
	root := c.rootCmd()
	root.SetArgs(legacyLongFlags(root, args))
	return root.ExecuteContext(ctx)
}

// noArgs is the argument check of a command that takes none.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return clikit.Usagef(cmd, "unknown command %q for %q", args[0], cmd.CommandPath())
}

// groupCmd returns a command that only holds subcommands: without one it
// fails with the list of them, and an unknown one is named as such.
func groupCmd(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			return clikit.Usagef(cmd, "unknown command %q for %q%s", args[0], cmd.CommandPath(), clikit.Suggest(cmd, args[0]))
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			var names []string
			for _, s := range cmd.Commands() {
				if s.IsAvailableCommand() {
					names = append(names, s.Name())
				}
			}
			return clikit.Usagef(cmd, "%s needs a command: %s", cmd.CommandPath(), strings.Join(names, ", "))
		},
	}
	g.AddCommand(subs...)
	return g
}

// legacyLongFlags rewrites the single-dash long flags the commands
// accepted when they parsed with the flag package (-user 5, -token=T) to
// the two dashes cobra reads, for the command args run. A command that
// parses its own flags (DisableFlagParsing) gets its arguments unchanged.
func legacyLongFlags(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd.DisableFlagParsing {
		return args
	}
	cmd.InitDefaultHelpFlag()
	lookup := func(name string) *pflag.Flag {
		if f := cmd.Flags().Lookup(name); f != nil {
			return f
		}
		return cmd.InheritedFlags().Lookup(name)
	}
	out := make([]string, 0, len(args))
	value := false // the previous argument is a flag that takes this one as its value
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if value {
			value = false
			out = append(out, a)
			continue
		}
		if strings.HasPrefix(a, "-") && len(a) > 2 {
			name, _, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
			if f := lookup(name); f != nil && len(name) > 1 {
				if !strings.HasPrefix(a, "--") {
					a = "-" + a
				}
				value = !hasValue && f.NoOptDefVal == ""
			}
		}
		out = append(out, a)
	}
	return out
}
