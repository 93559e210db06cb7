// Package procstat reads the CPU time of local processes from /proc
// (Linux): a process's own ticks, those of its children, and its live
// children. The benches meter the service and the stack's processes with
// it; it starts, stops and signals nothing.
package procstat

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is the kernel's USER_HZ (sysconf(_SC_CLK_TCK)): 100 on every
// Linux architecture Go supports, the unit of /proc/<pid>/stat's times.
const ClockTicks = 100

// Ticks reads utime+stime (and, with children, cutime+cstime) of pid
// in clock ticks, and its parent pid.
func Ticks(pid int, children bool) (ticks uint64, ppid int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces: fields are counted
	// after its closing parenthesis, from field 3 (state) on.
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ppid, _ = strconv.Atoi(f[1])
	n := 2 // utime (14), stime (15)
	if children {
		n = 4 // cutime (16), cstime (17)
	}
	for _, v := range f[11 : 11+n] {
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += x
	}
	return ticks, ppid, nil
}

// TreeTicks is the CPU of pid and its children: its own time, the time
// of the children it reaped, and the time of its live children (listed by
// /proc/<pid>/task/*/children, or, on a kernel without those files, found
// by their parent pid in every /proc/*/stat: a scan that cost the load
// generator about a millisecond per sample).
func TreeTicks(pid int) (uint64, error) {
	total, _, err := Ticks(pid, true)
	if err != nil {
		return 0, err
	}
	kids, err := Children(pid)
	if err == nil {
		for _, child := range kids {
			if t, _, err := Ticks(child, true); err == nil {
				total += t
			}
		}
		return total, nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		t, ppid, err := Ticks(child, true)
		if err == nil && ppid == pid {
			total += t
		}
	}
	return total, nil
}

// ProcessTicks is the CPU of pid in clock ticks: with its children
// (TreeTicks) when tree, else its own.
func ProcessTicks(pid int, tree bool) (uint64, error) {
	if tree {
		return TreeTicks(pid)
	}
	t, _, err := Ticks(pid, false)
	return t, err
}

// Children lists the live children of pid from
// /proc/<pid>/task/<tid>/children (every thread's); the error is the
// files' (absent without CONFIG_PROC_CHILDREN).
func Children(pid int) ([]int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var kids []int
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && t.Name() != strconv.Itoa(pid) {
				continue // a thread that ended since the listing
			}
			return nil, err
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				kids = append(kids, c)
			}
		}
	}
	return kids, nil
}
