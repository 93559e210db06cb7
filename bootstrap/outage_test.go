package bootstrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/seckill-dev/seckill/adapters/testkit/faultproxy"
	"github.com/seckill-dev/seckill/bootstrap"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// health asks the API's gRPC health service about service.
func (s *system) health(service string) healthpb.HealthCheckResponse_ServingStatus {
	s.t.Helper()
	hc := connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](
		s.http, s.base+"/grpc.health.v1.Health/Check", connect.WithGRPC())
	res, err := hc.CallUnary(context.Background(), connect.NewRequest(&healthpb.HealthCheckRequest{Service: service}))
	if err != nil {
		s.t.Fatalf("health %q: %v", service, err)
	}
	return res.Msg.GetStatus()
}

// ready reads /readyz of the operations listener.
func (s *system) ready() (int, bootstrap.HealthStatus) {
	s.t.Helper()
	res, err := s.http.Get("http://" + s.app.OpsAddr().String() + "/readyz")
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	var st bootstrap.HealthStatus
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		s.t.Fatal(err)
	}
	return res.StatusCode, st
}

const serving = healthpb.HealthCheckResponse_SERVING

// TestBrokerOutageOpensTheBreakerAndRecovers: the broker stops answering
// (a fault proxy holds every reply). PlaceOrder keeps reserving and
// answering QUEUING; after the breaker opens, sends are skipped instead of
// being attempted just to time out (mq_publish_skipped_total rises while
// the attempted sends stay few), the scanner and the relay claim nothing;
// once the broker answers again, one probe closes the breaker and every
// acknowledged reservation becomes exactly one order, with I1-I7 holding.
func TestBrokerOutageOpensTheBreakerAndRecovers(t *testing.T) {
	var proxy *faultproxy.Proxy
	s := startSystem(t, options{beforeRun: brokerThroughProxy(t, &proxy)})
	const activity = 64
	s.activity(activity, 1000, time.Hour, time.Hour)
	s.eventually(10*time.Second, "both roles are ready", func() bool {
		return s.health("") == serving && s.health(seckillv1connect.AdminServiceName) == serving
	})
	proxy.SetBlackhole()
	ctx := context.Background()
	user := int64(0)
	place := func() {
		user++
		res, err := s.place(ctx, user, activity, fmt.Sprintf("outage-%d", user))
		if err != nil || res.GetStatus() != seckillv1.OrderStatus_ORDER_STATUS_QUEUING {
			t.Fatalf("during the outage: %v %v, want QUEUING", res, err)
		}
	}
	s.eventually(60*time.Second, "the breaker opens", func() bool {
		place()
		return s.metric("mq_breaker_state") == 2
	})
	attempted := s.metric("mq_publish_unknown_total")
	// Health tells the truth: the entry still serves (QUEUING), the order
	// side does not.
	s.eventually(10*time.Second, "the order side reports NOT_SERVING", func() bool {
		return s.health(seckillv1connect.AdminServiceName) != serving
	})
	if s.health("") != serving || s.health(seckillv1connect.OrderServiceName) != serving {
		t.Fatal("the entry reported NOT_SERVING while Redis answers")
	}
	if code, st := s.ready(); code != http.StatusOK || st.Broker || st.Orders || !st.Entry || !st.Postgres || !st.Redis {
		t.Fatalf("/readyz during the broker outage: %d %+v", code, st)
	}
	for range 50 {
		place()
	}
	skipped := s.metric("mq_publish_skipped_total")
	if skipped < 40 {
		t.Fatalf("only %v sends skipped out of 50 placed while the breaker was open", skipped)
	}
	// Hold the outage a little: only probes may go out meanwhile.
	time.Sleep(3 * time.Second)
	during := s.metric("mq_publish_unknown_total") - attempted
	t.Logf("outage: %d reservations acknowledged, %v sends attempted before the breaker opened, %v skipped, %v attempted (probes) while open",
		user, attempted, s.metric("mq_publish_skipped_total"), during)
	if during > 10 {
		t.Fatalf("%v sends were attempted in 3 s with the breaker open: a retry storm", during)
	}

	proxy.SetPass()
	back := time.Now()
	s.eventually(60*time.Second, "every acknowledged reservation is an order", func() bool {
		return s.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, activity) == user
	})
	t.Logf("the last of %d orders was created %s after the broker answered again", user, time.Since(back).Round(100*time.Millisecond))
	if state := s.metric("mq_breaker_state"); state != 0 {
		t.Fatalf("breaker state %v after recovery, want 0 (closed)", state)
	}
	s.eventually(10*time.Second, "the order side is ready again", func() bool {
		return s.health(seckillv1connect.AdminServiceName) == serving
	})
	s.invariants(activity)
}

// TestServiceStartsWhileTheBrokerIsDown: a service started during a broker
// outage comes up (its producer and consumers keep starting in the
// background), reserves and answers QUEUING, and every acknowledged
// reservation becomes an order once the broker answers.
func TestServiceStartsWhileTheBrokerIsDown(t *testing.T) {
	var proxy *faultproxy.Proxy
	s := startSystem(t, options{beforeRun: func(s *system) {
		brokerThroughProxy(t, &proxy)(s)
		proxy.SetBlackhole()
	}})
	const activity = 65
	s.activity(activity, 100, time.Hour, time.Hour)
	ctx := context.Background()
	const buyers = 20
	for user := int64(1); user <= buyers; user++ {
		res, err := s.place(ctx, user, activity, fmt.Sprintf("down-at-start-%d", user))
		if err != nil || res.GetStatus() != seckillv1.OrderStatus_ORDER_STATUS_QUEUING {
			t.Fatalf("with the broker down since the start: %v %v, want QUEUING", res, err)
		}
	}
	if code, st := s.ready(); code != http.StatusOK || st.Broker || !st.Entry {
		t.Fatalf("/readyz with the broker down since the start: %d %+v", code, st)
	}
	proxy.SetPass()
	s.eventually(90*time.Second, "every acknowledged reservation is an order", func() bool {
		return s.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, activity) == buyers
	})
	s.invariants(activity)
}

// TestHealthIsNotServingOnceTheDrainStarts: the moment the service is
// told to stop, every role reports NOT_SERVING.
func TestHealthIsNotServingOnceTheDrainStarts(t *testing.T) {
	s := startSystem(t, options{})
	s.eventually(10*time.Second, "ready", func() bool { return s.app.Health.Status().Entry })
	s.cancel()
	s.eventually(10*time.Second, "draining", func() bool {
		st := s.app.Health.Status()
		return st.Draining && !st.Entry && !st.Orders
	})
}
