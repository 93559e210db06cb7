package api

import (
	"hash/maphash"
	"sync"
	"time"
)

// Verified-token cache bounds (see verifiedTokens).
const (
	// DefaultVerifiedTokens is how many verified tokens an Authenticator
	// remembers when AuthOptions.VerifiedTokens is zero.
	DefaultVerifiedTokens = 1 << 16
	// VerifiedTokenTTL is the longest a verified token is answered from
	// the cache before it is verified again in full.
	VerifiedTokenTTL = time.Minute
)

// verifiedShards spreads the cache over independent locks.
const verifiedShards = 32

// verifiedTokens remembers the identities of tokens that passed the full
// verification, by the token itself, until the earlier of the token's
// exp and VerifiedTokenTTL after the verification. A buyer's retries in a
// sale carry the same token, and the full check (two strict JSON parses
// and a signature) is most of the CPU of an answer that needs no Redis
// write. The cache never widens what is accepted: an entry is used only
// before its token's exp, and only for the very string that verified
// (the signature covers every byte of it). What it changes: in JWKS mode
// a key that leaves the set stops being accepted up to VerifiedTokenTTL
// later for the tokens verified with it just before. Each shard holds at
// most its share of the bound; a full shard drops its expired entries
// and, if still full, everything (the next calls verify in full).
type verifiedTokens struct {
	seed   maphash.Seed
	max    int // per shard
	shards [verifiedShards]verifiedShard
}

type verifiedShard struct {
	mu sync.Mutex
	m  map[string]verifiedEntry
}

type verifiedEntry struct {
	id    Identity
	until time.Time
}

// newVerifiedTokens returns a cache of about n tokens; nil when n < 0
// (no cache). n == 0 means DefaultVerifiedTokens.
func newVerifiedTokens(n int) *verifiedTokens {
	if n < 0 {
		return nil
	}
	if n == 0 {
		n = DefaultVerifiedTokens
	}
	c := &verifiedTokens{seed: maphash.MakeSeed(), max: max(1, n/verifiedShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]verifiedEntry)
	}
	return c
}

func (c *verifiedTokens) shard(token string) *verifiedShard {
	return &c.shards[maphash.String(c.seed, token)%verifiedShards]
}

// get returns the identity of token if it verified and its entry is still
// valid at now.
func (c *verifiedTokens) get(token string, now time.Time) (Identity, bool) {
	if c == nil {
		return Identity{}, false
	}
	s := c.shard(token)
	s.mu.Lock()
	e, ok := s.m[token]
	s.mu.Unlock()
	if !ok || !now.Before(e.until) {
		return Identity{}, false
	}
	return e.id, true
}

// put remembers that token verified as id at now and expires at exp.
func (c *verifiedTokens) put(token string, id Identity, now, exp time.Time) {
	if c == nil {
		return
	}
	until := now.Add(VerifiedTokenTTL)
	if exp.Before(until) {
		until = exp
	}
	s := c.shard(token)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= c.max {
		for k, e := range s.m {
			if !now.Before(e.until) {
				delete(s.m, k)
			}
		}
		if len(s.m) >= c.max {
			clear(s.m)
		}
	}
	s.m[token] = verifiedEntry{id: id, until: until}
}
