// Package ids makes the identifiers of the rows the gateway creates: a
// type's prefix and a UUID in hex, "pay_0193a1…".
//
// The UUID is version 7 (RFC 9562), which starts with the millisecond it
// was made, so the rows an instance writes one after another get
// neighbouring ids. An index on them (a merchant's payments by (merchant,
// id), events, their dedupe keys, which start with the payment's id)
// then takes each new entry on the last page of the merchant's range,
// which its predecessors just used and which is in memory, instead of on
// a random page of the whole index: fewer pages read and dirtied per
// insert, and fewer full-page images in the WAL after a checkpoint. The
// price is density where a merchant's range is not the end of the index:
// those pages split in halves that no later id returns to (with 100
// merchants a third more index than random ids, at half the leaf density;
// bench/README.md).
//
// Ids stay opaque: they reveal when they were made (as created_at does),
// nothing may rely on their order, which two instances' clocks need not
// agree on, and 62 random bits keep them unguessable, though no id is a
// secret (every route that takes one is authenticated and scoped to its
// merchant).
package ids

import (
	"encoding/hex"

	"github.com/google/uuid"
)

// New is prefix followed by a fresh version 7 UUID's 32 hex digits.
// Within one process the ids it returns increase (google/uuid orders the
// version 7 UUIDs it makes, even when the clock steps back).
func New(prefix string) string {
	u := uuid.Must(uuid.NewV7())
	b := make([]byte, len(prefix)+hex.EncodedLen(len(u)))
	copy(b, prefix)
	hex.Encode(b[len(prefix):], u[:])
	return string(b)
}
