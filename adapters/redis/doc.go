// Package redis is the Redis adapter of the seckill service. Its Store
// implements ports.Admission, ports.Reservations and ports.Backlog, and
// Store.OrderViews returns the ports.OrderViews implementation, all with
// github.com/redis/go-redis/v9.
//
// Every state change is one Lua script (embedded from lua/*.lua) run by SHA
// (EVALSHA) with a NOSCRIPT fallback to EVAL (go-redis Script.Run). Every
// key a script touches is passed in KEYS, and all keys of one call share one
// hash tag, so the scripts run unchanged on Redis Cluster:
//
//   - user slot {u<user>}: request claims, order lookups, the token bucket;
//   - activity-SKU slot {a<activity>:s<sku>}: stock, rules, holders,
//     reservation hashes and the pending / unresolved indexes;
//   - order view slot {<order_id>}: the query view of one order.
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
