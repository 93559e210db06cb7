package benchanswers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"connectrpc.com/connect"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/seckill-dev/seckill/adapters/api"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
	"github.com/seckill-dev/seckill/tools/internal/saleload"
)

// answersOptions are the flags of `seckill-bench answers`.
type answersOptions struct {
	calls, warmup, clients, runs int
	protocol, out                string
}

// answerMode is one server the answers bench drives: the service, or the
// floor server with or without its Redis round trip.
type answerMode struct {
	name string
	// floorArgs are the answer-floor command's flags; nil: the service.
	floorArgs []string
}

// answerFigures is what one mode cost in one run, per answer: the server
// process's CPU, Redis's, this process's (the load generator), and the
// answers per second.
type answerFigures struct {
	server, redis, loadgen, rate float64
}

// Run is `seckill-bench answers` with the command-line flags args, its
// table going to stdout. It measures the answer a buyer gets once a sale
// is sold out, beside the floor of any answer through the same API: a
// bare server with the same generated Connect handler, codec and
// net/http server and no authentication, rate limit, metrics or logging,
// answering the same FailedPrecondition error with its SOLD_OUT
// ErrorInfo, once with nothing else and once with the one Redis round
// trip the real answer needs (the buyer-state read of PlaceOrder's
// sold-out mark: EXISTS and HEXISTS in one pipeline, which tells a buyer
// who holds a unit from one who does not). Each server is a process of
// its own, driven by the sale's load generator (Connect JSON over
// HTTP/1.1 with a connection per client as in bench sale, or gRPC over
// h2c as in bench place; a new buyer with a token of its own per call);
// the figures are the server's and Redis's CPU over the measured calls
// divided by the answers, with nothing subtracted. The modes are
// interleaved within each run.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseAnswersOptions(args)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	sc, exe, _, err := saleload.ServiceScratch(ctx, o.out, 0, "")
	if err != nil {
		return err
	}
	defer sc.Close()
	redisPID, err := benchenv.StackPID("redis")
	if err != nil {
		return err
	}
	db := strconv.Itoa(sc.Config.Redis.DB)
	modes := []answerMode{
		{name: "service: sold-out answer"},
		{name: "floor: bare answer", floorArgs: []string{}},
		{name: "floor: answer + buyer-state read", floorArgs: []string{"--redis-db", db}},
	}
	fmt.Fprintf(stdout, "seckill-bench answers: %d cores, %d measured calls per mode and run after %d warm-up calls, %d clients, %s, %d runs\n\n",
		runtime.NumCPU(), o.calls, o.warmup, o.clients, saleload.Options{Protocol: o.protocol}.ProtocolText(), o.runs)
	fmt.Fprintf(stdout, "%-4s %-34s %10s %10s %10s %12s\n", "run", "mode", "server µs", "Redis µs", "loadgen µs", "answers/s")
	results := make([][]answerFigures, len(modes))
	for run := 1; run <= o.runs; run++ {
		for i, m := range modes {
			offset := ((run-1)*len(modes) + i) * (o.calls + o.warmup)
			f, err := answerRun(ctx, sc, o, m, exe, self, redisPID, offset)
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", run, m.name, err)
			}
			results[i] = append(results[i], f)
			fmt.Fprintf(stdout, "%-4d %-34s %10.1f %10.1f %10.1f %12.0f\n", run, m.name, f.server, f.redis, f.loadgen, f.rate)
		}
	}
	writeAnswerMedians(stdout, modes, results)
	return nil
}

// parseAnswersOptions reads and validates the flags.
func parseAnswersOptions(args []string) (answersOptions, error) {
	fs := flag.NewFlagSet("answers", flag.ContinueOnError)
	var o answersOptions
	fs.IntVar(&o.calls, "calls", 40000, "measured calls per mode and run, each a new buyer")
	fs.IntVar(&o.warmup, "warmup", 2000, "calls before the measured ones (the connections opened, the sale sold out)")
	fs.IntVar(&o.clients, "clients", 256, "concurrent clients (a connection each)")
	fs.IntVar(&o.runs, "runs", 3, "runs (every mode once per run)")
	fs.StringVar(&o.protocol, "protocol", "connect", "connect (Connect JSON over HTTP/1.1, a connection per client, as bench sale) or grpc (gRPC over h2c, as bench place)")
	fs.StringVar(&o.out, "out", filepath.Join(os.TempDir(), "seckill-bench-answers"), "directory for the servers' logs")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.calls < 1 || o.warmup < 1 || o.clients < 1 || o.runs < 1 {
		return o, fmt.Errorf("--calls, --warmup, --clients and --runs must be > 0: %w", flag.ErrHelp)
	}
	if o.protocol != "connect" && o.protocol != "grpc" {
		return o, fmt.Errorf("--protocol must be connect or grpc, not %q: %w", o.protocol, flag.ErrHelp)
	}
	return o, nil
}

// answerRun starts mode m's server, makes o.warmup calls and then
// o.calls measured ones, and stops the server. offset keeps the buyers of
// every mode and run apart (a token is new to the server that verifies
// it, as in the sold-out phase of a sale).
func answerRun(ctx context.Context, sc *benchenv.Scratch, o answersOptions, m answerMode, exe, self string, redisPID, offset int) (answerFigures, error) {
	activityID := salekit.BenchActivityID()
	var in *benchenv.Instance
	var err error
	if m.floorArgs == nil {
		if in, err = saleload.StartService(ctx, sc, exe, o.out); err != nil {
			return answerFigures{}, err
		}
	} else if in, err = startAnswerFloor(ctx, self, o.out, m.floorArgs); err != nil {
		return answerFigures{}, err
	}
	defer func() { in.Stop(); _ = in.LogFile.Close() }()
	base := "http://" + in.API
	pid := in.PID()
	if m.floorArgs == nil {
		// One unit: the first warm-up call takes it, every later call is
		// answered sold out.
		adminHTTP := &http.Client{Timeout: 10 * time.Second}
		if err := salekit.CreateSaleActivity(ctx, adminHTTP, base, []byte(sc.Config.AuthSecret), activityID, 1, time.Hour, 1); err != nil {
			return answerFigures{}, fmt.Errorf("create the activity: %w", err)
		}
	}
	load := func(n, from int) (*saleload.Load, error) {
		l, err := saleload.New(saleload.Options{Stock: 1, Buyers: n, Attempts: 1, Clients: o.clients, Protocol: o.protocol, UserOffset: from},
			base, []byte(sc.Config.AuthSecret), activityID)
		if err != nil {
			return nil, err
		}
		l.Run(ctx, time.Now())
		return l, ctx.Err()
	}
	if _, err := load(o.warmup, offset); err != nil {
		return answerFigures{}, err
	}
	return measureAnswers(func() (*saleload.Load, error) { return load(o.calls, offset+o.warmup) }, pid, redisPID)
}

// measureAnswers runs load and divides the CPU the server (pid, with its
// children), Redis and this process spent meanwhile by its answers; every
// answer must be SOLD_OUT.
func measureAnswers(load func() (*saleload.Load, error), pid, redisPID int) (answerFigures, error) {
	cpu, err := benchenv.StartCPUMeter(benchenv.MeteredProc{PID: pid, Tree: true}, benchenv.MeteredProc{PID: redisPID}, benchenv.SelfProc())
	if err != nil {
		return answerFigures{}, err
	}
	t0 := time.Now()
	l, err := load()
	if err != nil {
		return answerFigures{}, err
	}
	wall := time.Since(t0)
	counts := l.Counts()
	answers := counts.Total()
	per, err := cpu.PerUnit(answers)
	if err != nil {
		return answerFigures{}, err
	}
	if sold := counts.SoldOut; sold != answers {
		return answerFigures{}, fmt.Errorf("%d of %d answers were SOLD_OUT (others: %v)", sold, answers, l.OtherByCode())
	}
	return answerFigures{server: per[0], redis: per[1], loadgen: per[2], rate: float64(answers) / wall.Seconds()}, nil
}

// writeAnswerMedians prints each mode's medians and the service's figures
// as multiples of the floors of the same runs.
func writeAnswerMedians(w io.Writer, modes []answerMode, results [][]answerFigures) {
	med := func(fs []answerFigures, pick func(answerFigures) float64) float64 {
		xs := make([]float64, len(fs))
		for i, f := range fs {
			xs[i] = pick(f)
		}
		return salekit.Median(xs)
	}
	fmt.Fprintf(w, "\nmedians of %d runs:\n", len(results[0]))
	fmt.Fprintf(w, "%-39s %10s %10s %10s %12s\n", "mode", "server µs", "Redis µs", "server+Redis", "answers/s")
	for i, m := range modes {
		sv, rd := med(results[i], func(f answerFigures) float64 { return f.server }), med(results[i], func(f answerFigures) float64 { return f.redis })
		fmt.Fprintf(w, "%-39s %10.1f %10.1f %12.1f %12.0f\n", m.name, sv, rd,
			med(results[i], func(f answerFigures) float64 { return f.server + f.redis }),
			med(results[i], func(f answerFigures) float64 { return f.rate }))
	}
	floor := med(results[2], func(f answerFigures) float64 { return f.server + f.redis })
	svc := med(results[0], func(f answerFigures) float64 { return f.server + f.redis })
	fmt.Fprintf(w, "\nthe service's sold-out answer (server + Redis): %.2fx the floor with the buyer-state read\n", svc/floor)
}

// startAnswerFloor starts `seckill-bench answer-floor` (this binary) on a
// free loopback port with args and waits until it serves.
func startAnswerFloor(ctx context.Context, self, dir string, args []string) (*benchenv.Instance, error) {
	in, err := benchenv.NewInstance("answer-floor", self, dir)
	if err != nil {
		return nil, err
	}
	in.Args = append([]string{"answer-floor", "--addr", in.API}, args...)
	if err := in.Start(); err != nil {
		_ = in.LogFile.Close()
		return nil, err
	}
	if err := salekit.WaitReady(ctx, "http://"+in.API+"/readyz", 30*time.Second); err != nil {
		in.Stop()
		_ = in.LogFile.Close()
		return nil, fmt.Errorf("floor server: %w (log: %s)", err, in.LogFile.Name())
	}
	return in, nil
}

// Floor is `seckill-bench answer-floor` with the command-line flags args:
// it serves the floor of a sold-out answer on --addr until ctx ends:
// OrderService with every PlaceOrder answered FailedPrecondition "sold
// out" with the ErrorInfo the service sends, after the buyer-state read
// when --redis-db is given, and /readyz. It writes nothing to its
// io.Writer; Run starts it as `answer-floor` of the running binary.
func Floor(ctx context.Context, args []string, _ io.Writer) error {
	fs := flag.NewFlagSet("answer-floor", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	db := fs.Int("redis-db", -1, "read the buyer state from this Redis logical database of SECKILL_REDIS_ADDR before answering (-1: no read)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	h := &floorHandler{}
	if *db >= 0 {
		cfg, _, err := benchenv.LoadConfig()
		if err != nil {
			return err
		}
		h.rdb = goredis.NewClient(&goredis.Options{Addr: cfg.Redis.Addr, Password: string(cfg.Redis.Password), DB: *db})
		defer func() { _ = h.rdb.Close() }()
	}
	mux := http.NewServeMux()
	mux.Handle(seckillv1connect.NewOrderServiceHandler(h))
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	// HTTP/1.1 and HTTP/2 without TLS, as the service's listener.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, Protocols: protocols}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// floorHandler answers every PlaceOrder sold out; with rdb it first reads
// two keys of the buyer in one pipeline, as the service's sold-out mark
// does.
type floorHandler struct {
	seckillv1connect.UnimplementedOrderServiceHandler
	rdb *goredis.Client
}

// PlaceOrder implements seckillv1connect.OrderServiceHandler.
func (h *floorHandler) PlaceOrder(ctx context.Context, req *connect.Request[seckillv1.PlaceOrderRequest]) (*connect.Response[seckillv1.PlaceOrderResponse], error) {
	if h.rdb != nil {
		rid := req.Msg.GetRequestId()
		_, err := h.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.Exists(ctx, "answer-floor:req:"+rid)
			p.HExists(ctx, "answer-floor:holders", rid)
			return nil
		})
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("temporarily unavailable"))
		}
	}
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("sold out"))
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: api.ReasonSoldOut, Domain: api.ErrorDomain}); err == nil {
		ce.AddDetail(d)
	}
	return nil, ce
}
