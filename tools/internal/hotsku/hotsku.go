package hotsku

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisadapter "github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/reserveceiling"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// hotSKUOptions are the flags of `seckill-bench hot-sku`.
type hotSKUOptions struct {
	lanes          []int
	calls, clients int
	rounds         int
}

// hotSKURun is what the phases of one `seckill-bench hot-sku` run share:
// the options, the Redis Cluster client, the run's namespace and the
// reservation store on it, and where the table goes.
type hotSKURun struct {
	opts   hotSKUOptions
	rc     *goredis.ClusterClient
	ns     string
	store  *redisadapter.Store
	stdout io.Writer
}

// hotSKURow is one lane count's figures, one per round: calls per second
// and the CPU per call of the busiest master and of all masters.
type hotSKURow struct {
	rate, hottest, all []float64
}

// Run is `seckill-bench hot-sku` with the command-line flags args, its
// table going to stdout. It measures how stock lanes spread one SKU's
// reservations over the masters of a Redis Cluster: for each lane count
// it runs the reserve ceiling (reserveceiling.Measure, every call a new
// buyer of one SKU) and reads each master's CPU (INFO cpu) before and
// after, in interleaved rounds. The figure that bounds one SKU's entry
// rate is the CPU of the busiest master per reservation: with one lane
// one master serves every call.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseHotSKUFlags(args)
	if err != nil {
		return err
	}
	addrs := redisadapter.SplitAddrs(os.Getenv("SECKILL_REDIS_CLUSTER_ADDRS"))
	if len(addrs) == 0 {
		return errors.New("hot-sku: SECKILL_REDIS_CLUSTER_ADDRS is not set: eval \"$(deploy/local/stack.sh up)\"")
	}
	cfg, log, err := benchenv.LoadConfig()
	if err != nil {
		return err
	}
	rc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, Password: string(cfg.Redis.Password)})
	defer func() { _ = rc.Close() }()
	ns := fmt.Sprintf("hotsku%d", time.Now().UnixNano())
	defer benchenv.PurgeClusterNamespace(context.WithoutCancel(ctx), rc, ns)
	store, err := redisadapter.New(rc, redisadapter.Config{Namespace: ns}, nil, log)
	if err != nil {
		return err
	}

	r := &hotSKURun{opts: o, rc: rc, ns: ns, store: store, stdout: stdout}
	rows := make([]hotSKURow, len(o.lanes))
	fmt.Fprintf(stdout, "seckill-bench hot-sku: %d reserve calls of one SKU per run, %d clients, Redis Cluster %s\n",
		o.calls, o.clients, strings.Join(addrs, ","))
	fmt.Fprintf(stdout, "%-6s %-6s %10s %10s %10s %14s %14s\n", "round", "lanes", "calls/s", "p50", "p99", "hottest us/call", "masters us/call")
	for round := 1; round <= o.rounds; round++ {
		for i, n := range o.lanes {
			if err := r.measure(ctx, round, i, n, &rows[i]); err != nil {
				return err
			}
		}
	}
	r.writeMedians(rows)
	return nil
}

// parseHotSKUFlags parses the flags of `seckill-bench hot-sku` into
// hotSKUOptions; a --lanes entry that is not a count >= 1 is an error.
func parseHotSKUFlags(args []string) (hotSKUOptions, error) {
	fs := flag.NewFlagSet("hot-sku", flag.ContinueOnError)
	var o hotSKUOptions
	lanesFlag := fs.String("lanes", "1,3", "stock lane counts to compare")
	fs.IntVar(&o.calls, "calls", 20000, "reserve calls (new buyers) per run")
	fs.IntVar(&o.clients, "clients", 64, "concurrent callers")
	fs.IntVar(&o.rounds, "rounds", 3, "interleaved rounds (medians are printed)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for f := range strings.SplitSeq(*lanesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return o, fmt.Errorf("--lanes: %q is not a lane count", f)
		}
		o.lanes = append(o.lanes, n)
	}
	return o, nil
}

// measure runs the reserve ceiling of round for the i-th lane count n on
// an activity of its own, with every master's CPU read before and after,
// adds the figures to row and prints them (in the first round after the
// lanes' placement on the masters).
func (r *hotSKURun) measure(ctx context.Context, round, i, n int, row *hotSKURow) error {
	before, err := mastersCPU(ctx, r.rc)
	if err != nil {
		return err
	}
	res, err := reserveceiling.Measure(ctx, r.store, reserveceiling.Options{ActivityID: int64(round*100 + i + 1), SKUID: 1,
		Reservations: r.opts.calls, Clients: r.opts.clients, Lanes: n})
	if err != nil {
		return err
	}
	after, err := mastersCPU(ctx, r.rc)
	if err != nil {
		return err
	}
	var hottest, all float64
	for addr, v := range after {
		d := v - before[addr]
		all += d
		hottest = max(hottest, d)
	}
	if round == 1 {
		placement, err := lanePlacement(ctx, r.rc, r.ns, int64(round*100+i+1))
		if err != nil {
			return err
		}
		fmt.Fprintf(r.stdout, "       %d lanes per master (port:lanes) %s\n", n, placement)
	}
	perCall := func(s float64) float64 { return s * 1e6 / float64(res.Calls) }
	row.rate = append(row.rate, res.PerSecond)
	row.hottest = append(row.hottest, perCall(hottest))
	row.all = append(row.all, perCall(all))
	fmt.Fprintf(r.stdout, "%-6d %-6d %10.0f %10s %10s %14.1f %14.1f\n", round, n, res.PerSecond,
		res.P50.Round(time.Microsecond), res.P99.Round(time.Microsecond), perCall(hottest), perCall(all))
	return nil
}

// writeMedians prints each lane count's medians over the rounds, its
// busiest master compared with the first lane count's, and what bounds
// one SKU's entry rate.
func (r *hotSKURun) writeMedians(rows []hotSKURow) {
	fmt.Fprintf(r.stdout, "\nmedians of %d rounds:\n", r.opts.rounds)
	base := salekit.Median(rows[0].hottest)
	for i, n := range r.opts.lanes {
		h := salekit.Median(rows[i].hottest)
		fmt.Fprintf(r.stdout, "  lanes %-3d %8.0f calls/s; busiest master %6.1f us CPU per call (%.2fx lanes %d); all masters %6.1f us\n",
			n, salekit.Median(rows[i].rate), h, base/max(h, 0.001), r.opts.lanes[0], salekit.Median(rows[i].all))
	}
	fmt.Fprintln(r.stdout, "One SKU's entry rate is bounded by one core of its busiest master: about 1e6 / (busiest us per call) calls a second.")
}

// lanePlacement counts the lanes of SKU 1 of the activity on each master
// (their stock counters, found with SCAN), as "port:count" pairs.
func lanePlacement(ctx context.Context, rc *goredis.ClusterClient, ns string, activityID int64) (string, error) {
	var mu sync.Mutex
	var out []string
	err := rc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		n := 0
		it := m.Scan(ctx, 0, fmt.Sprintf("%s:{a%d:s1*}:stock", ns, activityID), 1000).Iterator()
		for it.Next(ctx) {
			n++
		}
		if err := it.Err(); err != nil {
			return err
		}
		addr := m.Options().Addr
		mu.Lock()
		out = append(out, fmt.Sprintf("%s:%d", addr[strings.LastIndexByte(addr, ':')+1:], n))
		mu.Unlock()
		return nil
	})
	slices.Sort(out)
	return strings.Join(out, " "), err
}

// mastersCPU reads each master's CPU seconds (used_cpu_sys + used_cpu_user
// of INFO cpu), by address.
func mastersCPU(ctx context.Context, rc goredis.UniversalClient) (map[string]float64, error) {
	return benchenv.SumMasterInfo(ctx, rc, "cpu", func(line string) float64 {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				return x
			}
		}
		return 0
	})
}
