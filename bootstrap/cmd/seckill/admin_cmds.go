package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"connectrpc.com/connect"

	sconnect "github.com/seckill-dev/seckill/adapters/connect"
	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/bootstrap"
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
	ttl := fs.Duration("ttl", 24*time.Hour, "validity")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, _, err := loadConfig()
	if err != nil {
		return err
	}
	tok, err := sconnect.MintToken([]byte(cfg.AuthSecret), *user, *admin, *ttl, time.Now())
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
	app, cleanup, err := bootstrap.NewApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	return fn(app)
}

func reconcile(ctx context.Context, _ []string, stdout io.Writer) error {
	return withApp(ctx, func(app *bootstrap.App) error {
		rep, err := app.Reconciler.Reconcile(ctx)
		if err != nil {
			return err
		}
		return printJSON(stdout, rep)
	})
}

func projection(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) != 1 || args[0] != "rebuild" {
		return fmt.Errorf("usage: seckill projection rebuild: %w", flag.ErrHelp)
	}
	return withApp(ctx, func(app *bootstrap.App) error {
		n, err := app.Projection.Rebuild(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "views rebuilt: %d\n", n)
		return nil
	})
}

// dlq operates dead letters through the AdminService API with an admin
// token minted from SECKILL_AUTH_SECRET (or --token).
func dlq(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "replay") {
		return fmt.Errorf("usage: seckill dlq list|replay: %w", flag.ErrHelp)
	}
	fs := flag.NewFlagSet("dlq "+args[0], flag.ContinueOnError)
	group := fs.String("group", "", "list: only this consumer group")
	id := fs.Int64("id", 0, "replay: the dead letter id")
	reason := fs.String("reason", "", "replay: why (audited)")
	tok := fs.String("token", "", "bearer token (default: an admin token minted from SECKILL_AUTH_SECRET)")
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
	if *tok == "" {
		if *tok, err = sconnect.MintToken([]byte(cfg.AuthSecret), 1, true, 10*time.Minute, time.Now()); err != nil {
			return err
		}
	}
	client := seckillv1connect.NewAdminServiceClient(http.DefaultClient, "http://"+*addr)
	if args[0] == "list" {
		req := connect.NewRequest(&seckillv1.ListDeadLettersRequest{ConsumerGroup: *group, PageSize: 500})
		req.Header().Set("Authorization", "Bearer "+*tok)
		res, err := client.ListDeadLetters(ctx, req)
		if err != nil {
			return err
		}
		return printJSON(stdout, res.Msg.GetDeadLetters())
	}
	if *id <= 0 || *reason == "" {
		return errors.New("dlq replay needs --id and --reason")
	}
	req := connect.NewRequest(&seckillv1.ReplayDeadLetterRequest{DeadLetterId: *id, Reason: *reason})
	req.Header().Set("Authorization", "Bearer "+*tok)
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
