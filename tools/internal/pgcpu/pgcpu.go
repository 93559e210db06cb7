// Package pgcpu caps a running PostgreSQL server (its postmaster and every
// backend) at a number of CPU cores with a CPU cgroup, v2 where its cpu
// controller is usable, else v1, and restores it afterwards: the benches
// use it to measure the service against a PostgreSQL of a known size. It
// needs root and touches no process but the ones it is given.
package pgcpu

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seckill-dev/seckill/tools/internal/procstat"
)

// cgroupRoot is where the cgroup file systems are mounted: cgroup v2
// either at the root itself or at its unified directory, cgroup v1
// hierarchies in directories named by their controllers (cpu, or
// cpu,cpuacct).
const cgroupRoot = "/sys/fs/cgroup"

// cpuCapPeriod is the CFS period of the cap: the quota is a share of it.
const cpuCapPeriod = 100 * time.Millisecond

// minCPUQuota is the smallest quota the kernel accepts (1 ms a period).
const minCPUQuota = time.Millisecond

// cgroupCandidate is a cgroup that can hold a CPU cap: version 1 or 2,
// and parent, the directory of the cgroup the processes are in now, under
// which the cap's cgroup is made.
type cgroupCandidate struct {
	version int
	parent  string
}

// String names the candidate as the reports do.
func (c cgroupCandidate) String() string { return fmt.Sprintf("cgroup v%d %s", c.version, c.parent) }

// cgroupCandidates returns, best first, the cgroups under root in which
// the process whose /proc/<pid>/cgroup text is procCgroup can be capped:
// cgroup v2 when the cpu controller is available in the process's cgroup
// (its cgroup.controllers lists cpu), then cgroup v1 when a hierarchy with
// the cpu controller is mounted (a directory of root named cpu, or a
// comma-separated list holding cpu, with cpu.cfs_quota_us). It reads
// only; the error says why no candidate exists.
func cgroupCandidates(root, procCgroup string) ([]cgroupCandidate, error) {
	var v2Path, v1Path string
	haveV1 := false
	for line := range strings.Lines(procCgroup) {
		id, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		controllers, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			v2Path = path
		case slices.Contains(strings.Split(controllers, ","), "cpu"):
			v1Path, haveV1 = path, true
		}
	}
	var out []cgroupCandidate
	var why []string
	if mount, ok := cgroupV2Mount(root); !ok {
		why = append(why, "no cgroup v2 file system under "+root)
	} else {
		parent := filepath.Join(mount, v2Path)
		b, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("cgroup v2: %v", err))
		case !slices.Contains(strings.Fields(string(b)), "cpu"):
			why = append(why, "cgroup v2: the cpu controller is not available in "+parent)
		default:
			out = append(out, cgroupCandidate{version: 2, parent: parent})
		}
	}
	if mount, ok := cgroupV1CPUMount(root); !ok {
		why = append(why, "no cgroup v1 cpu hierarchy under "+root)
	} else if !haveV1 {
		why = append(why, "cgroup v1: the process is in no cpu hierarchy")
	} else {
		out = append(out, cgroupCandidate{version: 1, parent: filepath.Join(mount, v1Path)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no usable CPU cgroup: %s", strings.Join(why, "; "))
	}
	return out, nil
}

// cgroupV2Mount is the cgroup v2 mount under root: root itself (a host
// with cgroup v2 alone) or root/unified (the hybrid layout).
func cgroupV2Mount(root string) (string, bool) {
	for _, dir := range []string{root, filepath.Join(root, "unified")} {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); err == nil {
			return dir, true
		}
	}
	return "", false
}

// cgroupV1CPUMount is the directory of root that holds the cgroup v1
// hierarchy of the cpu controller: named cpu or a comma-separated list
// of controllers that holds cpu, with cpu.cfs_quota_us in it.
func cgroupV1CPUMount(root string) (string, bool) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", false
	}
	for _, e := range entries {
		if !e.IsDir() || !slices.Contains(strings.Split(e.Name(), ","), "cpu") {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "cpu.cfs_quota_us")); err == nil {
			return dir, true
		}
	}
	return "", false
}

// cpuQuota is the CFS quota, in µs a period, that allows cores CPUs over
// period; cores must be positive and the quota at least minCPUQuota.
func cpuQuota(cores float64, period time.Duration) (int64, error) {
	if !(cores > 0) || math.IsInf(cores, 0) {
		return 0, fmt.Errorf("a CPU cap of %v cores: want a positive number", cores)
	}
	q := int64(math.Round(cores * float64(period.Microseconds())))
	if q < minCPUQuota.Microseconds() {
		return 0, fmt.Errorf("a CPU cap of %v cores is a quota of %d µs a %s period, below the kernel's least (%d µs)",
			cores, q, period, minCPUQuota.Microseconds())
	}
	return q, nil
}

// formatCPUMax is cgroup v2's cpu.max for a quota and a period in µs.
func formatCPUMax(quotaUS, periodUS int64) string { return fmt.Sprintf("%d %d", quotaUS, periodUS) }

// parseCPUMax reads cgroup v2's cpu.max ("max 100000" or "50000
// 100000"): the cores it allows, and false when it sets no limit.
func parseCPUMax(s string) (float64, bool, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, false, fmt.Errorf("cpu.max %q: want a quota and a period", s)
	}
	period, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || period <= 0 {
		return 0, false, fmt.Errorf("cpu.max %q: bad period", s)
	}
	if f[0] == "max" {
		return 0, false, nil
	}
	return parseQuota(f[0], period, "cpu.max "+strconv.Quote(s))
}

// parseCFSQuota reads cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us:
// the cores they allow, and false when the quota is -1 (no limit).
func parseCFSQuota(quota, period string) (float64, bool, error) {
	p, err := strconv.ParseInt(strings.TrimSpace(period), 10, 64)
	if err != nil || p <= 0 {
		return 0, false, fmt.Errorf("cpu.cfs_period_us %q: bad period", period)
	}
	if strings.TrimSpace(quota) == "-1" {
		return 0, false, nil
	}
	return parseQuota(strings.TrimSpace(quota), p, "cpu.cfs_quota_us "+strconv.Quote(quota))
}

// parseQuota is the cores a quota of q µs a period of periodUS allows.
func parseQuota(q string, periodUS int64, what string) (float64, bool, error) {
	n, err := strconv.ParseInt(q, 10, 64)
	if err != nil || n <= 0 {
		return 0, false, fmt.Errorf("%s: bad quota", what)
	}
	return float64(n) / float64(periodUS), true, nil
}

// Cap is a CPU cgroup of its own holding a PostgreSQL server:
// the postmaster and every process it had forked when it was made; the
// processes it forks afterwards (new backends) inherit the cgroup. Cores
// is the quota applied, read back from the kernel. Restore must be called
// once the measurements are done, whatever their outcome.
type Cap struct {
	cgroupCandidate
	dir    string
	cores  float64
	moved  int
	enable bool // cpu was enabled in the parent's cgroup.subtree_control (v2) by the cap
}

// String says what the cap holds, for the report's header.
func (c *Cap) String() string {
	return fmt.Sprintf("PostgreSQL capped at %.2f cores (%d processes moved to cgroup v%d %s)", c.cores, c.moved, c.version, c.dir)
}

// CapPostgres moves the PostgreSQL server whose postmaster is pid (and
// the postmaster's children) into a new CPU
// cgroup allowed cores CPUs, under the cgroup it is in now: cgroup v2
// (cpu.max) where its cpu controller is usable, else cgroup v1
// (cpu.cfs_quota_us). It needs root. On an error nothing is left behind:
// whatever was moved is moved back and the new cgroup removed; on success
// the caller owns the cap and must call Restore, also on an error or a
// cancellation of its own.
func CapPostgres(pid int, cores float64) (*Cap, error) {
	quota, err := cpuQuota(cores, cpuCapPeriod)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, fmt.Errorf("the postmaster (pid %d) is not running: %w", pid, err)
	}
	cands, err := cgroupCandidates(cgroupRoot, string(b))
	if err != nil {
		return nil, fmt.Errorf("cap PostgreSQL's CPU: %w", err)
	}
	var errs []error
	for _, cand := range cands {
		c, err := newCPUCap(cand, pid, quota)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", cand, err))
	}
	return nil, fmt.Errorf("cap PostgreSQL's CPU at %v cores: %w", cores, errors.Join(errs...))
}

// newCPUCap makes the cap's cgroup under cand, sets its quota (µs a
// cpuCapPeriod) and moves the postmaster pid, then its children, into
// it: a backend forked after the postmaster moved is born inside. On an
// error it restores what it did.
func newCPUCap(cand cgroupCandidate, pid int, quota int64) (_ *Cap, err error) {
	c := &Cap{cgroupCandidate: cand, dir: filepath.Join(cand.parent, fmt.Sprintf("seckill-bench-pg-%d", os.Getpid()))}
	if cand.version == 2 {
		sub, rerr := os.ReadFile(filepath.Join(cand.parent, "cgroup.subtree_control"))
		if rerr != nil {
			return nil, fmt.Errorf("read cgroup.subtree_control: %w", rerr)
		}
		if !slices.Contains(strings.Fields(string(sub)), "cpu") {
			if werr := os.WriteFile(filepath.Join(cand.parent, "cgroup.subtree_control"), []byte("+cpu"), 0); werr != nil {
				return nil, fmt.Errorf("enable the cpu controller for child cgroups: %w", werr)
			}
			c.enable = true
		}
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("%w (left by an earlier run of this process id? move its processes to %s and remove it)", err, cand.parent)
		}
		c.disable()
		return nil, fmt.Errorf("create the cgroup: %w", err)
	}
	defer func() {
		if err != nil {
			if rerr := c.Restore(); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err := c.setQuota(quota); err != nil {
		return nil, err
	}
	if err := c.join(pid); err != nil {
		return nil, fmt.Errorf("move the postmaster (pid %d): %w", pid, err)
	}
	c.moved = 1
	kids, err := postgresChildren(pid)
	if err != nil {
		return nil, err
	}
	for _, k := range kids {
		if err := c.join(k); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				continue // a backend that ended since the listing
			}
			return nil, fmt.Errorf("move PostgreSQL process %d: %w", k, err)
		}
		c.moved++
	}
	return c, nil
}

// setQuota writes quota (µs a cpuCapPeriod) into the cap's cgroup and
// reads the cores back.
func (c *Cap) setQuota(quota int64) error {
	period := cpuCapPeriod.Microseconds()
	var err error
	switch c.version {
	case 2:
		if err := writeCgroup(c.dir, "cpu.max", formatCPUMax(quota, period)); err != nil {
			return err
		}
		b, rerr := os.ReadFile(filepath.Join(c.dir, "cpu.max"))
		if rerr != nil {
			return fmt.Errorf("read cpu.max back: %w", rerr)
		}
		var limited bool
		c.cores, limited, err = parseCPUMax(string(b))
		if err == nil && !limited {
			err = errors.New("cpu.max reads back without a limit")
		}
	default:
		if err := writeCgroup(c.dir, "cpu.cfs_period_us", strconv.FormatInt(period, 10)); err != nil {
			return err
		}
		if err := writeCgroup(c.dir, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)); err != nil {
			return err
		}
		q, qerr := os.ReadFile(filepath.Join(c.dir, "cpu.cfs_quota_us"))
		p, perr := os.ReadFile(filepath.Join(c.dir, "cpu.cfs_period_us"))
		if qerr != nil || perr != nil {
			return fmt.Errorf("read the quota back: %w", errors.Join(qerr, perr))
		}
		var limited bool
		c.cores, limited, err = parseCFSQuota(string(q), string(p))
		if err == nil && !limited {
			err = errors.New("cpu.cfs_quota_us reads back without a limit")
		}
	}
	return err
}

// join moves the process pid (all its threads) into the cap's cgroup.
func (c *Cap) join(pid int) error { return writeCgroup(c.dir, "cgroup.procs", strconv.Itoa(pid)) }

// Restore moves every process still in the cap's cgroup back to the
// cgroup they came from (the parent's cgroup.procs), including backends
// forked while capped, then removes the cap's cgroup and, on cgroup v2,
// disables the cpu controller in the parent if the cap had enabled it.
// It takes no context: it must run after a cancellation. It retries while
// processes are being forked or the kernel still counts the cgroup busy,
// for up to about two seconds, and returns what it could not undo.
func (c *Cap) Restore() error {
	var errs []error
	deadline := time.Now().Add(2 * time.Second)
	for {
		pids, err := cgroupProcs(c.dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				c.disable()
				return nil // removed already
			}
			return fmt.Errorf("restore PostgreSQL's cgroup: %w", err)
		}
		if len(pids) == 0 {
			err := os.Remove(c.dir)
			if err == nil {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove the cgroup: %w", err))
				break
			}
		}
		var moveErr error
		for _, pid := range pids {
			if err := writeCgroup(c.parent, "cgroup.procs", strconv.Itoa(pid)); err != nil && !errors.Is(err, syscall.ESRCH) {
				moveErr = fmt.Errorf("move process %d back to %s: %w", pid, c.parent, err)
			}
		}
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("processes %v still in %s", pids, c.dir), moveErr)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.disable()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("restore PostgreSQL's cgroup: %w", err)
	}
	return nil
}

// disable undoes the cap's enabling of the cpu controller in the
// parent's cgroup.subtree_control (cgroup v2), best effort: another
// child of the parent may use it.
func (c *Cap) disable() {
	if c.enable {
		_ = writeCgroup(c.parent, "cgroup.subtree_control", "-cpu")
		c.enable = false
	}
}

// writeCgroup writes s to the cgroup file dir/name.
func writeCgroup(dir, name, s string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(s)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %q to %s: %w", s, f.Name(), werr)
	}
	return cerr
}

// cgroupProcs lists the processes of the cgroup dir.
func cgroupProcs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// postgresChildren lists the live children of the postmaster pid: from
// /proc/<pid>/task/*/children where the kernel has it, else by the parent
// pid of every process in /proc.
func postgresChildren(pid int) ([]int, error) {
	if kids, err := procstat.Children(pid); err == nil {
		return kids, nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list PostgreSQL's processes: %w", err)
	}
	var kids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if _, ppid, err := procstat.Ticks(child, false); err == nil && ppid == pid {
			kids = append(kids, child)
		}
	}
	return kids, nil
}
