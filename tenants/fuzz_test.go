package tenants

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
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

// FuzzDecodeCursor: a tenants cursor is untrusted input. Any string is
// refused or decodes to a key the database can take (an id of "ten_" and
// id characters, a UTC time within the years 1970-9999) that is stable:
// its encoding decodes to the same key and encodes to itself, however the
// client spelt the number ("+1", "007") or the base64's trailing bits.
// And the other way: every cursor the API hands out for a tenant id and a
// creation time it can hold is one it takes back (the 128-byte bound
// included).
func FuzzDecodeCursor(f *testing.F) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 123456000, time.UTC)
	f.Add(encodeCursor(pageKey{CreatedAt: at, ID: "ten_0123456789abcdef01234567"}), at.UnixMicro(), "0123456789abcdef01234567")
	f.Add("MTczNTgzMDI0NTAwMDAwMC50ZW5fNWYy", int64(0), "5f2") // the documented example
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("+0017.ten_a")), int64(253402300799999999), strings.Repeat("Z", 64))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("-1.ten_a")), int64(-1), "")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("1.ten_\x00")), int64(1), "a.b")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("253402300800000000.ten_a")), int64(253402300800000000), "\xff")
	f.Add(base64.StdEncoding.EncodeToString([]byte("1.ten_ab")), int64(1), "-_")
	f.Add(strings.Repeat("A", 129), int64(1), strings.Repeat("a", 65))
	f.Fuzz(func(t *testing.T, s string, micros int64, body string) {
		if k, err := decodeCursor(s); err == nil {
			require.True(t, strings.HasPrefix(k.ID, "ten_") && idChars(k.ID[len("ten_"):]), "%q: id %q", s, k.ID)
			require.Equal(t, time.UTC, k.CreatedAt.Location())
			if y := k.CreatedAt.Year(); y < 1970 || y > 9999 {
				t.Fatalf("%q decodes to the year %d", s, y)
			}
			enc := encodeCursor(k)
			again, err := decodeCursor(enc)
			require.NoError(t, err, "%q decodes to %+v, whose encoding %q does not decode", s, k, enc)
			require.True(t, k.CreatedAt.Equal(again.CreatedAt))
			require.Equal(t, k.ID, again.ID)
			require.Equal(t, enc, encodeCursor(again), "the encoding of a cursor is a fixed point")
		}

		at := time.UnixMicro(micros).UTC()
		if micros < 0 || at.Year() > 9999 || !idChars(body) {
			return
		}
		k := pageKey{CreatedAt: at, ID: "ten_" + body}
		got, err := decodeCursor(encodeCursor(k))
		require.NoError(t, err, "the cursor of %+v is refused", k)
		require.True(t, at.Equal(got.CreatedAt))
		require.Equal(t, k.ID, got.ID)
	})
}

// FuzzFormCredentials: the token endpoint's client_secret_post form is
// untrusted input, read as issueToken reads it (fasthttp's PostArgs of an
// application/x-www-form-urlencoded body). Whatever the body, the parser
// never panics, refuses a field sent twice, bounds each field like the
// Basic header, says inForm exactly when a field has a value, and reads
// back the id and secret a conforming client encoded.
func FuzzFormCredentials(f *testing.F) {
	for _, seed := range []string{
		"grant_type=client_credentials&client_id=cli_0123456789abcdef01234567&client_secret=sk_abc",
		"grant_type=client_credentials&client_id=&client_secret=", "client_id=a&client_id=b",
		"client_secret=" + strings.Repeat("s", maxBasicLen+1), "client_id=%00&client_secret=%ff",
		"client_id=a%26client_secret%3Db", "client_id", "=&&=;client_id=x", "client_id=a+b&client_secret=%2B",
	} {
		f.Add(seed, "cli_0123456789abcdef01234567", "sk_a/b+c=d&e")
	}
	f.Fuzz(func(t *testing.T, body, id, secret string) {
		read := func(body string) (string, string, bool, bool) {
			req := fasthttp.AcquireRequest()
			defer fasthttp.ReleaseRequest(req)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/x-www-form-urlencoded")
			req.SetBodyString(body)
			args := req.PostArgs()
			gotID, gotSecret, inForm, p := formCredentials(args.PeekMulti)
			if p != nil {
				require.Equal(t, fiber.StatusBadRequest, p.Status)
				return "", "", false, false
			}
			require.Equal(t, gotID != "" || gotSecret != "", inForm)
			require.LessOrEqual(t, len(gotID), maxBasicLen)
			require.LessOrEqual(t, len(gotSecret), maxBasicLen)
			if len(args.PeekMulti("client_id")) > 1 || len(args.PeekMulti("client_secret")) > 1 {
				t.Fatalf("%q: accepted a field sent twice", body)
			}
			return gotID, gotSecret, inForm, true
		}
		read(body)

		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}.Encode()
		gotID, gotSecret, _, ok := read(form)
		if len(id) > maxBasicLen || len(secret) > maxBasicLen {
			require.False(t, ok, "an over-long field is refused")
			return
		}
		require.True(t, ok, form)
		require.Equal(t, id, gotID)
		require.Equal(t, secret, gotSecret)
	})
}
