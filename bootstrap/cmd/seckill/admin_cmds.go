package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	sconnect "github.com/seckill-dev/seckill/adapters/connect"
	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

func migrate(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) != 1 || (args[0] != "up" && args[0] != "status") {
		return fmt.Errorf("usage: seckill migrate up|status: %w", flag.ErrHelp)
	}
	cfg, log, err := loadConfig()
	if err != nil {
		return err
	}
	m, err := postgres.NewMigrator(string(cfg.Postgres.DSN), log)
	if err != nil {
		return err
	}
	defer func() { _ = m.Close() }()
	if args[0] == "up" {
		applied, err := m.Up(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "migrations applied: %d\n", len(applied))
		for _, a := range applied {
			fmt.Fprintln(stdout, "  "+a)
		}
		return nil
	}
	states, err := m.Status(ctx)
	if err != nil {
		return err
	}
	for _, s := range states {
		fmt.Fprintln(stdout, s.String())
	}
	return nil
}

func token(_ context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	user := fs.Int64("user", 0, "user id (the token's sub), > 0")
	admin := fs.Bool("admin", false, "add the admin scope")
	payment := fs.Bool("payment", false, "add the payment scope (the payment side's callback service: PayOrder)")
	ttl := fs.Duration("ttl", 24*time.Hour, "validity")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, _, err := loadConfig()
	if err != nil {
		return err
	}
	var scopes []string
	if *admin {
		scopes = append(scopes, sconnect.ScopeAdmin)
	}
	if *payment {
		scopes = append(scopes, sconnect.ScopePayment)
	}
	tok, err := sconnect.MintScopedToken([]byte(cfg.AuthSecret), *user, scopes, *ttl, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
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

// errNoOperatorToken refuses a state-changing command run without an
// admin token.
var errNoOperatorToken = errors.New("this command changes state and is audited under the operator: " +
	"pass an admin token with --token or " + envOperatorToken + " (mint one with `seckill token --user N --admin`)")

// tokenFlag registers --token on fs.
func tokenFlag(fs *flag.FlagSet) *string {
	return fs.String("token", "", "the operator's admin token (default $"+envOperatorToken+")")
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
// $SECKILL_OPERATOR_TOKEN) with the service's secret and the API's rules
// (connect.Authenticator: HS256, exp required and in the future, sub a
// user id > 0) and requires the admin scope. It returns the audit actor
// "user:<id>", or an error saying why the command refuses to run.
func operator(cfg config.Config, flagValue string) (string, error) {
	token := operatorToken(flagValue)
	if token == "" {
		return "", errNoOperatorToken
	}
	auth, err := sconnect.NewAuthenticator([]byte(cfg.AuthSecret))
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

func reconcile(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	tok := tokenFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("usage: seckill reconcile [--token T]: %w", flag.ErrHelp)
	}
	return withOperator(ctx, *tok, func(app *bootstrap.App, actor string) error {
		rep, err := app.Reconciler.Reconcile(ctx, actor)
		if err != nil {
			return err
		}
		return printJSON(stdout, rep)
	})
}

func projection(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "rebuild" {
		return fmt.Errorf("usage: seckill projection rebuild [--token T]: %w", flag.ErrHelp)
	}
	fs := flag.NewFlagSet("projection rebuild", flag.ContinueOnError)
	tok := tokenFlag(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("usage: seckill projection rebuild [--token T]: %w", flag.ErrHelp)
	}
	return withOperator(ctx, *tok, func(app *bootstrap.App, actor string) error {
		n, err := app.Admin.RebuildProjection(ctx, actor, app.Projection)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "views rebuilt: %d\n", n)
		return nil
	})
}

// dlq operates dead letters through the AdminService API. A replay changes
// state: it needs the operator's admin token (--token or
// $SECKILL_OPERATOR_TOKEN), verified here before any call, and the API
// audits it under that token's user. A list uses the operator's token
// when one is given, or else a short-lived token minted from
// SECKILL_AUTH_SECRET (reads are not audited).
func dlq(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "replay") {
		return fmt.Errorf("usage: seckill dlq list|replay: %w", flag.ErrHelp)
	}
	fs := flag.NewFlagSet("dlq "+args[0], flag.ContinueOnError)
	group := fs.String("group", "", "list: only this consumer group")
	id := fs.Int64("id", 0, "replay: the dead letter id")
	reason := fs.String("reason", "", "replay: why (audited)")
	tok := tokenFlag(fs)
	addr := fs.String("addr", "", "API address (default SECKILL_HTTP_ADDR)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	cfg, _, err := loadConfig()
	if err != nil {
		return err
	}
	if *addr == "" {
		*addr = cfg.HTTPAddr
	}
	token := operatorToken(*tok)
	client := seckillv1connect.NewAdminServiceClient(http.DefaultClient, "http://"+*addr)
	if args[0] == "list" {
		if token == "" {
			if token, err = sconnect.MintToken([]byte(cfg.AuthSecret), 1, true, 10*time.Minute, time.Now()); err != nil {
				return err
			}
		}
		req := connect.NewRequest(&seckillv1.ListDeadLettersRequest{ConsumerGroup: *group, PageSize: 500})
		req.Header().Set("Authorization", "Bearer "+token)
		res, err := client.ListDeadLetters(ctx, req)
		if err != nil {
			return err
		}
		return printJSON(stdout, res.Msg.GetDeadLetters())
	}
	if _, err := operator(cfg, token); err != nil {
		return err
	}
	if *id <= 0 || *reason == "" {
		return errors.New("dlq replay needs --id and --reason")
	}
	req := connect.NewRequest(&seckillv1.ReplayDeadLetterRequest{DeadLetterId: *id, Reason: *reason})
	req.Header().Set("Authorization", "Bearer "+token)
	res, err := client.ReplayDeadLetter(ctx, req)
	if err != nil {
		return err
	}
	return printJSON(stdout, res.Msg)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
