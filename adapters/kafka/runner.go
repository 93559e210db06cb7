package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/ports"
)

// Bounds of a runner.
const (
	defaultBatch       = 16
	drainTimeout       = 10 * time.Second
	revokeWait         = 10 * time.Second
	settleTimeout      = 5 * time.Second
	commitInterval     = 500 * time.Millisecond
	retryProducePause  = time.Second
	minPartitionBuffer = 256
	// maxHold bounds an in-place wait (an ordered group's RetryAfter).
	maxHold = 10 * time.Minute
)

// runnerDeps are the runner's shared dependencies.
type runnerDeps struct {
	tracer trace.TracerProvider
	reg    prometheus.Registerer
}

// sourceKind is how the runner treats the records of a topic.
type sourceKind int

const (
	kindMain    sourceKind = iota // an unordered group's topic: batches, retry topic
	kindRetry                     // an unordered group's retry topic: held until due
	kindOrdered                   // an ordered group's topic: one at a time, in place
	kindDead                      // a dead-letter topic: one at a time, in place, no bound
)

// runner is the consume loop of one Kafka consumer group (see doc.go and
// README.md): one kgo group client, a loop per assigned partition, the
// handler calls bounded by a slot per Concurrency and the LimitGate, and
// manual commits of each partition's finished watermark.
type runner struct {
	s       Settings
	name    string // group id
	topics  []string
	regex   bool
	kinds   func(topic string) sourceKind
	bound   int // redeliveries before the dead-letter topic
	retry   string
	dlq     string
	create  []string // topics Run creates before consuming
	origin  string   // the group's own name in dead-letter headers
	batch   int
	logAcks bool

	handler ports.BatchHandler
	gate    *brokerkit.LimitGate
	slots   chan struct{}
	log     *slog.Logger
	metrics *consumerMetrics
	tracer  trace.Tracer
	origins *originTable

	cl         *kgo.Client
	handlerCtx context.Context
	mu         sync.Mutex
	parts      map[tp]*part
	workers    sync.WaitGroup
}

// tp is a topic partition.
type tp struct {
	topic     string
	partition int32
}

// newGroupRunner returns the runner of business group sub.
func newGroupRunner(s Settings, sub ports.Subscription, h ports.BatchHandler, opts brokerplug.ConsumerOptions, d runnerDeps,
	log *slog.Logger) (*runner, error) {
	spec, err := ports.SpecOf(sub.Topic)
	if err != nil {
		return nil, err
	}
	main := topicName(s.Prefix, spec)
	r := &runner{s: s, name: s.Prefix + string(sub.Group), bound: sub.MaxRetries, retry: retryTopic(s.Prefix, sub.Group),
		dlq: dlqTopic(s.Prefix, sub.Group), batch: opts.Batch, logAcks: opts.LogAcks}
	r.origin = r.name
	if sub.Ordered {
		r.topics = []string{main}
		r.kinds = func(string) sourceKind { return kindOrdered }
	} else {
		r.topics = []string{main, r.retry}
		r.kinds = func(t string) sourceKind {
			if t == r.retry {
				return kindRetry
			}
			return kindMain
		}
	}
	r.create = []string{main, r.retry, r.dlq}
	if err := r.init(h, opts.Concurrency, opts.Limit, d, log); err != nil {
		return nil, err
	}
	return r, nil
}

// init checks and sets what every runner has.
func (r *runner) init(h ports.BatchHandler, concurrency int, limit ports.ConcurrencyLimit, d runnerDeps, log *slog.Logger) error {
	if h == nil {
		return errors.New("nil handler")
	}
	if concurrency <= 0 {
		return errors.New("concurrency must be > 0")
	}
	if r.batch <= 0 {
		r.batch = defaultBatch
	}
	m, err := newConsumerMetrics(d.reg)
	if err != nil {
		return err
	}
	m.Inflight.WithLabelValues(r.name)
	m.AckFailure.WithLabelValues(r.name)
	m.Duplicate.WithLabelValues(r.name)
	m.deadLettered.WithLabelValues(r.name)
	m.retried.WithLabelValues(r.name)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r.metrics, r.log, r.handler = m, log.With(slog.String("consumer_group", r.name)), h
	r.slots = make(chan struct{}, concurrency)
	if limit != nil {
		r.gate = brokerkit.NewLimitGate(limit, concurrency)
		r.handler = r.gate.Observe(h)
	}
	if d.tracer != nil {
		r.tracer = d.tracer.Tracer(tracerName)
	}
	r.parts = map[tp]*part{}
	return nil
}

// client builds the group client.
func (r *runner) client() (*kgo.Client, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(r.s.Brokers...), kgo.ConsumerGroup(r.name), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) { r.release(ctx, cl, m, true) }),
		kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) { r.release(ctx, cl, m, false) }),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Millisecond)}
	if r.regex {
		opts = append(opts, kgo.ConsumeRegex(), kgo.ConsumeTopics(r.topics...), kgo.MetadataMaxAge(10*time.Second))
	} else {
		opts = append(opts, kgo.ConsumeTopics(r.topics...))
	}
	return kgo.NewClient(opts...)
}

// Run creates the group's topics (retrying while the broker is not
// reachable), consumes until ctx ends, then stops handing out records,
// drains the running handler calls (canceling their context after 10 s),
// commits what is finished and leaves the group. It returns nil after a
// graceful stop.
func (r *runner) Run(ctx context.Context) error {
	for len(r.create) > 0 && ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := createTopics(cctx, r.s, r.create)
		cancel()
		if err == nil {
			break
		}
		r.log.Warn("kafka topics of the group not created; retrying", slog.String("error", err.Error()))
		brokerkit.Sleep(ctx, time.Second)
	}
	if ctx.Err() != nil {
		return nil
	}
	cl, err := r.client()
	if err != nil {
		return fmt.Errorf("kafka consumer %s: %w", r.name, err)
	}
	r.cl = cl
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	r.handlerCtx = handlerCtx
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		r.commitLoop(ctx)
	}()
	r.poll(ctx)
	r.stopAll(cancelHandlers)
	<-committed
	cctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	r.commit(cctx, nil)
	cancel()
	cl.Close()
	return nil
}

// poll fetches records until ctx ends and hands them to their partition
// (push never blocks: a full partition is paused instead).
func (r *runner) poll(ctx context.Context) {
	defer r.cl.AllowRebalance()
	for ctx.Err() == nil {
		fs := r.cl.PollRecords(ctx, 4*r.batch*cap(r.slots))
		if fs.IsClientClosed() || ctx.Err() != nil {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			r.log.Warn("kafka fetch failed", slog.String("topic", topic), slog.Int("partition", int(p)), slog.String("error", err.Error()))
		})
		fs.EachPartition(func(f kgo.FetchTopicPartition) {
			if len(f.Records) > 0 {
				r.partOf(ctx, tp{f.Topic, f.Partition}).push(f.Records)
			}
		})
		// A revocation runs only between polls (BlockRebalanceOnPoll), so
		// no record of a revoked partition is handed to a new part state.
		r.cl.AllowRebalance()
	}
}

// partOf returns the state of partition k, starting its loop if new.
func (r *runner) partOf(ctx context.Context, k tp) *part {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.parts[k]; ok {
		return p
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &part{r: r, k: k, kind: r.kinds(k.topic), tracker: newOffsetTracker(), ctx: pctx, cancel: cancel,
		signal: make(chan struct{}, 1), done: make(chan struct{}), limit: max(minPartitionBuffer, 2*r.batch*cap(r.slots))}
	r.parts[k] = p
	go p.loop()
	return p
}

// release stops the revoked (or lost) partitions: no more records are
// handed out, their running calls are awaited (bounded) and, when revoked,
// their watermarks committed.
func (r *runner) release(ctx context.Context, cl *kgo.Client, m map[string][]int32, commit bool) {
	var stopped []*part
	r.mu.Lock()
	for topic, ps := range m {
		for _, n := range ps {
			if p, ok := r.parts[tp{topic, n}]; ok {
				delete(r.parts, p.k)
				stopped = append(stopped, p)
			}
		}
	}
	r.mu.Unlock()
	for _, p := range stopped {
		p.stop(revokeWait)
	}
	cl.ResumeFetchPartitions(m)
	if commit && len(stopped) > 0 {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		r.commit(cctx, stopped)
		cancel()
	}
}

// stopAll stops every partition at shutdown: their loops end, running
// calls get drainTimeout before their context is canceled.
func (r *runner) stopAll(cancelHandlers context.CancelFunc) {
	r.mu.Lock()
	ps := make([]*part, 0, len(r.parts))
	for _, p := range r.parts {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	for _, p := range ps {
		p.cancel()
	}
	drained := make(chan struct{})
	go func() {
		// A partition's loop adds to r.workers until it ends: wait for
		// every loop first, so that no Add runs concurrently with Wait.
		for _, p := range ps {
			<-p.done
		}
		r.workers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		r.log.Warn("drain timeout: canceling in-flight handlers", slog.Duration("drain_timeout", drainTimeout))
		cancelHandlers()
		<-drained
	}
}

// commitLoop commits the watermarks every commitInterval until ctx ends.
func (r *runner) commitLoop(ctx context.Context) {
	t := time.NewTicker(commitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.commit(ctx, nil)
		}
	}
}

// commit commits the watermark of ps (every current partition when nil)
// that moved since its last commit.
func (r *runner) commit(ctx context.Context, ps []*part) {
	if ps == nil {
		r.mu.Lock()
		for _, p := range r.parts {
			ps = append(ps, p)
		}
		r.mu.Unlock()
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	var moved []*part
	var marks []int64
	for _, p := range ps {
		w, ok := p.tracker.watermark()
		if !ok || w == p.committed.Load() {
			continue
		}
		if offsets[p.k.topic] == nil {
			offsets[p.k.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[p.k.topic][p.k.partition] = kgo.EpochOffset{Epoch: -1, Offset: w}
		moved, marks = append(moved, p), append(marks, w)
	}
	if len(offsets) == 0 {
		return
	}
	var failed error
	r.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		failed = commitError(resp, err)
	})
	if failed != nil {
		r.log.Warn("kafka offset commit failed; it is retried", slog.String("error", failed.Error()))
		return
	}
	for i, p := range moved {
		p.committed.Store(marks[i])
	}
}

// newDeadLetterRunner returns the runner of every <prefix>*.DLQ topic.
func newDeadLetterRunner(s Settings, h func(*originTable) ports.BatchHandler, d runnerDeps, log *slog.Logger) (*runner, error) {
	r := &runner{s: s, name: s.Prefix + dlqReaderGroup, regex: true, batch: defaultBatch,
		topics: []string{"^" + regexp.QuoteMeta(s.Prefix) + `[A-Za-z0-9._-]*` + regexp.QuoteMeta(dlqSuffix) + "$"},
		kinds:  func(string) sourceKind { return kindDead }, origins: &originTable{m: map[string]ports.DeadLetterOrigin{}}}
	if err := r.init(h(r.origins), 1, nil, d, log); err != nil {
		return nil, err
	}
	return r, nil
}

// itoa formats n for a header.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// commitError returns the request's error or the first partition error.
func commitError(resp *kmsg.OffsetCommitResponse, err error) error {
	if err != nil || resp == nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
				return fmt.Errorf("commit %s/%d: %w", t.Topic, p.Partition, e)
			}
		}
	}
	return nil
}
