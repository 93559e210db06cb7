package system

import (
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

func TestIDsAreUniqueTimeOrderedAndWellFormed(t *testing.T) {
	g := NewIDs()
	const n = 20000
	var (
		mu   sync.Mutex
		seen = make(map[string]bool, n)
		wg   sync.WaitGroup
	)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/4; i++ {
				id := g.NewID(ports.IDOrder)
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate id %s", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	prev := ""
	for i := 0; i < 1000; i++ {
		id := g.NewID(ports.IDReservation)
		if !strings.HasPrefix(id, "rsv_") || len(id) != 30 {
			t.Fatalf("malformed id %q", id)
		}
		for _, c := range id[4:] {
			if !strings.ContainsRune(crockford, c) {
				t.Fatalf("id %q has non-Crockford character %q", id, c)
			}
		}
		// Ordered by millisecond (the first 10 characters), not within one.
		if id[4:14] < prev {
			t.Fatalf("timestamp part went back: %q after %q", id[4:14], prev)
		}
		prev = id[4:14]
	}
}

func TestIDEncodesTimestampFirst(t *testing.T) {
	at := time.Date(2026, 6, 25, 17, 0, 0, 0, time.UTC)
	g := &IDs{now: func() time.Time { return at }}
	later := &IDs{now: func() time.Time { return at.Add(time.Millisecond) }}
	a, b := g.NewID(ports.IDMessage), later.NewID(ports.IDMessage)
	if a[4:14] >= b[4:14] {
		t.Fatalf("timestamp part not ordered: %s vs %s", a, b)
	}
	// The first character of a 48-bit timestamp ULID is at most '7'.
	if a[4] > '7' {
		t.Fatalf("ULID overflow in %s", a)
	}
}

// TestIDsOfOneMillisecondShareNoArithmeticRelation: 1000 ids issued in one
// millisecond (a clock that stands still) are all different, carry that
// millisecond, and their random parts are unrelated: no two consecutive
// differences are equal and none is small, so an order id does not tell
// another buyer's (OWASP API3; the old counter made it one's own + 1).
func TestIDsOfOneMillisecondShareNoArithmeticRelation(t *testing.T) {
	at := time.Date(2026, 6, 25, 17, 0, 0, 0, time.UTC)
	g := &IDs{now: func() time.Time { return at }}
	const n = 1000
	seen := make(map[string]bool, n)
	rnd := make([]*big.Int, 0, n)
	stamp := ""
	for range n {
		id := g.NewID(ports.IDOrder)
		if !strings.HasPrefix(id, "ord_") || len(id) != 30 {
			t.Fatalf("malformed id %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
		if stamp == "" {
			stamp = id[4:14]
		} else if id[4:14] != stamp {
			t.Fatalf("timestamp part %q differs from %q in one millisecond", id[4:14], stamp)
		}
		rnd = append(rnd, randomPart(t, id[4:]))
	}
	// 2^48 is tiny beside the 2^80 range: a random pair this close occurs
	// with probability about 2^-31.
	small := new(big.Int).Lsh(big.NewInt(1), 48)
	var prev *big.Int
	for i := 1; i < n; i++ {
		d := new(big.Int).Sub(rnd[i], rnd[i-1])
		if new(big.Int).Abs(d).Cmp(small) < 0 {
			t.Fatalf("ids %d and %d are only %v apart", i-1, i, d)
		}
		if prev != nil && d.Cmp(prev) == 0 {
			t.Fatalf("constant step %v between ids %d, %d and %d", d, i-2, i-1, i)
		}
		prev = d
	}
}

// randomPart decodes the 80 random bits of a 26-character ULID.
func randomPart(t *testing.T, ulid string) *big.Int {
	t.Helper()
	v := new(big.Int)
	for _, c := range ulid {
		i := strings.IndexRune(crockford, c)
		if i < 0 {
			t.Fatalf("non-Crockford character %q in %s", c, ulid)
		}
		v.Lsh(v, 5).Or(v, big.NewInt(int64(i)))
	}
	mask := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 80), big.NewInt(1))
	return v.And(v, mask)
}
