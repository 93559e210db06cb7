package rocketmq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestClassifySend(t *testing.T) {
	cases := []struct {
		name    string
		err     error
		outcome string
	}{
		{"nil", nil, OutcomeConfirmed},
		{"topic not found", &rmq.ErrRpcStatus{Code: 40402}, OutcomeDefiniteFailure},
		{"wrapped forbidden", fmt.Errorf("x: %w", &rmq.ErrRpcStatus{Code: 40300}), OutcomeDefiniteFailure},
		{"body empty", &rmq.ErrRpcStatus{Code: 41302}, OutcomeDefiniteFailure},
		{"type conflict", &rmq.ErrRpcStatus{Code: 40014}, OutcomeDefiniteFailure},
		{"internal", &rmq.ErrRpcStatus{Code: 50001}, OutcomeUnknown},
		{"proxy timeout", &rmq.ErrRpcStatus{Code: 50400}, OutcomeUnknown},
		{"flush timeout", &rmq.ErrRpcStatus{Code: 50401}, OutcomeUnknown},
		{"ha", &rmq.ErrRpcStatus{Code: 50002}, OutcomeUnknown},
		{"throttled", &rmq.ErrRpcStatus{Code: 42900}, OutcomeUnknown},
		{"request timeout", &rmq.ErrRpcStatus{Code: 40800}, OutcomeUnknown},
		{"unlisted code", &rmq.ErrRpcStatus{Code: 49999}, OutcomeUnknown},
		{"deadline", fmt.Errorf("%w: x", context.DeadlineExceeded), OutcomeUnknown},
		{"canceled", context.Canceled, OutcomeUnknown},
		{"grpc unavailable", status.Error(codes.Unavailable, "x"), OutcomeUnknown},
		{"grpc deadline", status.Error(codes.DeadlineExceeded, "x"), OutcomeUnknown},
		{"grpc too large", status.Error(codes.ResourceExhausted, "x"), OutcomeDefiniteFailure},
		{"type mismatch", errors.New("current message type not match with topic accept message types"), OutcomeDefiniteFailure},
		{"body too big", errors.New("message body size exceeds the threshold, max size=4194304 bytes"), OutcomeDefiniteFailure},
		{"no broker", errors.New("no broker available to sendMessage"), OutcomeDefiniteFailure},
		{"not running", errors.New("producer is not running"), OutcomeUnknown},
		{"anything else", errors.New("create grpc conn failed"), OutcomeUnknown},
	}
	for _, c := range cases {
		if got, _ := classifySend(c.err); got != c.outcome {
			t.Errorf("%s: classifySend(%v) = %s, want %s", c.name, c.err, got, c.outcome)
		}
	}
}

func TestRemotingFrameRoundTrip(t *testing.T) {
	cmd := remotingCommand{
		header: remotingHeader{Code: 17, Language: "GO", Version: remotingVersion, Opaque: 7, Flag: flagResponse, ExtFields: map[string]string{"topic": "t"}},
		body:   []byte(`{"a":1}`),
	}
	frame, err := encodeFrame(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if frame[4] != 0 {
		t.Fatalf("serialize type byte = %d, want 0 (JSON)", frame[4])
	}
	got, err := readFrame(bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	if got.header.Code != 17 || got.header.Opaque != 7 || got.header.ExtFields["topic"] != "t" || string(got.body) != `{"a":1}` {
		t.Fatalf("decoded %+v %q", got.header, got.body)
	}
	if _, err := readFrame(bytes.NewReader(frame[:len(frame)-1])); err == nil {
		t.Fatal("truncated frame decoded")
	}
}

func TestMissingTopic(t *testing.T) {
	msg := "startUp err=... err=CODE: TOPIC_NOT_FOUND, MESSAGE: CODE: 17  DESC: No topic route info in name server for the topic: T1_PROD_X\nFor more information"
	if got := missingTopic(msg); got != "T1_PROD_X" {
		t.Fatalf("missingTopic = %q", got)
	}
	if got := missingTopic("other"); got != "" {
		t.Fatalf("missingTopic(other) = %q", got)
	}
}
