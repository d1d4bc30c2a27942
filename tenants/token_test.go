package tenants

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A remembered token is served only while the parser itself would accept
// it, and only for its exact bytes.
func TestVerifiedTokensAreRememberedUntilExpiry(t *testing.T) {
	t.Parallel()
	c := newClock()
	s := newSigner(Config{
		JWTSecret: []byte("0123456789abcdef0123456789abcdef"),
		Issuer:    "oncepay", Audience: "oncepay-api", TokenTTL: 15 * time.Minute,
	}, c.Now)
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
