package api_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// TestEventStreamCutsStalledSubscriberOnThePagePath: through the
// service's own subscriptions (application.EventSubscriptions, which hand
// the stream a page of events at once: ports.EventBatchSink), a
// subscriber that stops reading is cut off within the send bound like on
// the single-event path: its place among the streams frees, and reading
// on it finds the events in flight, then an error, never the whole log.
// (No reading subscriber here: with the 50 ms bound a loaded machine may
// cut one too; the page path's order is covered end to end by
// TestEventSubscriptionMidSale.)
func TestEventStreamCutsStalledSubscriberOnThePagePath(t *testing.T) {
	limits := api.DefaultLimits()
	limits.EventStreams = 1
	limits.EventSendTimeout = 50 * time.Millisecond
	auth, err := api.NewAuthenticator(secret)
	if err != nil {
		t.Fatal(err)
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	log := memory.NewEventLog(50 * time.Millisecond)
	subs := application.NewEventSubscriptions(log, nil, nil, discard, application.SubscriptionConfig{Page: 100})
	h, err := api.NewHandler(&fakeOrders{}, &fakeAdmin{}, subs, auth, discard, limits, nil, api.Observability{})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := serveLimited(t, h, api.DefaultServerLimits())
	base := "http://" + addr
	// About 16 MiB: far more than the client's HTTP/2 receive buffers
	// (64 KiB, below) and the socket buffers hold.
	big := strings.Repeat("m", 8<<10)
	const n = 2000
	recs := make([]ports.EventRecord, n)
	for i := range recs {
		recs[i] = ports.EventRecord{ActivityID: 1, Event: order.Event{OrderID: "ord_x", Version: int64(i + 1),
			Type: order.EventCreated, SchemaVersion: 1, Payload: order.Created{MessageID: big}}}
	}
	log.Append(recs...)
	tok := scopedToken(t, 7, api.ScopeEvents)
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p, HTTP2: &http.HTTP2Config{
		MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10}}
	t.Cleanup(tr.CloseIdleConnections)
	c := seckillv1connect.NewEventServiceClient(&http.Client{Transport: tr}, base, connect.WithGRPC())

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.Subscribe(ctx, withToken(&seckillv1.SubscribeRequest{}, tok))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	receive(t, s, 1)
	// The client reads nothing more; the only stream's place frees once
	// the server has cut it.
	for i := 0; ; i++ {
		err := streamErr(t, c, &seckillv1.SubscribeRequest{FromPosition: n + 1}, tok)
		if connect.CodeOf(err) == connect.CodeInvalidArgument {
			break
		}
		if reasonOf(t, connectErr(t, err, connect.CodeResourceExhausted)) != api.ReasonOverloaded || i == 1000 {
			t.Fatalf("the stalled stream still holds its place: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := 1
	for s.Receive() && got <= n {
		got++
	}
	if got >= n || s.Err() == nil || errors.Is(s.Err(), io.EOF) {
		t.Fatalf("after %d of %d events the stream ended with %v, want an error before the end", got, n, s.Err())
	}
}
