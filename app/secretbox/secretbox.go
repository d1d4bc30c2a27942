// Package secretbox seals small secrets at rest with AES-256-GCM under a
// key derived from MASTER_KEY for one purpose (HKDF-SHA256 with a label),
// so a weakness in one use cannot spill into another. A sealed blob is
// bound to its row by additional data (e.g. merchant and id): moved to
// another row, it does not open.
//
// MASTER_KEY can be rotated: a box made with the previous key as well
// (MASTER_KEY_PREVIOUS) seals under the current key only and opens what
// either sealed, and Reseal moves one blob to the current key, so a
// re-seal pass (the gateway's reseal command) can retire the old key.
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
type Box struct {
	aead     cipher.AEAD // the current key's: seals, and opens first
	previous cipher.AEAD // MASTER_KEY_PREVIOUS's, nil when none: opens only
}

// New derives the purpose's key from master (32 bytes) and label, and
// from previous too when it is not empty: the key being rotated out,
// whose blobs still open.
func New(master []byte, label string, previous ...[]byte) (*Box, error) {
	aead, err := derive(master, label)
	if err != nil {
		return nil, err
	}
	b := &Box{aead: aead}
	for _, p := range previous {
		if len(p) == 0 {
			continue
		}
		if b.previous != nil {
			return nil, errors.New("secretbox: at most one previous master key")
		}
		if b.previous, err = derive(p, label); err != nil {
			return nil, fmt.Errorf("secretbox: previous %w", err)
		}
	}
	return b, nil
}

func derive(master []byte, label string) (cipher.AEAD, error) {
	if len(master) != 32 {
		return nil, fmt.Errorf("master key must be 32 bytes, got %d", len(master))
	}
	key, err := hkdf.Key(sha256.New, master, nil, label, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Seal encrypts plaintext bound to aad, under the current key.
func (b *Box) Seal(aad, plaintext []byte) []byte {
	nonce := make([]byte, b.aead.NonceSize())
	_, _ = rand.Read(nonce) // never fails (crypto/rand, Go ≥ 1.24)
	out := append([]byte{version}, nonce...)
	return b.aead.Seal(out, nonce, plaintext, aad)
}

// Open decrypts a blob sealed with aad under the current or the previous
// key; ErrOpen when it does not open.
func (b *Box) Open(aad, blob []byte) ([]byte, error) {
	pt, _, err := b.open(aad, blob)
	return pt, err
}

// Reseal is blob sealed under the current key, and whether that changed
// anything: false when blob already was (it is returned as it is). A blob
// that does not open under either key gives ErrOpen.
func (b *Box) Reseal(aad, blob []byte) ([]byte, bool, error) {
	pt, current, err := b.open(aad, blob)
	if err != nil || current {
		return blob, false, err
	}
	out := b.Seal(aad, pt)
	clear(pt)
	return out, true, nil
}

// open reports also whether the current key opened the blob.
func (b *Box) open(aad, blob []byte) (pt []byte, current bool, err error) {
	n := b.aead.NonceSize()
	if len(blob) < 1+n || blob[0] != version {
		return nil, false, ErrOpen
	}
	if pt, err := b.aead.Open(nil, blob[1:1+n], blob[1+n:], aad); err == nil {
		return pt, true, nil
	}
	if b.previous != nil {
		if pt, err := b.previous.Open(nil, blob[1:1+n], blob[1+n:], aad); err == nil {
			return pt, false, nil
		}
	}
	return nil, false, ErrOpen
}
