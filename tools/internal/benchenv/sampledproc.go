package benchenv

import "github.com/seckill-dev/seckill/tools/internal/procstat"

// SampledProcess is a process whose CPU time a sampler reads from
// /proc/<pid>/stat.
type SampledProcess struct {
	Name string
	PID  int
	// Tree adds the live children (PostgreSQL's backends under the
	// postmaster) and the reaped ones (the parent's cutime and cstime).
	Tree        bool
	First, Last uint64 // clock ticks at the first and the latest sample
	gone        bool
}

// Sample reads the process's ticks; it reports false once the process is
// gone (its last reading is kept).
func (p *SampledProcess) Sample() (uint64, bool) {
	if p.gone {
		return p.Last, false
	}
	t, err := procstat.ProcessTicks(p.PID, p.Tree)
	if err != nil {
		p.gone = true
		return p.Last, false
	}
	return t, true
}
