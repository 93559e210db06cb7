// Package bootstrap wires the service: configuration, the Wire provider
// sets and injectors, and the App that runs the API server and every
// background worker. It is the only package that imports every layer.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/failpoint"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// Worker is a named background loop that runs until its context ends.
type Worker struct {
	Name string
	Run  func(ctx context.Context) error
}

// App is the assembled service.
type App struct {
	Config config.Config
	// Server is the API listener; Ops the operations listener.
	Server *api.Server
	Ops    OpsServer
	// Health probes the dependencies for gRPC health and /readyz.
	Health *Health
	// Broker is the messaging adapter SECKILL_BROKER chose.
	Broker Broker
	Admin  *application.Admin
	Orders *application.OrderService
	// Activities runs a sale for operators (list, get, update, pause,
	// resume, close); Buyers answers the buyers' reads of it.
	Activities *application.ActivityOps
	Buyers     *application.BuyerQueries
	Reconciler *application.Reconciler
	Projection *application.ProjectOrderStates
	// Gate is the backlog gate; Run measures it once before serving, so
	// the first PlaceOrder does not meet an unmeasured (closed) gate.
	Gate *application.BacklogGate
	// Failpoints is nil unless SECKILL_FAILPOINTS configured one; tests
	// change points at run time through it.
	Failpoints *failpoint.Registry
	Workers    []Worker
	Log        *slog.Logger
}

// Run starts the publisher, then the servers and every worker, and blocks
// until ctx is canceled or one of them fails. It then stops the API server
// first (in-flight requests drain) and the workers after it (the sent
// marker flushes what those requests queued; consumers finish in-flight
// work and leave the rest un-ACKed), then the operations server, and
// returns the first failure. ready, if non-nil, gets the API server's
// address once both servers listen (OpsAddr has the other). An instance of
// the workers role (config.Config.Role) serves no API: ready gets nil once
// the operations server listens, and Run blocks until ctx ends.
func (a *App) Run(ctx context.Context, ready func(net.Addr)) error {
	if err := a.Broker.Start(ctx); err != nil {
		return fmt.Errorf("start publisher: %w", err)
	}
	if a.Gate != nil && a.Config.RunsAPI() {
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := a.Gate.Measure(mctx); err != nil {
			a.Log.Warn("first backlog measurement failed; admission stays closed until the gate measures", "error", err)
		}
		cancel()
	}
	if _, err := a.Ops.Listen(); err != nil {
		return fmt.Errorf("operations server: %w", err)
	}
	opsCtx, stopOps := context.WithCancel(context.WithoutCancel(ctx))
	opsDone := make(chan error, 1)
	go func() { opsDone <- a.Ops.Run(opsCtx, time.Second, nil) }()
	defer func() {
		stopOps()
		if err := <-opsDone; err != nil {
			a.Log.Warn("operations server stopped with an error", "error", err)
		}
	}()
	srvCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	workCtx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorkers()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(name string, err error) {
		if err == nil || errors.Is(err, context.Canceled) {
			return
		}
		mu.Lock()
		if firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", name, err)
		}
		mu.Unlock()
		stopServer()
	}
	// Health flips to NOT_SERVING as soon as the drain starts, and probes
	// until the workers stop.
	go func() {
		select {
		case <-ctx.Done():
			a.Health.Drain()
		case <-workCtx.Done():
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		fail("health", a.Health.Run(workCtx))
	}()
	for _, w := range a.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail(w.Name, w.Run(workCtx))
			a.Log.Info("worker stopped", "worker", w.Name)
		}()
	}
	if a.Config.RunsAPI() {
		fail("server", a.Server.Run(srvCtx, 10*time.Second, ready))
	} else {
		// The workers role serves no API: ready gets a nil address.
		if ready != nil {
			ready(nil)
		}
		<-srvCtx.Done()
	}
	// (the operations server stops last, in the deferred call above)
	stopWorkers()
	wg.Wait()
	return firstErr
}

// OpsAddr returns the operations listener's address once Run listens, nil
// before.
func (a *App) OpsAddr() net.Addr { return a.Ops.Addr() }
