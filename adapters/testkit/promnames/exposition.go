package promnames

import (
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ExportedNames reads a Prometheus text exposition (what GET /metrics
// answers without content negotiation) and returns the names a query can
// select from it: every metric family name, and the series names of the
// composite types, X_bucket, X_sum and X_count for a histogram family X and
// X_sum and X_count for a summary. Names follow the legacy validation
// scheme (letters, digits, underscores and colons).
func ExportedNames(exposition io.Reader) (map[string]bool, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(exposition)
	if err != nil {
		return nil, fmt.Errorf("promnames: exposition: %w", err)
	}
	names := make(map[string]bool, len(families))
	for name, f := range families {
		names[name] = true
		var suffixes []string
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			suffixes = []string{"_bucket", "_sum", "_count"}
		case dto.MetricType_GAUGE_HISTOGRAM:
			suffixes = []string{"_bucket", "_gsum", "_gcount"}
		case dto.MetricType_SUMMARY:
			suffixes = []string{"_sum", "_count"}
		}
		for _, s := range suffixes {
			names[name+s] = true
		}
	}
	return names, nil
}
