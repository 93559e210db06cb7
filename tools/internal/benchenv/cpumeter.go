package benchenv

import (
	"errors"
	"os"

	"github.com/seckill-dev/seckill/tools/internal/procstat"
)

// MeteredProc is a process whose CPU a cpuMeter reads: pid, with its
// children when tree (PostgreSQL's backends).
type MeteredProc struct {
	PID  int
	Tree bool
}

// StackMeteredProc is the local stack's process component (its pid file under
// $SECKILL_STACK_DIR/run); tree as in meteredProc.
func StackMeteredProc(component string, tree bool) (MeteredProc, error) {
	pid, err := StackPID(component)
	return MeteredProc{PID: pid, Tree: tree}, err
}

// SelfProc is this process.
func SelfProc() MeteredProc { return MeteredProc{PID: os.Getpid()} }

// CPUMeter holds the CPU clock ticks of some processes at the start of a
// measured run.
type CPUMeter struct {
	procs []MeteredProc
	Start []uint64
}

// StartCPUMeter reads the clocks of procs.
func StartCPUMeter(procs ...MeteredProc) (*CPUMeter, error) {
	m := &CPUMeter{procs: procs}
	t, err := m.Read()
	if err != nil {
		return nil, err
	}
	m.Start = t
	return m, nil
}

// Read returns the clock ticks of each process now, in the order of
// the meter's processes.
func (m *CPUMeter) Read() ([]uint64, error) {
	out := make([]uint64, len(m.procs))
	for i, p := range m.procs {
		var err error
		if out[i], err = procstat.ProcessTicks(p.PID, p.Tree); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// PerUnit reads the clocks again and returns each process's CPU since the
// start in µs per unit of units (> 0).
func (m *CPUMeter) PerUnit(units int64) ([]float64, error) {
	if units <= 0 {
		return nil, errors.New("cpu meter: nothing measured")
	}
	now, err := m.Read()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(now))
	for i := range now {
		out[i] = float64(now[i]-m.Start[i]) / procstat.ClockTicks * 1e6 / float64(units)
	}
	return out, nil
}
