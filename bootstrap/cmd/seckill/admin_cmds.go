package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// tokenCmd mints a bearer token signed with SECKILL_AUTH_SECRET.
func (c *cli) tokenCmd() *cobra.Command {
	var (
		user           int64
		admin, payment bool
		events         bool
		ttl            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "token --user N [flags]",
		Short: "Mint a bearer token for local use",
		Long: `Mint a bearer token (HS256, signed with SECKILL_AUTH_SECRET) for user N and print it.
--admin adds the admin scope (the operator of reconcile, projection rebuild and dlq replay);
--payment adds the payment scope (the payment side's callback service: PayOrder only);
--events adds the events scope (a projection consumer: EventService.Subscribe only).
A token signed with the public development secret (the default) is accepted only by a
service on the local stack (SECKILL_LOCAL_STACK=true). With SECKILL_AUTH_JWKS set the
service takes only its identity provider's tokens, and this command refuses to mint.
--ttl may not exceed SECKILL_AUTH_MAX_TOKEN_LIFETIME.`,
		Example: `  TOKEN=$(seckill token --user 42)
  export SECKILL_OPERATOR_TOKEN=$(seckill token --user 7 --admin --ttl 1h)`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			// Minting verifies nothing, so the rules that guard a running
			// service (the development secret and the operations token
			// only on the local stack) do not apply here: a token signed
			// with the public secret is worthless outside the local stack.
			cfg, _, err := loadConfigWith(map[string]string{"SECKILL_LOCAL_STACK": "true"})
			if err != nil {
				return err
			}
			if cfg.Auth.JWKS != "" {
				return errors.New("SECKILL_AUTH_JWKS is set: the service accepts only its identity provider's tokens (RS256, ES256, EdDSA); unset it to mint local HS256 tokens")
			}
			if ttl > cfg.Auth.MaxTokenLifetime {
				return fmt.Errorf("--ttl %s exceeds SECKILL_AUTH_MAX_TOKEN_LIFETIME (%s): the service would refuse the token", ttl, cfg.Auth.MaxTokenLifetime)
			}
			if string(cfg.AuthSecret) == config.DevAuthSecret && os.Getenv("SECKILL_LOCAL_STACK") != "true" {
				fmt.Fprintln(c.stderr, "note: signed with the public development secret; only a service with SECKILL_LOCAL_STACK=true accepts it")
			}
			var scopes []string
			if admin {
				scopes = append(scopes, api.ScopeAdmin)
			}
			if payment {
				scopes = append(scopes, api.ScopePayment)
			}
			if events {
				scopes = append(scopes, api.ScopeEvents)
			}
			tok, err := api.MintScopedToken([]byte(cfg.AuthSecret), user, scopes, ttl, time.Now())
			if err != nil {
				return fmt.Errorf("mint a token: %w", err)
			}
			fmt.Fprintln(c.stdout, tok)
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&user, "user", 0, "user id (the token's sub), > 0")
	f.BoolVar(&admin, "admin", false, "add the admin scope")
	f.BoolVar(&payment, "payment", false, "add the payment scope (the payment side's callback service: PayOrder)")
	f.BoolVar(&events, "events", false, "add the events scope (a projection consumer: EventService.Subscribe)")
	f.DurationVar(&ttl, "ttl", 24*time.Hour, "validity")
	return cmd
}

// withApp builds the application from the environment's configuration,
// runs fn with it and releases it afterwards.
func withApp(ctx context.Context, fn func(app *bootstrap.App) error) error {
	cfg, log, err := loadConfig()
	if err != nil {
		return err
	}
	return runApp(ctx, cfg, log, fn)
}

// withOperator verifies the operator's admin token (see operator) and only
// then builds the application and runs fn with it and the operator's
// audit actor: without a valid admin token nothing is built or changed.
func withOperator(ctx context.Context, token string, fn func(app *bootstrap.App, actor string) error) error {
	cfg, log, err := loadConfig()
	if err != nil {
		return err
	}
	actor, err := operator(cfg, token)
	if err != nil {
		return err
	}
	return runApp(ctx, cfg, log, func(app *bootstrap.App) error { return fn(app, actor) })
}

func runApp(ctx context.Context, cfg config.Config, log *slog.Logger, fn func(app *bootstrap.App) error) error {
	app, cleanup, err := bootstrap.NewApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	return fn(app)
}

// envOperatorToken holds the operator's admin token when --token is not
// given.
const envOperatorToken = "SECKILL_OPERATOR_TOKEN"

// noOperatorToken refuses a state-changing command run without an admin
// token.
const noOperatorToken = "this command changes state and is audited under the operator: " +
	"pass an admin token with --token or " + envOperatorToken + " (mint one with `seckill token --user N --admin`)"

// tokenFlag registers --token on cmd.
func tokenFlag(cmd *cobra.Command) *string {
	return cmd.Flags().String("token", "", "the operator's admin token (default $"+envOperatorToken+")")
}

// operatorToken returns the --token value, or else $SECKILL_OPERATOR_TOKEN
// ("" when neither is set).
func operatorToken(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return strings.TrimSpace(os.Getenv(envOperatorToken))
}

// operator verifies the operator's admin token (the --token value, or else
// $SECKILL_OPERATOR_TOKEN) exactly as the API does (bootstrap.NewAuthenticator:
// the JWKS of SECKILL_AUTH_JWKS or else HS256 with SECKILL_AUTH_SECRET, the
// strict claim rules, issuer, audience and maximum lifetime) and requires
// the admin scope. It returns the audit actor
// "user:<id>", or an error saying why the command refuses to run.
func operator(cfg config.Config, flagValue string) (string, error) {
	token := operatorToken(flagValue)
	if token == "" {
		return "", errors.New(noOperatorToken)
	}
	auth, err := bootstrap.NewAuthenticator(context.Background(), cfg, bootstrap.LoggerFor(cfg))
	if err != nil {
		return "", fmt.Errorf("verify the operator token: %w", err)
	}
	id, err := auth.Verify(token)
	if err != nil {
		return "", fmt.Errorf("operator token refused (%w); mint one with `seckill token --user N --admin`", err)
	}
	if !id.Admin {
		return "", fmt.Errorf("operator token of user %d refused: the admin scope is required (`seckill token --user N --admin`)", id.UserID)
	}
	return ports.UserActor(id.UserID), nil
}

// reconcileCmd runs one reconciliation pass as the operator.
func (c *cli) reconcileCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reconcile [flags]",
		Short: "Run one reconciliation pass (audited) and print its report",
		Long: `Run one reconciliation pass, as the service's reconciler does every
SECKILL_RECONCILE_INTERVAL, and print its report as JSON: the stock drift of every
activity SKU (invariant I6) and the inconsistencies examined and repaired. The pass
is audited (RECONCILE) under the operator of the admin token, --token or
$` + envOperatorToken + `. While it runs, a progress line goes to stderr every few seconds.`,
		Args: noArgs,
	}
	tok := tokenFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		defer c.progress("reconcile")()
		return withOperator(ctx, *tok, func(app *bootstrap.App, actor string) error {
			rep, err := app.Reconciler.Reconcile(ctx, actor)
			if err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			return printJSON(c.stdout, rep)
		})
	}
	return cmd
}

// projectionCmd holds projection rebuild.
func (c *cli) projectionCmd() *cobra.Command {
	rebuild := &cobra.Command{
		Use:   "rebuild [flags]",
		Short: "Rebuild the Redis query view from order_events (audited)",
		Long: `Rebuild the Redis query view of every order (what GetOrder reads) by replaying
order_events and the rejections, and print how many views were written. The rebuild is
audited (PROJECTION_REBUILD) under the operator of the admin token, --token or
$` + envOperatorToken + `. While it runs, a progress line goes to stderr every few seconds.`,
		Args: noArgs,
	}
	tok := tokenFlag(rebuild)
	rebuild.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		defer c.progress("projection rebuild")()
		return withOperator(ctx, *tok, func(app *bootstrap.App, actor string) error {
			n, err := app.Admin.RebuildProjection(ctx, actor, app.Projection)
			if err != nil {
				return fmt.Errorf("rebuild the projection: %w", err)
			}
			fmt.Fprintf(c.stdout, "views rebuilt: %d\n", n)
			return nil
		})
	}
	return groupCmd("projection", "Operate the Redis query view of the orders",
		"Operate the Redis query view of the orders (what GetOrder reads).", rebuild)
}

// dlqCmd operates dead letters through the AdminService API. A replay
// changes state: it needs the operator's admin token (--token or
// $SECKILL_OPERATOR_TOKEN), verified here before any call, and the API
// audits it under that token's user. A list uses the operator's token
// when one is given, or else a short-lived token minted from
// SECKILL_AUTH_SECRET (reads are not audited).
func (c *cli) dlqCmd() *cobra.Command {
	addrFlag := func(cmd *cobra.Command) *string {
		return cmd.Flags().String("addr", "", "API address (default SECKILL_HTTP_ADDR)")
	}
	list := &cobra.Command{
		Use:   "list [flags]",
		Short: "List the open dead letters as JSON",
		Long: `List the open dead letters (up to 500) as JSON through AdminService.ListDeadLetters of the
running service at --addr. Reads are not audited: without --token or $` + envOperatorToken + `
a short-lived admin token is minted from SECKILL_AUTH_SECRET.`,
		Args: noArgs,
	}
	group := list.Flags().String("group", "", "only this consumer group")
	listTok, listAddr := tokenFlag(list), addrFlag(list)
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, _, err := loadConfig()
		if err != nil {
			return err
		}
		token := operatorToken(*listTok)
		if token == "" && cfg.Auth.JWKS != "" {
			return errors.New("SECKILL_AUTH_JWKS is set: pass an admin token of the identity provider with --token or $" + envOperatorToken)
		}
		if token == "" {
			if token, err = api.MintToken([]byte(cfg.AuthSecret), 1, true, 10*time.Minute, time.Now()); err != nil {
				return fmt.Errorf("mint a token for the list: %w", err)
			}
		}
		req := connect.NewRequest(&seckillv1.ListDeadLettersRequest{ConsumerGroup: *group, PageSize: 500})
		req.Header().Set("Authorization", "Bearer "+token)
		res, err := adminClient(cfg, *listAddr).ListDeadLetters(cmd.Context(), req)
		if err != nil {
			return fmt.Errorf("list dead letters: %w", err)
		}
		return printJSON(c.stdout, res.Msg.GetDeadLetters())
	}

	replay := &cobra.Command{
		Use:   "replay --id N --reason TEXT [flags]",
		Short: "Replay one dead letter (audited)",
		Long: `Replay dead letter N through AdminService.ReplayDeadLetter of the running service at --addr
and print the outcome as JSON. The replay is audited (DLQ_REPLAY, with the reason) under the
operator of the admin token, --token or $` + envOperatorToken + `, which is verified before any call.`,
		Args: noArgs,
	}
	id := replay.Flags().Int64("id", 0, "the dead letter id")
	reason := replay.Flags().String("reason", "", "why (audited)")
	replayTok, replayAddr := tokenFlag(replay), addrFlag(replay)
	replay.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, _, err := loadConfig()
		if err != nil {
			return err
		}
		token := operatorToken(*replayTok)
		if _, err := operator(cfg, token); err != nil {
			return err
		}
		if *id <= 0 || *reason == "" {
			return clikit.Usagef(cmd, "dlq replay needs --id and --reason")
		}
		req := connect.NewRequest(&seckillv1.ReplayDeadLetterRequest{DeadLetterId: *id, Reason: *reason})
		req.Header().Set("Authorization", "Bearer "+token)
		res, err := adminClient(cfg, *replayAddr).ReplayDeadLetter(cmd.Context(), req)
		if err != nil {
			return fmt.Errorf("replay dead letter %d: %w", *id, err)
		}
		return printJSON(c.stdout, res.Msg)
	}
	return groupCmd("dlq", "Operate the dead letters through the running service's API",
		`List and replay the dead letters (messages a consumer gave up on) through the
AdminService API of a running service (--addr, default SECKILL_HTTP_ADDR).`, list, replay)
}

// adminClient is an AdminService client of the API at addr, or else at
// the configuration's SECKILL_HTTP_ADDR.
func adminClient(cfg config.Config, addr string) seckillv1connect.AdminServiceClient {
	if addr == "" {
		addr = cfg.HTTPAddr
	}
	return seckillv1connect.NewAdminServiceClient(http.DefaultClient, "http://"+addr)
}

// progress starts the progress lines of the long-running command what on
// c.stderr: "seckill <what>: running, 4s elapsed" every c.progressEvery,
// and "seckill <what>: finished after 5.2s" at the end when any was
// written (a short run prints nothing). The returned stop ends them and
// waits until nothing more is written.
func (c *cli) progress(what string) (stop func()) {
	if c.progressEvery <= 0 {
		return func() {}
	}
	start := time.Now()
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(c.progressEvery)
		defer tick.Stop()
		wrote := false
		for {
			select {
			case <-done:
				if wrote {
					fmt.Fprintf(c.stderr, "seckill %s: finished after %s\n", what, time.Since(start).Round(100*time.Millisecond))
				}
				return
			case <-tick.C:
				wrote = true
				fmt.Fprintf(c.stderr, "seckill %s: running, %s elapsed\n", what, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
