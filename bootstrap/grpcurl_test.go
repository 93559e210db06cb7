package bootstrap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// grpcurl builds the grpcurl tool of go.mod (`go tool grpcurl`) into a
// directory of the test and returns a function that runs it against addr
// with flags, then the address, then rest (a verb or a method).
func grpcurl(t *testing.T, addr string) func(flags []string, rest ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "grpcurl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/fullstorydev/grpcurl/cmd/grpcurl")
	build.Dir = ".." // the module root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build grpcurl: %v\n%s", err, out)
	}
	return func(flags []string, rest ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		args := append(append([]string{"-plaintext", "-max-time", "20"}, flags...), addr)
		cmd := exec.CommandContext(ctx, bin, append(args, rest...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
}

// TestGrpcurlCallsTheAPI drives the real service with a standard gRPC
// client that knows nothing of it beforehand: the schema comes from
// reflection on the API port (no token), every OrderService call
// succeeds with a token, and an error's google.rpc.ErrorInfo is decoded.
func TestGrpcurlCallsTheAPI(t *testing.T) {
	s := startSystem(t, options{withoutWorkers: []string{"consumer CG_SECKILL_ORDER_TIMEOUT_V1"}})
	s.activity(90, 10, time.Hour, time.Minute)
	run := grpcurl(t, strings.TrimPrefix(s.base, "http://"))
	must := func(flags []string, rest ...string) string {
		t.Helper()
		out, err := run(flags, rest...)
		if err != nil {
			t.Fatalf("grpcurl %s: %v\n%s", strings.Join(rest, " "), err, out)
		}
		return out
	}
	call := func(tok, method, body string) map[string]any {
		t.Helper()
		out := must([]string{"-H", "authorization: Bearer " + tok, "-d", body}, "seckill.v1.OrderService/"+method)
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%s answered %q: %v", method, out, err)
		}
		return m
	}
	status := func(m map[string]any) string {
		o, _ := m["order"].(map[string]any)
		st, _ := o["status"].(string)
		return st
	}

	list := must(nil, "list")
	for _, svc := range []string{"seckill.v1.OrderService", "seckill.v1.AdminService"} {
		if !strings.Contains(list, svc) {
			t.Fatalf("grpcurl list without a token:\n%s\nmissing %s", list, svc)
		}
	}
	if out := must(nil, "describe", "google.rpc.ErrorInfo"); !strings.Contains(out, "reason") {
		t.Fatalf("describe google.rpc.ErrorInfo:\n%s", out)
	}

	buyer := s.token(91, false)
	placed := call(buyer, "PlaceOrder", `{"activityId": 90, "skuId": 1, "requestId": "grpcurl-1"}`)
	orderID, _ := placed["orderId"].(string)
	if orderID == "" || placed["status"] != "ORDER_STATUS_QUEUING" {
		t.Fatalf("PlaceOrder answered %v", placed)
	}
	s.eventually(30*time.Second, "order "+orderID+" is created", func() bool {
		return status(call(buyer, "GetOrder", `{"orderId": "`+orderID+`"}`)) == "ORDER_STATUS_CREATED"
	})
	if st := status(call(s.paymentToken(), "PayOrder", `{"orderId": "`+orderID+`", "paymentId": "grpcurl-pay-1"}`)); st != "ORDER_STATUS_PAID" {
		t.Fatalf("PayOrder: status %q", st)
	}

	other := s.token(92, false)
	second := call(other, "PlaceOrder", `{"activityId": 90, "skuId": 1, "requestId": "grpcurl-2"}`)
	secondID, _ := second["orderId"].(string)
	s.eventually(30*time.Second, "order "+secondID+" is created", func() bool {
		return status(call(other, "GetOrder", `{"orderId": "`+secondID+`"}`)) == "ORDER_STATUS_CREATED"
	})
	if st := status(call(other, "CancelOrder", `{"orderId": "`+secondID+`"}`)); st != "ORDER_STATUS_CANCELED" {
		t.Fatalf("CancelOrder: status %q", st)
	}

	out, err := run([]string{"-H", "authorization: Bearer " + buyer, "-d", `{"activityId": 90, "skuId": 1, "requestId": "grpcurl-3"}`},
		"seckill.v1.OrderService/PlaceOrder")
	if err == nil {
		t.Fatalf("a second order for the same buyer succeeded:\n%s", out)
	}
	for _, want := range []string{"AlreadyExists", "google.rpc.ErrorInfo", `"reason": "ALREADY_PURCHASED"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("grpcurl error output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "not recognized") {
		t.Fatalf("grpcurl could not decode the error details:\n%s", out)
	}
	t.Logf("grpcurl error output:\n%s", out)
}
