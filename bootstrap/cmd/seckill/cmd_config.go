package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/bootstrap/config"
)

// configCmd lists the configuration.
func (c *cli) configCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "List the SECKILL_* environment variables with defaults, values and meanings",
		Long: `List every SECKILL_* environment variable the service reads, in the order the configuration
reads them, one per line: its name, where its value comes from (env or default), the value in
effect, the default and a one-line meaning. Secrets are masked (****; a DSN keeps its host and
database but not its password) and an empty value is shown as "". A second table lists the
variables that only the commands read. When the configuration is invalid the listing is
printed all the same and the command fails with the reasons.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error { return writeConfig(c.stdout, os.LookupEnv) },
	}
}

// commandSetting is an environment variable read by the commands rather
// than by the service's configuration.
type commandSetting struct {
	key, def, meaning string
	secret            bool
}

// commandSettings are the variables that only commands read.
func commandSettings() []commandSetting {
	return []commandSetting{
		{key: envOperatorToken, secret: true,
			meaning: "admin token of the operator of reconcile, projection rebuild and dlq replay (when --token is not given)"},
		{key: "SECKILL_STACK_DIR",
			meaning: "state directory of the local stack (deploy/local/stack.sh env): seckill-bench chaos and sale find its processes there"},
	}
}

// writeConfig writes the listing of `seckill config` for the environment
// lookup: the service's settings (config.Settings, the reader of
// config.Load) and then the commands' own variables. It returns the
// configuration's validation error, after the listing.
func writeConfig(w io.Writer, lookup func(string) (string, bool)) error {
	settings, loadErr := config.Settings(lookup)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "# The service's configuration (bootstrap/config), in reading order.")
	fmt.Fprintln(tw, "VARIABLE\tSOURCE\tVALUE\tDEFAULT\tMEANING")
	for _, s := range settings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Key, source(s.FromEnv), shown(s.Value), shown(s.Default), s.Meaning)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "# Read by commands only, not by the service.")
	fmt.Fprintln(tw, "VARIABLE\tSOURCE\tVALUE\tDEFAULT\tMEANING")
	for _, s := range commandSettings() {
		v, ok := lookup(s.key)
		set := ok && v != ""
		if !set {
			v = s.def
		}
		if s.secret && v != "" {
			v = "****"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.key, source(set), shown(v), shown(s.def), s.meaning)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write the configuration: %w", err)
	}
	return loadErr
}

// source names where a value comes from.
func source(fromEnv bool) string {
	if fromEnv {
		return "env"
	}
	return "default"
}

// shown quotes an empty value so the column stays readable.
func shown(v string) string {
	if v == "" {
		return `""`
	}
	return v
}

// versionCmd prints the build's version.
func (c *cli) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version, VCS revision, dirty flag and Go version of this build",
		Long: `Print what runtime/debug.ReadBuildInfo knows of this build: the module version ("(devel)" for a
build from a source tree), the VCS revision and time and whether the tree had uncommitted
changes ("unknown" when the build was not stamped, e.g. with -buildvcs=false), and the Go
version and platform.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := io.WriteString(c.stdout, versionText())
			return err
		},
	}
}

// versionText is the output of `seckill version` for this build.
func versionText() string {
	info, _ := debug.ReadBuildInfo()
	return formatVersion(info, runtime.GOOS+"/"+runtime.GOARCH)
}

// formatVersion renders info (nil when the binary carries none) for
// platform.
func formatVersion(info *debug.BuildInfo, platform string) string {
	version, module, goVersion := "(devel)", "unknown", runtime.Version()
	settings := map[string]string{}
	if info != nil {
		if v := info.Main.Version; v != "" {
			version = v
		}
		if info.Main.Path != "" {
			module = info.Main.Path
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
	}
	revision, dirty := "unknown (not stamped: built with -buildvcs=false or outside a checkout)", "unknown"
	if r := settings["vcs.revision"]; r != "" {
		revision = r
		if t := settings["vcs.time"]; t != "" {
			revision += " (" + t + ")"
		}
		dirty = "no"
		if settings["vcs.modified"] == "true" {
			dirty = "yes (uncommitted changes)"
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seckill %s\n", version)
	fmt.Fprintf(&b, "  module:   %s\n", module)
	fmt.Fprintf(&b, "  revision: %s\n", revision)
	fmt.Fprintf(&b, "  dirty:    %s\n", dirty)
	fmt.Fprintf(&b, "  go:       %s %s\n", goVersion, platform)
	return b.String()
}
