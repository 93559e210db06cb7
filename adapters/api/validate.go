package api

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/domain/clientid"
	"github.com/seckill-dev/seckill/ports"
)

// Limits of request fields.
const (
	maxReasonLen = 512
	maxStock     = 100_000_000
	// maxDelay bounds payment timeouts and reservation TTLs: the broker's
	// delay messages reach at most one day ahead.
	maxDelay = 24 * time.Hour
)

func positiveID(field string, v int64) error {
	if v <= 0 {
		return ports.InvalidField(field, "must be > 0")
	}
	return nil
}

// clientID checks an identifier the client chooses (request_id,
// payment_id) against the one rule of package clientid: it becomes part of
// Redis and broker keys.
func clientID(field, v string) error {
	if err := clientid.Validate(v); err != nil {
		return ports.InvalidField(field, "must be %s", clientid.Allowed)
	}
	return nil
}

// text checks free-form text (an operator's reason): 1..max bytes, valid
// UTF-8, no control characters.
func text(field, v string, max int) error {
	switch {
	case v == "":
		return ports.InvalidField(field, "must not be empty")
	case len(v) > max:
		return ports.InvalidField(field, "must be at most %d bytes", max)
	case !utf8.ValidString(v):
		return ports.InvalidField(field, "must be valid UTF-8")
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return ports.InvalidField(field, "must not contain control characters")
	}
	return nil
}

// orderID checks the "ord_" + 26 Crockford base32 characters form.
func orderID(v string) error {
	rest, ok := strings.CutPrefix(v, "ord_")
	if !ok || len(rest) != 26 || strings.IndexFunc(rest, func(r rune) bool {
		return !strings.ContainsRune("0123456789ABCDEFGHJKMNPQRSTVWXYZ", r)
	}) >= 0 {
		return ports.InvalidField("order_id", "must look like ord_<26 characters> as returned by PlaceOrder")
	}
	return nil
}

func timestamp(field string, ts *timestamppb.Timestamp) (time.Time, error) {
	if ts == nil {
		return time.Time{}, ports.InvalidField(field, "is required")
	}
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, ports.InvalidField(field, "is not a valid timestamp")
	}
	return ts.AsTime(), nil
}

func duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, ports.InvalidField(field, "is required")
	}
	if err := d.CheckValid(); err != nil {
		return 0, ports.InvalidField(field, "is not a valid duration")
	}
	v := d.AsDuration()
	if v <= 0 || v > maxDelay {
		return 0, ports.InvalidField(field, "must be > 0 and at most %s", maxDelay)
	}
	return v, nil
}

// first returns the first non-nil error.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
