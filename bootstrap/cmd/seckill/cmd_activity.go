package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// maxListPages bounds `activity list` (500 activities a page).
const maxListPages = 200

// activityCmd is `seckill activity ...`: the operator's commands of a
// running sale, each one call of AdminService on the running service's
// API (--addr). The state-changing ones verify the operator's admin token
// first and are audited by the service under it; list and show mint a
// short-lived admin token when none is given (reads are not audited).
func (c *cli) activityCmd() *cobra.Command {
	var subs []*cobra.Command
	for _, b := range []func() *cobra.Command{c.activityList, c.activityShow, c.activityCreate, c.activityUpdate,
		c.activityPause, c.activityResume, c.activityClose, c.activityAddStock, c.activityRemoveStock} {
		subs = append(subs, b())
	}
	return groupCmd("activity", "Run a sale: list, show, create, change, pause, close and restock activities",
		`Operate the activities (flash sales) of a running service through its AdminService API
(--addr, default SECKILL_HTTP_ADDR). Every command prints the service's answer as JSON (the
protobuf JSON form: durations as strings such as "900s", times in RFC 3339). The commands that
change state run as the operator of an admin token (--token or $`+envOperatorToken+`), verified
before any call, and the service audits each under it (admin_audit).`, subs...)
}

// activityFlags are the flags every activity subcommand shares.
type activityFlags struct {
	addr, token *string
	activity    *int64
	sku         *int64
}

func addActivityFlags(cmd *cobra.Command, ids bool) activityFlags {
	f := activityFlags{
		addr:  cmd.Flags().String("addr", "", "API address (default SECKILL_HTTP_ADDR)"),
		token: tokenFlag(cmd),
	}
	if ids {
		f.activity = cmd.Flags().Int64("activity", 0, "the activity id (> 0)")
		f.sku = cmd.Flags().Int64("sku", 1, "the SKU id (> 0)")
	}
	return f
}

// ids returns the activity and SKU ids, or a usage error.
func (f activityFlags) ids(cmd *cobra.Command) (int64, int64, error) {
	if *f.activity <= 0 || *f.sku <= 0 {
		return 0, 0, clikit.Usagef(cmd, "%s needs --activity N (and --sku N, default 1), both > 0", cmd.CommandPath())
	}
	return *f.activity, *f.sku, nil
}

// call runs one AdminService call as the operator (state-changing: the
// admin token is verified first) or as a reader (a short-lived admin token
// is minted when none is given), and prints the answer as JSON.
func (c *cli) call(cmd *cobra.Command, f activityFlags, changes bool, what string,
	do func(ctx context.Context, client seckillv1connect.AdminServiceClient, auth func(connect.AnyRequest)) (proto.Message, error)) error {
	cfg, _, err := loadConfig()
	if err != nil {
		return err
	}
	token := operatorToken(*f.token)
	switch {
	case changes:
		if _, err := operator(cfg, token); err != nil {
			return err
		}
	case token == "" && cfg.Auth.JWKS != "":
		return errors.New("SECKILL_AUTH_JWKS is set: pass an admin token of the identity provider with --token or $" + envOperatorToken)
	case token == "":
		if token, err = api.MintToken([]byte(cfg.AuthSecret), 1, true, 10*time.Minute, time.Now()); err != nil {
			return fmt.Errorf("mint a token for the read: %w", err)
		}
	}
	msg, err := do(cmd.Context(), adminClient(cfg, *f.addr), func(r connect.AnyRequest) { r.Header().Set("Authorization", "Bearer "+token) })
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return printProto(c.stdout, msg)
}

// printProto writes m in the protobuf JSON form, indented.
func printProto(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: false}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode the answer: %w", err)
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// answer is the message of a unary call's response, or its error.
func answer[T any, P interface {
	*T
	proto.Message
}](res *connect.Response[T], err error) (proto.Message, error) {
	if err != nil {
		return nil, err
	}
	return P(res.Msg), nil
}

// request is msg with the caller's authorization.
func request[T any](msg *T, auth func(connect.AnyRequest)) *connect.Request[T] {
	r := connect.NewRequest(msg)
	auth(r)
	return r
}

func (c *cli) activityList() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [--state S]... [flags]",
		Short: "List the activities with their state as JSON",
		Long: `List every activity SKU (AdminService.ListActivities, all pages) with its settings and state:
SCHEDULED, ON_SALE, PAUSED, SOLD_OUT or ENDED. --state keeps only those states (repeat it).`,
		Example: `  seckill activity list
  seckill activity list --state ON_SALE --state PAUSED`,
		Args: noArgs,
	}
	f := addActivityFlags(cmd, false)
	states := cmd.Flags().StringSlice("state", nil, "keep only this state (SCHEDULED, ON_SALE, PAUSED, SOLD_OUT, ENDED); repeatable")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var want []seckillv1.ActivityState
		for _, s := range *states {
			v, ok := seckillv1.ActivityState_value["ACTIVITY_STATE_"+strings.ToUpper(strings.TrimPrefix(s, "ACTIVITY_STATE_"))]
			if !ok || v == 0 {
				return clikit.Usagef(cmd, "--state %q: want SCHEDULED, ON_SALE, PAUSED, SOLD_OUT or ENDED", s)
			}
			want = append(want, seckillv1.ActivityState(v))
		}
		return c.call(cmd, f, false, "list activities", func(ctx context.Context, client seckillv1connect.AdminServiceClient, auth func(connect.AnyRequest)) (proto.Message, error) {
			all := &seckillv1.ListActivitiesResponse{}
			page := ""
			for range maxListPages {
				res, err := client.ListActivities(ctx, request(&seckillv1.ListActivitiesRequest{
					PageSize: 500, PageToken: page, States: want}, auth))
				if err != nil {
					return nil, err
				}
				all.Activities = append(all.Activities, res.Msg.GetActivities()...)
				if page = res.Msg.GetNextPageToken(); page == "" {
					return all, nil
				}
			}
			return nil, fmt.Errorf("more than %d pages of activities", maxListPages)
		})
	}
	return cmd
}

func (c *cli) activityShow() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "show --activity N [--sku N] [flags]",
		Short:   "Show one activity with its live books as JSON",
		Long:    `Show one activity SKU (AdminService.GetActivity): its settings, its state and the stock report's books measured now.`,
		Example: `  seckill activity show --activity 7`,
		Args:    noArgs,
	}
	f := addActivityFlags(cmd, true)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		act, sku, err := f.ids(cmd)
		if err != nil {
			return err
		}
		return c.call(cmd, f, false, fmt.Sprintf("show activity %d/%d", act, sku),
			func(ctx context.Context, client seckillv1connect.AdminServiceClient, auth func(connect.AnyRequest)) (proto.Message, error) {
				return answer(client.GetActivity(ctx, request(&seckillv1.GetActivityRequest{ActivityId: act, SkuId: sku}, auth)))
			})
	}
	return cmd
}

func (c *cli) activityCreate() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create (--activity N --stock N --starts-at T --ends-at T ... | --json FILE) [flags]",
		Short: "Create an activity (audited)",
		Long: `Create an activity SKU (AdminService.CreateActivity) from flags, or from a CreateActivityRequest
in the protobuf JSON form (--json FILE, - for stdin). In that JSON, times are RFC 3339 strings and
durations are protobuf Duration strings: seconds with an "s" suffix ("900s", "0.5s"), not "15m".
--starts-at and --ends-at take RFC 3339 times or "now", "now+10m", "now+2h". Creating an existing
activity again with equal settings succeeds; with other settings it fails (use update).`,
		Example: `  seckill activity create --activity 7 --stock 100 --starts-at now+5m --ends-at now+1h \
    --payment-timeout 15m --reservation-ttl 10m --price 1999 --currency EUR
  echo '{"activityId":"7","skuId":"1","stock":"100","startsAt":"2026-12-24T10:00:00Z",
    "endsAt":"2026-12-24T12:00:00Z","paymentTimeout":"900s","reservationTtl":"600s"}' |
    seckill activity create --json -`,
		Args: noArgs,
	}
	f := addActivityFlags(cmd, true)
	fl := cmd.Flags()
	stock := fl.Int64("stock", 0, "units for sale (> 0)")
	startsAt := fl.String("starts-at", "", `when the sale opens: RFC 3339, "now" or "now+DURATION"`)
	endsAt := fl.String("ends-at", "", `when the sale closes: RFC 3339, "now" or "now+DURATION"`)
	paymentTimeout := fl.Duration("payment-timeout", 15*time.Minute, "how long an order may stay unpaid")
	reservationTTL := fl.Duration("reservation-ttl", 10*time.Minute, "how long a reservation may wait to become an order")
	lanes := fl.Int32("lanes", 1, "Redis stock lanes (1..16) for a very hot SKU")
	price := fl.Int64("price", 0, "unit price in minor units of --currency (cents); 0: not priced")
	currency := fl.String("currency", "", "ISO 4217 code of --price (EUR)")
	jsonFile := fl.String("json", "", "read a CreateActivityRequest in the protobuf JSON form from FILE (- for stdin) instead of the flags")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		req := &seckillv1.CreateActivityRequest{}
		if *jsonFile != "" {
			if err := readJSON(*jsonFile, cmd.InOrStdin(), req); err != nil {
				return clikit.Usagef(cmd, "--json: %v", err)
			}
		} else {
			act, sku, err := f.ids(cmd)
			if err != nil {
				return err
			}
			now := time.Now()
			start, err := parseWhen(*startsAt, now)
			if err != nil {
				return clikit.Usagef(cmd, "--starts-at: %v", err)
			}
			end, err := parseWhen(*endsAt, now)
			if err != nil {
				return clikit.Usagef(cmd, "--ends-at: %v", err)
			}
			req = &seckillv1.CreateActivityRequest{ActivityId: act, SkuId: sku, Stock: *stock,
				StartsAt: timestamppb.New(start), EndsAt: timestamppb.New(end),
				PaymentTimeout: durationpb.New(*paymentTimeout), ReservationTtl: durationpb.New(*reservationTTL),
				StockLanes: *lanes, UnitPrice: *price, Currency: *currency}
		}
		return c.call(cmd, f, true, fmt.Sprintf("create activity %d/%d", req.GetActivityId(), req.GetSkuId()),
			func(ctx context.Context, client seckillv1connect.AdminServiceClient, auth func(connect.AnyRequest)) (proto.Message, error) {
				return answer(client.CreateActivity(ctx, request(req, auth)))
			})
	}
	return cmd
}

func (c *cli) activityUpdate() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "update --activity N [--sku N] --ends-at T [flags]",
		Short: "Move the end of a sale (audited)",
		Long: `Change what is safe to change during a sale (AdminService.UpdateActivity): today the end,
--ends-at (RFC 3339, or "now+DURATION"; in the future: to end a sale now, use close).`,
		Example: `  seckill activity update --activity 7 --ends-at now+30m`,
		Args:    noArgs,
	}
	f := addActivityFlags(cmd, true)
	endsAt := cmd.Flags().String("ends-at", "", `the new end: RFC 3339 or "now+DURATION"`)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		act, sku, err := f.ids(cmd)
		if err != nil {
			return err
		}
		end, err := parseWhen(*endsAt, time.Now())
		if err != nil {
			return clikit.Usagef(cmd, "--ends-at: %v", err)
		}
		return c.call(cmd, f, true, fmt.Sprintf("update activity %d/%d", act, sku),
			func(ctx context.Context, client seckillv1connect.AdminServiceClient, auth func(connect.AnyRequest)) (proto.Message, error) {
				return answer(client.UpdateActivity(ctx, request(&seckillv1.UpdateActivityRequest{
					ActivityId: act, SkuId: sku, EndsAt: timestamppb.New(end),
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"ends_at"}}}, auth)))
			})
	}
	return cmd
}

// stateCommand builds pause, resume and close: one call by the ids.
func (c *cli) stateCommand(use, short, long string,
	do func(ctx context.Context, client seckillv1connect.AdminServiceClient, act, sku int64, auth func(connect.AnyRequest)) (proto.Message, error)) *cobra.Command {
	name := strings.Fields(use)[0]
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: fmt.Sprintf("  seckill activity %s --activity 7", name),
		Args:    noArgs,
	}
	f := addActivityFlags(cmd, true)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		act, sku, err := f.ids(cmd)
		if err != nil {
			return err
		}
		return c.call(cmd, f, true, fmt.Sprintf("%s activity %d/%d", name, act, sku),
			func(ctx context.Context, client seckillv1connect.AdminServiceClient, auth func(connect.AnyRequest)) (proto.Message, error) {
				return do(ctx, client, act, sku, auth)
			})
	}
	return cmd
}

func (c *cli) activityPause() *cobra.Command {
	return c.stateCommand("pause --activity N [--sku N] [flags]", "Pause a sale's entry (audited)",
		`Pause the sale (AdminService.PauseActivity): once the command returns, every PlaceOrder of the SKU
answers ACTIVITY_PAUSED until resume; everything accepted before goes on to become an order.`,
		func(ctx context.Context, client seckillv1connect.AdminServiceClient, act, sku int64, auth func(connect.AnyRequest)) (proto.Message, error) {
			return answer(client.PauseActivity(ctx, request(&seckillv1.PauseActivityRequest{ActivityId: act, SkuId: sku}, auth)))
		})
}

func (c *cli) activityResume() *cobra.Command {
	return c.stateCommand("resume --activity N [--sku N] [flags]", "Resume a paused sale (audited)",
		`Resume a paused sale (AdminService.ResumeActivity): PlaceOrder accepts reservations again.`,
		func(ctx context.Context, client seckillv1connect.AdminServiceClient, act, sku int64, auth func(connect.AnyRequest)) (proto.Message, error) {
			return answer(client.ResumeActivity(ctx, request(&seckillv1.ResumeActivityRequest{ActivityId: act, SkuId: sku}, auth)))
		})
}

func (c *cli) activityClose() *cobra.Command {
	return c.stateCommand("close --activity N [--sku N] [flags]", "End a sale now (audited)",
		`End the sale now (AdminService.CloseActivity): once the command returns PlaceOrder answers
ACTIVITY_ENDED; reservations accepted before still become orders or are released. Prints the
state after the close and the units left unsold.`,
		func(ctx context.Context, client seckillv1connect.AdminServiceClient, act, sku int64, auth func(connect.AnyRequest)) (proto.Message, error) {
			return answer(client.CloseActivity(ctx, request(&seckillv1.CloseActivityRequest{ActivityId: act, SkuId: sku}, auth)))
		})
}

// stockCommand builds add-stock and remove-stock.
func (c *cli) stockCommand(use, short, long string, add bool) *cobra.Command {
	name := strings.Fields(use)[0]
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: fmt.Sprintf("  seckill activity %s --activity 7 --quantity 50 --request-id delivery-2026-12-01", name),
		Args:    noArgs,
	}
	f := addActivityFlags(cmd, true)
	quantity := cmd.Flags().Int64("quantity", 0, "units (> 0)")
	requestID := cmd.Flags().String("request-id", "", "identifies the change: run the command again with the same id after a failure, never a new one")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		act, sku, err := f.ids(cmd)
		if err != nil {
			return err
		}
		if *quantity <= 0 || *requestID == "" {
			return clikit.Usagef(cmd, "%s needs --quantity N (> 0) and --request-id ID", cmd.CommandPath())
		}
		return c.call(cmd, f, true, fmt.Sprintf("%s of activity %d/%d", name, act, sku),
			func(ctx context.Context, client seckillv1connect.AdminServiceClient, auth func(connect.AnyRequest)) (proto.Message, error) {
				if add {
					return answer(client.AddStock(ctx, request(&seckillv1.AddStockRequest{ActivityId: act, SkuId: sku,
						Quantity: *quantity, RequestId: *requestID}, auth)))
				}
				return answer(client.RemoveStock(ctx, request(&seckillv1.RemoveStockRequest{ActivityId: act, SkuId: sku,
					Quantity: *quantity, RequestId: *requestID}, auth)))
			})
	}
	return cmd
}

func (c *cli) activityAddStock() *cobra.Command {
	return c.stockCommand("add-stock --activity N [--sku N] --quantity N --request-id ID [flags]", "Add units to a sale (audited, exactly once)",
		`Add --quantity units to the sale (AdminService.AddStock), exactly once per --request-id: after a
timeout or a crash run the same command again with the same id; it answers "applied": false and
changes nothing when the first one went through.`, true)
}

func (c *cli) activityRemoveStock() *cobra.Command {
	return c.stockCommand("remove-stock --activity N [--sku N] --quantity N --request-id ID [flags]", "Remove unreserved units (audited, exactly once)",
		`Remove --quantity units not yet reserved from the sale (AdminService.RemoveStock), exactly once
per --request-id; when fewer units are unreserved nothing is removed and the error says how many could be.`, false)
}

// parseWhen reads an RFC 3339 time, "now" or "now+DURATION".
func parseWhen(s string, now time.Time) (time.Time, error) {
	switch {
	case s == "":
		return time.Time{}, errors.New(`a time is required (RFC 3339, "now" or "now+DURATION")`)
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "now+"):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "now+"))
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("%q: want now+DURATION such as now+10m", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (2026-12-24T10:00:00Z)", s)
	}
	return t, nil
}

// readJSON decodes a protobuf JSON message from file (- for stdin).
func readJSON(file string, stdin io.Reader, m proto.Message) error {
	var (
		b   []byte
		err error
	)
	if file == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, 1<<20))
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}
	return protojson.Unmarshal(b, m)
}
