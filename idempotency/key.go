package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"

	"github.com/oncepay/gateway/app/reqjson"
)

// MaxKeyLen is the longest key accepted, counted after normalisation.
const MaxKeyLen = 255

// NormalizeKey validates the value of an Idempotency-Key header and returns
// the key it names. A key is 1 to MaxKeyLen printable ASCII characters
// (0x20–0x7E). The IETF draft writes the header as an RFC 8941 sf-string,
// `"8e03…"`, so a value starting with a double quote is parsed as one (with
// the \" and \\ escapes) and names the same key as the bare form. A value
// that starts with a quote but is not a well-formed sf-string is rejected
// rather than guessed at, and so is a key that would itself start with a
// quote: its bare form could not be told from a quoted one. Every error is
// ErrKeyInvalid.
//
// NormalizeKey is idempotent: a normalised key normalises to itself.
func NormalizeKey(raw string) (string, error) {
	// Even fully escaped, a valid key is at most 2*MaxKeyLen+2 bytes.
	if len(raw) == 0 || len(raw) > 2*MaxKeyLen+2 {
		return "", ErrKeyInvalid
	}
	key := raw
	if raw[0] == '"' {
		var ok bool
		if key, ok = unquote(raw); !ok {
			return "", ErrKeyInvalid
		}
	}
	if !validKey(key) {
		return "", ErrKeyInvalid
	}
	return key, nil
}

// unquote parses an RFC 8941 §3.3.3 sf-string: DQUOTE *(unescaped /
// "\" DQUOTE / "\" "\") DQUOTE, where unescaped is %x20-21 / %x23-5B / %x5D-7E.
func unquote(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	inner := s[1 : len(s)-1]
	if !strings.ContainsAny(inner, `"\`) {
		return inner, true
	}
	var b strings.Builder
	b.Grow(len(inner))
	for i := 0; i < len(inner); i++ {
		ch := inner[i]
		switch ch {
		case '"':
			// An unescaped quote before the end: not one sf-string.
			return "", false
		case '\\':
			i++
			if i == len(inner) || (inner[i] != '"' && inner[i] != '\\') {
				return "", false
			}
			b.WriteByte(inner[i])
		default:
			b.WriteByte(ch)
		}
	}
	return b.String(), true
}

func validKey(k string) bool {
	if len(k) == 0 || len(k) > MaxKeyLen || k[0] == '"' {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// Fingerprint is the request hash stored with a key: hex SHA-256 over the
// method, the route and the body, each preceded by its length as a
// big-endian uint64 so that no two different triples hash the same input
// ("POST", "/a", "b" and "POST", "/ab", "" differ).
//
// The body is hashed in its RFC 8785 canonical form when it is JSON, as
// Stripe compares a retry's meaning rather than its bytes: an app that
// re-serialises the same payment with other spacing, key order or string
// escapes sends the same request, and any changed value is another one.
// A body that is not JSON (it will fail validation) is hashed as sent, and
// a marker keeps the two forms from ever colliding.
func Fingerprint(method, route string, body []byte) string {
	form := "raw"
	if c, err := reqjson.Canonical(body); err == nil {
		form, body = "jcs", c
	}
	return digest(form, method, route, body)
}

// SameRequest reports whether stored, a key's request hash, fingerprints
// the request whose Fingerprint is hash. Keys stored before fingerprints
// were canonical hold the hash of the raw body (LegacyFingerprint): a
// byte-identical retry of such a key is still the same request.
//
// No body at all and the empty object are the same request: the routes
// that take no body take `{}` as well (a client library may send either),
// and a retry that sends the other must be answered as the first was.
// Each is still fingerprinted as it always was, so an instance of the
// version before, during a rolling deploy, matches what this one stores.
func SameRequest(stored, hash, method, route string, body []byte) bool {
	if stored == hash || stored == LegacyFingerprint(method, route, body) {
		return true
	}
	return empty(body) && (stored == digest("raw", method, route, nil) || stored == digest("jcs", method, route, emptyObject))
}

var emptyObject = []byte("{}")

// empty reports whether body is none, or the empty object however spaced.
func empty(body []byte) bool {
	if len(body) == 0 {
		return true
	}
	c, err := reqjson.Canonical(body)
	return err == nil && bytes.Equal(c, emptyObject)
}

// LegacyFingerprint is Fingerprint as it was before canonical bodies: the
// hash of the raw body, which keys and payments of those versions hold.
func LegacyFingerprint(method, route string, body []byte) string {
	return digest("", method, route, body)
}

// digest is hex SHA-256 over prefix and the length-prefixed parts.
func digest(prefix, method, route string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(prefix))
	var n [8]byte
	for _, part := range [][]byte{[]byte(method), []byte(route), body} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}
