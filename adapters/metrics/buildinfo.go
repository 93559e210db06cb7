package metrics

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterBuildInfo registers seckill_build_info, a gauge of 1 whose labels
// say which build is running: version (the module version, "(devel)" for
// a local build), revision and modified (from the VCS stamp, when the
// binary has one) and go_version.
func RegisterBuildInfo(reg prometheus.Registerer) error {
	version, revision, modified, goVersion := "(devel)", "unknown", "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_build_info",
		Help: "Always 1; the labels name the running build.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "modified": modified,
			"go_version": goVersion}})
	g.Set(1)
	return reg.Register(g)
}
