// Package secretbox seals small secrets at rest with AES-256-GCM under a
// key derived from MASTER_KEY for one purpose (HKDF-SHA256 with a label),
// so a weakness in one use cannot spill into another. A sealed blob is
// bound to its row by additional data (e.g. merchant and id): moved to
// another row, it does not open.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// version prefixes every sealed blob, so the format or the key can change
// later without guessing what a stored row holds.
const version byte = 1

// ErrOpen means a blob does not open: another key, another row, or damage.
var ErrOpen = errors.New("secretbox: sealed secret does not open")

// Box seals and opens secrets for one purpose.
type Box struct{ aead cipher.AEAD }

// New derives the purpose's key from master (32 bytes) and label.
func New(master []byte, label string) (*Box, error) {
	if len(master) != 32 {
		return nil, fmt.Errorf("secretbox: master key must be 32 bytes, got %d", len(master))
	}
	key, err := hkdf.Key(sha256.New, master, nil, label, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plaintext bound to aad.
func (b *Box) Seal(aad, plaintext []byte) []byte {
	nonce := make([]byte, b.aead.NonceSize())
	_, _ = rand.Read(nonce) // never fails (crypto/rand, Go ≥ 1.24)
	out := append([]byte{version}, nonce...)
	return b.aead.Seal(out, nonce, plaintext, aad)
}

// Open decrypts a blob sealed with aad; ErrOpen when it does not open.
func (b *Box) Open(aad, blob []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(blob) < 1+n || blob[0] != version {
		return nil, ErrOpen
	}
	pt, err := b.aead.Open(nil, blob[1:1+n], blob[1+n:], aad)
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}
