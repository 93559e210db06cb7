package benchbroker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-dev/seckill/ports"

	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/procstat"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// brokerKind is one kind of message an order makes the broker carry,
// with the consumer group the service reads it with.
type brokerKind struct {
	name  string
	topic ports.Topic
	group ports.ConsumerGroup
	tag   string
	fifo  bool // one message group per message (an order id), as the relay sends the state changes
}

// brokerKinds are the messages every accepted order costs the broker
// whatever the design around them: the order-create request, the
// ORDER_CREATED event and the FIFO state change (the payment-timeout
// trigger is one delay message per activity and due second, not per
// order, and is left out).
var brokerKinds = []brokerKind{
	{name: "order-create (NORMAL)", topic: ports.TopicOrderCreate, group: ports.GroupOrderCreate, tag: "CREATE_ORDER"},
	{name: "order event (NORMAL)", topic: ports.TopicOrderEvent, group: ports.GroupAudit, tag: "ORDER_CREATED"},
	{name: "state change (FIFO)", topic: ports.TopicOrderStateFIFO, group: ports.GroupOrderProjection, tag: "ORDER_CREATED", fifo: true},
}

// brokerRun is what one kind cost in one run: the broker's CPU (its
// processes' utime+stime, the proxy's embedded broker included) and this
// process's (the client library), in clock ticks, while publishing and
// while consuming, and the wall time of each phase.
type brokerRun struct {
	pubBroker, conBroker, pubClient, conClient uint64
	pubWall, conWall                           time.Duration
}

// Run is `seckill-bench broker` with the command-line flags args, its
// table going to stdout. It measures the broker on its own: for each
// kind of message an order needs, it publishes N messages from
// concurrent senders (as the service's PlaceOrder calls and relay do, so
// plain sends are batched) and consumes them with the service's consumer
// settings and a handler that only acknowledges, and reports the
// broker's CPU per message, its idle share subtracted. The sum over the
// kinds is the broker's floor per order: what no change of the service
// around the broker can go below.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	n := fs.Int("messages", 20000, "messages per kind and run")
	runs := fs.Int("runs", 3, "runs (the median is reported)")
	senders := fs.Int("senders", 64, "concurrent senders")
	batch := fs.Int("batch", 32, "messages per consumer batch")
	concurrency := fs.Int("concurrency", 16, "concurrent consumer batches")
	idle := fs.Duration("idle", 5*time.Second, "how long the broker's idle CPU is read before each run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 || *runs < 1 || *senders < 1 || *batch < 1 || *concurrency < 1 || *idle <= 0 {
		return errors.New("--messages, --runs, --senders, --batch and --concurrency must be positive, --idle above 0")
	}
	cfg, log, err := benchenv.LoadConfig()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "seckill-bench broker: %s, %d cores, %d messages per kind, %d senders, consumer batch %d x %d\n\n",
		benchenv.BrokerText(cfg), runtime.NumCPU(), *n, *senders, *batch, *concurrency)
	results := make([][]float64, len(brokerKinds)) // broker µs per message, idle subtracted, per run
	for run := 1; run <= *runs; run++ {
		env, err := benchenv.NewNamespace(ctx, cfg, log)
		if err != nil {
			return err
		}
		pids, err := brokerPIDs(env.StackProcesses())
		if err != nil {
			env.Close()
			return err
		}
		idleRate, err := idleTicksPerSecond(ctx, pids, *idle)
		if err != nil {
			env.Close()
			return err
		}
		fmt.Fprintf(stdout, "run %d: broker idle %.1f %% of a core\n", run, idleRate*100/procstat.ClockTicks)
		fmt.Fprintf(stdout, "  %-24s %14s %14s %14s %14s %14s\n", "kind", "publish µs/msg", "consume µs/msg",
			"broker µs/msg", "client µs/msg", "msgs/s (pub)")
		for i, k := range brokerKinds {
			r, err := brokerKindRun(ctx, env, pids, k, *n, *senders, *batch, *concurrency, log)
			if err != nil {
				env.Close()
				return fmt.Errorf("%s: %w", k.name, err)
			}
			perMsg := func(ticks uint64, wall time.Duration) float64 {
				busy := float64(ticks) - idleRate*wall.Seconds()
				return max(busy, 0) / procstat.ClockTicks * 1e6 / float64(*n)
			}
			pub, con := perMsg(r.pubBroker, r.pubWall), perMsg(r.conBroker, r.conWall)
			client := float64(r.pubClient+r.conClient) / procstat.ClockTicks * 1e6 / float64(*n)
			results[i] = append(results[i], pub+con)
			fmt.Fprintf(stdout, "  %-24s %14.0f %14.0f %14.0f %14.0f %14.0f\n", k.name, pub, con, pub+con, client,
				float64(*n)/r.pubWall.Seconds())
		}
		env.Close()
	}
	fmt.Fprintf(stdout, "\nbroker CPU per message, idle subtracted (median of %d runs; runs):\n", *runs)
	var floor float64
	for i, k := range brokerKinds {
		m := salekit.Median(results[i])
		floor += m
		fmt.Fprintf(stdout, "  %-24s %8.0f µs  %v\n", k.name, m, roundAll(results[i]))
	}
	fmt.Fprintf(stdout, "broker floor per order (one message of each kind): %.0f µs\n", floor)
	return nil
}

// brokerKindRun publishes n messages of kind k into env and consumes them.
func brokerKindRun(ctx context.Context, env *benchenv.Namespace, pids []int, k brokerKind, n, senders, batch, concurrency int,
	log *slog.Logger) (brokerRun, error) {
	var r brokerRun
	pub, closePub, err := env.Publisher(ctx, 5*time.Second, log)
	if err != nil {
		return r, err
	}
	defer closePub()
	b0, c0, err := brokerTicks(pids)
	if err != nil {
		return r, err
	}
	start := time.Now()
	if err := publishKind(ctx, pub, k, n, senders); err != nil {
		return r, err
	}
	r.pubWall = time.Since(start)
	b1, c1, err := brokerTicks(pids)
	if err != nil {
		return r, err
	}
	sub, ok := ports.SubscriptionOf(k.group)
	if !ok {
		return r, fmt.Errorf("no subscription of %s", k.group)
	}
	h := &ackAll{want: n, done: make(chan struct{})}
	consume, err := env.Consumer(sub, h, batch, concurrency, nil, log)
	if err != nil {
		return r, err
	}
	runCtx, stop := context.WithCancel(ctx)
	ended := make(chan error, 1)
	start = time.Now()
	go func() { ended <- consume(runCtx) }()
	var waitErr error
	select {
	case <-h.done:
	case err := <-ended:
		waitErr = fmt.Errorf("the consumer ended after %d of %d messages: %w", h.count(), n, err)
	case <-time.After(5 * time.Minute):
		waitErr = fmt.Errorf("%d of %d messages consumed within 5 minutes", h.count(), n)
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	r.conWall = time.Since(start)
	b2, c2, err := brokerTicks(pids)
	stop()
	if waitErr == nil {
		waitErr = err
	}
	if rerr := <-ended; rerr != nil && !errors.Is(rerr, context.Canceled) && waitErr == nil {
		waitErr = rerr
	}
	if waitErr != nil {
		return r, waitErr
	}
	r.pubBroker, r.pubClient = b1-b0, c1-c0
	r.conBroker, r.conClient = b2-b1, c2-c1
	return r, nil
}

// publishKind sends n messages of kind k from senders goroutines and
// fails on the first send that was not confirmed.
func publishKind(ctx context.Context, pub ports.Publisher, k brokerKind, n, senders int) error {
	body := []byte(`{"schema_version":1,"order_id":"ord_bench","status":"CREATED","aggregate_version":1}`)
	var next atomic.Int64
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) || ctx.Err() != nil {
					errs <- ctx.Err()
					return
				}
				id := "bench_" + strconv.FormatInt(i, 10)
				msg := ports.OutboundMessage{Topic: k.topic, MessageID: id, Tag: k.tag, Keys: []string{id}, Body: body}
				if k.fifo {
					msg.MessageGroup = id
				}
				if _, err := pub.Publish(ctx, msg); err != nil {
					errs <- fmt.Errorf("send %s: %w", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ackAll acknowledges every delivery and closes done once want distinct
// message ids (the deliveries' first key) were seen.
type ackAll struct {
	want int
	done chan struct{}
	mu   sync.Mutex
	seen map[string]struct{}
}

// HandleBatch implements ports.BatchHandler.
func (a *ackAll) HandleBatch(_ context.Context, deliveries []ports.Delivery) []ports.Decision {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = make(map[string]struct{}, a.want)
	}
	decisions := make([]ports.Decision, len(deliveries))
	for i, d := range deliveries {
		id := d.BrokerMessageID
		if len(d.Keys) > 0 {
			id = d.Keys[0] // the sender's message id (publishKind sets it as the key)
		}
		before := len(a.seen)
		a.seen[id] = struct{}{}
		if before < a.want && len(a.seen) == a.want {
			close(a.done)
		}
		decisions[i] = ports.Decision{Ack: true, Outcome: "acked"}
	}
	return decisions
}

func (a *ackAll) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

// brokerPIDs resolves the broker processes a namespace names (absolute
// pid file paths), the name server left out: the figures are the message
// path's.
func brokerPIDs(procs [][2]string) ([]int, error) {
	var pids []int
	for _, p := range procs {
		if p[1] == "" || p[0] == "namesrv" {
			continue
		}
		pid, err := benchenv.PIDFromFile(p[1])
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // a process this stack does not run (the proxy's embedded broker has no pid file)
			}
			return nil, fmt.Errorf("%s: %w", p[0], err)
		}
		pids = append(pids, pid)
	}
	if len(pids) == 0 {
		return nil, errors.New("no broker process of the local stack found (is the stack up? deploy/local/stack.sh status)")
	}
	return pids, nil
}

// brokerTicks reads the CPU clock ticks of the broker processes and of
// this process.
func brokerTicks(pids []int) (broker, self uint64, err error) {
	for _, pid := range pids {
		t, _, err := procstat.Ticks(pid, false)
		if err != nil {
			return 0, 0, fmt.Errorf("broker process %d: %w", pid, err)
		}
		broker += t
	}
	self, _, err = procstat.Ticks(os.Getpid(), false)
	return broker, self, err
}

// idleTicksPerSecond reads the broker's CPU over d with no traffic.
func idleTicksPerSecond(ctx context.Context, pids []int, d time.Duration) (float64, error) {
	b0, _, err := brokerTicks(pids)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	b1, _, err := brokerTicks(pids)
	if err != nil {
		return 0, err
	}
	return float64(b1-b0) / time.Since(start).Seconds(), nil
}

// roundAll rounds xs to whole numbers for printing.
func roundAll(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x + 0.5)
	}
	return out
}
