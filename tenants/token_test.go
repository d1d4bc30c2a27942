package tenants

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// A remembered token is served only while the parser itself would accept
// it, and only for its exact bytes.
func TestVerifiedTokensAreRememberedUntilExpiry(t *testing.T) {
	t.Parallel()
	s, c := testSigner()
	raw, exp, err := s.sign("ten_1", "cli_1")
	require.NoError(t, err)

	got, err := s.parse(raw)
	require.NoError(t, err)
	require.Equal(t, "ten_1", got.Subject)
	require.Len(t, s.verified, 1, "remembered after the first full check")

	got.Subject = "ten_changed" // a caller's copy never changes the remembered claims
	again, err := s.parse(raw)
	require.NoError(t, err)
	require.Equal(t, "ten_1", again.Subject)
	require.Equal(t, "cli_1", again.ClientID)

	// Another signature over the same claims is not the remembered token.
	tampered := raw[:len(raw)-2] + "AA"
	if tampered == raw {
		tampered = raw[:len(raw)-2] + "BB"
	}
	_, err = s.parse(tampered)
	require.ErrorIs(t, err, ErrInvalidToken)

	// Up to exp plus the tolerated skew, as the parser: then never again.
	c.Advance(exp.Add(clockSkew).Sub(c.Now()) - time.Second)
	_, err = s.parse(raw)
	require.NoError(t, err)
	c.Advance(time.Second)
	_, err = s.parse(raw)
	require.ErrorIs(t, err, ErrInvalidToken)
}

// The token handed to parse may alias a buffer the HTTP server reuses for
// the next request. What is remembered must not change with that buffer:
// if it did, the next request's token would match this one's entry and be
// given this merchant's claims. (Found by make chaos: payments landed
// under the wrong merchant.)
func TestRememberedTokensDoNotAliasTheRequestBuffer(t *testing.T) {
	t.Parallel()
	s, _ := testSigner()
	tokA, _, err := s.sign("ten_aaaaaaaa", "cli_aaaaaaaa")
	require.NoError(t, err)
	tokB, _, err := s.sign("ten_bbbbbbbb", "cli_bbbbbbbb")
	require.NoError(t, err)
	require.Len(t, tokB, len(tokA), "same-length ids give same-length tokens")

	buf := []byte(tokA)
	aliased := unsafe.String(&buf[0], len(buf)) // as Fiber hands out header values
	got, err := s.parse(aliased)
	require.NoError(t, err)
	require.Equal(t, "ten_aaaaaaaa", got.Subject)

	copy(buf, tokB) // the server reuses its buffer for the next request
	got, err = s.parse(tokB)
	require.NoError(t, err)
	require.Equal(t, "ten_bbbbbbbb", got.Subject, "B's token must never get A's claims")

	// A's entry still holds A's bytes: A is found again, not verified anew
	// (an aliased key would now read as B's token and miss).
	got, err = s.parse(tokA)
	require.NoError(t, err)
	require.Equal(t, "ten_aaaaaaaa", got.Subject)
	require.Len(t, s.verified, 2, "one entry per token")
	for k, v := range s.verified {
		if k == tokA {
			require.Equal(t, "ten_aaaaaaaa", v.claims.Subject)
		} else {
			require.Equal(t, tokB, k)
			require.Equal(t, "ten_bbbbbbbb", v.claims.Subject)
		}
	}
}

func testSigner() (*signer, *clock) {
	c := newClock()
	return newSigner(Config{
		JWTSecret: []byte("0123456789abcdef0123456789abcdef"),
		Issuer:    "oncepay", Audience: "oncepay-api", TokenTTL: 15 * time.Minute,
	}, c.Now), c
}

// A rolling deploy that raises TOKEN_TTL: an instance still on the old,
// shorter value verifies the longer tokens the new ones issue (both are
// within the ceiling), instead of answering every one 401.
func TestALongerTTLsTokenVerifiesWhereTheTTLIsShorter(t *testing.T) {
	t.Parallel()
	old, c := testSigner() // 15m
	raised := newSigner(Config{
		JWTSecret: []byte("0123456789abcdef0123456789abcdef"),
		Issuer:    "oncepay", Audience: "oncepay-api", TokenTTL: MaxTokenTTL,
	}, c.Now)
	raw, _, err := raised.sign("ten_1", "cli_1")
	require.NoError(t, err)
	_, err = old.parse(raw)
	require.NoError(t, err)
}
