package tenants

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

func fuzzSigner() (*signer, string) {
	now := func() time.Time { return time.Unix(1_750_000_000, 0) }
	cfg := Config{JWTSecret: testJWTSecret, Issuer: "oncepay", Audience: "oncepay-merchant-api", TokenTTL: 15 * time.Minute}
	s := newSigner(cfg, now)
	// Built by hand with a fixed jti so that every fuzz worker process
	// computes the same token (sign would pick a random jti).
	at := now()
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, accessClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: "oncepay", Subject: "ten_0123456789abcdef01234567", Audience: jwt.ClaimStrings{"oncepay-merchant-api"},
			ExpiresAt: jwt.NewNumericDate(at.Add(time.Minute)), IssuedAt: jwt.NewNumericDate(at), ID: "fixed-jti",
		},
		ClientID: "cli_0123456789abcdef01234567",
	})
	t.Header["kid"] = s.kid
	tok, err := t.SignedString(testJWTSecret)
	if err != nil {
		panic(err)
	}
	return s, tok
}

// FuzzParseToken: the verifier never panics, and under strict decoding
// nothing but the exact token we signed verifies.
func FuzzParseToken(f *testing.F) {
	s, good := fuzzSigner()
	parts := strings.Split(good, ".")
	none := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "ten_x", "iss": "oncepay", "aud": "oncepay-merchant-api", "exp": 2_000_000_000})
	none.Header["kid"] = s.kid
	noneTok, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	for _, seed := range []string{
		good, "", ".", "..", "a.b.c", noneTok, good + "=", parts[0] + "." + parts[1] + ".",
		parts[0] + ".e30." + parts[2], "eyJhbGciOiJIUzI1NiJ9.e30.", testAdminKey,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := s.parse(raw)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidToken)
			if len(raw) > 120 { // reasons are short fixed strings, never the token
				require.NotContains(t, err.Error(), raw)
			}
			return
		}
		require.Equal(t, good, raw, "only the signed token verifies")
		require.Equal(t, "ten_0123456789abcdef01234567", c.Subject)
	})
}

// FuzzParseBasicAuth: the Basic parser never panics, never accepts empty
// parts, and round-trips what a conforming client sends.
func FuzzParseBasicAuth(f *testing.F) {
	for _, seed := range []string{
		basic("cli_a", "sk_b"), "Basic", "Basic ", "basic Y2xpOnNr", "Basic Og==", "Basic %%%",
		"Bearer x", "Basic " + base64.StdEncoding.EncodeToString([]byte("a%3Ab:c%zz")),
	} {
		f.Add(seed, "cli_x", "sk_y")
	}
	f.Fuzz(func(t *testing.T, header, id, secret string) {
		if gotID, gotSecret, ok := parseBasicAuth(header); ok {
			require.NotEmpty(t, gotID)
			require.NotEmpty(t, gotSecret)
		}
		if id == "" || secret == "" {
			return
		}
		h := "Basic " + base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(id)+":"+url.QueryEscape(secret)))
		gotID, gotSecret, ok := parseBasicAuth(h)
		if len(h) > maxBasicLen {
			require.False(t, ok)
			return
		}
		require.True(t, ok, h)
		require.Equal(t, id, gotID)
		require.Equal(t, secret, gotSecret)
	})
}
