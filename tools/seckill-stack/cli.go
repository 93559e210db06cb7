package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/bootstrap/clikit"
	"github.com/seckill-dev/seckill/deploy/devstack"
)

// cli is what the commands share: where they write and the environment
// they read.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// exec replaces the process (mqadmin); tests stub it.
	exec func(argv0 string, argv, env []string) error
}

// newCLI returns the command line of a process with these streams and
// environment.
func newCLI(stdout, stderr io.Writer, getenv func(string) string) *cli {
	return &cli{stdout: stdout, stderr: stderr, getenv: getenv, exec: syscall.Exec}
}

// repoDir is the checkout the stack builds the service binary from and
// reads its templates in: $SECKILL_STACK_REPO (set by stack.sh), else the
// nearest directory above the working directory whose go.mod is this
// module's; "" when neither.
func (c *cli) repoDir() string {
	if d := c.getenv("SECKILL_STACK_REPO"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/seckill-dev/seckill\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// stack builds the default stack from the environment; quiet drops
// progress lines.
func (c *cli) stack(quiet bool) (*devstack.Stack, devstack.Config, error) {
	cfg, err := devstack.ConfigFromEnv(c.getenv, c.repoDir())
	if err != nil {
		return nil, cfg, err
	}
	cfg.DeprecatedFromEnviron(os.Environ())
	return devstack.Default(cfg, devstack.NewLogger(c.stderr, quiet)), cfg, nil
}

// cluster reports whether the RocketMQ cluster mode is requested: the
// --rocketmq-cluster flag or SECKILL_STACK_ROCKETMQ_CLUSTER=1.
func (c *cli) cluster(flag bool) bool {
	return flag || c.getenv("SECKILL_STACK_ROCKETMQ_CLUSTER") == "1"
}

// rootCmd builds the command tree.
func (c *cli) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "seckill-stack",
		Short: "The local stack of the seckill service: PostgreSQL, Redis, Redis Cluster, RocketMQ 5 on loopback",
		Long: `seckill-stack runs the local stack (docs/local-stack.md): a private PostgreSQL, Redis, a 3-master
Redis Cluster and RocketMQ 5 (name server, and a proxy with the broker embedded) on 127.0.0.1, all state in
${SECKILL_STACK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill/stack}. It only signals the processes it
started, by the pid in their pid file, after checking through /proc that they are ours.
deploy/local/stack.sh installs what it needs, builds it and runs it: use that script.

Typical use:   eval "$(deploy/local/stack.sh up)"`,
		Args:          clikit.UnknownCommand,
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetFlagErrorFunc(clikit.FlagError)
	root.AddCommand(c.upCmd(), c.envCmd(), c.statusCmd(), c.downCmd(), c.mqadminCmd())
	return root
}

// upCmd is `up`: start what is not running and print the export lines.
func (c *cli) upCmd() *cobra.Command {
	var quiet, clusterFlag bool
	var brokerClusterFlag string
	const clusterUsage = "also the RocketMQ cluster mode (name server, broker-a, broker-b, CLUSTER-mode proxy in " +
		"<state>/rocketmq-cluster); the RocketMQ exports then point at it ($SECKILL_STACK_ROCKETMQ_CLUSTER=1)"
	up := &cobra.Command{
		Use:   "up [--quiet] [--rocketmq-cluster] [--broker-cluster NAME]",
		Short: "Start whatever is not running, apply the topics and groups, print the export lines",
		Long: `Start whatever is not running (adopting what runs and is ours), apply the topics and groups
(seckill topology apply, built into the state dir) and print the export lines. Only the
export lines go to stdout; progress goes to stderr (--quiet silences it, not warnings).
With --rocketmq-cluster it then brings up the RocketMQ cluster mode beside the default stack
(docs/local-stack.md, "RocketMQ cluster mode") and the RocketMQ export lines point at it.
With --broker-cluster NAME it brings up the cluster mode of that broker's plug (docs/local-stack.md,
"Other brokers") and that broker's export lines point at it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, cfg, err := c.stack(quiet)
			if err != nil {
				return err
			}
			if err := s.Up(cmd.Context()); err != nil {
				return err
			}
			exports := s.Exports()
			if c.cluster(clusterFlag) {
				if err := devstack.RocketMQClusterStack(cfg, devstack.NewLogger(c.stderr, quiet)).Up(cmd.Context()); err != nil {
					return fmt.Errorf("rocketmq-cluster: %w", err)
				}
				exports = cfg.ClusterExports()
			}
			exports, err = c.withBrokerCluster(cmd.Context(), cfg, c.brokerCluster(brokerClusterFlag), true, quiet, exports)
			if err != nil {
				return err
			}
			return devstack.WriteExportLines(c.stdout, exports)
		},
	}
	up.Flags().BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	up.Flags().BoolVar(&clusterFlag, "rocketmq-cluster", false, clusterUsage)
	up.Flags().StringVar(&brokerClusterFlag, "broker-cluster", "", brokerClusterUsage)

	return up
}

// envCmd is `env`: the export lines of a running stack.
func (c *cli) envCmd() *cobra.Command {
	var envCluster bool
	var envBrokerCluster string
	env := &cobra.Command{
		Use:   "env [--rocketmq-cluster] [--broker-cluster NAME]",
		Short: "Print the export lines of a running stack (exit 1 if it is not healthy)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, cfg, err := c.stack(false)
			if err != nil {
				return err
			}
			broker := c.brokerCluster(envBrokerCluster)
			if !c.cluster(envCluster) && broker == "" {
				return s.Env(cmd.Context(), c.stdout)
			}
			if err := s.Env(cmd.Context(), io.Discard); err != nil {
				return err
			}
			exports := s.Exports()
			if c.cluster(envCluster) {
				if err := devstack.RocketMQClusterStack(cfg, devstack.NewLogger(c.stderr, false)).Env(cmd.Context(), io.Discard); err != nil {
					return fmt.Errorf("rocketmq-cluster: %w", err)
				}
				exports = cfg.ClusterExports()
			}
			exports, err = c.withBrokerCluster(cmd.Context(), cfg, broker, false, false, exports)
			if err != nil {
				return err
			}
			return devstack.WriteExportLines(c.stdout, exports)
		},
	}
	env.Flags().BoolVar(&envCluster, "rocketmq-cluster", false, "the exports of the stack with the RocketMQ cluster mode")
	env.Flags().StringVar(&envBrokerCluster, "broker-cluster", "", "the exports with the broker NAME's cluster mode")
	return env
}

// statusCmd is `status`: one line per component.
func (c *cli) statusCmd() *cobra.Command {
	var statusCluster bool
	var statusBrokerCluster string
	status := &cobra.Command{
		Use:   "status [--rocketmq-cluster] [--broker-cluster NAME]",
		Short: "One line per component: pid, ports, healthy, RSS (exit 1 if anything is not healthy)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, cfg, err := c.stack(false)
			if err != nil {
				return err
			}
			err = s.Status(cmd.Context(), c.stdout)
			if broker := c.brokerCluster(statusBrokerCluster); broker != "" {
				err = errors.Join(err, c.statusBrokerCluster(cmd.Context(), cfg, broker))
			}
			if !c.cluster(statusCluster) {
				return err
			}
			_, _ = fmt.Fprintf(c.stdout, "\nRocketMQ cluster mode (%s):\n", cfg.RocketMQClusterDir())
			if cerr := devstack.RocketMQClusterStack(cfg, devstack.NewLogger(c.stderr, false)).Status(cmd.Context(), c.stdout); cerr != nil {
				return errors.Join(err, fmt.Errorf("rocketmq-cluster: %w", cerr))
			}
			return err
		},
	}
	status.Flags().BoolVar(&statusCluster, "rocketmq-cluster", false, "also the RocketMQ cluster mode's components")
	status.Flags().StringVar(&statusBrokerCluster, "broker-cluster", "", "also the components of the broker NAME's cluster mode")
	return status
}

// downCmd is `down`: stop what the stack started, by pid.
func (c *cli) downCmd() *cobra.Command {
	down := &cobra.Command{
		Use:   "down [--purge] [--rocketmq-cluster | --broker-cluster NAME] [postgres|redis|redis-cluster|rocketmq]...",
		Short: "Stop the processes the stack started (by pid); --purge also deletes their data",
		Long: `Stop the processes the stack started, by the pid in their pid file and only if they are ours
(all components unless some are named; namesrv and proxy stand for rocketmq, redis-c1..3
for redis-cluster). --purge also
deletes their data: the named components' data, or the whole state dir when none is named
(the download cache is kept). A down of the whole stack also stops the RocketMQ cluster mode when
it exists (it lives in the state dir); --rocketmq-cluster stops (and purges) only the cluster mode.
Likewise every broker's cluster mode (--broker-cluster NAME: only that one).`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			purge, onlyCluster, brokerCluster := false, false, ""
			var names []string
			for i := 0; i < len(args); i++ {
				switch a := args[i]; {
				case a == "--purge":
					purge = true
				case a == "--rocketmq-cluster":
					onlyCluster = true
				case a == "--broker-cluster" && i+1 < len(args):
					brokerCluster = args[i+1]
					i++
				case strings.HasPrefix(a, "--broker-cluster="):
					brokerCluster = strings.TrimPrefix(a, "--broker-cluster=")
				case a == "-h", a == "--help":
					return cmd.Help()
				default:
					names = append(names, a)
				}
			}
			s, cfg, err := c.stack(false)
			if err != nil {
				return err
			}
			if brokerCluster != "" {
				bs, err := c.pluggedCluster(cfg, brokerCluster, false)
				if err != nil {
					return err
				}
				return bs.Down(cmd.Context(), purge, names)
			}
			cs := devstack.RocketMQClusterStack(cfg, devstack.NewLogger(c.stderr, false))
			if onlyCluster {
				return cs.Down(cmd.Context(), purge, names)
			}
			if len(names) == 0 && cs.Exists() {
				if err := cs.Down(cmd.Context(), false, nil); err != nil {
					return fmt.Errorf("rocketmq-cluster: %w", err)
				}
			}
			if len(names) == 0 {
				if err := c.downBrokerClusters(cmd.Context(), cfg); err != nil {
					return err
				}
			}
			return s.Down(cmd.Context(), purge, names)
		},
	}
	return down
}

// mqadminCmd is `mqadmin`: RocketMQ's mqadmin against the local name server.
func (c *cli) mqadminCmd() *cobra.Command {
	mqadmin := &cobra.Command{
		Use:                "mqadmin ARGS...",
		Short:              "Run RocketMQ's mqadmin against the local name server",
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			_, cfg, err := c.stack(false)
			if err != nil {
				return err
			}
			argv, extra, err := devstack.MQAdmin(cfg, args)
			if err != nil {
				return err
			}
			if err := c.exec(argv[0], argv, append(os.Environ(), extra...)); err != nil {
				return fmt.Errorf("mqadmin: exec %s: %w", argv[0], err)
			}
			return nil
		},
	}
	return mqadmin
}

// execute runs the command line args (without the program name) with ctx.
func (c *cli) execute(ctx context.Context, args []string) error {
	root := c.rootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var usage *clikit.UsageError
	if err != nil && !errors.As(err, &usage) && strings.HasPrefix(err.Error(), "unknown command") {
		return clikit.NewUsageError(err.Error())
	}
	return err
}
