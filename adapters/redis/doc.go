// Package redis is the Redis adapter of the seckill service. Its Store
// implements ports.Admission, ports.Reservations and ports.Backlog, and
// Store.OrderViews returns the ports.OrderViews implementation, all with
// github.com/redis/go-redis/v9.
//
// Every state change is one Lua script (embedded from lua/*.lua) run by SHA
// (EVALSHA) with a NOSCRIPT fallback to EVAL (go-redis Script.Run). Every
// key a script touches is passed in KEYS, and all keys of one call share one
// hash tag, so the scripts run unchanged on Redis Cluster (NewClient
// returns the cluster client for several addresses):
//
//   - user slot {u<user>}: request claims, order lookups, the token bucket
//     (claim_request, forget_request);
//   - activity-SKU slot {a<activity>:s<sku>}: stock, rules, holders,
//     reservation hashes and the pending / unresolved / pending_created
//     indexes (seed, reserve, claim_due, mark_sent, mark_sent_many,
//     schedule_retry, mark_ordered, release, release_many, inventory,
//     rebuild); a hot SKU therefore lives on one master, unless its
//     activity splits the stock over lanes: lane k > 0 is a slot of its
//     own, {a<activity>:s<sku>:l<k>[.<salt>]}, with the same keys plus
//     a transfer log and a set of received transfers (transfer_out,
//     transfer_in, transfer_done, freeze_lane, open_lane; lanes.go);
//   - order view slot {<order_id>}: the query view of one order
//     (view_apply);
//   - <ns>:slots (the set of seeded activity SKUs) and <ns>:generation have
//     no hash tag: each is one key in a slot of its own, read and written by
//     single-key commands (finish_recovery's only key is the generation);
//   - <ns>:node:{<tag>}: on a cluster, the generation hash of the master
//     whose lowest hash slot the tag maps to (guard_node, finish_recovery).
//
// guard.lua is the one script that is not single-slot: it freezes every
// seeded SKU's rules from one connection to one process, so it runs on a
// single Redis node only. On a cluster NewClient installs
// Guard.OnClusterConnect instead: each master keeps its own generation
// hash (on itself, so it is lost or restored older with the master's
// data), and a new process behind a master freezes that master's SKUs
// only, one guard_sku script per SKU found by SCAN on the connection
// (clusterguard.go).
//
// Reads across activity SKUs work on a cluster because they are single-key
// commands per SKU, routed by slot: ClaimDue, Stats and Unresolved read the
// slot index <ns>:slots (one key, cached for Config.SlotsCacheTTL) and then
// each SKU's indexes (ZRANGEBYSCORE, then claim_due per SKU; Stats and
// Unresolved in pipelines, which the cluster client splits per master).
// MarkSentBatch, MarkOrdered and ReleaseMany make one script call per SKU.
// BuyerState pipelines one key of the user slot and one of the SKU slot.
// Order views are one hash per order. The tests of package clustertest run
// these against a 3-master cluster.
//
// During a slot migration Redis answers ASK for keys moved already, MOVED
// once the slot changed owner, and TRYAGAIN for a multi-key script whose
// keys are split between the two masters or not all present (a new
// reservation's hash never is, so reserve is refused for the whole
// migration of its SKU's slot). goredis follows ASK and MOVED and retries
// TRYAGAIN within ClusterOptions.MaxRedirects; when it gives up the
// adapter calls the script again (Store.run: at most 20 more calls, pauses
// doubling from 1ms to 100ms, about 1.5s), and a refusal that outlasts
// that is returned as ports.ErrTransient. A refused script did not run.
//
// Retries: goredis sends a command again when its reply was lost (a read
// timeout, a closed connection; Options.MaxRetries, per node on a cluster,
// and ClusterOptions.MaxRedirects), so a script may run twice with the
// same KEYS and ARGV. Every script has the effect of one run then, and
// answers as one run did (TestEveryScriptToleratesARetriedCall):
//
//   - seed: the rules exist, nothing changes;
//   - claim_request: a claim bound to exactly this call's ids (new per
//     call) answers CREATED again, no second token;
//   - reserve: the reservation exists, EXISTS returns it (same snapshot);
//   - claim_due: a candidate leased to this owner until exactly this
//     lease_until is returned again, send_attempt counted once;
//   - schedule_retry: a reservation already due at this time and not
//     leased to the caller is left as is (version counted once);
//   - mark_sent, mark_sent_many, mark_ordered: past PENDING (or SENT) they
//     skip;
//   - release, release_many, finish_recovery, view_apply, rebuild: the
//     effect carries a token new per call (Store.callToken: release_call,
//     verified_call, apply_call, rebuilt_call with rebuilt_result), so the
//     same call answers as the first run did while another call with the
//     same arguments still answers "already done";
//   - forget_request: PEXPIRE ... LT only shortens;
//   - guard, guard_node: a second run answers PENDING, handled as FROZEN;
//   - guard_sku, freeze_lane: a second run sets the same frozen value
//     again;
//   - transfer_out: the transfer is logged already, its stored units are
//     returned; transfer_in: received already, 0 (the units were added
//     once); transfer_done: gone already, 0; open_lane: open for the
//     generation already, 1 (TestLaneScriptsTolerateARetriedCall);
//   - inventory: read-only;
//   - switch (the operator's pause and end, switch.go): a second run
//     writes the same value, answers 0.
//
// The key layout is the one of docs/architecture.md, plus one index per
// activity SKU, <ns>:{a:s}:pending_created (a sorted set of the
// reservations whose message is not confirmed, scored by their creation
// time), which Backlog.Stats needs because the pending index is scored by
// the next send attempt.
//
// The scripts perform the commands of the reservation aggregate, the
// reference of the rules (TestScriptsFollowTheAggregate runs every script
// and the aggregate from every status and requires the same result):
// Reserve creates
// PENDING; MarkSent moves PENDING to SENT; ScheduleRetry keeps PENDING;
// MarkOrdered moves PENDING or SENT to ORDERED; Release moves any other
// status to RELEASED, exactly once. Times of a reservation are stored as
// Unix milliseconds (the domain truncates creation times to milliseconds).
// The version field counts status events (created, sent, retry scheduled,
// ordered, released); send_attempt counts the scanner's claims (ClaimDue).
//
// Time: Reserve uses the snapshot's CreatedAt for the activity window,
// ClaimDue the now it is given. The token bucket of ClaimRequest uses
// Config.Clock when set (tests) and Redis' own TIME otherwise, so that all
// service instances share one clock per bucket.
//
// Errors are wrapped with the operation's name; failures that may succeed
// when retried (connection loss, timeouts, pool exhaustion, LOADING,
// READONLY, TRYAGAIN, CLUSTERDOWN, ...) also wrap ports.ErrTransient.
package redis
