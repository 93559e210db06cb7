package benchenv

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// TestSaleJSONCodecWritesWhatProtojsonReads checks that the load
// generator's PlaceOrderRequest JSON reads back, through protojson, as the
// request it encodes, and that a request id needing escapes (or any other
// message) goes through protojson.
func TestSaleJSONCodecWritesWhatProtojsonReads(t *testing.T) {
	for _, req := range []*seckillv1.PlaceOrderRequest{
		{ActivityId: 1796159630439546, SkuId: 1, RequestId: "sale-49999-1"},
		{ActivityId: 7, SkuId: 9223372036854775807, RequestId: `a "quoted" \ id ü`},
		{ActivityId: 0, SkuId: 1, RequestId: "sale-0-0"},
	} {
		b, err := SaleJSONCodec{}.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		back := &seckillv1.PlaceOrderRequest{}
		if err := protojson.Unmarshal(b, back); err != nil {
			t.Fatalf("%s does not parse: %v", b, err)
		}
		if !proto.Equal(back, req) {
			t.Errorf("%s reads back as %v, want %v", b, back, req)
		}
	}
	res := &seckillv1.PlaceOrderResponse{OrderId: "o-1", Status: seckillv1.OrderStatus_ORDER_STATUS_QUEUING}
	b, err := SaleJSONCodec{}.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	back := &seckillv1.PlaceOrderResponse{}
	if err := (SaleJSONCodec{}).Unmarshal(append(b[:len(b)-1:len(b)-1], []byte(`,"unknownField":1}`)...), back); err != nil {
		t.Fatalf("an answer with an unknown field: %v", err)
	}
	if !proto.Equal(back, res) {
		t.Errorf("the answer reads back as %v, want %v", back, res)
	}
}
