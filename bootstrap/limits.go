package bootstrap

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/metrics"
	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// GroupOptions returns each business group's batch and concurrency:
// the order-create group's from the pool's consumer budget
// (cfg.ConsumerConcurrency), the others fixed. Under the adaptive limiter
// the concurrency is the group's budget, the highest limit.
func GroupOptions(cfg config.Config) map[ports.ConsumerGroup]brokerplug.ConsumerOptions {
	return map[ports.ConsumerGroup]brokerplug.ConsumerOptions{
		ports.GroupOrderCreate:         {Batch: cfg.Orders.ConsumerBatch, Concurrency: cfg.ConsumerConcurrency()},
		ports.GroupOrderTimeout:        {Batch: 16, Concurrency: 4},
		ports.GroupInventoryCompensate: {Batch: 16, Concurrency: 4},
		ports.GroupOrderProjection:     {Batch: 16, Concurrency: 4},
		ports.GroupAudit:               {Batch: 32, Concurrency: 2},
	}
}

// provideConsumerLimits builds the adaptive limiters of the business
// consumer groups when SECKILL_CONSUMER_LIMITER=adaptive on an instance
// that runs the workers, and registers their metrics; otherwise it
// returns nil and every consumer keeps its fixed concurrency. With
// SECKILL_CONSUMER_GLOBAL_BUDGET the instances share that budget through
// peers (the Redis registry of live instances).
//
// The groups are named by their physical names (Broker.Group), the group
// label of the consumers' other metrics. The order-create group has
// priority in the shared budget.
func provideConsumerLimits(cfg config.Config, store *postgres.Store, peers ports.ConsumerPeers, gate *application.BacklogGate,
	broker Broker, clock ports.Clock, reg prometheus.Registerer, log *slog.Logger) (*application.ConsumerLimits, error) {
	if !cfg.AdaptiveConsumers() || !cfg.RunsWorkers() {
		return nil, nil
	}
	lc := application.ConsumerLimitsConfig{Priority: broker.Group(ports.GroupOrderCreate), Tick: cfg.Workers.ConsumerLimitTick}
	if cfg.Workers.ConsumerGlobalBudget > 0 {
		lc.GlobalBudget, lc.Instance, lc.Peers = cfg.Workers.ConsumerGlobalBudget, cfg.InstanceID, peers
	}
	for g, o := range GroupOptions(cfg) {
		lc.Groups = append(lc.Groups, application.ConsumerLimitGroup{Group: broker.Group(g), Budget: o.Concurrency,
			Floor: cfg.Workers.ConsumerLimitFloor, Batch: o.Batch})
	}
	limits, err := application.NewConsumerLimits(lc, databaseSignals{store}, gate, broker, clock,
		log.With("component", "consumer-limits"))
	if err != nil {
		return nil, err
	}
	if err := metrics.RegisterConsumerLimits(reg, limitsSource{limits}); err != nil {
		return nil, fmt.Errorf("consumer limit metrics: %w", err)
	}
	return limits, nil
}

// NewDatabaseSignals returns application.DatabaseSignals on the
// PostgreSQL adapter (the benches build their own ConsumerLimits with it).
func NewDatabaseSignals(s *postgres.Store) application.DatabaseSignals { return databaseSignals{s} }

// databaseSignals is application.DatabaseSignals on the PostgreSQL
// adapter.
type databaseSignals struct{ s *postgres.Store }

// Pool implements application.DatabaseSignals.
func (d databaseSignals) Pool() application.PoolCounters {
	p := d.s.PoolStats()
	return application.PoolCounters{Acquires: p.Acquires, EmptyAcquires: p.EmptyAcquires, EmptyAcquireWait: p.EmptyAcquireWait,
		Acquired: p.Acquired, Total: p.Total, Max: p.Max}
}

// LockWaits implements application.DatabaseSignals.
func (d databaseSignals) LockWaits(ctx context.Context) (int, error) {
	n, err := d.s.LockWaits(ctx)
	if err != nil {
		return 0, fmt.Errorf("lock waits: %w", err)
	}
	return n, nil
}

// limitsSource is metrics.ConsumerLimitsSource on the application's
// ConsumerLimits.
type limitsSource struct{ *application.ConsumerLimits }

// ConsumerLimitStates implements metrics.ConsumerLimitsSource.
func (l limitsSource) ConsumerLimitStates() []metrics.ConsumerLimitState {
	states := l.States()
	out := make([]metrics.ConsumerLimitState, len(states))
	for i, st := range states {
		d := make(map[string]uint64, len(st.Decisions))
		for reason, n := range st.Decisions {
			d[string(reason)] = n
		}
		out[i] = metrics.ConsumerLimitState{Group: st.Group, Limit: st.Limit, Decisions: d}
	}
	return out
}
