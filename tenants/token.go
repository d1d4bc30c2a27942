package tenants

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// maxTokenLen bounds what the verifier will look at; our tokens are ~350
// bytes.
const maxTokenLen = 4096

// clockSkew is tolerated on exp and iat between gateway instances.
const clockSkew = 5 * time.Second

// accessClaims are the claims of a merchant access token. Sub is the
// tenant id; cid names the credential it was issued for, so that rotating
// the credential also ends its tokens.
type accessClaims struct {
	jwt.RegisteredClaims
	ClientID string `json:"cid"`
}

// signer issues and verifies access tokens: HS256 only, with a kid header
// naming the key so JWT_SECRET can rotate (tokens signed under the previous
// key keep verifying until they expire).
type signer struct {
	current, previous []byte
	kid, prevKID      string
	issuer, audience  string
	ttl               time.Duration
	now               func() time.Time
	parser            *jwt.Parser

	// verified remembers tokens whose signature and claims checked out,
	// by their exact bytes, until they expire: an app sends the same token
	// with every request for its lifetime, and checking an HMAC and
	// decoding its JSON each time was a twentieth of the gateway's CPU per
	// payment. A token that is not byte-identical to one verified before
	// misses and is verified in full; revocation is not decided here (the
	// credential is looked up after parse, on every request).
	mu       sync.Mutex
	verified map[string]verifiedToken
}

type verifiedToken struct {
	claims  accessClaims
	expires time.Time // exp plus the tolerated skew, as the parser checks it
}

// MaxTokenTTL is the longest TOKEN_TTL config accepts, and so the longest
// any token the gateway issues lives.
const MaxTokenTTL = 24 * time.Hour

// maxVerified bounds the verified tokens kept; when full it starts over.
const maxVerified = 10_000

func newSigner(cfg Config, now func() time.Time) *signer {
	s := &signer{
		current:  cfg.JWTSecret,
		kid:      keyID(cfg.JWTSecret),
		issuer:   cfg.Issuer,
		audience: cfg.Audience,
		ttl:      cfg.TokenTTL,
		now:      now,
		verified: map[string]verifiedToken{},
	}
	if len(cfg.JWTPrevious) > 0 {
		s.previous = cfg.JWTPrevious
		s.prevKID = keyID(cfg.JWTPrevious)
	}
	s.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithStrictDecoding(),
		jwt.WithLeeway(clockSkew),
		jwt.WithTimeFunc(now),
	)
	return s
}

// sign mints a token for the tenant's credential.
func (s *signer) sign(tenantID, clientID string) (string, time.Time, error) {
	now := s.now().UTC().Truncate(time.Second)
	exp := now.Add(s.ttl)
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, accessClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.issuer,
			Subject:   tenantID,
			Audience:  jwt.ClaimStrings{s.audience},
			ExpiresAt: jwt.NewNumericDate(exp),
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ID:        newJTI(),
		},
		ClientID: clientID,
	})
	tok.Header["kid"] = s.kid
	raw, err := tok.SignedString(s.current)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("tenants: sign token: %w", err)
	}
	return raw, exp, nil
}

var errUnknownKey = errors.New("unknown signing key")

func (s *signer) key(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	switch {
	case kid == "":
		return nil, errUnknownKey
	case kid == s.kid:
		return s.current, nil
	case s.previous != nil && kid == s.prevKID:
		return s.previous, nil
	}
	return nil, errUnknownKey
}

// parse verifies raw and returns its claims. Every failure wraps
// ErrInvalidToken; the wrapped reason is for debug logs and never contains
// the token.
func (s *signer) parse(raw string) (*accessClaims, error) {
	if raw == "" || len(raw) > maxTokenLen || strings.Count(raw, ".") != 2 {
		return nil, fmt.Errorf("%w: malformed", ErrInvalidToken)
	}
	if c, ok := s.remembered(raw); ok {
		return c, nil
	}
	var c accessClaims
	if _, err := s.parser.ParseWithClaims(raw, &c, s.key); err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) && !errors.Is(err, jwt.ErrTokenSignatureInvalid) {
			return nil, ErrTokenExpired
		}
		return nil, fmt.Errorf("%w: %s", ErrInvalidToken, reason(err))
	}
	if !strings.HasPrefix(c.Subject, "ten_") || c.ClientID == "" || c.ID == "" {
		return nil, fmt.Errorf("%w: missing sub, cid or jti", ErrInvalidToken)
	}
	// No token the gateway issues lives longer than TOKEN_TTL's ceiling:
	// one that does was made elsewhere with the key (leaked), and would
	// outlive the key's rotation by as long as it says. The ceiling, not
	// this instance's TOKEN_TTL: during a rolling deploy that raises it,
	// instances still on the old value would refuse every token the new
	// ones issue, and clients would flap between 401s until it ended.
	if c.IssuedAt == nil || c.ExpiresAt.Sub(c.IssuedAt.Time) > MaxTokenTTL+clockSkew {
		return nil, fmt.Errorf("%w: lifetime missing or longer than TOKEN_TTL allows", ErrInvalidToken)
	}
	s.remember(raw, &c)
	return &c, nil
}

// remembered returns a copy of the claims of raw if it was verified before
// and has not expired since.
func (s *signer) remembered(raw string) (*accessClaims, bool) {
	s.mu.Lock()
	v, ok := s.verified[raw]
	s.mu.Unlock()
	if !ok || !s.now().Before(v.expires) {
		return nil, false
	}
	c := v.claims
	return &c, true
}

func (s *signer) remember(raw string, c *accessClaims) {
	if c.ExpiresAt == nil { // required by the parser; never cache without it
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.verified) >= maxVerified {
		clear(s.verified)
	}
	// raw may alias the HTTP server's reused request buffer (Fiber's
	// zero-copy strings): a key kept past the request must own its bytes,
	// or a later request's token, written over it in place, would find
	// this token's claims — another merchant's.
	s.verified[strings.Clone(raw)] = verifiedToken{claims: *c, expires: c.ExpiresAt.Add(clockSkew)}
}

// reason turns a jwt error into a short, token-free cause.
func reason(err error) string {
	for _, e := range []error{
		jwt.ErrTokenMalformed, jwt.ErrTokenUnverifiable, jwt.ErrTokenSignatureInvalid,
		jwt.ErrTokenExpired, jwt.ErrTokenUsedBeforeIssued, jwt.ErrTokenNotValidYet,
		jwt.ErrTokenInvalidAudience, jwt.ErrTokenInvalidIssuer, jwt.ErrTokenRequiredClaimMissing,
	} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "invalid"
}
