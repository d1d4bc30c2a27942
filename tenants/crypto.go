package tenants

import (
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

	"github.com/oncepay/gateway/app/secretbox"
	"github.com/oncepay/gateway/providers"
)

// Key-derivation labels. MASTER_KEY is never used directly: each purpose
// gets its own key, so a weakness in one use cannot spill into another.
const (
	labelAccounts   = "oncepay/tenants/provider-accounts/v1"
	labelSecretHash = "oncepay/tenants/client-secret-hash/v1"
)

var errSealed = errors.New("tenants: sealed secrets do not open")

// keyring holds the keys derived from MASTER_KEY and, during a rotation,
// from MASTER_KEY_PREVIOUS: the previous key's only still open and verify,
// the current one seals and hashes.
type keyring struct {
	accounts *secretbox.Box
	hashKeys [][]byte // the client-secret hash keys, the current one first
	kids     []string // hashKeys' ids, recorded beside the hashes they make
}

func newKeyring(master, previous []byte) (*keyring, error) {
	accounts, err := secretbox.New(master, labelAccounts, previous)
	if err != nil {
		return nil, fmt.Errorf("tenants: %w", err)
	}
	k := &keyring{accounts: accounts}
	for _, m := range [][]byte{master, previous} {
		if len(m) == 0 {
			continue
		}
		hk, err := hkdf.Key(sha256.New, m, nil, labelSecretHash, 32)
		if err != nil {
			return nil, err
		}
		kid := sha256.Sum256(append([]byte("oncepay/tenants/hash-key-id/v1\x00"), hk...))
		k.hashKeys, k.kids = append(k.hashKeys, hk), append(k.kids, hex.EncodeToString(kid[:8]))
	}
	return k, nil
}

// accountAAD binds a sealed blob to its row, so ciphertext copied to another
// tenant or provider does not open.
func accountAAD(tenantID, provider string) []byte {
	return []byte("provider_accounts\x00" + tenantID + "\x00" + provider)
}

// seal encrypts s for the (tenantID, provider) account:
// version || nonce || AES-GCM(JSON(s)) (app/secretbox).
func (k *keyring) seal(tenantID, provider string, s providers.Secrets) ([]byte, error) {
	if s == nil {
		s = providers.Secrets{}
	}
	plain, err := json.Marshal(map[string]string(s))
	if err != nil {
		return nil, err
	}
	out := k.accounts.Seal(accountAAD(tenantID, provider), plain)
	clear(plain)
	return out, nil
}

// open reverses seal. Any tampering, a wrong key or a row moved to another
// account yields errSealed.
func (k *keyring) open(tenantID, provider string, blob []byte) (providers.Secrets, error) {
	plain, err := k.accounts.Open(accountAAD(tenantID, provider), blob)
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

// hashSecret is the stored form of a client secret, and the id of the key
// that made it (stored beside it: the hash itself stays the bare HMAC that
// every version reads, so instances of an older version, during a deploy
// or after a rollback, still verify it). Secrets are 32 random bytes, so a
// keyed hash (no slow KDF) is enough: there is nothing to guess.
func (k *keyring) hashSecret(secret string) (hash []byte, keyID string) {
	return mac(k.hashKeys[0], secret), k.kids[0]
}

// secretMatches compares in constant time and returns the id of the key
// the secret matched under. It computes the HMAC under every key whatever
// the stored hash, so a refusal takes the same time for every hash.
func (k *keyring) secretMatches(secret string, stored []byte) (ok bool, keyID string) {
	for i, hk := range k.hashKeys {
		if hmac.Equal(stored, mac(hk, secret)) && !ok {
			ok, keyID = true, k.kids[i]
		}
	}
	return ok, keyID
}

// currentKey is the id of the key hashSecret uses.
func (k *keyring) currentKey() string { return k.kids[0] }

func mac(key []byte, secret string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(secret))
	return m.Sum(nil)
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
