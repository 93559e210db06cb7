package rocketmq

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/apache/rocketmq-clients/golang/v5/pkg/utils"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Receiving from every broker (see Runner): the runner keeps one receive
// loop per broker that serves its topics, and each loop asks the proxy for
// that broker's messages. Two behaviours of the v5.1.2 client make this
// necessary on a cluster (measured with make cluster-sale, docs/capacity.md):
//
//   - SimpleConsumer.Receive picks the message queue of each receive from its
//     own copy of the topic route, which it refreshes only every 30 s
//     (client.go startUp: ticker.Tick(f, time.Second*30, ...)), and the
//     proxy pops from the broker the queue names (ReceiveMessageActivity
//     .ReceiveMessageQueueSelector: MessageQueueSelector.getQueueByBrokerName;
//     any broker only when the name is blank or unknown to the proxy). A
//     route refreshed while a broker was down leaves that broker out for up
//     to 30 s after it is back, so its backlog waits.
//   - The route lists a broker's queues one after another (RouteActivity
//     .genMessageQueueFromQueueData, broker by broker) and Receive takes them
//     round robin, so a consumer asks the same broker 8 times in a row (8
//     queues per broker here). Receives were sequential, and a receive from a
//     broker with nothing ready long-polls (about AwaitDuration + 1.5 s), so
//     a drained broker held the consumer up to 8 x 6.5 s before it asked the
//     broker with the backlog.
//
// A receive loop per broker removes both: the broker list comes from the
// proxy's route (its own cache follows the name server within
// topicRouteServiceCacheRefreshSeconds), read by the runner every
// RouteRefresh, and an empty long poll on one broker holds only that
// broker's loop.

// DefaultRouteRefresh is how often a runner reads its topics' routes from the
// proxy to learn which brokers to receive from.
const DefaultRouteRefresh = 2 * time.Second

// brokerTargetKey is the context key of the broker a receive must ask the
// proxy for (see withBrokerTarget).
type brokerTargetKey struct{}

// withBrokerTarget returns a context whose Receive calls ask the proxy for
// broker's messages, whatever queue the client library picked.
func withBrokerTarget(ctx context.Context, broker string) context.Context {
	return context.WithValue(ctx, brokerTargetKey{}, broker)
}

// receiveMethod is the server-streaming receive of the gRPC API.
const receiveMethod = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"

// targetBroker is a stream interceptor of every connection of the client
// library: a ReceiveMessage call whose context carries a broker target
// (withBrokerTarget) names that broker in its message queue. The request is
// copied first: the library's request points into its cached route.
func targetBroker(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != receiveMethod {
		return cs, err
	}
	broker, ok := ctx.Value(brokerTargetKey{}).(string)
	if !ok {
		return cs, nil
	}
	return brokerTargeter{ClientStream: cs, broker: broker}, nil
}

type brokerTargeter struct {
	grpc.ClientStream
	broker string
}

// SendMsg implements grpc.ClientStream.
func (s brokerTargeter) SendMsg(m any) error {
	if req, ok := m.(*v2.ReceiveMessageRequest); ok && req.GetMessageQueue() != nil {
		req = proto.Clone(req).(*v2.ReceiveMessageRequest)
		if req.MessageQueue.Broker == nil {
			req.MessageQueue.Broker = &v2.Broker{}
		}
		req.MessageQueue.Broker.Name = s.broker
		m = req
	}
	return s.ClientStream.SendMsg(m)
}

// readableBrokers asks the proxy for each topic's route and returns the
// names of the brokers with a readable queue of any of them, sorted. It
// fails only when no route could be read.
func (p *protoConn) readableBrokers(ctx context.Context, topics []string) ([]string, error) {
	endpoints, err := utils.ParseTarget(p.cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("route: endpoint %q: %w", p.cfg.Endpoint, err)
	}
	ctx = p.sign(ctx)
	var brokers []string
	var lastErr error
	read := 0
	for _, topic := range topics {
		res, err := p.client.QueryRoute(ctx, &v2.QueryRouteRequest{Topic: &v2.Resource{Name: topic}, Endpoints: endpoints})
		if err == nil {
			err = statusErr(res.GetStatus())
		}
		if err != nil {
			lastErr = fmt.Errorf("route of %s: %w", topic, err)
			continue
		}
		read++
		for _, mq := range res.GetMessageQueues() {
			switch mq.GetPermission() {
			case v2.Permission_READ, v2.Permission_READ_WRITE:
				if name := mq.GetBroker().GetName(); name != "" && !slices.Contains(brokers, name) {
					brokers = append(brokers, name)
				}
			}
		}
	}
	if read == 0 {
		return nil, lastErr
	}
	slices.Sort(brokers)
	return brokers, nil
}
