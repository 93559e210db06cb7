package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// provideWorkers assembles the background loops of the instance's role:
// for the API role the backlog gate, the sent marker and the event
// subscriptions' tail reader (event-tail); for the workers
// role the stock-books recovery, the dead-letter gauge, the resend
// scanner, the outbox relay, the event sequencer, the reconciler and one consumer loop per
// business group (plus the dead-letter reader), each consumer bounded as
// configured (with SECKILL_CONSUMER_LIMITER=adaptive each group under
// its adaptive limit, see provideConsumerLimits, ticked by the
// consumer-limits worker); for RoleAll both.
func provideWorkers(cfg config.Config, broker Broker, uow ports.UnitOfWork, r ports.Reservations,
	clock ports.Clock, m ports.Metrics, fp ports.Failpoints,
	log *slog.Logger, acts *application.Activities, gate *application.BacklogGate, life *application.OrderLifecycle,
	rec *application.Reconciler, dl *application.DeadLetters, proj *application.ProjectOrderStates,
	marker *application.SentMarker, policy application.CompensationPolicy, recovery *application.StockRecovery,
	guard *redis.Guard, seq *application.Sequencer, events *application.EventSubscriptions,
	stock *application.StockChanges, limits *application.ConsumerLimits) ([]Worker, error) {
	pub := ports.Publisher(broker)
	w := cfg.Workers
	var workers []Worker
	if cfg.RunsAPI() {
		// Admission needs a measured gate; the sent marker flushes what
		// this instance's PlaceOrder calls confirmed; the tail reader
		// serves EventService's live subscriptions with one read of the
		// log per move.
		workers = append(workers, Worker{Name: "backlog-gate", Run: gate.Run}, Worker{Name: "sent-marker", Run: marker.Run},
			Worker{Name: "event-tail", Run: events.Run})
	}
	if !cfg.RunsWorkers() {
		return workers, nil
	}
	workers = append(workers,
		Worker{Name: "stock-recovery", Run: func(ctx context.Context) error { return recovery.Run(ctx, guard.Wake()) }},
		Worker{Name: "dlq-gauge", Run: func(ctx context.Context) error { return dl.RunGauge(ctx, 5*time.Second) }},
		Worker{Name: "scanner", Run: application.NewResendPending(r, pub, clock, m, log, cfg.InstanceID, application.ResendConfig{
			Interval: w.ScannerInterval, IdleMax: time.Second, Batch: w.ScannerBatch, Workers: w.ScannerWorkers, Lease: w.ScannerLease,
			BackoffBase: 200 * time.Millisecond, BackoffMax: 3 * time.Second}).Run},
		Worker{Name: "relay", Run: application.NewRelayOutbox(uow, pub, clock, fp, log, application.RelayConfig{
			Interval: w.RelayInterval, IdleMax: 250 * time.Millisecond, Batch: w.RelayBatch, Workers: 8, Retention: w.OutboxRetention,
			BackoffBase: 200 * time.Millisecond, BackoffMax: 5 * time.Second, CoalesceTimeouts: w.RelayCoalesceTimeouts,
			HoldDelayed: !broker.Features().DelayedDelivery}).Run},
		Worker{Name: "event-sequencer", Run: seq.Run},
		// Finishes the stock changes interrupted between their Redis and
		// their PostgreSQL step.
		Worker{Name: "stock-changes", Run: stock.Run},
	)
	if w.ReconcileInterval > 0 {
		workers = append(workers, Worker{Name: "reconciler", Run: func(ctx context.Context) error {
			return rec.Run(ctx, ports.ActorReconciler, w.ReconcileInterval)
		}})
	}
	handlers := map[ports.ConsumerGroup]ports.BatchHandler{
		ports.GroupOrderCreate:         application.NewCreateOrders(uow, r, acts, fp, log, broker.Group(ports.GroupOrderCreate), policy),
		ports.GroupOrderTimeout:        application.NewCancelExpiredOrders(life, uow, m, log, broker.Group(ports.GroupOrderTimeout)),
		ports.GroupInventoryCompensate: application.NewCompensateReservations(r, uow, clock, m, log, broker.Group(ports.GroupInventoryCompensate)),
		ports.GroupOrderProjection:     proj,
		ports.GroupAudit:               application.NewAuditEvents(uow, log, broker.Group(ports.GroupAudit)),
	}
	options := GroupOptions(cfg)
	if limits != nil {
		workers = append(workers, Worker{Name: "consumer-limits", Run: limits.Run})
	}
	for _, sub := range ports.Subscriptions() {
		h, ok := handlers[sub.Group]
		if !ok {
			return nil, fmt.Errorf("consumer group %s has no handler", sub.Group)
		}
		opts := options[sub.Group]
		if limits != nil {
			// The limit bounds the calls; the hard cap lets the
			// order-create group run what the others yield to it.
			opts.Limit = limits.Limit(broker.Group(sub.Group))
			opts.Concurrency = max(opts.Concurrency, limits.Highest(broker.Group(sub.Group)))
		}
		run, err := broker.Consumer(sub, h, opts)
		if err != nil {
			return nil, err
		}
		workers = append(workers, Worker{Name: "consumer " + string(sub.Group), Run: run})
	}
	run, err := broker.DeadLetterReader(dl.Reader)
	if err != nil {
		return nil, err
	}
	return append(workers, Worker{Name: "dlq-reader", Run: run}), nil
}
