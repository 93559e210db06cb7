package promnames

import (
	"encoding/json"
	"fmt"
	"os"
)

// dashboard is the part of a Grafana dashboard that holds queries: its
// panels (schema 16 and later) and the panels of its rows (older schemas).
type dashboard struct {
	Panels []panel `json:"panels"`
	Rows   []struct {
		Panels []panel `json:"panels"`
	} `json:"rows"`
}

// panel is a Grafana panel: its queries and, for a collapsed row, the
// panels it holds.
type panel struct {
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// DashboardExprs reads the Grafana dashboard JSON at path and returns the
// expr of every panel target that has one, in the order of the file; the
// panels of collapsed rows (and of the rows of old schemas) are included.
// A dashboard wrapped as the HTTP API sends it ({"dashboard": {...}}) is
// unwrapped. The queries of template variables are not returned: they are
// not PromQL (label_values(metric, label)).
func DashboardExprs(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var wrapped struct {
		Dashboard *json.RawMessage `json:"dashboard"`
	}
	if err := json.Unmarshal(data, &wrapped); err != nil {
		return nil, fmt.Errorf("promnames: %s: %w", path, err)
	}
	if wrapped.Dashboard != nil {
		data = *wrapped.Dashboard
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("promnames: %s: %w", path, err)
	}
	var exprs []string
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			for _, t := range p.Targets {
				if t.Expr != "" {
					exprs = append(exprs, t.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, r := range d.Rows {
		walk(r.Panels)
	}
	return exprs, nil
}
