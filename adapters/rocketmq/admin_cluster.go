package rocketmq

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Request codes of the remoting protocol (RequestCode.java) for what the
// name server and the brokers tell about the cluster.
const (
	codeGetBrokerConfig      = 26
	codeGetRouteinfoByTopic  = 105
	codeGetBrokerClusterInfo = 106
)

// masterID is the broker id of a master in a broker name's address table.
const masterID = "0"

// BrokerRef names one broker: its broker name (brokerName of broker.conf,
// for example broker-a) and its remoting address.
type BrokerRef struct {
	// Name is the broker name; empty when unknown.
	Name string
	// Addr is the remoting address, host:port.
	Addr string
}

// String reads "broker-a 127.0.0.1:10911", or the address alone when the
// name is unknown.
func (b BrokerRef) String() string {
	if b.Name == "" {
		return b.Addr
	}
	return b.Name + " " + b.Addr
}

// brokerDataJSON is one broker name's entry of the name server's answers
// (BrokerData.java): its addresses keyed by broker id, "0" the master.
type brokerDataJSON struct {
	BrokerName  string            `json:"brokerName"`
	Cluster     string            `json:"cluster"`
	BrokerAddrs map[string]string `json:"brokerAddrs"`
}

// Masters asks the name server (GET_BROKER_CLUSTER_INFO) which brokers are
// registered and returns the master of each broker name, sorted by name:
// every broker the topology must be applied to. A broker name without a
// registered master (only slaves, or a master that just went away) is left
// out. The error is for an admin without a name server address, a name
// server that cannot be read, and a name server that lists no master at
// all. It talks to the name server only: the admin's broker address may be
// empty.
func (a *Admin) Masters(ctx context.Context) ([]BrokerRef, error) {
	if a.namesrv == "" {
		return nil, errors.New("read the master brokers: no name server address")
	}
	resp, err := a.call(ctx, a.namesrv, codeGetBrokerClusterInfo, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("read the master brokers from the name server %s: %w", a.namesrv, err)
	}
	var info struct {
		BrokerAddrTable map[string]brokerDataJSON `json:"brokerAddrTable"`
	}
	if err := json.Unmarshal(quoteIntegerKeys(resp.body), &info); err != nil {
		return nil, fmt.Errorf("read the master brokers from the name server %s: decode %q: %w", a.namesrv, resp.body, err)
	}
	var out []BrokerRef
	for name, bd := range info.BrokerAddrTable {
		if bd.BrokerName != "" {
			name = bd.BrokerName
		}
		if addr := bd.BrokerAddrs[masterID]; addr != "" {
			out = append(out, BrokerRef{Name: name, Addr: addr})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("read the master brokers: the name server %s lists no master broker", a.namesrv)
	}
	slices.SortFunc(out, func(x, y BrokerRef) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// ForBroker returns an admin client with a's name server and timeout whose
// broker commands go to b.Addr. b.Name, when not empty, is taken as the
// broker's name (BrokerName then asks nothing); pass the BrokerRefs of
// Masters. a is not changed.
func (a *Admin) ForBroker(b BrokerRef) *Admin {
	return &Admin{broker: b.Addr, brokerName: b.Name, namesrv: a.namesrv, timeout: a.timeout}
}

// BrokerName returns the name of the admin's broker: the one given to
// ForBroker, else the brokerName the broker reports in its configuration
// (GET_BROKER_CONFIG). The error is for a broker that cannot be read or
// reports no name.
func (a *Admin) BrokerName(ctx context.Context) (string, error) {
	if a.brokerName != "" {
		return a.brokerName, nil
	}
	resp, err := a.brokerCall(ctx, codeGetBrokerConfig, nil, nil)
	if err != nil {
		return "", fmt.Errorf("read the broker's name: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(resp.body))
	sc.Buffer(make([]byte, 0, 64<<10), maxFrame)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "brokerName="); ok && name != "" {
			return name, nil
		}
	}
	return "", fmt.Errorf("read the broker's name: the configuration of %s has no brokerName", a.broker)
}

// TopicRoute asks the name server (GET_ROUTEINFO_BY_TOPIC) which brokers
// it routes topic to, sorted by name; Addr is the broker's master address
// ("" when the route lists none). A topic the name server has no route for
// gives an error matching ports.ErrNotFound. It talks to the name server
// only.
func (a *Admin) TopicRoute(ctx context.Context, topic string) ([]BrokerRef, error) {
	if a.namesrv == "" {
		return nil, fmt.Errorf("read the route of topic %s: no name server address", topic)
	}
	resp, err := a.call(ctx, a.namesrv, codeGetRouteinfoByTopic, map[string]string{"topic": topic}, nil)
	if err != nil {
		return nil, fmt.Errorf("read the route of topic %s: %w", topic, err)
	}
	var route struct {
		BrokerDatas []brokerDataJSON `json:"brokerDatas"`
	}
	if err := json.Unmarshal(quoteIntegerKeys(resp.body), &route); err != nil {
		return nil, fmt.Errorf("read the route of topic %s: decode %q: %w", topic, resp.body, err)
	}
	out := make([]BrokerRef, 0, len(route.BrokerDatas))
	for _, bd := range route.BrokerDatas {
		out = append(out, BrokerRef{Name: bd.BrokerName, Addr: bd.BrokerAddrs[masterID]})
	}
	slices.SortFunc(out, func(x, y BrokerRef) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// brokerCall performs one command on the admin's broker; an admin without
// a broker address (one that only reads the name server) fails clearly.
func (a *Admin) brokerCall(ctx context.Context, code int, ext map[string]string, body []byte) (remotingCommand, error) {
	if a.broker == "" {
		return remotingCommand{}, errors.New("no broker address (an admin of the name server only: use ForBroker)")
	}
	return a.call(ctx, a.broker, code, ext, body)
}

// quoteIntegerKeys returns body with the object keys that are bare numbers
// quoted: RocketMQ serializes some maps with integer keys through fastjson
// ({"brokerAddrs":{0:"127.0.0.1:10911"}}), which is not JSON. Strings,
// values and array elements are copied unchanged; a body without such keys
// is returned as is.
func quoteIntegerKeys(body []byte) []byte {
	var out []byte // nil until the first key needs quoting
	var stack []byte
	inString, escaped := false, false
	expectKey := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			if out != nil {
				out = append(out, c)
			}
			continue
		}
		switch c {
		case '"':
			inString, expectKey = true, false
		case '{', '[':
			stack = append(stack, c)
			expectKey = c == '{'
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			expectKey = false
		case ',':
			expectKey = len(stack) > 0 && stack[len(stack)-1] == '{'
		case ' ', '\t', '\r', '\n':
		default:
			if expectKey && (c == '-' || c >= '0' && c <= '9') {
				j := i + 1
				for j < len(body) && (body[j] == '-' || body[j] >= '0' && body[j] <= '9') {
					j++
				}
				if out == nil {
					out = append(make([]byte, 0, len(body)+16), body[:i]...)
				}
				out = append(out, '"')
				out = append(out, body[i:j]...)
				out = append(out, '"')
				i = j - 1
				expectKey = false
				continue
			}
			expectKey = false
		}
		if out != nil {
			out = append(out, c)
		}
	}
	if out == nil {
		return body
	}
	return out
}
