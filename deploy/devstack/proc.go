package devstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// readPID returns the pid in the first line of path, or 0 when the file is
// missing, empty or holds no number.
func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	digits := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, line)
	pid, err := strconv.Atoi(digits)
	if err != nil || pid <= 1 {
		return 0
	}
	return pid
}

// writePID replaces path with pid.
func writePID(path string, pid int) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	return nil
}

// alive reports whether process pid exists and is not a zombie. A zombie
// child of this process (one Start launched and that exited) is reaped.
func alive(pid int) bool {
	if pid <= 1 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		return false
	}
	return true
}

// Owner says which processes are ours: those whose working directory is
// Dir and whose command line contains Needle (the program or main class).
type Owner struct {
	Dir    string
	Needle string
}

// Owns reports whether pid is alive and ours.
func (o Owner) Owns(pid int) bool {
	if !alive(pid) {
		return false
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil || cwd != o.Dir {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return strings.Contains(strings.ReplaceAll(string(cmdline), "\x00", " "), o.Needle)
}

// portOpen reports whether something accepts TCP connections on
// 127.0.0.1:port within a second.
func portOpen(ctx context.Context, port int) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// listenerPID returns the pid of a process with a listening TCP socket on
// port (any address), read from /proc; 0 when none is found or /proc does
// not tell (another user's process without privileges).
func listenerPID(port int) int {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		file, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			// sl local_address rem_address st ... inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A = LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil && int(p) == port {
				inodes["socket:["+fields[9]+"]"] = true
			}
		}
		_ = file.Close()
	}
	if len(inodes) == 0 {
		return 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, fdDir := range procs {
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && inodes[link] {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(fdDir)))
				return pid
			}
		}
	}
	return 0
}

// describePID is "pid N (comm)" or "" for 0.
func describePID(pid int) string {
	if pid == 0 {
		return ""
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(comm)))
}

// ensurePortsFree fails when one of ports of component name accepts
// connections: something that is not ours holds it.
func ensurePortsFree(ctx context.Context, name string, ports ...int) error {
	for _, port := range ports {
		if !portOpen(ctx, port) {
			continue
		}
		owner := describePID(listenerPID(port))
		if owner != "" {
			owner = ": " + owner
		}
		return fmt.Errorf("port 127.0.0.1:%d (needed by %s) is already in use by a process this script did not start%s. "+
			"Stop it, or choose other ports (see docs/local-stack.md, e.g. SECKILL_PG_PORT / SECKILL_REDIS_PORT / "+
			"SECKILL_NAMESRV_PORT / SECKILL_PROXY_PORT / SECKILL_BROKER_PORT)", port, name, owner)
	}
	return nil
}

// spawn starts argv as a long-running process detached from us: its own
// session, stdin from /dev/null, stdout and stderr appended to outFile, in
// directory dir, with env added to ours. It writes the pid to pidFile and
// returns it; the process is not waited for (alive reaps it if it exits
// while we run).
func spawn(pidFile, outFile, dir string, argv, env []string) (int, error) {
	out, err := os.OpenFile(outFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", outFile, err)
	}
	defer out.Close()
	_ = os.Remove(pidFile)
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:noctx // the process outlives this call on purpose
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", argv[0], err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	if err := writePID(pidFile, pid); err != nil {
		return pid, err
	}
	return pid, nil
}

// stopPID sends sig to pid, waits up to timeout for it to exit, then sends
// SIGKILL to that pid and waits up to a further 5 s. Callers have checked
// that pid is ours.
func stopPID(ctx context.Context, log *Logger, name string, pid int, sig syscall.Signal, timeout time.Duration) error {
	if !alive(pid) {
		return nil
	}
	log.Infof("stopping %s (pid %d, SIG%s)", name, pid, signalName(sig))
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s: signal pid %d: %w", name, pid, err)
	}
	if waitGone(ctx, pid, timeout) {
		log.Infof("%s stopped", name)
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("stop %s (pid %d): %w", name, pid, ctx.Err())
	}
	log.Warnf("%s (pid %d) still running after %s: SIGKILL", name, pid, timeout)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if !waitGone(ctx, pid, 5*time.Second) {
		return fmt.Errorf("stop %s: pid %d survived SIGKILL", name, pid)
	}
	log.Infof("%s stopped", name)
	return nil
}

// waitGone polls until pid is gone, timeout passes or ctx ends; it reports
// whether the process is gone.
func waitGone(ctx context.Context, pid int, timeout time.Duration) bool {
	return poll(ctx, timeout, 50*time.Millisecond, func() bool { return !alive(pid) })
}

// poll calls cond every interval until it is true (true), or timeout passes
// or ctx ends (false).
func poll(ctx context.Context, timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(interval):
		}
	}
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGINT:
		return "INT"
	case syscall.SIGKILL:
		return "KILL"
	default:
		return strconv.Itoa(int(sig))
	}
}

// procStatusKB reads a "Key: N kB" line of /proc/<pid>/<file>.
func procStatusKB(pid int, file, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// rssKB is the resident set size of pid in KiB (0 if unknown).
func rssKB(pid int) int64 { return procStatusKB(pid, "status", "VmRSS") }

// childrenOf lists the pids whose parent is pid.
func childrenOf(pid int) []int {
	var kids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		child, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if procStatusKB(child, "status", "PPid") == int64(pid) {
			kids = append(kids, child)
		}
	}
	return kids
}

// treeKB sums the RSS and the PSS of pid and its direct children
// (PostgreSQL: postmaster, backends and auxiliary processes).
func treeKB(pid int) (rss, pss int64) {
	for _, p := range append([]int{pid}, childrenOf(pid)...) {
		rss += rssKB(p)
		pss += procStatusKB(p, "smaps_rollup", "Pss")
	}
	return rss, pss
}

// tailFile returns the last n lines of path ("" if unreadable).
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// fileContains reports whether path contains s.
func fileContains(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), s)
}

// isRoot reports whether we run as root.
func isRoot() bool { return os.Geteuid() == 0 }
