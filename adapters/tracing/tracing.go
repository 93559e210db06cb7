// Package tracing sets up OpenTelemetry tracing for the service and holds
// the helpers the adapters share to carry a trace across the broker.
//
// Tracing is off unless an OTLP endpoint is configured (Config.Endpoint,
// from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT);
// off, every tracer is the no-op one and costs a few nanoseconds per span.
// On, spans go to the endpoint over OTLP/HTTP (protobuf) in batches.
//
// The adapters record their own spans with the provider New returns
// (adapters never import one another): across the broker a trace travels
// in the message property "traceparent" (W3C trace context); the
// RocketMQ publisher starts a producer span as a child of the caller's
// span, or of the message's own traceparent when the caller has none (the
// relay and the scanner send messages stored earlier), and writes the
// producer span into the property; the consumer starts its span as a
// child of the property's context.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config configures the exporter; the bootstrap reads it from the standard
// OTEL_* variables.
type Config struct {
	// Endpoint is the OTLP/HTTP traces URL (for example
	// http://127.0.0.1:4318/v1/traces) or base URL (http://127.0.0.1:4318,
	// to which /v1/traces is added). Empty turns tracing off.
	Endpoint string
	// ServiceName is the service.name resource attribute.
	ServiceName string
	// InstanceID is the service.instance.id resource attribute.
	InstanceID string
	// SampleRatio is the share of new traces sampled (1 samples all);
	// a sampled parent is always followed.
	SampleRatio float64
}

// Provider is the process's tracer provider and how to flush it.
type Provider struct {
	trace.TracerProvider
	shutdown func(context.Context) error
}

// Shutdown flushes the spans still queued and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.shutdown == nil {
		return nil
	}
	return p.shutdown(ctx)
}

// New returns the tracer provider cfg describes: the no-op provider when
// cfg.Endpoint is empty.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.Endpoint == "" {
		return &Provider{TracerProvider: noop.NewTracerProvider()}, nil
	}
	url := cfg.Endpoint
	if !strings.HasSuffix(url, "/v1/traces") {
		url = strings.TrimSuffix(url, "/") + "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(url))
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "seckill"
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(name), semconv.ServiceInstanceID(cfg.InstanceID)))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	ratio := cfg.SampleRatio
	if ratio <= 0 || ratio > 1 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	return &Provider{TracerProvider: tp, shutdown: tp.Shutdown}, nil
}
