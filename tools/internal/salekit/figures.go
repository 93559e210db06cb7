package salekit

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Latencies are the durations of calls a run measured, in any order.
type Latencies []time.Duration

// Percentile returns the q-quantile (0 < q <= 1) of l: the element of
// rank q*len(l) in ascending order (the smallest below rank 1), 0 when l
// is empty. It sorts a copy and leaves l as it is.
func (l Latencies) Percentile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := append(Latencies(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// IntList parses a comma-separated list of counts such as "16,64,256"
// (a list flag of the benches); a field that is not a number above 0 is
// an error naming it.
func IntList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
