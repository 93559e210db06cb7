package pgcpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCPUQuota: a cap in cores becomes a quota of the period, formatted
// and parsed back the same in cgroup v2's cpu.max and cgroup v1's files;
// no limit, nonsense and a quota below the kernel's least are refused.
func TestCPUQuota(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cores float64
		quota int64
	}{{0.33, 33000}, {1.0 / 3, 33333}, {1.5, 150000}, {0.01, 1000}} {
		q, err := cpuQuota(tc.cores, 100*time.Millisecond)
		if err != nil || q != tc.quota {
			t.Fatalf("cpuQuota(%v) = %d, %v; want %d", tc.cores, q, err, tc.quota)
		}
		s := formatCPUMax(q, 100000)
		if got, limited, err := parseCPUMax(s + "\n"); err != nil || !limited || got != float64(tc.quota)/100000 {
			t.Fatalf("parseCPUMax(%q) = %v, %v, %v", s, got, limited, err)
		}
		if got, limited, err := parseCFSQuota(strings.Fields(s)[0]+"\n", "100000\n"); err != nil || !limited || got != float64(tc.quota)/100000 {
			t.Fatalf("parseCFSQuota(%q) = %v, %v, %v", s, got, limited, err)
		}
	}
	for _, cores := range []float64{0, -1, 0.005} {
		if q, err := cpuQuota(cores, 100*time.Millisecond); err == nil {
			t.Fatalf("cpuQuota(%v) = %d, no error", cores, q)
		}
	}
	if _, limited, err := parseCPUMax("max 100000\n"); err != nil || limited {
		t.Fatalf("cpu.max without a limit: limited %v, %v", limited, err)
	}
	if _, limited, err := parseCFSQuota("-1\n", "100000\n"); err != nil || limited {
		t.Fatalf("cpu.cfs_quota_us without a limit: limited %v, %v", limited, err)
	}
	for _, s := range []string{"", "50000", "50000 0", "x 100000", "0 100000"} {
		if _, _, err := parseCPUMax(s); err == nil {
			t.Fatalf("parseCPUMax(%q): no error", s)
		}
	}
}

// TestCgroupCandidates: cgroup v2 comes first where its cpu controller is
// available in the process's cgroup, cgroup v1's cpu hierarchy otherwise
// (the hybrid layout of a v2 without controllers), and a layout with
// neither is an error that says why.
func TestCgroupCandidates(t *testing.T) {
	t.Parallel()
	const hybrid = "4:memory:/a\n2:cpu,cpuacct:/pg\n0::/pg2\n"
	mk := func(t *testing.T, files map[string]string) string {
		root := t.TempDir()
		for name, body := range files {
			path := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		procs string
		want  []cgroupCandidate // parents relative to the root
		fails string
	}{
		{name: "hybrid, v2 without the cpu controller", procs: hybrid,
			files: map[string]string{"unified/cgroup.controllers": "\n", "unified/pg2/cgroup.controllers": "\n",
				"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/pg/cpu.cfs_quota_us": "-1\n"},
			want: []cgroupCandidate{{1, "cpu,cpuacct/pg"}}},
		{name: "hybrid, v2 with it", procs: hybrid,
			files: map[string]string{"unified/cgroup.controllers": "cpu io\n", "unified/pg2/cgroup.controllers": "cpu io\n",
				"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/pg/cpu.cfs_quota_us": "-1\n"},
			want: []cgroupCandidate{{2, "unified/pg2"}, {1, "cpu,cpuacct/pg"}}},
		{name: "v2 alone", procs: "0::/system.slice/pg\n",
			files: map[string]string{"cgroup.controllers": "cpu memory\n", "system.slice/pg/cgroup.controllers": "cpu memory pids\n"},
			want:  []cgroupCandidate{{2, "system.slice/pg"}}},
		{name: "v2 alone without cpu", procs: "0::/pg\n",
			files: map[string]string{"cgroup.controllers": "memory\n", "pg/cgroup.controllers": "memory\n"},
			fails: "cpu controller is not available"},
		{name: "v1 cpu without cfs quota", procs: "1:cpu:/\n",
			files: map[string]string{"cpu/cpu.shares": "1024\n"},
			fails: "no cgroup v1 cpu hierarchy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := mk(t, tc.files)
			got, err := cgroupCandidates(root, tc.procs)
			if tc.fails != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fails) {
					t.Fatalf("cgroupCandidates = %v, %v; want an error saying %q", got, err, tc.fails)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("cgroupCandidates = %v; want %v", got, tc.want)
			}
			for i, w := range tc.want {
				if got[i].version != w.version || got[i].parent != filepath.Join(root, w.parent) {
					t.Fatalf("candidate %d = %v; want v%d %s", i, got[i], w.version, w.parent)
				}
			}
		})
	}
}
