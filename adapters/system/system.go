// Package system provides the process-level implementations of small
// ports: the wall clock and a ULID-based id generator.
package system

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// Clock is the wall clock. The zero value is ready to use.
type Clock struct{}

// Now returns time.Now().
func (Clock) Now() time.Time { return time.Now() }

// crockford is the ULID alphabet (Crockford's base32).
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// IDs generates ids of the form "<kind>_<ULID>": 48 bits of milliseconds
// and 80 random bits, 26 characters, lexicographically ordered by time.
// Within one millisecond the random part is incremented, so ids from one
// generator are strictly increasing. Safe for concurrent use.
type IDs struct {
	mu      sync.Mutex
	lastMS  uint64
	lastRnd [10]byte
	now     func() time.Time
}

// NewIDs returns an id generator using the wall clock.
func NewIDs() *IDs { return &IDs{now: time.Now} }

// NewID implements ports.IDGenerator.
func (g *IDs) NewID(kind ports.IDKind) string {
	var u [16]byte
	g.mu.Lock()
	ms := uint64(g.now().UnixMilli())
	if ms <= g.lastMS {
		ms = g.lastMS
		increment(&g.lastRnd)
	} else {
		g.lastMS = ms
		if _, err := rand.Read(g.lastRnd[:]); err != nil {
			// crypto/rand never fails on supported platforms (Go 1.24+
			// crashes the program instead); keep the counter scheme.
			increment(&g.lastRnd)
		}
	}
	rnd := g.lastRnd
	g.mu.Unlock()

	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(u[0:6], ts[2:8])
	copy(u[6:16], rnd[:])
	return string(kind) + "_" + encode(u)
}

func increment(b *[10]byte) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i]++
		if b[i] != 0 {
			return
		}
	}
}

// encode renders 128 bits as 26 Crockford base32 characters.
func encode(u [16]byte) string {
	var out [26]byte
	// Process as a big integer: 130 bits of output, top 2 bits zero.
	var acc uint64
	bits := 2 // leading padding so 128 bits fill 26*5 = 130
	o := 0
	for _, by := range u {
		acc = acc<<8 | uint64(by)
		bits += 8
		for bits >= 5 {
			bits -= 5
			out[o] = crockford[(acc>>uint(bits))&31]
			o++
		}
	}
	return string(out[:])
}
