package redis

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// TestKeySlotFollowsTheClusterSpecification checks the hash slot function
// against the specification's CRC16 check value and slots Redis computes
// (CLUSTER KEYSLOT), hash tags included, and that every slot has a tag.
func TestKeySlotFollowsTheClusterSpecification(t *testing.T) {
	t.Parallel()
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{"foo": 12182, "bar": 5061, "{user1000}.following": 3443,
		"sk:{a1:s1}:rules": keySlot("a1:s1"), "x{}y": keySlot("x{}y"), "a{b}{c}": keySlot("b")} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	for _, slot := range []int{0, 1, 5460, 5461, 10922, 10923, 16383} {
		if got := keySlot(keys{ns: "sk"}.nodeGenerationKey(slot)); got != slot {
			t.Errorf("the generation hash of slot %d is in slot %d", slot, got)
		}
	}
}

// TestParseClusterSelf reads the node id, the lowest served slot and
// whether it is a replica from the myself line of CLUSTER NODES, ignoring
// slots in migration.
func TestParseClusterSelf(t *testing.T) {
	t.Parallel()
	nodes := "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30002@31002 master - 0 1426238317239 2 connected 5461-10922\n" +
		"67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 7000 100-200 [300->-e7d1] [5-<-e7d1]\n"
	self, ok := parseClusterSelf(nodes)
	if !ok || self.id != "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1" || self.firstSlot != 100 {
		t.Fatalf("parseClusterSelf = %+v, %v", self, ok)
	}
	self, ok = parseClusterSelf("67ed 127.0.0.1:30001@31001 myself,slave e7d1 0 0 1 connected\n")
	if !ok || self.firstSlot != -1 || !self.replica {
		t.Fatalf("a replica: parseClusterSelf = %+v, %v; want a replica with no slot", self, ok)
	}
	if self, _ := parseClusterSelf(nodes); self.replica {
		t.Fatal("a master read as a replica")
	}
	if _, ok := parseClusterSelf(""); ok {
		t.Fatal("an empty reply has a myself line")
	}
}

// TestGuardSKUDoesNotFreezeAgainWhatItsGenerationRebuilt: a connection
// that checks a new cluster master late (after the recovery of that same
// process rebuilt a SKU) must not freeze the SKU again; a newer process
// does freeze it. guard_sku.lua is single-key, so it runs on a single
// node here.
func TestGuardSKUDoesNotFreezeAgainWhatItsGenerationRebuilt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s, ctx := f.s, ctxT(t)
	act := f.seed(1, 1, 10)
	g, err := NewGuard(s.keys.ns, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rules := s.keys.slot(1, 1).rules
	freeze := func(run string) int {
		n, err := g.skuScript.Run(ctx, f.c, []string{rules}, run).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := freeze("run-1"); n != 1 {
		t.Fatalf("freeze by a new process = %d, want 1", n)
	}
	_, err = s.Reserve(ctx, f.newRsv(1, 1, 1, testBase), testBase)
	wantErr(t, err, ports.ErrStockPaused)
	if _, err := s.Rebuild(ctx, ports.StockRebuild{Generation: "run-1", Activity: act, Base: 10}); err != nil {
		t.Fatal(err)
	}
	if n := freeze("run-1"); n != 0 {
		t.Fatalf("a late check of the same process froze the rebuilt SKU again (%d)", n)
	}
	f.reserve(1, 1, 1, testBase, testBase)
	if n := freeze("run-2"); n != 1 {
		t.Fatalf("freeze by a newer process = %d, want 1", n)
	}
	f.c.Set(ctx, s.keys.ns+":not-rules", "x", 0)
	if n, err := g.skuScript.Run(ctx, f.c, []string{s.keys.ns + ":not-rules"}, "run-3").Int(); n != 0 || err != nil {
		t.Fatalf("guard_sku on a string key = %d, %v; want 0", n, err)
	}
}

// TestClusterFreezeRunsOncePerProcess: the connections opened at once to a
// new master share one freeze (one SCAN of its keyspace) and its result.
func TestClusterFreezeRunsOncePerProcess(t *testing.T) {
	t.Parallel()
	var c clusterPending
	var calls atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	check := func() {
		verified, err := c.once(ctxT(t), "node/run", func() (bool, error) {
			calls.Add(1)
			<-release
			return false, errors.New("scan failed")
		})
		if verified || err == nil {
			t.Errorf("once = %v, %v; want the shared failure", verified, err)
		}
	}
	wg.Go(check)
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for range 7 {
		wg.Go(check)
	}
	time.Sleep(100 * time.Millisecond) // the seven join the first one's freeze
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d freezes, want 1", n)
	}
	if v, err := c.once(ctxT(t), "node/run", func() (bool, error) { return true, nil }); !v || err != nil {
		t.Fatalf("a freeze after the first one ended = %v, %v; want it run", v, err)
	}
}
