package rocketmq

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// The remoting protocol (RocketMQ's TCP admin protocol, RemotingCommand):
//
//	int32 length            (bytes that follow: 4 + header length + body length)
//	int32 serializeType<<24 | header length   (serialize type 0 = JSON)
//	header                  (JSON: code, language, version, opaque, flag, remark, extFields)
//	body                    (command specific, JSON for the admin commands used here)
//
// All integers are big-endian. A response carries flag bit 0 and echoes the
// request's opaque.

// Request codes of the remoting protocol (RequestCode.java) used by Admin.
const (
	codeUpdateAndCreateTopic             = 17
	codeGetAllTopicConfig                = 21
	codeUpdateAndCreateSubscriptionGroup = 200
	codeGetAllSubscriptionGroupConfig    = 201
	codeGetAllTopicListFromNamesrv       = 206
	codeDeleteSubscriptionGroup          = 207
	codeDeleteTopicInBroker              = 215
	codeDeleteTopicInNamesrv             = 216
	codeGetTopicConfig                   = 351
	codeGetSubscriptionGroupConfig       = 352
)

// Response codes of the remoting protocol (ResponseCode.java) this file
// interprets.
const (
	respSuccess                   = 0
	respTopicNotExist             = 17
	respSubscriptionGroupNotExist = 26
)

const (
	// remotingVersion is the ordinal of MQVersion.Version.V5_3_0; brokers
	// gate some behaviour on the caller's version and every 5.3+ broker
	// knows this one.
	remotingVersion = 473
	// maxFrame bounds a response frame (the broker's own limit is 16 MiB).
	maxFrame         = 16 << 20
	serializeTypeRMQ = 1
	flagResponse     = 1
)

// remotingHeader is the JSON header of a RemotingCommand.
type remotingHeader struct {
	Code      int               `json:"code"`
	Language  string            `json:"language"`
	Version   int               `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int               `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields,omitempty"`
}

// remotingCommand is a decoded request or response.
type remotingCommand struct {
	header remotingHeader
	body   []byte
}

// RemotingError is a non-success response of the remoting protocol.
type RemotingError struct {
	// Code is the broker's response code (ResponseCode.java), for example
	// 17 TOPIC_NOT_EXIST, 26 SUBSCRIPTION_GROUP_NOT_EXIST, 1 SYSTEM_ERROR.
	Code int
	// Remark is the broker's explanation.
	Remark string
}

// Error implements error.
func (e *RemotingError) Error() string {
	return "remoting response code " + strconv.Itoa(e.Code) + ": " + e.Remark
}

// encodeFrame serializes a request frame.
func encodeFrame(cmd remotingCommand) ([]byte, error) {
	hdr, err := json.Marshal(cmd.header)
	if err != nil {
		return nil, fmt.Errorf("encode remoting header: %w", err)
	}
	if len(hdr) > 0xFFFFFF {
		return nil, errors.New("remoting header too large")
	}
	frame := make([]byte, 8, 8+len(hdr)+len(cmd.body))
	binary.BigEndian.PutUint32(frame[0:4], uint32(4+len(hdr)+len(cmd.body)))
	binary.BigEndian.PutUint32(frame[4:8], uint32(len(hdr))) // serialize type JSON = 0 in the high byte
	frame = append(frame, hdr...)
	frame = append(frame, cmd.body...)
	return frame, nil
}

// readFrame reads and decodes one frame from r.
func readFrame(r io.Reader) (remotingCommand, error) {
	var prefix [8]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return remotingCommand{}, fmt.Errorf("read remoting frame: %w", err)
	}
	length := binary.BigEndian.Uint32(prefix[0:4])
	mark := binary.BigEndian.Uint32(prefix[4:8])
	serializeType := mark >> 24
	hdrLen := mark & 0xFFFFFF
	if length < 4 || length > maxFrame || hdrLen > length-4 {
		return remotingCommand{}, fmt.Errorf("read remoting frame: bad lengths %d/%d", length, hdrLen)
	}
	if serializeType == serializeTypeRMQ {
		return remotingCommand{}, errors.New("read remoting frame: ROCKETMQ serialization is not supported")
	}
	rest := make([]byte, length-4)
	if _, err := io.ReadFull(r, rest); err != nil {
		return remotingCommand{}, fmt.Errorf("read remoting frame: %w", err)
	}
	var cmd remotingCommand
	if err := json.Unmarshal(rest[:hdrLen], &cmd.header); err != nil {
		return remotingCommand{}, fmt.Errorf("decode remoting header: %w", err)
	}
	cmd.body = rest[hdrLen:]
	return cmd, nil
}

// invoke opens a connection to addr, sends one request and returns the
// response whose opaque matches. The exchange is bounded by ctx and by
// timeout, whichever ends first.
func invoke(ctx context.Context, addr string, timeout time.Duration, code int, ext map[string]string, body []byte) (remotingCommand, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return remotingCommand{}, fmt.Errorf("dial %s: %w", addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return remotingCommand{}, fmt.Errorf("set deadline: %w", err)
		}
	}
	// Unblock the read if ctx is canceled without a deadline.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	const opaque = 1
	frame, err := encodeFrame(remotingCommand{
		header: remotingHeader{Code: code, Language: "GO", Version: remotingVersion, Opaque: opaque, ExtFields: ext},
		body:   body,
	})
	if err != nil {
		return remotingCommand{}, err
	}
	if _, err := conn.Write(frame); err != nil {
		return remotingCommand{}, wrapCtx(ctx, fmt.Errorf("write request %d to %s: %w", code, addr, err))
	}
	for {
		resp, err := readFrame(conn)
		if err != nil {
			return remotingCommand{}, wrapCtx(ctx, fmt.Errorf("request %d to %s: %w", code, addr, err))
		}
		if resp.header.Flag&flagResponse == 0 || resp.header.Opaque != opaque {
			continue // a server-initiated request or a stale response: not ours
		}
		return resp, nil
	}
}

// wrapCtx prefers the context's error when the context ended, so callers can
// match context.DeadlineExceeded / context.Canceled.
func wrapCtx(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w (%v)", ctxErr, err)
	}
	return err
}
