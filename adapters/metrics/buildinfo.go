package metrics

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo names the running build.
type BuildInfo struct {
	// Version is the module version, "(devel)" for a local build.
	Version string
	// Revision and Modified come from the VCS stamp ("unknown" when the
	// binary has none).
	Revision, Modified string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// ReadBuildInfo returns the running binary's build information.
func ReadBuildInfo() BuildInfo {
	b := BuildInfo{Version: "(devel)", Revision: "unknown", Modified: "unknown", GoVersion: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = bi.GoVersion
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value
		}
	}
	return b
}

// RegisterBuildInfo registers seckill_build_info, a gauge of 1 whose labels
// say which build is running (ReadBuildInfo): version, revision, modified
// and go_version.
func RegisterBuildInfo(reg prometheus.Registerer) error {
	b := ReadBuildInfo()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_build_info",
		Help: "Always 1; the labels name the running build.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "modified": b.Modified,
			"go_version": b.GoVersion}})
	g.Set(1)
	return reg.Register(g)
}
