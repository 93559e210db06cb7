package benchenv

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// SaleJSONCodec is the load generator's Connect JSON codec ("json"): it
// writes a PlaceOrderRequest by appending its three fields, the same JSON
// protojson writes (lowerCamelCase names, int64 as strings, zero fields
// left out) without its reflection, and hands every other message, and
// every answer, to protojson as connect.WithProtoJSON does. The service
// reads the same request either way.
type SaleJSONCodec struct{}

// Name is the codec's name on the wire (Content-Type application/json).
func (SaleJSONCodec) Name() string { return "json" }

// IsBinary reports that JSON is text.
func (SaleJSONCodec) IsBinary() bool { return false }

// Marshal encodes message as JSON.
func (c SaleJSONCodec) Marshal(message any) ([]byte, error) { return c.MarshalAppend(nil, message) }

// MarshalAppend appends the JSON of message to dst (connect reuses dst's
// buffer from call to call).
func (SaleJSONCodec) MarshalAppend(dst []byte, message any) ([]byte, error) {
	if r, ok := message.(*seckillv1.PlaceOrderRequest); ok && r.GetActivityId() > 0 && r.GetSkuId() > 0 && plainJSONString(r.GetRequestId()) {
		dst = append(dst, `{"activityId":"`...)
		dst = strconv.AppendInt(dst, r.GetActivityId(), 10)
		dst = append(dst, `","skuId":"`...)
		dst = strconv.AppendInt(dst, r.GetSkuId(), 10)
		dst = append(dst, `","requestId":"`...)
		dst = append(dst, r.GetRequestId()...)
		return append(dst, `"}`...), nil
	}
	m, ok := message.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("sale codec: %T is not a protobuf message", message)
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, m)
}

// Unmarshal decodes JSON into message with protojson, unknown fields
// discarded, as connect.WithProtoJSON does.
func (SaleJSONCodec) Unmarshal(data []byte, message any) error {
	m, ok := message.(proto.Message)
	if !ok {
		return fmt.Errorf("sale codec: %T is not a protobuf message", message)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", message, err)
	}
	return nil
}

// plainJSONString reports whether s is not empty and needs no JSON
// escaping (printable ASCII without '"' and '\').
func plainJSONString(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// maxWholeBody is the largest request body wholeBodyTransport reads into
// memory.
const maxWholeBody = 64 << 10

// WholeBodyTransport sends a request whose body has a known length of at
// most maxWholeBody from memory, so that net/http writes its headers and
// body in one write (it flushes the headers on their own before a body it
// cannot tell is in memory, as connect's unary body is): one system call
// and one TCP segment per call instead of two, on both ends. Other
// requests (streams, unknown length) pass through unchanged.
type WholeBodyTransport struct {
	Next http.RoundTripper
}

// RoundTrip implements http.RoundTripper. It does not change req: a
// shallow copy carries the in-memory body.
func (t WholeBodyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 || req.ContentLength > maxWholeBody {
		return t.Next.RoundTrip(req)
	}
	buf := make([]byte, req.ContentLength)
	_, err := io.ReadFull(req.Body, buf)
	if cerr := req.Body.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("read the request body: %w", err)
	}
	out := req.WithContext(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(buf))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	return t.Next.RoundTrip(out)
}
