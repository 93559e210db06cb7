package api

import (
	"context"
	"errors"
	"hash/maphash"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// Limits protect the API from oversized, slow and abusive requests. Every
// byte limit applies before authentication work reads a body; the
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
	// its own, in Redis). 0 disables it.
	ReadRate  float64
	ReadBurst int
}

// DefaultLimits are the limits for a service on a small machine.
func DefaultLimits() Limits {
	return Limits{MaxBodyBytes: 64 << 10, MaxMessageBytes: 64 << 10, PlaceOrderConcurrency: 512,
		ReadRate: 20, ReadBurst: 40}
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

// limiter enforces the concurrency and per-user limits of Limits.
type limiter struct {
	inflight chan struct{} // nil: no bound
	buckets  *userBuckets  // nil: no per-user limit
}

func newLimiter(l Limits, now func() time.Time) *limiter {
	lim := &limiter{}
	if l.PlaceOrderConcurrency > 0 {
		lim.inflight = make(chan struct{}, l.PlaceOrderConcurrency)
	}
	if l.ReadRate > 0 && l.ReadBurst > 0 {
		lim.buckets = newUserBuckets(l.ReadRate, l.ReadBurst, now)
	}
	return lim
}

// interceptor applies the limits by procedure.
func (lim *limiter) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().Procedure == seckillv1connect.OrderServicePlaceOrderProcedure {
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
			}
			if lim.buckets != nil && req.Spec().Procedure != payOrder {
				if id, ok := IdentityFrom(ctx); ok && !lim.buckets.take(id.UserID) {
					return nil, exhausted(ReasonRateLimited, "too many requests, slow down")
				}
			}
			return next(ctx, req)
		}
	}
}

func exhausted(reason, msg string) *connect.Error {
	ce := connect.NewError(connect.CodeResourceExhausted, errors.New(msg))
	addDetail(ce, &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
	return ce
}

// userBuckets is a fixed table of token buckets indexed by a hash of the
// user id: memory stays bounded whatever the number of users, and two
// users whose ids share a bucket share its budget (with 4,096 buckets a
// rare and mild effect, for read calls only).
type userBuckets struct {
	rate  float64
	burst float64
	now   func() time.Time
	seed  maphash.Seed
	mu    [64]sync.Mutex
	b     [4096]struct {
		tokens float64
		at     time.Time
	}
}

func newUserBuckets(rate float64, burst int, now func() time.Time) *userBuckets {
	return &userBuckets{rate: rate, burst: float64(burst), now: now, seed: maphash.MakeSeed()}
}

// take takes one token from user's bucket and reports whether there was
// one.
func (u *userBuckets) take(user int64) bool {
	i := maphash.Comparable(u.seed, user) % uint64(len(u.b))
	mu := &u.mu[i%uint64(len(u.mu))]
	mu.Lock()
	defer mu.Unlock()
	b := &u.b[i]
	now := u.now()
	if b.at.IsZero() {
		b.tokens = u.burst
	} else if d := now.Sub(b.at); d > 0 {
		b.tokens = min(u.burst, b.tokens+d.Seconds()*u.rate)
	}
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
