package bootstrap

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// apiLoops are the background loops the API role needs: the backlog gate
// admission reads, the sent marker that flushes what this instance's
// PlaceOrder calls confirmed, and the tail reader that serves
// EventService's live subscriptions with one read of the log per move.
type apiLoops struct {
	Gate   *application.BacklogGate
	Marker *application.SentMarker
	Events *application.EventSubscriptions
}

// workerLoops are the background loops of the workers role besides the
// consumers.
type workerLoops struct {
	Recovery   *application.StockRecovery
	Guard      *redis.Guard
	DeadLetter *application.DeadLetters
	Scanner    *application.ResendPending
	Relay      *application.RelayOutbox
	Sequencer  *application.Sequencer
	Stock      *application.StockChanges
	Reconciler *application.Reconciler
}

// consumerHandlers maps each business group to the handler its consumer
// loop calls.
type consumerHandlers map[ports.ConsumerGroup]ports.BatchHandler

// provideScanner builds the resend scanner of uncertain sends, tuned by
// cfg.Workers.
func provideScanner(cfg config.Config, r ports.Reservations, broker Broker, clock ports.Clock, m ports.Metrics,
	log *slog.Logger) *application.ResendPending {
	w := cfg.Workers
	return application.NewResendPending(r, broker, clock, m, log, cfg.InstanceID, application.ResendConfig{
		Interval: w.ScannerInterval, IdleMax: w.ScannerIdleMax, Batch: w.ScannerBatch, Workers: w.ScannerWorkers,
		Lease: w.ScannerLease, BackoffBase: w.ScannerBackoff.Base, BackoffMax: w.ScannerBackoff.Max})
}

// provideRelay builds the outbox relay, tuned by cfg.Workers; it holds
// delayed messages in PostgreSQL until due when the broker cannot delay
// them.
func provideRelay(cfg config.Config, uow ports.UnitOfWork, broker Broker, clock ports.Clock, fp ports.Failpoints,
	log *slog.Logger) *application.RelayOutbox {
	w := cfg.Workers
	return application.NewRelayOutbox(uow, broker, clock, fp, log, application.RelayConfig{
		Interval: w.RelayInterval, IdleMax: w.RelayIdleMax, Batch: w.RelayBatch, Workers: w.RelayWorkers,
		Retention: w.OutboxRetention, BackoffBase: w.RelayBackoff.Base, BackoffMax: w.RelayBackoff.Max,
		CoalesceTimeouts: w.RelayCoalesceTimeouts, HoldDelayed: !broker.Features().DelayedDelivery})
}

// provideConsumerHandlers builds the handler of every business group,
// each recording its group's physical name in the inbox.
func provideConsumerHandlers(broker Broker, uow ports.UnitOfWork, r ports.Reservations, acts *application.Activities,
	life *application.OrderLifecycle, proj *application.ProjectOrderStates, policy application.CompensationPolicy,
	clock ports.Clock, m ports.Metrics, fp ports.Failpoints, log *slog.Logger) consumerHandlers {
	return consumerHandlers{
		ports.GroupOrderCreate:         application.NewCreateOrders(uow, r, acts, fp, log, broker.Group(ports.GroupOrderCreate), policy),
		ports.GroupOrderTimeout:        application.NewCancelExpiredOrders(life, uow, m, log, broker.Group(ports.GroupOrderTimeout)),
		ports.GroupInventoryCompensate: application.NewCompensateReservations(r, uow, clock, m, log, broker.Group(ports.GroupInventoryCompensate)),
		ports.GroupOrderProjection:     proj,
		ports.GroupAudit:               application.NewAuditEvents(uow, log, broker.Group(ports.GroupAudit)),
	}
}

// provideWorkers assembles the background loops of the instance's role:
// for the API role the apiLoops; for the workers role the workerLoops
// (the reconciler only with SECKILL_RECONCILE_INTERVAL above 0) and one
// consumer loop per business group (plus the dead-letter reader), each
// consumer bounded as configured (with SECKILL_CONSUMER_LIMITER=adaptive
// each group under its adaptive limit, see provideConsumerLimits, ticked
// by the consumer-limits worker); for RoleAll both.
func provideWorkers(cfg config.Config, broker Broker, api apiLoops, loops workerLoops, handlers consumerHandlers,
	limits *application.ConsumerLimits) ([]Worker, error) {
	var workers []Worker
	if cfg.RunsAPI() {
		workers = append(workers, Worker{Name: "backlog-gate", Run: api.Gate.Run}, Worker{Name: "sent-marker", Run: api.Marker.Run},
			Worker{Name: "event-tail", Run: api.Events.Run})
	}
	if !cfg.RunsWorkers() {
		return workers, nil
	}
	workers = append(workers, loops.workers(cfg.Workers)...)
	if limits != nil {
		workers = append(workers, Worker{Name: "consumer-limits", Run: limits.Run})
	}
	consumers, err := consumerWorkers(cfg, broker, handlers, limits)
	if err != nil {
		return nil, err
	}
	workers = append(workers, consumers...)
	run, err := broker.DeadLetterReader(loops.DeadLetter.Reader)
	if err != nil {
		return nil, err
	}
	return append(workers, Worker{Name: "dlq-reader", Run: run}), nil
}

// workers returns the workers role's loops besides the consumers.
func (l workerLoops) workers(w config.Workers) []Worker {
	out := []Worker{
		{Name: "stock-recovery", Run: func(ctx context.Context) error { return l.Recovery.Run(ctx, l.Guard.Wake()) }},
		{Name: "dlq-gauge", Run: func(ctx context.Context) error { return l.DeadLetter.RunGauge(ctx, w.DeadLetterGaugeInterval) }},
		{Name: "scanner", Run: l.Scanner.Run},
		{Name: "relay", Run: l.Relay.Run},
		{Name: "event-sequencer", Run: l.Sequencer.Run},
		// Finishes the stock changes interrupted between their Redis and
		// their PostgreSQL step.
		{Name: "stock-changes", Run: l.Stock.Run},
	}
	if w.ReconcileInterval > 0 {
		out = append(out, Worker{Name: "reconciler", Run: func(ctx context.Context) error {
			return l.Reconciler.Run(ctx, ports.ActorReconciler, w.ReconcileInterval)
		}})
	}
	return out
}

// consumerWorkers returns one consumer loop per business group, bounded
// by GroupOptions and, when limits is set, by the group's adaptive limit.
func consumerWorkers(cfg config.Config, broker Broker, handlers consumerHandlers, limits *application.ConsumerLimits) ([]Worker, error) {
	options := GroupOptions(cfg)
	var workers []Worker
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
		if !broker.Features().DeliveryCount {
			h = brokerkit.CountDeliveries(h, brokerkit.DefaultCountedMessages)
		}
		run, err := broker.Consumer(sub, h, opts)
		if err != nil {
			return nil, err
		}
		workers = append(workers, Worker{Name: "consumer " + string(sub.Group), Run: run})
	}
	return workers, nil
}
