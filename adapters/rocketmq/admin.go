package rocketmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// MessageType is a topic's message type (the broker's topic attribute
// message.type). A producer may only send messages of the topic's type.
type MessageType string

// The message types of RocketMQ 5.
const (
	MessageTypeNormal      MessageType = "NORMAL"
	MessageTypeFIFO        MessageType = "FIFO"
	MessageTypeDelay       MessageType = "DELAY"
	MessageTypeTransaction MessageType = "TRANSACTION"
)

// TopicSpec describes a topic to create or update.
type TopicSpec struct {
	// Name is the physical topic name (letters, digits, '_', '-', '%', '|';
	// at most 127 characters).
	Name string
	// Type becomes the message.type attribute. Empty means NORMAL.
	Type MessageType
	// Queues is the read and write queue count; 0 means 4.
	Queues int
	// Perm is the permission bit set (2 write, 4 read, 6 both); 0 means 6.
	Perm int
}

// GroupSpec describes a consumer group (SubscriptionGroupConfig) to create
// or update. Creating replaces the whole configuration of an existing group.
type GroupSpec struct {
	// Name is the physical group name.
	Name string
	// Orderly sets consumeMessageOrderly: required for FIFO consumption.
	Orderly bool
	// RetryMaxTimes bounds redeliveries; a message is moved to %DLQ%<group>
	// when it would be delivered for the (RetryMaxTimes+2)-th time.
	// Negative means the broker default 16.
	RetryMaxTimes int
}

// TopicInfo is a topic's configuration as the broker stores it.
type TopicInfo struct {
	Name        string
	ReadQueues  int
	WriteQueues int
	Perm        int
	// Type is the message.type attribute (NORMAL when absent).
	Type MessageType
	// Attributes holds every topic attribute, keys without the '+' sign.
	Attributes map[string]string
}

// GroupInfo is a consumer group's configuration as the broker stores it.
type GroupInfo struct {
	Name          string
	ConsumeEnable bool
	Orderly       bool
	RetryMaxTimes int
	RetryQueues   int
}

// Admin is a minimal client of RocketMQ's remoting protocol (JSON
// serialization) for the broker's and name server's admin commands: it
// creates, reads and deletes topics and consumer groups. It opens one TCP
// connection per command. Safe for concurrent use.
type Admin struct {
	broker     string
	brokerName string // known name of broker (ForBroker); "" asks the broker
	namesrv    string
	timeout    time.Duration
}

// NewAdmin returns an admin client of the broker's remoting address
// (SECKILL_ROCKETMQ_BROKER, for example 127.0.0.1:10911). namesrv (optional)
// is the name server's address: DeleteTopic drops the deleted topic's route
// there, RoutedTopics, TopicRoute and Masters read it. broker may be empty
// for an admin of the name server only, which gives one admin per master
// broker through Masters and ForBroker; its broker commands fail. timeout
// bounds each command (0 means 5 s) in addition to the caller's context.
func NewAdmin(broker, namesrv string, timeout time.Duration) *Admin {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &Admin{broker: broker, namesrv: namesrv, timeout: timeout}
}

// CreateTopic creates or updates a topic on the broker
// (UPDATE_AND_CREATE_TOPIC). Idempotent. The topic is usable by producers
// and consumers as soon as CreateTopic returns, unless a client looked the
// topic up before it existed: the proxy caches "not found" for
// topicRouteServiceCacheRefreshSeconds.
func (a *Admin) CreateTopic(ctx context.Context, spec TopicSpec) error {
	if spec.Name == "" {
		return errors.New("create topic: empty name")
	}
	spec = spec.withDefaults()
	queues, perm, typ := spec.Queues, spec.Perm, spec.Type
	ext := map[string]string{
		"topic":           spec.Name,
		"defaultTopic":    "TBW102",
		"readQueueNums":   strconv.Itoa(queues),
		"writeQueueNums":  strconv.Itoa(queues),
		"perm":            strconv.Itoa(perm),
		"topicFilterType": "SINGLE_TAG",
		"topicSysFlag":    "0",
		"order":           "false",
		"attributes":      "+message.type=" + string(typ),
	}
	if _, err := a.brokerCall(ctx, codeUpdateAndCreateTopic, ext, nil); err != nil {
		return fmt.Errorf("create topic %s: %w", spec.Name, err)
	}
	return nil
}

// subscriptionGroupConfig is the JSON body of UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
// and of GET_SUBSCRIPTIONGROUP_CONFIG's response (SubscriptionGroupConfig.java).
type subscriptionGroupConfig struct {
	GroupName                      string            `json:"groupName"`
	ConsumeEnable                  bool              `json:"consumeEnable"`
	ConsumeFromMinEnable           bool              `json:"consumeFromMinEnable"`
	ConsumeBroadcastEnable         bool              `json:"consumeBroadcastEnable"`
	ConsumeMessageOrderly          bool              `json:"consumeMessageOrderly"`
	RetryQueueNums                 int               `json:"retryQueueNums"`
	RetryMaxTimes                  int               `json:"retryMaxTimes"`
	BrokerID                       int64             `json:"brokerId"`
	WhichBrokerWhenConsumeSlowly   int64             `json:"whichBrokerWhenConsumeSlowly"`
	NotifyConsumerIdsChangedEnable bool              `json:"notifyConsumerIdsChangedEnable"`
	GroupSysFlag                   int               `json:"groupSysFlag"`
	ConsumeTimeoutMinute           int               `json:"consumeTimeoutMinute"`
	Attributes                     map[string]string `json:"attributes"`
}

// CreateGroup creates or replaces a consumer group on the broker
// (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP). Idempotent.
func (a *Admin) CreateGroup(ctx context.Context, spec GroupSpec) error {
	if spec.Name == "" {
		return errors.New("create group: empty name")
	}
	retries := spec.withDefaults().RetryMaxTimes
	body, err := json.Marshal(subscriptionGroupConfig{
		GroupName:                      spec.Name,
		ConsumeEnable:                  true,
		ConsumeFromMinEnable:           true,
		ConsumeBroadcastEnable:         true,
		ConsumeMessageOrderly:          spec.Orderly,
		RetryQueueNums:                 1,
		RetryMaxTimes:                  retries,
		WhichBrokerWhenConsumeSlowly:   1,
		NotifyConsumerIdsChangedEnable: true,
		ConsumeTimeoutMinute:           15,
		Attributes:                     map[string]string{},
	})
	if err != nil {
		return fmt.Errorf("create group %s: %w", spec.Name, err)
	}
	if _, err := a.brokerCall(ctx, codeUpdateAndCreateSubscriptionGroup, nil, body); err != nil {
		return fmt.Errorf("create group %s: %w", spec.Name, err)
	}
	return nil
}

// topicConfigJSON is the body of GET_TOPIC_CONFIG's response
// (TopicConfigAndQueueMapping.java).
type topicConfigJSON struct {
	TopicName      string            `json:"topicName"`
	ReadQueueNums  int               `json:"readQueueNums"`
	WriteQueueNums int               `json:"writeQueueNums"`
	Perm           int               `json:"perm"`
	Attributes     map[string]string `json:"attributes"`
}

// Topic reads a topic's configuration from the broker (GET_TOPIC_CONFIG).
// A missing topic gives an error matching ports.ErrNotFound.
func (a *Admin) Topic(ctx context.Context, name string) (TopicInfo, error) {
	resp, err := a.brokerCall(ctx, codeGetTopicConfig, map[string]string{"topic": name}, nil)
	if err != nil {
		return TopicInfo{}, fmt.Errorf("read topic %s: %w", name, err)
	}
	var tc topicConfigJSON
	if err := json.Unmarshal(resp.body, &tc); err != nil {
		return TopicInfo{}, fmt.Errorf("read topic %s: decode %q: %w", name, resp.body, err)
	}
	return tc.info(), nil
}

// info converts the broker's JSON of one topic.
func (tc topicConfigJSON) info() TopicInfo {
	info := TopicInfo{
		Name: tc.TopicName, ReadQueues: tc.ReadQueueNums, WriteQueues: tc.WriteQueueNums, Perm: tc.Perm,
		Type: MessageTypeNormal, Attributes: map[string]string{},
	}
	for k, v := range tc.Attributes {
		info.Attributes[strings.TrimPrefix(k, "+")] = v
	}
	if t, ok := info.Attributes["message.type"]; ok {
		info.Type = MessageType(t)
	}
	return info
}

// Topics reads the configuration of every topic of the broker
// (GET_ALL_TOPIC_CONFIG), keyed by name. Unlike Topic it is one request
// whatever the number of topics.
func (a *Admin) Topics(ctx context.Context) (map[string]TopicInfo, error) {
	resp, err := a.brokerCall(ctx, codeGetAllTopicConfig, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("read all topics: %w", err)
	}
	var wrapper struct {
		TopicConfigTable map[string]topicConfigJSON `json:"topicConfigTable"`
	}
	if err := json.Unmarshal(resp.body, &wrapper); err != nil {
		return nil, fmt.Errorf("read all topics: decode %d bytes: %w", len(resp.body), err)
	}
	out := make(map[string]TopicInfo, len(wrapper.TopicConfigTable))
	for name, tc := range wrapper.TopicConfigTable {
		if tc.TopicName == "" {
			tc.TopicName = name
		}
		out[name] = tc.info()
	}
	return out, nil
}

// Groups reads the configuration of every consumer group of the broker
// (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), keyed by name. Unlike Group it never
// creates a missing group (see README.md, verified behaviour 2).
func (a *Admin) Groups(ctx context.Context) (map[string]GroupInfo, error) {
	resp, err := a.brokerCall(ctx, codeGetAllSubscriptionGroupConfig, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("read all groups: %w", err)
	}
	var wrapper struct {
		SubscriptionGroupTable map[string]subscriptionGroupConfig `json:"subscriptionGroupTable"`
	}
	if err := json.Unmarshal(resp.body, &wrapper); err != nil {
		return nil, fmt.Errorf("read all groups: decode %d bytes: %w", len(resp.body), err)
	}
	out := make(map[string]GroupInfo, len(wrapper.SubscriptionGroupTable))
	for name, gc := range wrapper.SubscriptionGroupTable {
		if gc.GroupName == "" {
			gc.GroupName = name
		}
		out[name] = gc.info()
	}
	return out, nil
}

// RoutedTopics reads the names of the topics the name server routes
// (GET_ALL_TOPIC_LIST_FROM_NAMESERVER): clients find a topic only once the
// broker has registered it there. It needs the name server address given
// to NewAdmin.
func (a *Admin) RoutedTopics(ctx context.Context) (map[string]bool, error) {
	if a.namesrv == "" {
		return nil, errors.New("read the name server's topics: no name server address")
	}
	resp, err := a.call(ctx, a.namesrv, codeGetAllTopicListFromNamesrv, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("read the name server's topics: %w", err)
	}
	var list struct {
		TopicList []string `json:"topicList"`
	}
	if err := json.Unmarshal(resp.body, &list); err != nil {
		return nil, fmt.Errorf("read the name server's topics: decode %d bytes: %w", len(resp.body), err)
	}
	out := make(map[string]bool, len(list.TopicList))
	for _, t := range list.TopicList {
		out[t] = true
	}
	return out, nil
}

// Namesrv returns the name server address given to NewAdmin ("" when none).
func (a *Admin) Namesrv() string { return a.namesrv }

// Broker returns the broker address given to NewAdmin or ForBroker ("" for
// an admin of the name server only).
func (a *Admin) Broker() string { return a.broker }

// info converts the broker's JSON of one group.
func (gc subscriptionGroupConfig) info() GroupInfo {
	return GroupInfo{
		Name: gc.GroupName, ConsumeEnable: gc.ConsumeEnable, Orderly: gc.ConsumeMessageOrderly,
		RetryMaxTimes: gc.RetryMaxTimes, RetryQueues: gc.RetryQueueNums,
	}
}

// Group reads a consumer group's configuration from the broker
// (GET_SUBSCRIPTIONGROUP_CONFIG). A missing group gives an error matching
// ports.ErrNotFound.
func (a *Admin) Group(ctx context.Context, name string) (GroupInfo, error) {
	resp, err := a.brokerCall(ctx, codeGetSubscriptionGroupConfig, map[string]string{"group": name}, nil)
	if err != nil {
		return GroupInfo{}, fmt.Errorf("read group %s: %w", name, err)
	}
	if len(resp.body) == 0 {
		return GroupInfo{}, fmt.Errorf("read group %s: %w", name, ports.ErrNotFound)
	}
	var gc subscriptionGroupConfig
	if err := json.Unmarshal(resp.body, &gc); err != nil {
		return GroupInfo{}, fmt.Errorf("read group %s: decode %q: %w", name, resp.body, err)
	}
	return gc.info(), nil
}

// DeleteTopic deletes a topic from the broker (DELETE_TOPIC_IN_BROKER; the
// broker also drops the pop retry topics of the groups that consumed it) and,
// when a name server address was given, its route from the name server.
// Deleting a missing topic succeeds.
func (a *Admin) DeleteTopic(ctx context.Context, name string) error {
	if _, err := a.brokerCall(ctx, codeDeleteTopicInBroker, map[string]string{"topic": name}, nil); err != nil {
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	if a.namesrv != "" {
		if _, err := a.call(ctx, a.namesrv, codeDeleteTopicInNamesrv, map[string]string{"topic": name}, nil); err != nil && !errors.Is(err, ports.ErrNotFound) {
			return fmt.Errorf("delete topic %s from name server: %w", name, err)
		}
	}
	return nil
}

// DeleteGroup deletes a consumer group and its consume offsets
// (DELETE_SUBSCRIPTIONGROUP with cleanOffset). Deleting a missing group
// succeeds.
func (a *Admin) DeleteGroup(ctx context.Context, name string) error {
	ext := map[string]string{"groupName": name, "cleanOffset": "true"}
	if _, err := a.brokerCall(ctx, codeDeleteSubscriptionGroup, ext, nil); err != nil && !errors.Is(err, ports.ErrNotFound) {
		return fmt.Errorf("delete group %s: %w", name, err)
	}
	return nil
}

// call performs one command and turns a non-success response into a
// *RemotingError (wrapping ports.ErrNotFound for TOPIC_NOT_EXIST and
// SUBSCRIPTION_GROUP_NOT_EXIST).
func (a *Admin) call(ctx context.Context, addr string, code int, ext map[string]string, body []byte) (remotingCommand, error) {
	resp, err := invoke(ctx, addr, a.timeout, code, ext, body)
	if err != nil {
		return remotingCommand{}, err
	}
	if resp.header.Code != respSuccess {
		rerr := &RemotingError{Code: resp.header.Code, Remark: resp.header.Remark}
		if rerr.Code == respTopicNotExist || rerr.Code == respSubscriptionGroupNotExist {
			return remotingCommand{}, fmt.Errorf("%w: %w", ports.ErrNotFound, rerr)
		}
		return remotingCommand{}, rerr
	}
	return resp, nil
}
