// Package clientid holds the one rule for identifiers that clients choose
// (a PlaceOrder request_id, a payment_id): 1 to MaxLen bytes of
// [A-Za-z0-9._:-]. Such identifiers become parts of Redis keys and broker
// message keys, so nothing else is accepted: no spaces, no multi-byte
// characters, no braces (Redis hash tags) and nothing a log or key parser
// would split on.
package clientid

import (
	"errors"
	"fmt"
)

// MaxLen is the longest accepted identifier, in bytes.
const MaxLen = 128

// ErrInvalid reports an identifier that breaks the rule.
var ErrInvalid = errors.New("clientid: invalid identifier")

// Allowed is the rule in words, for error messages.
const Allowed = "1..128 bytes of letters, digits and . _ : -"

// Validate returns nil when id follows the rule, or an error wrapping
// ErrInvalid that says how it breaks it.
func Validate(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: must not be empty", ErrInvalid)
	case len(id) > MaxLen:
		return fmt.Errorf("%w: must be at most %d bytes", ErrInvalid, MaxLen)
	}
	for i := 0; i < len(id); i++ {
		if !allowed(id[i]) {
			return fmt.Errorf("%w: byte %d is not one of letters, digits and . _ : -", ErrInvalid, i)
		}
	}
	return nil
}

func allowed(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '-'
}
