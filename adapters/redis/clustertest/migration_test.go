package clustertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// TestSlotMigrationUnderLoad moves the hash slot of a hot activity SKU from
// its master to another one (CLUSTER SETSLOT IMPORTING / MIGRATING, MIGRATE
// a few keys at a time, SETSLOT NODE) while eight goroutines reserve units
// of it, and then moves it back. During the moves the clients meet ASK
// (keys moved already), TRYAGAIN (a script whose keys are split between the
// two masters, or not all present) and MOVED (after the slot changed
// owner). It asserts that no reservation fails except as sold out, that
// every reservation answered CREATED is stored, PENDING, and that the stock
// counter plus the held reservations equal the initial stock (I1, I6).
func TestSlotMigrationUnderLoad(t *testing.T) {
	const (
		stock   = 400
		workers = 8
		// maxPerWorker bounds each goroutine's attempts; the goroutines stop
		// earlier, once both moves are done.
		maxPerWorker = 5000
	)
	c, refusals := countingClusterClient(t)
	ns := redistest.Namespace(t, c)
	s, err := redis.New(c, redis.Config{Namespace: ns}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := s.SeedActivity(ctx, open(1, 1, stock)); err != nil {
		t.Fatal(err)
	}
	slot := keySlot(t, c, skuKey(ns, 1, 1))
	nodes := masters(t, c)
	if len(nodes) < 2 {
		t.Fatalf("the cluster has %d master(s); the test needs two", len(nodes))
	}
	src := nodes[owner(t, c, slot)]
	var dst *node
	for _, n := range nodes {
		if n != src {
			dst = n
			break
		}
	}

	var (
		wg       sync.WaitGroup
		reserved sync.Map // reservation id -> struct{}
		attempts atomic.Int64
		created  atomic.Int64
		soldOut  atomic.Int64
		stop     atomic.Bool
		started  = make(chan struct{})
		once     sync.Once
		errMu    sync.Mutex
		errs     []error
	)
	for w := range workers {
		wg.Go(func() {
			for i := 0; i < maxPerWorker && !stop.Load(); i++ {
				attempts.Add(1)
				user := int64(w*maxPerWorker + i + 1)
				r := newRsv(t, 1, 1, user, "mig")
				got, err := s.Reserve(ctx, r, r.CreatedAt)
				switch {
				case err == nil:
					if got.ReservationID != r.ReservationID {
						err = fmt.Errorf("reserve %s answered %s", r.ReservationID, got.ReservationID)
						break
					}
					reserved.Store(r.ReservationID, struct{}{})
					if created.Add(1) == workers {
						once.Do(func() { close(started) })
					}
				case errors.Is(err, ports.ErrSoldOut):
					soldOut.Add(1)
					err = nil
				}
				if err != nil {
					errMu.Lock()
					errs = append(errs, fmt.Errorf("user %d: %w", user, err))
					errMu.Unlock()
				}
			}
		})
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("no reservation was made")
	}
	moveSlot(t, ctx, slot, src, dst, nodes)
	moveSlot(t, ctx, slot, dst, src, nodes)
	stop.Store(true)
	wg.Wait()

	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("refusals seen by the nodes' clients: %v", refusals.snapshot())
	if refusals.total() == 0 {
		t.Error("no command was refused: the moves overlapped no reservation and the test proved nothing")
	}
	inv, err := s.Inventory(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	n := created.Load()
	t.Logf("attempts %d, created %d, sold out %d, available %d, held %d",
		attempts.Load(), n, soldOut.Load(), inv.Available, len(inv.Held))
	if inv.Available+int64(len(inv.Held)) != stock {
		t.Errorf("I1/I6: available %d + held %d != initial stock %d", inv.Available, len(inv.Held), stock)
	}
	if int64(len(inv.Held)) != n {
		t.Errorf("held %d, want the %d reservations created", len(inv.Held), n)
	}
	for _, id := range inv.Held {
		if _, ok := reserved.Load(id); !ok {
			t.Errorf("held reservation %s was not answered CREATED", id)
		}
		r, err := s.Get(ctx, ports.ReservationRef{ActivityID: 1, SKUID: 1, ReservationID: id})
		if err != nil || r.Status != reservation.StatusPending {
			t.Errorf("reservation %s: %v %+v", id, err, r)
		}
	}
	if n+soldOut.Load() != attempts.Load() {
		t.Errorf("created %d + sold out %d != %d attempts", n, soldOut.Load(), attempts.Load())
	}
}

// refusalCounter counts the TRYAGAIN, ASK and MOVED replies the node
// clients of a cluster client receive (before the cluster client follows
// or retries them).
type refusalCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *refusalCounter) hook() goredis.Hook { return refusalHook{r} }

func (r *refusalCounter) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.n)
}

func (r *refusalCounter) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.n {
		n += v
	}
	return n
}

type refusalHook struct{ r *refusalCounter }

func (h refusalHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h refusalHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		h.count(err)
		return err
	}
}

func (h refusalHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.count(c.Err())
		}
		return err
	}
}

func (h refusalHook) count(err error) {
	if err == nil {
		return
	}
	kind, _, _ := strings.Cut(err.Error(), " ")
	switch kind {
	case "TRYAGAIN", "ASK", "MOVED":
		h.r.mu.Lock()
		h.r.n[kind]++
		h.r.mu.Unlock()
	}
}

// countingClusterClient returns a client of the test cluster whose node
// clients count refusals, closed when the test ends.
func countingClusterClient(t *testing.T) (*goredis.ClusterClient, *refusalCounter) {
	t.Helper()
	redistest.ClusterClient(t) // fails with the how-to when there is no cluster
	r := &refusalCounter{n: map[string]int{}}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: redis.SplitAddrs(os.Getenv(redistest.EnvClusterAddrs)), PoolSize: 32})
	c.OnNewNode(func(n *goredis.Client) { n.AddHook(r.hook()) })
	t.Cleanup(func() { _ = c.Close() })
	return c, r
}

// moveSlot migrates hash slot slot from from to to the way redis-cli
// --cluster reshard does: IMPORTING on the target, MIGRATING on the source,
// MIGRATE of at most 5 keys at a time until the source has none left, then
// SETSLOT NODE on the target, the source and the other masters.
func moveSlot(t *testing.T, ctx context.Context, slot int64, from, to *node, all map[string]*node) {
	t.Helper()
	must := func(what string, err error) {
		if err != nil {
			t.Fatalf("move slot %d %s -> %s: %s: %v", slot, from.port, to.port, what, err)
		}
	}
	must("importing", to.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.id).Err())
	must("migrating", from.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.id).Err())
	moved := 0
	// Each round moves at least one key, so the rounds are bounded by the
	// keys of the slot: seven index, counter and rules keys plus one hash
	// per reservation, far below 10,000 here.
	for round := 0; ; round++ {
		if round >= 10_000 {
			t.Fatalf("move slot %d: still keys left after %d rounds", slot, round)
		}
		keys, err := from.c.ClusterGetKeysInSlot(ctx, int(slot), 5).Result()
		must("getkeysinslot", err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", to.host, to.port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must("migrate", from.c.Do(ctx, args...).Err())
		moved += len(keys)
	}
	must("node on target", to.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", to.id).Err())
	must("node on source", from.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", to.id).Err())
	for _, n := range all {
		if n != from && n != to {
			must("node on "+n.port, n.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", to.id).Err())
		}
	}
	t.Logf("moved slot %d (%d keys) from %s to %s", slot, moved, from.port, to.port)
}
