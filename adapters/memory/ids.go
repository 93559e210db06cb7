package memory

import (
	"sync"

	"github.com/seckill-dev/seckill/ports"
)

// crockford is Crockford's base32 alphabet, as used by ULIDs.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// IDs is a deterministic ports.IDGenerator for tests: the n-th id of a kind
// is "<kind>_" followed by n in Crockford base32, zero-padded to 26
// characters (the length of a ULID), for example
// "ord_00000000000000000000000001". Ids of one kind are strictly
// increasing. Safe for concurrent use.
type IDs struct {
	mu   sync.Mutex
	next map[ports.IDKind]uint64
}

var _ ports.IDGenerator = (*IDs)(nil)

// NewIDs returns a generator whose first id of every kind ends in 1.
func NewIDs() *IDs { return &IDs{next: map[ports.IDKind]uint64{}} }

// NewID returns the next id of kind.
func (g *IDs) NewID(kind ports.IDKind) string {
	g.mu.Lock()
	g.next[kind]++
	n := g.next[kind]
	g.mu.Unlock()
	return string(kind) + "_" + encodeCounter(n)
}

// encodeCounter renders n as 26 Crockford base32 characters.
func encodeCounter(n uint64) string {
	var out [26]byte
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = crockford[n&31]
		n >>= 5
	}
	return string(out[:])
}
