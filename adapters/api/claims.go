package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of a token's header or payload JSON.
const maxJSONDepth = 32

// strictObject parses data as exactly one JSON object and returns its
// members by their exact (case-sensitive) names. It refuses invalid UTF-8,
// anything but an object at the top, data after the object, nesting deeper
// than maxJSONDepth and a member name that occurs twice in any object at
// any depth: encoding/json would silently keep the last of two "scope"
// members, so a token could carry two meanings.
func strictObject(data []byte) (map[string]json.RawMessage, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	if err := walkObject(dec, 1); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON object")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	return members, nil
}

// walkObject reads the members of an object whose '{' dec has just
// returned, up to and including its '}', refusing a duplicate name.
func walkObject(dec *json.Decoder, depth int) error {
	seen := map[string]struct{}{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("not JSON: %w", err)
		}
		name, ok := tok.(string)
		if !ok {
			return errors.New("not JSON: object member without a name")
		}
		if _, dup := seen[name]; dup {
			return fmt.Errorf("duplicate JSON member %q", name)
		}
		seen[name] = struct{}{}
		if err := walkValue(dec, depth); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return fmt.Errorf("not JSON: %w", err)
	}
	return nil
}

// walkValue reads one JSON value, descending into objects and arrays.
func walkValue(dec *json.Decoder, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("JSON nested deeper than %d levels", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	switch d {
	case '{':
		return walkObject(dec, depth+1)
	case '[':
		for dec.More() {
			if err := walkValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // the closing ']'
			return fmt.Errorf("not JSON: %w", err)
		}
		return nil
	default:
		return fmt.Errorf("not JSON: unexpected %q", d)
	}
}

// tokenHeader is the part of a JWS header the service reads.
type tokenHeader struct {
	// Alg is the signature algorithm ("alg", required).
	Alg string
	// Kid names the verification key ("kid", empty when absent).
	Kid string
}

// headerCache remembers the headers that parsed, by their encoded form:
// an issuer signs every token with the same few headers, so the strict
// parse of each runs once. It holds at most maxCachedHeaders; a header
// beyond that is parsed every time. A header that did not parse is never
// kept. The zero value is ready to use and safe for concurrent use.
type headerCache struct {
	mu sync.RWMutex
	m  map[string]tokenHeader
}

// maxCachedHeaders bounds a headerCache (a token's header is at most
// MaxTokenBytes, so the cache holds at most 64 x 4 KiB).
const maxCachedHeaders = 64

// parse returns the header whose base64url form is encoded (see
// parseHeader).
func (c *headerCache) parse(encoded string) (tokenHeader, error) {
	c.mu.RLock()
	h, ok := c.m[encoded]
	c.mu.RUnlock()
	if ok {
		return h, nil
	}
	hb, err := base64.RawURLEncoding.Strict().DecodeString(encoded)
	if err != nil {
		return tokenHeader{}, errors.New("header is not base64url")
	}
	if h, err = parseHeader(hb); err != nil {
		return tokenHeader{}, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]tokenHeader, maxCachedHeaders)
	}
	if len(c.m) < maxCachedHeaders {
		c.m[encoded] = h
	}
	c.mu.Unlock()
	return h, nil
}

// parseHeader reads a token's decoded header strictly (see strictObject):
// "alg" a string, "kid" a string when present, and no "crit" member: the
// service understands no header extension, so a token that says one must
// be understood is refused (RFC 7515, section 4.1.11).
func parseHeader(data []byte) (tokenHeader, error) {
	m, err := strictObject(data)
	if err != nil {
		return tokenHeader{}, fmt.Errorf("header: %w", err)
	}
	if _, ok := m["crit"]; ok {
		return tokenHeader{}, errors.New("header: crit names extensions this service does not understand")
	}
	var h tokenHeader
	if h.Alg, err = stringMember(m, "alg", true); err != nil {
		return tokenHeader{}, fmt.Errorf("header: %w", err)
	}
	if h.Kid, err = stringMember(m, "kid", false); err != nil {
		return tokenHeader{}, fmt.Errorf("header: %w", err)
	}
	return h, nil
}

// tokenClaims are the claims the service reads, by their exact names.
type tokenClaims struct {
	Subject   string    // "sub", required
	Issuer    string    // "iss", empty when absent
	Audience  []string  // "aud": a string or an array of strings
	Expires   time.Time // "exp", required
	IssuedAt  time.Time // "iat", zero when absent
	NotBefore time.Time // "nbf", zero when absent
	Scope     string    // "scope", empty when absent
}

// parseClaims reads a token's decoded payload strictly (see strictObject).
// Claim names are case-sensitive ("SCOPE" is not "scope" and means
// nothing), each claim must have its registered JSON type, and "exp" and
// "sub" are required.
func parseClaims(data []byte) (tokenClaims, error) {
	m, err := strictObject(data)
	if err != nil {
		return tokenClaims{}, fmt.Errorf("claims: %w", err)
	}
	var c tokenClaims
	if c.Subject, err = stringMember(m, "sub", true); err != nil {
		return tokenClaims{}, err
	}
	if c.Issuer, err = stringMember(m, "iss", false); err != nil {
		return tokenClaims{}, err
	}
	if c.Scope, err = stringMember(m, "scope", false); err != nil {
		return tokenClaims{}, err
	}
	if c.Expires, err = dateMember(m, "exp", true); err != nil {
		return tokenClaims{}, err
	}
	if c.IssuedAt, err = dateMember(m, "iat", false); err != nil {
		return tokenClaims{}, err
	}
	if c.NotBefore, err = dateMember(m, "nbf", false); err != nil {
		return tokenClaims{}, err
	}
	if raw, ok := m["aud"]; ok {
		var one string
		if isJSONString(raw) {
			if err := json.Unmarshal(raw, &one); err != nil {
				return tokenClaims{}, errors.New("aud must be a string or an array of strings")
			}
			c.Audience = []string{one}
		} else if err := json.Unmarshal(raw, &c.Audience); err != nil || bytes.TrimSpace(raw)[0] != '[' {
			return tokenClaims{}, errors.New("aud must be a string or an array of strings")
		}
	}
	return c, nil
}

// isJSONString reports whether raw (one JSON value) is a string.
func isJSONString(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '"'
}

// stringMember returns member name of m, which must be a JSON string
// (and present when required).
func stringMember(m map[string]json.RawMessage, name string, required bool) (string, error) {
	raw, ok := m[name]
	if !ok {
		if required {
			return "", fmt.Errorf("%s is required", name)
		}
		return "", nil
	}
	var s string
	if !isJSONString(raw) || json.Unmarshal(raw, &s) != nil {
		return "", fmt.Errorf("%s must be a string", name)
	}
	return s, nil
}

// maxNumericDate bounds a NumericDate (seconds since the epoch): beyond
// it the value is no date anyone means (year 33658).
const maxNumericDate = 1e12

// dateMember returns member name of m, a JSON number of seconds since
// the epoch (fractions allowed), as a time (zero when absent and not
// required).
func dateMember(m map[string]json.RawMessage, name string, required bool) (time.Time, error) {
	raw, ok := m[name]
	if !ok {
		if required {
			return time.Time{}, fmt.Errorf("%s is required", name)
		}
		return time.Time{}, nil
	}
	var n json.Number
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) || json.Unmarshal(raw, &n) != nil {
		return time.Time{}, fmt.Errorf("%s must be a number of seconds since the epoch", name)
	}
	f, err := strconv.ParseFloat(n.String(), 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > maxNumericDate {
		return time.Time{}, fmt.Errorf("%s must be a number of seconds since the epoch", name)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}

// errSubject is the refusal of a sub that is not a canonical user id.
var errSubject = errors.New("sub must be the canonical decimal user id")

// canonicalUserID parses sub as the canonical decimal form of a positive
// int64: ASCII digits only, no sign, no leading zero, no space, no
// exponent or fraction, at most 9223372036854775807. strconv.ParseInt
// alone would take "+1001" and "01001" as 1001, so two spellings would
// name one buyer.
func canonicalUserID(sub string) (int64, error) {
	if sub == "" || len(sub) > 19 || sub[0] == '0' {
		return 0, errSubject
	}
	for i := 0; i < len(sub); i++ {
		if sub[i] < '0' || sub[i] > '9' {
			return 0, errSubject
		}
	}
	n, err := strconv.ParseInt(sub, 10, 64)
	if err != nil || n <= 0 {
		return 0, errSubject
	}
	return n, nil
}

// scopes splits a scope claim on ASCII spaces (0x20) only, ignoring empty
// parts, as RFC 6749 section 3.3 defines it: a tab or a no-break space
// is part of a scope name, not a separator.
func scopes(claim string) []string {
	var out []string
	for _, s := range strings.Split(claim, " ") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
