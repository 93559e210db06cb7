package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// loadConfig reads the environment and fills in the instance id.
func loadConfig() (config.Config, *slog.Logger, error) { return loadConfigWith(nil) }

// loadConfigWith reads the environment with the values of override taking
// precedence (command-line flags), and fills in the instance id.
func loadConfigWith(override map[string]string) (config.Config, *slog.Logger, error) {
	cfg, err := config.Load(func(k string) (string, bool) {
		if v, ok := override[k]; ok {
			return v, true
		}
		return os.LookupEnv(k)
	})
	if err != nil {
		return config.Config{}, nil, err
	}
	if cfg.InstanceID == "" {
		host, _ := os.Hostname()
		cfg.InstanceID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return cfg, bootstrap.LoggerFor(cfg), nil
}

// serveCmd serves the API with every worker until interrupted.
func (c *cli) serveCmd() *cobra.Command {
	var seed, printConfig bool
	var role string
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Serve the Connect API and run every worker",
		Long: `Serve the Connect API (Connect, gRPC and gRPC-Web, with gRPC health) on SECKILL_HTTP_ADDR and
the operations endpoints (/metrics, /status, /healthz, gRPC reflection) on SECKILL_OPS_ADDR, and run
every worker and consumer, until SIGINT or SIGTERM. --role api serves the API with the backlog
gate and the sent marker only; --role workers runs the consumers, relay, scanner, reconciler and
dead-letter reader without the API; several instances of each role may run together (give each
its own SECKILL_HTTP_ADDR, SECKILL_OPS_ADDR and SECKILL_INSTANCE_ID). The database must be migrated first
(seckill migrate up). --print-config lists the configuration, as ` + "`seckill config`" + ` does,
and exits without serving.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printConfig {
				return writeConfig(c.stdout, os.LookupEnv)
			}
			override := map[string]string{}
			if role != "" {
				override["SECKILL_ROLE"] = role
			}
			return c.serve(cmd.Context(), seed, override)
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "what this instance runs: api, workers or all (default SECKILL_ROLE, else all)")
	cmd.Flags().BoolVar(&seed, "seed-demo", false, "create the demo activity (1/1, 1000 units) if it does not exist")
	cmd.Flags().BoolVar(&printConfig, "print-config", false, "list the SECKILL_* configuration (secrets masked) and exit")
	return cmd
}

func (c *cli) serve(ctx context.Context, seed bool, override map[string]string) error {
	cfg, log, err := loadConfigWith(override)
	if err != nil {
		return err
	}
	if string(cfg.AuthSecret) == config.DevAuthSecret {
		log.Warn("SECKILL_AUTH_SECRET is the local development default; set a real secret outside the local stack")
	}
	log.Info("starting", "config", cfg)
	app, cleanup, err := bootstrap.NewApp(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("build the service: %w", err)
	}
	defer cleanup()
	return app.Run(ctx, func(addr net.Addr) {
		if addr == nil {
			fmt.Fprintf(c.stdout, "seckill workers are running; operations on http://%s (/metrics, /healthz)\n", app.OpsAddr())
			return
		}
		if seed {
			if err := seedDemo(ctx, app); err != nil {
				log.Error("seed demo activity", "error", err)
			}
		}
		printWelcome(c.stdout, addr, app.OpsAddr())
	})
}

// demoActivity is the demo activity. Its settings are fixed, so seeding
// it again is a no-op.
func demoActivity() ports.Activity {
	return ports.Activity{
		ActivityID: 1, SKUID: 1, Stock: 1000,
		StartsAt:       time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		EndsAt:         time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		PaymentTimeout: 15 * time.Minute, ReservationTTL: 5 * time.Minute,
	}
}

func seedDemo(ctx context.Context, app *bootstrap.App) error {
	_, err := app.Admin.CreateActivity(ctx, ports.ActorSeedDemo, demoActivity())
	if errors.Is(err, ports.ErrAlreadyExists) {
		return nil
	}
	return err
}

func printWelcome(w io.Writer, addr, ops net.Addr) {
	fmt.Fprintf(w, `
seckill is serving on http://%[1]s (Connect, gRPC and gRPC-Web; health and gRPC reflection)
operations on http://%[2]s (/metrics, /status, /healthz, gRPC reflection)

Try it (demo activity 1, SKU 1, 1000 units):
  TOKEN=$(./bin/seckill token --user 42)
  curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d '{"activityId":1,"skuId":1,"requestId":"demo-1"}' \
    http://%[1]s/seckill.v1.OrderService/PlaceOrder
  curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d '{"orderId":"<order id from above>"}' http://%[1]s/seckill.v1.OrderService/GetOrder
  PAYER=$(./bin/seckill token --user 900 --payment)   # the payment side confirms payments
  curl -s -H "Authorization: Bearer $PAYER" -H 'Content-Type: application/json' \
    -d '{"orderId":"<order id>","paymentId":"pay-1"}' http://%[1]s/seckill.v1.OrderService/PayOrder
  go tool grpcurl -plaintext %[1]s list      # a standard gRPC client: docs/cli.md
  go tool grpcurl -plaintext -H "authorization: Bearer $TOKEN" -d '{"orderId":"<order id>"}' \
    %[1]s seckill.v1.OrderService/GetOrder

Stop with Ctrl-C.
`, addr, ops)
}
