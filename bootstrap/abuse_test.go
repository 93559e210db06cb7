package bootstrap_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/bootstrap/config"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// The abuse suite runs every probe of the "abuse and bad input" review
// against the real server on the real stack: each asserts the answer's
// code and reason, that nothing was left behind, and (for the byte bombs)
// that the process did not allocate what the attacker sent.

// countingReader counts what the client managed to hand to the server.
type countingReader struct {
	left int64
	sent atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	if n > c.left {
		n = c.left
	}
	for i := range p[:n] {
		p[i] = 'x'
	}
	c.left -= n
	c.sent.Add(n)
	return int(n), nil
}

// allocatedDuring returns how many bytes the process allocated while f ran.
func allocatedDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestAbuseBodiesAreRefusedBeforeTheyAreRead(t *testing.T) {
	s := startSystem(t, options{})
	url := s.base + "/seckill.v1.OrderService/PlaceOrder"
	const bomb = 50 << 20

	t.Run("50 MB body without a token", func(t *testing.T) {
		body := &countingReader{left: bomb}
		var status int
		alloc := allocatedDuring(func() {
			req, _ := http.NewRequest(http.MethodPost, url, body)
			req.Header.Set("Content-Type", "application/json")
			req.ContentLength = -1 // streamed: the server cannot refuse it by its length
			res, err := s.http.Do(req)
			if err == nil {
				status = res.StatusCode
				_ = res.Body.Close()
			}
		})
		if status != http.StatusUnauthorized {
			t.Fatalf("status = %d, want 401", status)
		}
		if sent := body.sent.Load(); sent > bomb/2 {
			t.Fatalf("the server took %d of %d bytes before answering 401", sent, bomb)
		}
		if alloc > 16<<20 {
			t.Fatalf("the process allocated %d MiB while refusing an unauthenticated 50 MB body", alloc>>20)
		}
		t.Logf("unauthenticated 50 MB body: 401 after %d KiB were sent, %d MiB allocated", body.sent.Load()>>10, alloc>>20)
	})

	t.Run("gzip bomb with a token", func(t *testing.T) {
		var zipped bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&zipped, gzip.BestCompression)
		chunk := bytes.Repeat([]byte(" "), 1<<20)
		_, _ = zw.Write([]byte(`{"activityId":1,"skuId":1,"requestId":"`))
		for range 100 {
			_, _ = zw.Write(chunk)
		}
		_ = zw.Close()
		var code connect.Code
		alloc := allocatedDuring(func() {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(zipped.Bytes()))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Content-Encoding", "gzip")
			req.Header.Set("Authorization", "Bearer "+s.token(7, false))
			res, err := s.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if !bytes.Contains(b, []byte("resource_exhausted")) {
				t.Errorf("answer %d %s, want resource_exhausted", res.StatusCode, b)
			}
			code = connect.CodeResourceExhausted
		})
		if code != connect.CodeResourceExhausted {
			t.Fatal("no answer")
		}
		if alloc > 32<<20 {
			t.Fatalf("a %d KiB gzip body inflating to 100 MiB made the process allocate %d MiB", zipped.Len()>>10, alloc>>20)
		}
		t.Logf("gzip bomb (%d KiB -> 100 MiB): resource_exhausted, %d MiB allocated", zipped.Len()>>10, alloc>>20)
	})

	t.Run("oversized token", func(t *testing.T) {
		_, err := s.orders.PlaceOrder(context.Background(), authed(&seckillv1.PlaceOrderRequest{
			ActivityId: 1, SkuId: 1, RequestId: "r"}, strings.Repeat("a", 8<<10)))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("8 KiB token: %v, want Unauthenticated", err)
		}
	})
}

func TestAbuseSlowBodyIsCutOff(t *testing.T) {
	s := startSystem(t, options{configure: func(c *config.Config) { c.API.ReadTimeout = 500 * time.Millisecond }})
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /seckill.v1.OrderService/PlaceOrder HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Authorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n{\"activ", s.token(8, false))
	// The body never completes: the server must give up on it, not hold
	// the connection for as long as the client likes.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body within 30 s: %v", err)
	}
	_ = res.Body.Close()
	if res.StatusCode < 400 {
		t.Fatalf("a stalled body was answered %s", res.Status)
	}
	t.Logf("the server gave up on the stalled body: %s", res.Status)
}

func TestAbuseHTTP2StreamsAreBounded(t *testing.T) {
	s := startSystem(t, options{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		v, ok := sf.Value(http2.SettingMaxConcurrentStreams)
		if !ok || v == 0 || v > 100 {
			t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (set %v), want 1..100", v, ok)
		}
		if h, ok := sf.Value(http2.SettingMaxHeaderListSize); !ok || h > 64<<10 {
			t.Fatalf("SETTINGS_MAX_HEADER_LIST_SIZE = %d (set %v), want <= 64 KiB", h, ok)
		}
		return
	}
}

func TestAbusePaymentsComeOnlyFromThePaymentSide(t *testing.T) {
	s := startSystem(t, options{withoutWorkers: []string{"consumer CG_SECKILL_ORDER_TIMEOUT_V1"}})
	s.activity(60, 10, time.Hour, time.Minute)
	s.activity(61, 10, 2*time.Second, time.Minute)
	mine := s.buy(1, 60, "pay-own")
	other := s.buy(2, 60, "pay-other")
	ctx := context.Background()
	pay := func(order, payment, tok string) error {
		_, err := s.orders.PayOrder(ctx, authed(&seckillv1.PayOrderRequest{OrderId: order, PaymentId: payment}, tok))
		return err
	}

	if err := pay(mine, "pay-1", s.token(1, false)); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("a buyer paying its own order: %v, want PermissionDenied", err)
	}
	if err := pay(other, "pay-1", s.paymentToken()); err != nil {
		t.Fatalf("the payment side: %v", err)
	}
	if err := pay(other, "pay-1", s.paymentToken()); err != nil {
		t.Fatalf("the same confirmation again (idempotent): %v", err)
	}
	err := pay(mine, "pay-1", s.paymentToken())
	if connect.CodeOf(err) != connect.CodeAlreadyExists || api.ErrorReason(err) != "PAYMENT_ID_REUSED" {
		t.Fatalf("another order's payment_id: %v, want AlreadyExists PAYMENT_ID_REUSED", err)
	}
	if err := pay(mine, "pay-2", s.token(1, true)); err != nil {
		t.Fatalf("an admin confirming a payment: %v", err)
	}

	late := s.buy(3, 61, "pay-late")
	var expiresAt time.Time
	if err := s.db.QueryRow(ctx, `SELECT expires_at FROM orders WHERE order_id = $1`, late).Scan(&expiresAt); err != nil {
		t.Fatal(err)
	}
	s.eventually(30*time.Second, "the database clock passes the deadline", func() bool {
		return s.count(`SELECT count(*) FROM orders WHERE order_id = $1 AND expires_at <= now()`, late) == 1
	})
	err = pay(late, "pay-late", s.paymentToken())
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || api.ErrorReason(err) != "PAYMENT_EXPIRED" {
		t.Fatalf("a payment after expires_at (%s): %v, want FailedPrecondition PAYMENT_EXPIRED", expiresAt, err)
	}
	if n := s.count(`SELECT count(*) FROM orders WHERE order_id = $1 AND status <> 'CREATED'`, late); n != 0 {
		t.Fatal("the refused late payment changed the order")
	}
}

func TestAbuseClientStringsAreValidatedInBytes(t *testing.T) {
	s := startSystem(t, options{})
	s.activity(62, 10, time.Hour, time.Minute)
	ctx := context.Background()
	for _, rid := range []string{
		strings.Repeat("é", 65),  // 65 characters, 130 bytes
		strings.Repeat("ж", 128), // 128 characters, 256 bytes
		"   ",
		"a b",
		"{62:s1}",
	} {
		_, err := s.place(ctx, 40, 62, rid)
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("request_id %q: %v, want InvalidArgument", rid, err)
		}
	}
	if keys := s.keysOfUser(40); len(keys) != 0 {
		t.Fatalf("invalid requests left Redis keys: %v", keys)
	}
	if _, err := s.place(ctx, 40, 62, strings.Repeat("A", 128)); err != nil {
		t.Fatalf("a 128-byte request_id: %v", err)
	}
}

// keysOfUser lists the Redis keys of user in the system's namespace.
func (s *system) keysOfUser(user int64) []string {
	s.t.Helper()
	keys, err := s.redis.Keys(context.Background(), fmt.Sprintf("%s:{u%d}:*", s.ns, user)).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		if !strings.HasSuffix(k, ":bucket") { // the rate limit's bucket lives for seconds
			out = append(out, k)
		}
	}
	return out
}

func TestAbuseRequestsThatReserveNothingLeaveNoLongLivedKeys(t *testing.T) {
	s := startSystem(t, options{})
	s.activity(63, 1, time.Hour, time.Minute)
	ctx := context.Background()
	s.buy(50, 63, "winner")
	answers := map[string]string{}
	for _, p := range []struct {
		user int64
		rid  string
		act  int64
	}{{51, "sold-out", 63}, {50, "again", 63}, {52, "unknown-activity", 9999}} {
		before := map[string]bool{} // the winner's own claim stays
		for _, k := range s.keysOfUser(p.user) {
			before[k] = true
		}
		_, err := s.place(ctx, p.user, p.act, p.rid)
		answers[p.rid] = api.ErrorReason(err)
		for _, k := range s.keysOfUser(p.user) {
			if before[k] {
				continue
			}
			ttl, err := s.redis.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl < 0 || ttl > 5*time.Second {
				t.Errorf("%s (%s) left %s with ttl %s, want <= 5s", p.rid, answers[p.rid], k, ttl)
			}
		}
	}
	if answers["sold-out"] != "SOLD_OUT" || answers["again"] != "ALREADY_PURCHASED" || answers["unknown-activity"] != "ACTIVITY_NOT_FOUND" {
		t.Fatalf("answers %v", answers)
	}
}

func TestAbuseReadsAndAdminAreRateLimited(t *testing.T) {
	s := startSystem(t, options{configure: func(c *config.Config) { c.API.ReadRate, c.API.ReadBurst = 0.01, 3 }})
	ctx := context.Background()
	var limited int
	for range 5 {
		_, err := s.orders.GetOrder(ctx, authed(&seckillv1.GetOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}, s.token(70, false)))
		if connect.CodeOf(err) == connect.CodeResourceExhausted && api.ErrorReason(err) == "RATE_LIMITED" {
			limited++
		}
	}
	if limited != 2 {
		t.Fatalf("%d of 5 GetOrder calls with a burst of 3 were RATE_LIMITED, want 2", limited)
	}
	limited = 0
	for range 5 {
		_, err := s.admin.GetStockReport(ctx, authed(&seckillv1.GetStockReportRequest{ActivityId: 1, SkuId: 1}, s.token(71, true)))
		if api.ErrorReason(err) == "RATE_LIMITED" {
			limited++
		}
	}
	if limited != 2 {
		t.Fatalf("%d of 5 admin calls with a burst of 3 were RATE_LIMITED, want 2", limited)
	}
}

func TestAbuseOperationsEndpointsAreNotOnTheAPIListener(t *testing.T) {
	s := startSystem(t, options{})
	// Reflection is served on the API listener too (the schema is
	// public), but only as a gRPC stream: a plain GET is refused.
	for _, path := range []string{"/metrics", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "/debug/pprof/"} {
		res, err := s.http.Get(s.base + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Errorf("API listener answers %s without a token: %d", path, res.StatusCode)
		}
	}
	res, err := s.http.Get("http://" + s.app.OpsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("operations listener /metrics: %d", res.StatusCode)
	}
}

// rateLimited reports whether err is ResourceExhausted RATE_LIMITED.
func rateLimited(err error) bool {
	return connect.CodeOf(err) == connect.CodeResourceExhausted && api.ErrorReason(err) == api.ReasonRateLimited
}

func TestAbusePayOrderIsRateLimited(t *testing.T) {
	s := startSystem(t, options{})
	limits := api.DefaultLimits()
	limits.PayRate, limits.PayBurst, limits.ClientRate = 0.001, 3, 0
	a := s.serveAPI(limits, api.DefaultServerLimits())
	ctx := context.Background()
	var limited int
	for i := range 4 {
		_, err := a.orders.PayOrder(ctx, authed(&seckillv1.PayOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5",
			PaymentId: fmt.Sprintf("pay-limit-%d", i)}, s.paymentToken()))
		if rateLimited(err) {
			limited++
		} else if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("payment %d of an unknown order: %v, want NotFound or RATE_LIMITED", i+1, err)
		}
	}
	if limited != 1 {
		t.Fatalf("%d of 4 payments with a burst of 3 were RATE_LIMITED, want 1", limited)
	}
}

func TestAbuseClientAddressIsRateLimited(t *testing.T) {
	s := startSystem(t, options{})
	limits := api.DefaultLimits()
	limits.ClientRate, limits.ClientBurst = 0.001, 5
	a := s.serveAPI(limits, api.DefaultServerLimits())
	ctx := context.Background()
	var limited, unauthenticated int
	for i := range 8 {
		tok := s.token(int64(200+i), false) // a new user each time: the per-user budget never runs out
		if i%2 == 1 {
			tok = "not-a-token"
		}
		_, err := a.orders.GetOrder(ctx, authed(&seckillv1.GetOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}, tok))
		switch {
		case rateLimited(err):
			limited++
		case connect.CodeOf(err) == connect.CodeUnauthenticated:
			unauthenticated++
		case connect.CodeOf(err) != connect.CodeNotFound:
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if limited != 3 || unauthenticated != 2 {
		t.Fatalf("of 8 calls from one address with a burst of 5: %d RATE_LIMITED, %d Unauthenticated; want 3 and 2",
			limited, unauthenticated)
	}
}

func TestAbuseTwoUsersNeverShareAReadBudget(t *testing.T) {
	s := startSystem(t, options{})
	limits := api.DefaultLimits()
	limits.ReadRate, limits.ReadBurst, limits.ClientRate = 0.001, 1, 0
	a := s.serveAPI(limits, api.DefaultServerLimits())
	ctx := context.Background()
	// 6,000 users (more than the 4,096 hashed slots the buckets once
	// had): each one's single read is served.
	const users = 6000
	var mu sync.Mutex
	var shared []int
	concurrently(users, 16, func(i int) {
		_, err := a.orders.GetOrder(ctx, authed(&seckillv1.GetOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"},
			s.token(int64(10_000+i), false)))
		if connect.CodeOf(err) != connect.CodeNotFound {
			mu.Lock()
			shared = append(shared, i)
			mu.Unlock()
		}
	})
	if len(shared) > 0 {
		t.Fatalf("%d of %d users' first read was refused (first: user %d): they share a budget", len(shared), users, 10_000+shared[0])
	}
	_, err := a.orders.GetOrder(ctx, authed(&seckillv1.GetOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}, s.token(10_000, false)))
	if !rateLimited(err) {
		t.Fatalf("a user's second read with a burst of 1: %v, want RATE_LIMITED", err)
	}
}

func TestAbuseOperationsListenerRefusesForeignHosts(t *testing.T) {
	s := startSystem(t, options{})
	ops := "http://" + s.app.OpsAddr().String()
	for _, path := range []string{"/metrics", "/status.json"} {
		for _, tc := range []struct {
			host string
			want int
		}{{"evil.example", http.StatusMisdirectedRequest}, {"evil.example:7081", http.StatusMisdirectedRequest},
			{s.app.OpsAddr().String(), http.StatusOK}, {"127.0.0.1", http.StatusOK}, {"localhost:7081", http.StatusOK}} {
			req, err := http.NewRequest(http.MethodGet, ops+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tc.host
			res, err := s.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			if res.StatusCode != tc.want {
				t.Errorf("%s with Host %q: %d, want %d", path, tc.host, res.StatusCode, tc.want)
			}
		}
	}
}

// TestAbuseOrderIDsDoNotCountSales: order ids placed within one
// millisecond share no small difference, so a buyer cannot read the number
// of orders placed around his own from them (OWASP API3). Ids are
// "<kind>_<ULID>": 48 bits of milliseconds, then 80 bits that must be
// fresh randomness, not a counter.
func TestAbuseOrderIDsDoNotCountSales(t *testing.T) {
	s := startSystem(t, options{})
	s.activity(63, 2000, time.Hour, time.Minute)
	ctx := context.Background()
	byMS := map[uint64][]*big.Int{}
	samePair := false
	for round := 0; round < 5 && !samePair; round++ {
		var mu sync.Mutex
		concurrently(200, 32, func(i int) {
			user := int64(10_000 + round*1000 + i)
			r, err := s.place(ctx, user, 63, fmt.Sprintf("ids-%d-%d", round, i))
			if err != nil {
				t.Errorf("place %d: %v", user, err)
				return
			}
			ms, rnd, err := ulidParts(r.GetOrderId())
			if err != nil {
				t.Errorf("order id %q: %v", r.GetOrderId(), err)
				return
			}
			mu.Lock()
			byMS[ms] = append(byMS[ms], rnd)
			mu.Unlock()
		})
		for _, ids := range byMS {
			samePair = samePair || len(ids) > 1
		}
	}
	if !samePair {
		t.Fatal("no two orders were placed in one millisecond in 1000 placements: nothing compared")
	}
	small := new(big.Int).Lsh(big.NewInt(1), 40)
	pairs := 0
	for ms, ids := range byMS {
		for i := range ids {
			for j := i + 1; j < len(ids); j++ {
				pairs++
				if d := new(big.Int).Sub(ids[i], ids[j]); d.Abs(d).Cmp(small) < 0 {
					t.Fatalf("two order ids of millisecond %d differ by %v in their random part: they count sales", ms, d)
				}
			}
		}
	}
	t.Logf("%d pairs of order ids within one millisecond compared", pairs)
}

// ulidParts splits "<kind>_<26 Crockford base32 characters>" into its
// millisecond and its 80-bit random part.
func ulidParts(s string) (uint64, *big.Int, error) {
	_, enc, ok := strings.Cut(s, "_")
	if !ok || len(enc) != 26 {
		return 0, nil, errors.New("not <kind>_<26 characters>")
	}
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	v := new(big.Int)
	for _, c := range enc {
		k := strings.IndexRune(alphabet, c)
		if k < 0 {
			return 0, nil, fmt.Errorf("%q is not Crockford base32", c)
		}
		v.Lsh(v, 5).Or(v, big.NewInt(int64(k)))
	}
	rnd := new(big.Int).And(v, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 80), big.NewInt(1)))
	return new(big.Int).Rsh(v, 80).Uint64(), rnd, nil
}
