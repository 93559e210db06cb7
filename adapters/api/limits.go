package api

import (
	"context"
	"errors"
	"hash/maphash"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// Limits protect the API from oversized, slow and abusive requests. Every
// byte limit applies before authentication work reads a body; the
// per-address limit applies before the token is verified; the
// concurrency and per-user limits apply after the token is verified and
// before any use case runs.
type Limits struct {
	// MaxBodyBytes caps a request body as it arrives on the wire; a
	// larger one is cut off (ResourceExhausted).
	MaxBodyBytes int64
	// MaxMessageBytes caps a request message after decompression, so a
	// small gzip body cannot inflate into a large allocation.
	MaxMessageBytes int
	// PlaceOrderConcurrency bounds PlaceOrder calls in flight in this
	// process; one more is answered ResourceExhausted (OVERLOADED) at
	// once, before the machine saturates. 0 means no bound.
	PlaceOrderConcurrency int
	// ReadRate and ReadBurst shape a per-user token bucket shared by
	// GetOrder, CancelOrder and every AdminService call (PlaceOrder has
	// its own, in Redis; PayOrder the one below). 0 disables it.
	ReadRate  float64
	ReadBurst int
	// PayRate and PayBurst shape a per-caller token bucket of PayOrder
	// (the payment side is one principal: its budget is the rate at which
	// it confirms payments). 0 disables it.
	PayRate  float64
	PayBurst int
	// ClientRate and ClientBurst shape a token bucket per client IP
	// address (IPv6: per /64) over every API call (health and reflection
	// excepted), taken before the token is verified. 0 disables it.
	ClientRate  float64
	ClientBurst int
	// MaxRateKeys bounds the buckets each per-key limit (users, payment
	// callers, addresses) keeps. A bucket refilled to its burst is the
	// same as none and is dropped; when the table is full of buckets in
	// use, new keys share one bucket per shard until space frees. 0 means
	// DefaultMaxRateKeys.
	MaxRateKeys int
	// EventStreams bounds the EventService streams open at once in this
	// process; one more is answered ResourceExhausted (OVERLOADED) at once.
	// 0 (or less) means DefaultEventStreams.
	EventStreams int
	// EventSendTimeout bounds how long one item of an EventService stream
	// may take to be sent (the subscriber not reading lets the stream's
	// flow-control window fill up); a send that does not complete within
	// it ends the stream with ResourceExhausted (SUBSCRIBER_TOO_SLOW). 0 (or
	// less) means DefaultEventSendTimeout.
	EventSendTimeout time.Duration
}

// DefaultMaxRateKeys is the default bound of buckets per per-key limit:
// about 16 MiB at most per table.
const DefaultMaxRateKeys = 1 << 18

// DefaultEventStreams is the default bound of EventService streams open
// at once per process.
const DefaultEventStreams = 64

// DefaultEventSendTimeout is the default bound of one send of an
// EventService stream.
const DefaultEventSendTimeout = 30 * time.Second

// DefaultLimits are the limits for a service on a small machine.
func DefaultLimits() Limits {
	return Limits{MaxBodyBytes: 64 << 10, MaxMessageBytes: 64 << 10, PlaceOrderConcurrency: 512,
		ReadRate: 20, ReadBurst: 40, PayRate: 200, PayBurst: 400, ClientRate: 2000, ClientBurst: 4000,
		MaxRateKeys: DefaultMaxRateKeys, EventStreams: DefaultEventStreams, EventSendTimeout: DefaultEventSendTimeout}
}

// ReasonOverloaded is the ErrorInfo reason of a call refused by the
// process-wide concurrency limit.
const ReasonOverloaded = "OVERLOADED"

// limitBody caps every request body at max bytes on the wire.
func limitBody(max int64, next http.Handler) http.Handler {
	if max <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			refuse(w, r, connect.NewErrorWriter(), connect.NewError(connect.CodeResourceExhausted,
				errors.New("request body too large")))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		next.ServeHTTP(w, r)
	})
}

// limiter enforces the concurrency and per-key limits of Limits.
type limiter struct {
	inflight chan struct{}             // nil: no bound
	reads    *keyedBuckets[int64]      // nil: no per-user read limit
	pays     *keyedBuckets[int64]      // nil: no PayOrder limit
	clients  *keyedBuckets[netip.Addr] // nil: no per-address limit
}

func newLimiter(l Limits, now func() time.Time) *limiter {
	lim := &limiter{}
	if l.PlaceOrderConcurrency > 0 {
		lim.inflight = make(chan struct{}, l.PlaceOrderConcurrency)
	}
	keys := l.MaxRateKeys
	if keys <= 0 {
		keys = DefaultMaxRateKeys
	}
	if l.ReadRate > 0 && l.ReadBurst > 0 {
		lim.reads = newKeyedBuckets[int64](l.ReadRate, l.ReadBurst, keys, now)
	}
	if l.PayRate > 0 && l.PayBurst > 0 {
		lim.pays = newKeyedBuckets[int64](l.PayRate, l.PayBurst, keys, now)
	}
	if l.ClientRate > 0 && l.ClientBurst > 0 {
		lim.clients = newKeyedBuckets[netip.Addr](l.ClientRate, l.ClientBurst, keys, now)
	}
	return lim
}

// interceptor applies the limits by procedure.
func (lim *limiter) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			switch req.Spec().Procedure {
			case seckillv1connect.OrderServicePlaceOrderProcedure:
				if lim.inflight == nil {
					return next(ctx, req)
				}
				select {
				case lim.inflight <- struct{}{}:
					defer func() { <-lim.inflight }()
					return next(ctx, req)
				default:
					return nil, exhausted(ReasonOverloaded, "the service is at capacity, retry with the same request_id")
				}
			case payOrder:
				if lim.pays != nil {
					if id, ok := IdentityFrom(ctx); ok && !lim.pays.take(id.UserID) {
						return nil, exhausted(ReasonRateLimited, "too many payment confirmations, slow down")
					}
				}
			default:
				if lim.reads != nil {
					if id, ok := IdentityFrom(ctx); ok && !lim.reads.take(id.UserID) {
						return nil, exhausted(ReasonRateLimited, "too many requests, slow down")
					}
				}
			}
			return next(ctx, req)
		}
	}
}

// perClient applies the per-address bucket before next (the
// authentication): a client beyond its budget is answered
// ResourceExhausted (RATE_LIMITED) in its protocol without its token being
// verified or its body read.
func (lim *limiter) perClient(next http.Handler) http.Handler {
	if lim.clients == nil {
		return next
	}
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !lim.clients.take(remoteIP(r.RemoteAddr)) {
			if r.ProtoMajor == 1 {
				w.Header().Set("Connection", "close")
			}
			ce := exhausted(ReasonRateLimited, "too many requests from this address, slow down")
			if ew.IsSupported(r) {
				_ = ew.Write(w, r, ce)
				return
			}
			http.Error(w, ce.Message(), http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// remoteIP is the client key (clientKey) of a request's RemoteAddr
// ("ip:port"); an unparsable one maps to the zero Addr (one shared
// budget).
func remoteIP(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	return clientKey(ap.Addr())
}

func exhausted(reason, msg string) *connect.Error {
	ce := connect.NewError(connect.CodeResourceExhausted, errors.New(msg))
	addDetail(ce, &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
	return ce
}

// bucketShards is the number of independently locked shards of a
// keyedBuckets table.
const bucketShards = 64

// keyedBuckets holds one token bucket per key (user id, client address):
// two keys never share a budget while the table has room. Memory is
// bounded: a bucket refilled to its burst is the same as no bucket, so a
// shard that reaches its share of the cap drops those first; if every
// bucket of the shard is still in use, a new key draws from the shard's
// overflow bucket (one budget for all such keys) until space frees, so the
// cap is never exceeded and a flood of new keys is limited, not waved
// through.
type keyedBuckets[K comparable] struct {
	rate     float64
	burst    float64
	fill     time.Duration // time for an empty bucket to refill
	shardCap int
	now      func() time.Time
	base     time.Time
	seed     maphash.Seed
	shards   [bucketShards]bucketShard[K]
}

type bucketShard[K comparable] struct {
	mu        sync.Mutex
	m         map[K]bucket
	overflow  bucket
	nextSweep time.Duration
	_         [32]byte // keeps neighbouring shards' locks off one cache line
}

// bucket is a token bucket; at is the time of its last update since the
// table's base (monotonic).
type bucket struct {
	tokens float64
	at     time.Duration
}

func newKeyedBuckets[K comparable](rate float64, burst, maxKeys int, now func() time.Time) *keyedBuckets[K] {
	k := &keyedBuckets[K]{rate: rate, burst: float64(burst), now: now, base: now(), seed: maphash.MakeSeed(),
		shardCap: max(1, maxKeys/bucketShards)}
	k.fill = time.Duration(float64(burst) / rate * float64(time.Second))
	for i := range k.shards {
		k.shards[i].m = make(map[K]bucket)
		k.shards[i].overflow.tokens = k.burst
	}
	return k
}

// refill brings b up to time at.
func (k *keyedBuckets[K]) refill(b *bucket, at time.Duration) {
	if d := at - b.at; d > 0 {
		b.tokens = min(k.burst, b.tokens+d.Seconds()*k.rate)
	}
	b.at = at
}

// take takes one token from key's bucket and reports whether there was
// one.
func (k *keyedBuckets[K]) take(key K) bool {
	sh := &k.shards[maphash.Comparable(k.seed, key)%bucketShards]
	at := k.now().Sub(k.base)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.m[key]
	if ok {
		k.refill(&b, at)
	} else {
		if len(sh.m) >= k.shardCap && !k.sweep(sh, at) {
			o := &sh.overflow
			k.refill(o, at)
			if o.tokens < 1 {
				return false
			}
			o.tokens--
			return true
		}
		b = bucket{tokens: k.burst, at: at}
	}
	if b.tokens < 1 {
		sh.m[key] = b
		return false
	}
	b.tokens--
	sh.m[key] = b
	return true
}

// sweep drops the shard's buckets that have refilled to their burst and
// reports whether there is room for one more. A sweep that finds the
// shard full of buckets in use is not repeated before the earliest of
// them could have refilled (at most one fill time later), so a full table
// costs no repeated scans.
func (k *keyedBuckets[K]) sweep(sh *bucketShard[K], at time.Duration) bool {
	if at < sh.nextSweep {
		return false
	}
	for key, b := range sh.m {
		k.refill(&b, at)
		if b.tokens >= k.burst {
			delete(sh.m, key)
		}
	}
	if len(sh.m) < k.shardCap {
		return true
	}
	sh.nextSweep = at + min(k.fill, time.Second)
	return false
}

// size is the number of buckets the table holds (for tests).
func (k *keyedBuckets[K]) size() int {
	n := 0
	for i := range k.shards {
		k.shards[i].mu.Lock()
		n += len(k.shards[i].m)
		k.shards[i].mu.Unlock()
	}
	return n
}
