// Package ids makes the identifiers of the rows the gateway creates: a
// type's prefix and a UUID in hex, "pay_0193a1…".
//
// The UUID is version 7 (RFC 9562), which starts with the time it was
// made, so the rows an instance writes one after another get neighbouring
// ids. Every index led by an id (and by merchant and id) then takes a new
// payment's entry on the page its predecessors went to, which stays in
// memory and fills before it splits, instead of on a random page of an
// index that grows by half-empty splits and, after each checkpoint, writes
// a full page image to the WAL for each page it touches. Ids stay opaque
// to merchants: nothing may rely on their order, which the clocks of two
// instances need not agree on.
package ids

import (
	"encoding/hex"

	"github.com/google/uuid"
)

// New is prefix followed by a fresh version 7 UUID's 32 hex digits.
// Within one process the ids it returns increase.
func New(prefix string) string {
	u := uuid.Must(uuid.NewV7())
	b := make([]byte, len(prefix)+hex.EncodedLen(len(u)))
	copy(b, prefix)
	hex.Encode(b[len(prefix):], u[:])
	return string(b)
}
