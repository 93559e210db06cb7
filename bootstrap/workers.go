package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// provideWorkers assembles every background loop of the service: the
// backlog gate, the sent marker, the dead-letter gauge, the resend scanner,
// the outbox relay, the reconciler, the stock-books recovery and one consumer runner per group (plus
// the dead-letter reader), each consumer bounded as configured.
func provideWorkers(cfg config.Config, bc rocketmq.Config, uow ports.UnitOfWork, r ports.Reservations,
	pub ports.Publisher, clock ports.Clock, m ports.Metrics, fp ports.Failpoints, reg prometheus.Registerer,
	log *slog.Logger, acts *application.Activities, gate *application.BacklogGate, life *application.OrderLifecycle,
	rec *application.Reconciler, dl *application.DeadLetters, proj *application.ProjectOrderStates,
	marker *application.SentMarker, policy application.CompensationPolicy, recovery *application.StockRecovery,
	guard *redis.Guard) ([]Worker, error) {
	runner := func(rc rocketmq.RunnerConfig, h ports.BatchHandler) (func(context.Context) error, error) {
		rn, err := rocketmq.NewRunner(bc, rc, h, log.With("consumer_group", rc.Group), reg)
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", rc.Group, err)
		}
		return rn.Run, nil
	}
	w := cfg.Workers
	workers := []Worker{
		{Name: "backlog-gate", Run: gate.Run},
		{Name: "sent-marker", Run: marker.Run},
		{Name: "stock-recovery", Run: func(ctx context.Context) error { return recovery.Run(ctx, guard.Wake()) }},
		{Name: "dlq-gauge", Run: func(ctx context.Context) error { return dl.RunGauge(ctx, 5*time.Second) }},
		{Name: "scanner", Run: application.NewResendPending(r, pub, clock, m, log, cfg.InstanceID, application.ResendConfig{
			Interval: w.ScannerInterval, IdleMax: time.Second, Batch: w.ScannerBatch, Workers: w.ScannerWorkers, Lease: w.ScannerLease,
			BackoffBase: 200 * time.Millisecond, BackoffMax: 3 * time.Second}).Run},
		{Name: "relay", Run: application.NewRelayOutbox(uow, pub, clock, fp, log, application.RelayConfig{
			Interval: w.RelayInterval, IdleMax: 250 * time.Millisecond, Batch: w.RelayBatch, Workers: 8, Retention: w.OutboxRetention,
			BackoffBase: 200 * time.Millisecond, BackoffMax: 5 * time.Second}).Run},
	}
	if w.ReconcileInterval > 0 {
		workers = append(workers, Worker{Name: "reconciler", Run: func(ctx context.Context) error {
			return rec.Run(ctx, ports.ActorReconciler, w.ReconcileInterval)
		}})
	}
	consumers := []struct {
		group       rocketmq.Group
		handler     ports.BatchHandler
		batch       int
		concurrency int
	}{
		{rocketmq.GroupOrderCreate, application.NewCreateOrders(uow, r, acts, fp, log,
			bc.Group(rocketmq.GroupOrderCreate), policy), cfg.Orders.ConsumerBatch, cfg.ConsumerConcurrency()},
		{rocketmq.GroupOrderTimeout, application.NewCancelExpiredOrders(life, uow, m, log,
			bc.Group(rocketmq.GroupOrderTimeout)), 16, 4},
		{rocketmq.GroupInventoryCompensate, application.NewCompensateReservations(r, uow, clock, m, log,
			bc.Group(rocketmq.GroupInventoryCompensate)), 16, 4},
		{rocketmq.GroupOrderProjection, proj, 16, 4},
		{rocketmq.GroupAudit, application.NewAuditEvents(uow, log, bc.Group(rocketmq.GroupAudit)), 32, 2},
	}
	for _, c := range consumers {
		topic, _ := c.group.Topic()
		physical, err := bc.Topic(topic)
		if err != nil {
			return nil, err
		}
		run, err := runner(rocketmq.RunnerConfig{Group: bc.Group(c.group), Subscriptions: map[string]string{physical: "*"},
			Orderly: c.group.Orderly(), BatchSize: c.batch, Concurrency: c.concurrency,
			InvisibleDuration: w.InvisibleDuration, LogAcks: c.group == rocketmq.GroupOrderCreate}, c.handler)
		if err != nil {
			return nil, err
		}
		workers = append(workers, Worker{Name: "consumer " + string(c.group), Run: run})
	}
	dlqSubs := map[string]string{}
	for _, g := range rocketmq.Groups() {
		dlqSubs[rocketmq.DLQTopic(bc.Group(g))] = "*"
	}
	// One group reads the five dead-letter topics; a receive long-polls one
	// topic at a time, so a short wait keeps every topic's latency low.
	run, err := runner(rocketmq.RunnerConfig{Group: bc.Group(rocketmq.GroupDLQReader), Subscriptions: dlqSubs,
		BatchSize: 16, Concurrency: 1, InvisibleDuration: w.InvisibleDuration, AwaitDuration: time.Second},
		dl.Reader(func(dv ports.Delivery) (application.DeadLetterOrigin, bool) {
			o, ok := rocketmq.ParseDeadLetter(bc, dv)
			return application.DeadLetterOrigin{Group: o.SourceGroup, Deliveries: o.SourceDeliveries}, ok
		}))
	if err != nil {
		return nil, err
	}
	if url := cfg.RocketMQ.MetricsURL; url != "" {
		groups := []string{bc.Group(rocketmq.GroupDLQReader)}
		for _, g := range rocketmq.Groups() {
			groups = append(groups, bc.Group(g))
		}
		if err := reg.Register(rocketmq.NewLagCollector(url, groups, log.With("component", "broker-lag"))); err != nil {
			return nil, fmt.Errorf("broker lag metrics: %w", err)
		}
	}
	return append(workers, Worker{Name: "dlq-reader", Run: run}), nil
}
