package redis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The guard on Redis Cluster: a generation per master, a freeze per SKU.
//
// Every master keeps its own generation hash, <ns>:node:{<tag>}, whose
// hash tag maps to the lowest hash slot the master serves, so the hash
// lives on the master it describes: it is lost, or restored older, with
// that master's data. Its fields are those of <ns>:generation on a single
// node (run_id: the verified process, pending: the process awaiting
// recovery). OnClusterConnect compares the process behind a new
// connection with the run_id its master's hash records; on a difference it
// freezes, one single-slot script per SKU (guard_sku.lua), every activity
// SKU whose rules the process holds (found with SCAN on that connection),
// then records the process as pending (guard_node.lua). The other masters'
// SKUs are not touched: they keep selling.
//
// A master that came back empty has no rules left to freeze: Reserve then
// answers ErrStockPaused for an activity SKU Redis does not know while the
// master serving its hash slot is pending (Store.pausedFor), and the
// rebuild seeds it from PostgreSQL. A master restored from an older AOF or
// snapshot carries the run_id of the process it was copied from, never the
// new process's.

// ErrReplicaConnection is OnClusterConnect's refusal of a connection to a
// replica (see OnClusterConnect); the cluster client then reads the
// topology from another node.
var ErrReplicaConnection = errors.New("redis guard: a connection to a replica is not kept (masters only)")

// nodeGenerationKey is the generation hash of the master whose lowest hash
// slot is slot.
func (k keys) nodeGenerationKey(slot int) string {
	return k.ns + ":node:{" + slotTag(slot) + "}"
}

// clusterSelf is what CLUSTER NODES says about the node it was sent to.
type clusterSelf struct {
	id        string
	firstSlot int  // -1: the node serves no hash slot
	replica   bool // the node replicates a master
}

// parseClusterSelf finds the "myself" line of a CLUSTER NODES reply.
func parseClusterSelf(nodes string) (clusterSelf, bool) {
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 8 || !slices.Contains(strings.Split(f[2], ","), "myself") {
			continue
		}
		flags := strings.Split(f[2], ",")
		self := clusterSelf{id: f[0], firstSlot: -1, replica: slices.Contains(flags, "slave") || slices.Contains(flags, "replica")}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot in migration: not served yet, or still
				continue
			}
			start, _, _ := strings.Cut(r, "-")
			n, err := strconv.Atoi(start)
			if err != nil {
				continue
			}
			if self.firstSlot < 0 || n < self.firstSlot {
				self.firstSlot = n
			}
		}
		return self, true
	}
	return clusterSelf{}, false
}

// OnClusterConnect is Guard's check for a connection of a cluster client
// (goredis.ClusterOptions.OnConnect; NewClient installs it): it checks the
// master behind the connection against that master's own generation hash
// and freezes that master's activity SKUs only. A connection to a replica
// is refused (ErrReplicaConnection): the client reads and writes masters
// only, and a connection kept in a replica's pool (opened to read the
// topology) would carry commands unchecked once the cluster promoted that
// replica; refused, every connection to the promoted node is a new one,
// checked here. A master that serves no hash slot yet is not checked. As
// OnConnect, it fails the connection only then and when the check itself
// fails.
func (g *Guard) OnClusterConnect(ctx context.Context, cn *goredis.Conn) error {
	run, err := processRunID(ctx, cn)
	if err != nil {
		return err
	}
	nodes, err := cn.ClusterNodes(ctx).Result()
	if err != nil {
		return fmt.Errorf("redis guard: cluster nodes: %w", err)
	}
	self, ok := parseClusterSelf(nodes)
	if !ok {
		return errors.New("redis guard: CLUSTER NODES has no myself line")
	}
	if self.replica {
		return ErrReplicaConnection
	}
	if self.firstSlot < 0 {
		return nil
	}
	gen := g.keys.nodeGenerationKey(self.firstSlot)
	v, err := cn.HMGet(ctx, gen, "run_id", "pending").Result()
	if err != nil {
		return fmt.Errorf("redis guard: read generation: %w", err)
	}
	if v[0] == run {
		return nil
	}
	if v[1] != run {
		verified, err := g.cluster.once(ctx, self.id+"/"+run, func() (bool, error) { return g.freezeAndRecord(ctx, cn, self.id, gen, run) })
		if err != nil || verified {
			return err
		}
	}
	g.markNodePending(self.id, run)
	return nil
}

// freezeAndRecord freezes the SKUs of the node behind cn and then records
// run as its pending generation; it reports whether run turned out to be
// the verified generation already.
func (g *Guard) freezeAndRecord(ctx context.Context, cn *goredis.Conn, node, gen, run string) (bool, error) {
	frozen, err := g.freezeNode(ctx, cn, run)
	if err != nil {
		return false, err
	}
	res, err := g.nodeScript.Run(ctx, cn, []string{gen}, run, itoa(time.Now().UnixMilli())).Text()
	if err != nil {
		return false, fmt.Errorf("redis guard: %w", err)
	}
	switch res {
	case "OK":
		return true, nil
	case "FROZEN":
		g.logger.WarnContext(ctx, "redis cluster master is a new process: its activity SKUs are frozen until rebuilt",
			"node", node, "generation", run, "frozen_skus", frozen)
	}
	return false, nil
}

// freezeNode freezes every activity SKU whose rules the node behind cn
// holds, one guard_sku.lua per SKU, and returns how many it froze.
func (g *Guard) freezeNode(ctx context.Context, cn *goredis.Conn, run string) (int, error) {
	match := globEscape(g.keys.ns) + ":{*}:rules"
	var cursor uint64
	frozen := 0
	for {
		ks, next, err := cn.Scan(ctx, cursor, match, 1000).Result()
		if err != nil {
			return frozen, fmt.Errorf("redis guard: scan rules: %w", err)
		}
		for _, k := range ks {
			n, err := g.skuScript.Run(ctx, cn, []string{k}, run).Int()
			if err != nil {
				return frozen, fmt.Errorf("redis guard: freeze %s: %w", k, err)
			}
			frozen += n
		}
		if next == 0 {
			return frozen, nil
		}
		cursor = next
	}
}

// globEscape escapes the glob characters of a SCAN MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\*?[]`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// clusterPending is the per-master state of a cluster guard in this
// process: node id -> pending generation.
type clusterPending struct {
	mu    sync.Mutex
	nodes map[string]string
	marks uint64 // markNodePending calls

	// freezes are the freezes in progress by node/run: the connections
	// opened at once to a new process wait for one SCAN instead of each
	// scanning the master's keyspace.
	freezes map[string]*freeze
}

// freeze is one freezeAndRecord in progress.
type freeze struct {
	done     chan struct{}
	verified bool
	err      error
}

// once runs fn for key unless a call for key is in progress, whose result
// it then waits for (until ctx ends) and returns.
func (c *clusterPending) once(ctx context.Context, key string, fn func() (bool, error)) (bool, error) {
	c.mu.Lock()
	if f, ok := c.freezes[key]; ok {
		c.mu.Unlock()
		select {
		case <-f.done:
			return f.verified, f.err
		case <-ctx.Done():
			return false, fmt.Errorf("redis guard: %w", ctx.Err())
		}
	}
	if c.freezes == nil {
		c.freezes = map[string]*freeze{}
	}
	f := &freeze{done: make(chan struct{})}
	c.freezes[key] = f
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.freezes, key)
		c.mu.Unlock()
		close(f.done)
	}()
	f.verified, f.err = fn()
	return f.verified, f.err
}

func (g *Guard) markNodePending(node, run string) {
	g.cluster.mu.Lock()
	if g.cluster.nodes == nil {
		g.cluster.nodes = map[string]string{}
	}
	g.cluster.nodes[node] = run
	g.cluster.marks++
	g.cluster.mu.Unlock()
	g.markPending()
}

// nodeMarks returns the number of markNodePending calls so far.
func (g *Guard) nodeMarks() uint64 {
	g.cluster.mu.Lock()
	defer g.cluster.mu.Unlock()
	return g.cluster.marks
}

// setNodesPending replaces the per-master state with what Redis held when
// read; when a connection marked a master pending since marks (the read
// may predate it), it adds to the state instead.
func (g *Guard) setNodesPending(nodes map[string]string, marks uint64) {
	g.cluster.mu.Lock()
	defer g.cluster.mu.Unlock()
	if g.cluster.marks != marks {
		maps.Copy(g.cluster.nodes, nodes)
	} else {
		g.cluster.nodes = nodes
	}
	g.pending.Store(len(g.cluster.nodes) > 0)
}

// finishNodes forgets the masters whose pending generation is run.
func (g *Guard) finishNodes(run string) {
	g.cluster.mu.Lock()
	defer g.cluster.mu.Unlock()
	for id, r := range g.cluster.nodes {
		if r == run {
			delete(g.cluster.nodes, id)
		}
	}
	g.pending.Store(len(g.cluster.nodes) > 0)
}

func (g *Guard) nodePending(node string) bool {
	g.cluster.mu.Lock()
	defer g.cluster.mu.Unlock()
	return g.cluster.nodes[node] != ""
}

// clusterMaster is one master of the cluster, the hash slot ranges it
// serves and its generation hash.
type clusterMaster struct {
	id, gen string
	slots   []goredis.SlotRange
}

// clusterMasters returns the masters serving hash slots (CLUSTER SHARDS),
// by node id, with the generation hash of each.
func (s *Store) clusterMasters(ctx context.Context, cc *goredis.ClusterClient) ([]clusterMaster, error) {
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		return nil, wrapErr("cluster shards", err)
	}
	var out []clusterMaster
	for _, sh := range shards {
		if len(sh.Slots) == 0 {
			continue
		}
		first := sh.Slots[0].Start
		for _, r := range sh.Slots {
			first = min(first, r.Start)
		}
		for _, n := range sh.Nodes {
			if n.Role == "master" && n.ID != "" {
				out = append(out, clusterMaster{id: n.ID, gen: s.keys.nodeGenerationKey(int(first)), slots: sh.Slots})
			}
		}
	}
	slices.SortFunc(out, func(a, b clusterMaster) int { return strings.Compare(a.id, b.id) })
	return out, nil
}

// clusterRecoveryPending is RecoveryPending on a cluster: the pending
// generation of the first master (by node id) that has one. A master that
// does not answer is skipped unless no other has a pending generation.
func (s *Store) clusterRecoveryPending(ctx context.Context, cc *goredis.ClusterClient) (string, error) {
	var marks uint64
	if s.cfg.Guard != nil {
		marks = s.cfg.Guard.nodeMarks()
	}
	ms, err := s.clusterMasters(ctx, cc)
	if err != nil {
		return "", err
	}
	pending := map[string]string{}
	first := ""
	var errs []error
	for _, m := range ms {
		v, err := cc.HGet(ctx, m.gen, "pending").Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("master %s: %w", m.id, err))
			continue
		}
		pending[m.id] = v
		if first == "" {
			first = v
		}
	}
	if first == "" && len(errs) > 0 {
		return "", wrapErr("recovery pending", errors.Join(errs...))
	}
	if s.cfg.Guard != nil && len(errs) == 0 {
		s.cfg.Guard.setNodesPending(pending, marks)
	}
	return first, nil
}

// clusterFinishRecovery is FinishRecovery on a cluster: it marks
// generation verified on the master whose pending generation it is.
func (s *Store) clusterFinishRecovery(ctx context.Context, cc *goredis.ClusterClient, generation string) (bool, error) {
	ms, err := s.clusterMasters(ctx, cc)
	if err != nil {
		return false, err
	}
	done := false
	for _, m := range ms {
		n, err := s.run(ctx, scriptFinishRecovery, []string{m.gen}, generation, itoa(s.now().UnixMilli()), s.callToken()).Int()
		if err != nil {
			return false, wrapErr("finish recovery", err)
		}
		done = done || n == 1
	}
	if done && s.cfg.Guard != nil {
		s.cfg.Guard.finishNodes(generation)
	}
	return done, nil
}

// clusterPaused reports whether the master serving the hash slot of key is
// pending; when the topology cannot be read it answers true (paused is the
// safe answer while some master is pending).
func (s *Store) clusterPaused(ctx context.Context, cc *goredis.ClusterClient, key string) bool {
	ms, err := s.clusterMasters(ctx, cc)
	if err != nil {
		return true
	}
	slot := int64(keySlot(key))
	for _, m := range ms {
		for _, r := range m.slots {
			if r.Start <= slot && slot <= r.End {
				return s.cfg.Guard.nodePending(m.id)
			}
		}
	}
	return true
}

// Hash slots (the Redis Cluster specification: CRC16/XMODEM of the key's
// hash tag, or of the key, modulo 16384).

const clusterSlots = 16384

// keySlot returns the hash slot of key.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % clusterSlots)
}

func crc16(s string) uint16 {
	var crc uint16
	for i := range len(s) {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

var (
	slotTagsOnce sync.Once
	slotTags     []string
)

// slotTag returns the shortest decimal hash tag whose key maps to slot (the
// smallest such number).
func slotTag(slot int) string {
	slotTagsOnce.Do(func() {
		slotTags = make([]string, clusterSlots)
		left := clusterSlots
		for i := 0; left > 0; i++ {
			tag := strconv.Itoa(i)
			if sl := crc16(tag) % clusterSlots; slotTags[sl] == "" {
				slotTags[sl] = tag
				left--
			}
		}
	})
	return slotTags[slot]
}
