package tenants

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/oncepay/gateway/providers"
)

// Key-derivation labels. MASTER_KEY is never used directly: each purpose
// gets its own key, so a weakness in one use cannot spill into another.
const (
	labelAccounts   = "oncepay/tenants/provider-accounts/v1"
	labelSecretHash = "oncepay/tenants/client-secret-hash/v1"
)

// sealVersion prefixes every sealed blob so the format (or the key) can
// change later without guessing what a stored row holds.
const sealVersion byte = 1

var errSealed = errors.New("tenants: sealed secrets do not open")

// keyring holds the keys derived from MASTER_KEY.
type keyring struct {
	aead    cipher.AEAD
	hashKey []byte
}

func newKeyring(master []byte) (*keyring, error) {
	if len(master) != 32 {
		return nil, fmt.Errorf("tenants: master key must be 32 bytes, got %d", len(master))
	}
	encKey, err := hkdf.Key(sha256.New, master, nil, labelAccounts, 32)
	if err != nil {
		return nil, err
	}
	hashKey, err := hkdf.Key(sha256.New, master, nil, labelSecretHash, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(encKey)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &keyring{aead: aead, hashKey: hashKey}, nil
}

// accountAAD binds a sealed blob to its row, so ciphertext copied to another
// tenant or provider does not open.
func accountAAD(tenantID, provider string) []byte {
	return []byte("provider_accounts\x00" + tenantID + "\x00" + provider)
}

// seal encrypts s for the (tenantID, provider) account:
// version || nonce || AES-GCM(JSON(s)).
func (k *keyring) seal(tenantID, provider string, s providers.Secrets) ([]byte, error) {
	if s == nil {
		s = providers.Secrets{}
	}
	plain, err := json.Marshal(map[string]string(s))
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+k.aead.NonceSize(), 1+k.aead.NonceSize()+len(plain)+k.aead.Overhead())
	out[0] = sealVersion
	_, _ = rand.Read(out[1:])
	out = k.aead.Seal(out, out[1:1+k.aead.NonceSize()], plain, accountAAD(tenantID, provider))
	clear(plain)
	return out, nil
}

// open reverses seal. Any tampering, a wrong key or a row moved to another
// account yields errSealed.
func (k *keyring) open(tenantID, provider string, blob []byte) (providers.Secrets, error) {
	ns := k.aead.NonceSize()
	if len(blob) < 1+ns+k.aead.Overhead() || blob[0] != sealVersion {
		return nil, errSealed
	}
	plain, err := k.aead.Open(nil, blob[1:1+ns], blob[1+ns:], accountAAD(tenantID, provider))
	if err != nil {
		return nil, errSealed
	}
	var m map[string]string
	err = json.Unmarshal(plain, &m)
	clear(plain)
	if err != nil {
		return nil, errSealed
	}
	return providers.Secrets(m), nil
}

// hashSecret is the stored form of a client secret. Secrets are 32 random
// bytes, so a keyed hash (no slow KDF) is enough: there is nothing to guess.
func (k *keyring) hashSecret(secret string) []byte {
	m := hmac.New(sha256.New, k.hashKey)
	m.Write([]byte(secret))
	return m.Sum(nil)
}

// secretMatches compares in constant time.
func (k *keyring) secretMatches(secret string, hash []byte) bool {
	return hmac.Equal(k.hashSecret(secret), hash)
}

// equalConstantTime compares two strings without leaking where (or, since
// both are hashed first, whether their lengths) differ.
func equalConstantTime(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go ≥ 1.24)
	return hex.EncodeToString(b)
}

func newTenantID() string { return "ten_" + randomHex(12) }

// wellFormedID reports whether id is prefix and 24 lowercase hex digits,
// the only ids the gateway makes. Stores check it before a query: an id
// from a path, a form or a token that is anything else (NUL bytes, invalid
// UTF-8, a megabyte) names nothing, and must not reach the database.
func wellFormedID(prefix, id string) bool {
	if len(id) != len(prefix)+24 || id[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// wellFormedName reports whether a provider name could be one: 1 to 32
// lowercase letters, digits and '_'.
func wellFormedName(name string) bool {
	if len(name) == 0 || len(name) > 32 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}
func newClientID() string { return "cli_" + randomHex(12) }
func newJTI() string      { return randomHex(16) }

// newClientSecret is "sk_" + 32 random bytes, base64url.
func newClientSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "sk_" + base64.RawURLEncoding.EncodeToString(b)
}

// keyID names a JWT signing key without revealing it: the first 8 bytes of
// a domain-separated SHA-256 of the key, hex.
func keyID(key []byte) string {
	h := sha256.New()
	h.Write([]byte("oncepay/jwt-kid/v1\x00"))
	h.Write(key)
	return hex.EncodeToString(h.Sum(nil)[:8])
}
