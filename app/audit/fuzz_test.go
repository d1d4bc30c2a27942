package audit

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// encodeCursor is the next_cursor list writes for the last event of a
// page (inline there).
func encodeCursor(p Position) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.At.UnixMicro(), 10) + "." + p.ID))
}

// FuzzDecodeCursor: an audit cursor is untrusted input. Any string is
// refused or decodes to a position the database can take (an id of
// lower-case letters, digits and '_', a UTC time within the years
// 0001-9999) that is stable: its encoding decodes to the same position
// and encodes to itself, however the client spelt the number. And every
// cursor list hands out for an id and a time it can hold is one it takes
// back (the 128-byte bound included).
func FuzzDecodeCursor(f *testing.F) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 123456000, time.UTC)
	f.Add(encodeCursor(Position{At: at, ID: "aud_0123456789abcdef0123456789abcdef"}), at.UnixMicro(), "aud_01")
	f.Add("MTc2NDc1NjAwMDAwMDAwMC5hdWRfMDE", int64(-62135596800000000), "aud_01") // the documented example; 0001-01-01
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("+0017.aud_1")), int64(253402300799999999), strings.Repeat("z", 64))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("-62135596800000001.aud_1")), int64(-62135596800000001), "")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("1.AUD_\x00")), int64(1), "a.b")
	f.Add(base64.StdEncoding.EncodeToString([]byte("1.aud_ab")), int64(1), "\xff")
	f.Add(strings.Repeat("A", 129), int64(1), strings.Repeat("a", 65))
	f.Fuzz(func(t *testing.T, s string, micros int64, id string) {
		if p, ok := decodeCursor(s); ok {
			require.True(t, printableID(p.ID), "%q: id %q", s, p.ID)
			require.Equal(t, time.UTC, p.At.Location())
			if y := p.At.Year(); y < 1 || y > 9999 {
				t.Fatalf("%q decodes to the year %d", s, y)
			}
			enc := encodeCursor(p)
			again, ok := decodeCursor(enc)
			require.True(t, ok, "%q decodes to %+v, whose encoding %q does not decode", s, p, enc)
			require.True(t, p.At.Equal(again.At))
			require.Equal(t, p.ID, again.ID)
			require.Equal(t, enc, encodeCursor(again), "the encoding of a cursor is a fixed point")
		}

		at := time.UnixMicro(micros).UTC()
		if y := at.Year(); y < 1 || y > 9999 || !printableID(id) {
			return
		}
		got, ok := decodeCursor(encodeCursor(Position{At: at, ID: id}))
		require.True(t, ok, "the cursor of %v %q is refused", at, id)
		require.True(t, at.Equal(got.At))
		require.Equal(t, id, got.ID)
	})
}
