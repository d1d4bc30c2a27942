package idempotency_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/idempotency"
)

// quote writes k as an RFC 8941 sf-string.
func quote(k string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
}

func TestNormalizeKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", idempotency.MaxKeyLen)
	tests := []struct {
		name, raw, want string
		invalid         bool
	}{
		{name: "BareKeyIsItself", raw: "8e03978e-40d5-43e8-bc93-6894a57f9324", want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "QuotedKeyIsBareKey", raw: `"8e03978e-40d5"`, want: "8e03978e-40d5"},
		{name: "QuotedEscapesAreUnescaped", raw: `"a\"b\\c"`, want: `a"b\c`},
		{name: "MaxLengthIsValid", raw: long, want: long},
		{name: "QuotedMaxLengthIsValid", raw: `"` + long + `"`, want: long},
		{name: "InnerQuoteInBareKeyIsValid", raw: `a"b`, want: `a"b`},
		{name: "EmptyIsInvalid", raw: "", invalid: true},
		{name: "EmptyQuotedIsInvalid", raw: `""`, invalid: true},
		{name: "TooLongIsInvalid", raw: long + "k", invalid: true},
		{name: "QuotedTooLongIsInvalid", raw: `"` + long + `k"`, invalid: true},
		{name: "NonASCIIIsInvalid", raw: "clé", invalid: true},
		{name: "ControlCharIsInvalid", raw: "a\tb", invalid: true},
		{name: "DELIsInvalid", raw: "a\x7fb", invalid: true},
		{name: "UnterminatedQuoteIsInvalid", raw: `"abc`, invalid: true},
		{name: "BadEscapeIsInvalid", raw: `"a\nb"`, invalid: true},
		{name: "UnescapedInnerQuoteIsInvalid", raw: `"a"b"`, invalid: true},
		{name: "KeyStartingWithQuoteIsInvalid", raw: `"\"abc"`, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := idempotency.NormalizeKey(tt.raw)
			if tt.invalid {
				require.ErrorIs(t, err, idempotency.ErrKeyInvalid)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	base := idempotency.Fingerprint("POST", "/v1/payments", []byte(`{"amount":100}`))
	require.Len(t, base, 64)
	require.Equal(t, base, idempotency.Fingerprint("POST", "/v1/payments", []byte(`{"amount":100}`)))
	for name, other := range map[string]string{
		"OtherMethod":       idempotency.Fingerprint("PUT", "/v1/payments", []byte(`{"amount":100}`)),
		"OtherRoute":        idempotency.Fingerprint("POST", "/v1/refunds", []byte(`{"amount":100}`)),
		"OtherBody":         idempotency.Fingerprint("POST", "/v1/payments", []byte(`{"amount":101}`)),
		"BoundaryShifted":   idempotency.Fingerprint("POST", "/v1/payments{", []byte(`"amount":100}`)),
		"MethodRouteJoined": idempotency.Fingerprint("POST/v1/payments", "", []byte(`{"amount":100}`)),
	} {
		require.NotEqual(t, base, other, name)
	}
}

// No body and the empty object are the same request: a route that takes
// none takes `{}` as well, and a retry sending the other matches — either
// way round. Each keeps its own fingerprint, as the version before
// computed it, so keys stored on either side of a rolling deploy match.
func TestNoBodyIsTheEmptyObject(t *testing.T) {
	t.Parallel()
	route := "/v1/webhook_endpoints/{id}/rotate_secret"
	none := idempotency.Fingerprint("POST", route, nil)
	object := idempotency.Fingerprint("POST", route, []byte(`{}`))

	// The fingerprint of no body is frozen: "raw", then the method, the
	// route and the (empty) body, each after its 8-byte length.
	h := sha256.New()
	h.Write([]byte("raw"))
	for _, part := range []string{"POST", route, ""} {
		_ = binary.Write(h, binary.BigEndian, uint64(len(part)))
		h.Write([]byte(part))
	}
	require.Equal(t, hex.EncodeToString(h.Sum(nil)), none)

	for _, tc := range []struct {
		stored, name string
		body         []byte
	}{
		{none, "NoneThenObject", []byte(`{}`)},
		{none, "NoneThenSpacedObject", []byte(` { } `)},
		{object, "ObjectThenNone", nil},
		{none, "NoneThenNone", nil},
	} {
		hash := idempotency.Fingerprint("POST", route, tc.body)
		require.True(t, idempotency.SameRequest(tc.stored, hash, "POST", route, tc.body), tc.name)
	}
	for name, body := range map[string]string{"AMember": `{"a":1}`, "Null": `null`, "AnArray": `[]`} {
		b := []byte(body)
		require.False(t, idempotency.SameRequest(none, idempotency.Fingerprint("POST", route, b), "POST", route, b), name)
	}
	require.False(t, idempotency.SameRequest(none, idempotency.Fingerprint("POST", "/other", nil), "POST", "/other", nil), "another route")
}

func FuzzNormalizeKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, `"a\\b"`, `"`, `""`, `"\"`, "a\x00b", "é", strings.Repeat("x", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		k, err := idempotency.NormalizeKey(raw)
		if err != nil {
			require.ErrorIs(t, err, idempotency.ErrKeyInvalid)
			return
		}
		require.NotEmpty(t, k)
		require.LessOrEqual(t, len(k), idempotency.MaxKeyLen)
		for i := 0; i < len(k); i++ {
			require.True(t, k[i] >= 0x20 && k[i] <= 0x7e, "byte %#x", k[i])
		}
		// A normalised key is valid and stable, and its quoted form is the
		// same key.
		again, err := idempotency.NormalizeKey(k)
		require.NoError(t, err)
		require.Equal(t, k, again)
		quoted, err := idempotency.NormalizeKey(quote(k))
		require.NoError(t, err)
		require.Equal(t, k, quoted)
	})
}

func FuzzFingerprint(f *testing.F) {
	f.Add("POST", "/v1/payments", []byte(`{"amount":100}`))
	f.Add("", "", []byte(nil))
	f.Fuzz(func(t *testing.T, method, route string, body []byte) {
		fp := idempotency.Fingerprint(method, route, body)
		require.Len(t, fp, 64)
		require.Equal(t, fp, idempotency.Fingerprint(method, route, body))
		// Moving a byte across a boundary changes the hash.
		if route != "" {
			require.NotEqual(t, fp, idempotency.Fingerprint(method+route[:1], route[1:], body))
			require.NotEqual(t, fp, idempotency.Fingerprint(method, route[:len(route)-1], append([]byte{route[len(route)-1]}, body...)))
		}
	})
}

// LegacyFingerprint is a frozen format: keys and payments written before
// canonical fingerprints hold it, and only the same value matches them.
// The expected hash is SHA-256 over the length-prefixed (8 bytes, big
// endian) method, route and raw body, computed outside this code.
func TestLegacyFingerprintIsFrozen(t *testing.T) {
	t.Parallel()
	require.Equal(t, "e712c83047d6e346a0f7eb3d57c233f3e93c550fe8a4eaf40f0a8a411f824419",
		idempotency.LegacyFingerprint("POST", "/v1/payments", []byte(`{"amount":5000,"currency":"NGN"}`)))
}
