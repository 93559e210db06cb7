// Package system provides the process-level implementations of small
// ports: the wall clock and a ULID-based id generator.
package system

import (
	"crypto/rand"
	"encoding/binary"
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
// and 80 random bits, 26 characters. Ids of different milliseconds sort by
// time; within one millisecond every id has 80 fresh random bits from
// crypto/rand, so an id says nothing about the ids issued before or after
// it (no counter to step through: a buyer cannot derive another buyer's
// order id from their own, OWASP API3). Ids of one millisecond are
// therefore unordered among themselves: nothing may rely on ids increasing
// within a millisecond (ordering that matters uses a timestamp or a
// sequence). Safe for concurrent use.
type IDs struct {
	now func() time.Time
}

// NewIDs returns an id generator using the wall clock.
func NewIDs() *IDs { return &IDs{now: time.Now} }

// NewID implements ports.IDGenerator. The timestamp is the clock's
// milliseconds since the Unix epoch (a clock before 1970 gives 0).
func (g *IDs) NewID(kind ports.IDKind) string {
	var u [16]byte
	ms := max(g.now().UnixMilli(), 0)
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(ms))
	copy(u[0:6], ts[2:8])
	// crypto/rand.Read never returns an error (Go 1.24+ crashes the
	// program instead when the system's generator fails).
	_, _ = rand.Read(u[6:16])
	return string(kind) + "_" + encode(u)
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
