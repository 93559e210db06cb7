package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/ports"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// Health is the service's view of its dependencies, probed in the
// background (so a health check never reaches a dependency itself) and
// reported per role:
//
//   - entry (PlaceOrder, GetOrder: seckill.v1.OrderService and the
//     overall "" service of gRPC health) is ready while Redis answers:
//     with the broker down it keeps reserving and answers QUEUING, and
//     PostgreSQL is not on its path at all;
//   - orders (order creation, payments, timeouts, the admin API:
//     seckill.v1.AdminService) is ready while PostgreSQL answers and the
//     broker is available (the publisher's breaker is not open).
//
// Every role is NOT_SERVING from the moment a drain starts. Liveness is
// separate: the process answers /livez as long as it runs.
type Health struct {
	pg       *postgres.Store
	redis    goredis.UniversalClient
	broker   ports.BrokerHealth
	interval time.Duration

	mu       sync.RWMutex
	status   HealthStatus
	draining bool
}

// HealthStatus is one probe round's result.
type HealthStatus struct {
	Postgres bool      `json:"postgres"`
	Redis    bool      `json:"redis"`
	Broker   bool      `json:"broker"`
	Entry    bool      `json:"entry"`
	Orders   bool      `json:"orders"`
	Draining bool      `json:"draining"`
	At       time.Time `json:"at"`
}

func provideHealth(pg *postgres.Store, redis goredis.UniversalClient, broker Broker) *Health {
	return &Health{pg: pg, redis: redis, broker: broker, interval: time.Second}
}

// Run probes every dependency once a second until ctx ends.
func (h *Health) Run(ctx context.Context) error {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		h.probe(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// probe checks each dependency with a deadline shorter than the interval.
func (h *Health) probe(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, h.interval*8/10)
	defer cancel()
	var st HealthStatus
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); st.Postgres = h.pg.Ping(pctx) == nil }()
	go func() { defer wg.Done(); st.Redis = h.redis.Ping(pctx).Err() == nil }()
	wg.Wait()
	st.Broker, _ = h.broker.BrokerAvailable()
	st.At = time.Now()
	h.mu.Lock()
	h.status = st
	h.mu.Unlock()
}

// Drain marks every role NOT_SERVING for good (the process is stopping).
func (h *Health) Drain() {
	h.mu.Lock()
	h.draining = true
	h.mu.Unlock()
}

// Status returns the last probe round with the roles derived from it.
func (h *Health) Status() HealthStatus {
	h.mu.RLock()
	st, draining := h.status, h.draining
	h.mu.RUnlock()
	st.Draining = draining
	st.Entry = st.Redis && !draining
	st.Orders = st.Postgres && st.Broker && !draining
	return st
}

// Check implements grpchealth.Checker: "" and seckill.v1.OrderService
// follow the entry role, seckill.v1.AdminService the orders role.
func (h *Health) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	st := h.Status()
	ok := false
	switch req.Service {
	case "", seckillv1connect.OrderServiceName:
		ok = st.Entry
	case seckillv1connect.AdminServiceName:
		ok = st.Orders
	default:
		return nil, errUnknownService
	}
	if ok {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
}

// errUnknownService answers a health check of a service this process
// does not serve (gRPC health's NOT_FOUND).
var errUnknownService = connect.NewError(connect.CodeNotFound, errors.New("unknown service"))

// ReadyHandler answers /readyz: the status as JSON, 200 while the entry
// role is ready, 503 otherwise.
func (h *Health) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		st := h.Status()
		w.Header().Set("Content-Type", "application/json")
		if !st.Entry {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(st)
	})
}
