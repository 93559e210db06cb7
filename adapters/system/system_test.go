package system

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

func TestIDsAreUniqueOrderedAndWellFormed(t *testing.T) {
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
		if id <= prev {
			t.Fatalf("ids not increasing: %q after %q", id, prev)
		}
		prev = id
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
