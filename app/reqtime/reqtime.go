// Package reqtime reads the times clients send: filters in query
// parameters, and the times inside cursors (RFC 3339, or microseconds
// since the epoch).
//
// A time must be RFC 3339 and, in UTC, within the years 0001–9999.
// time.Parse accepts 9999-12-31T23:59:59-23:59, which is in the year
// 10000 in UTC: PostgreSQL compares it correctly, but SQLite keeps times
// as text, where "10000-…" sorts before "2026-…", so such a filter
// silently inverted (every payment "created from" the year 10000).
package reqtime

import (
	"errors"
	"strings"
	"time"
)

// ErrOutOfRange is a valid RFC 3339 time outside the years 0001–9999 in UTC.
var ErrOutOfRange = errors.New("reqtime: outside the years 0001-9999 in UTC")

// Parse reads s as an RFC 3339 time and returns it in UTC. Its "T" and
// "Z" may be lower case (RFC 3339 §5.6), which time.Parse refuses; no
// other letter is valid in one, so upper-casing these two changes nothing
// else.
func Parse(s string) (time.Time, error) {
	if strings.ContainsAny(s, "tz") {
		s = strings.NewReplacer("t", "T", "z", "Z").Replace(s)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	return inRange(t.UTC())
}

// UnixMicro is the time n microseconds after the Unix epoch, in UTC: the
// time in a cursor that spells it that way.
func UnixMicro(n int64) (time.Time, error) {
	return inRange(time.UnixMicro(n).UTC())
}

func inRange(t time.Time) (time.Time, error) {
	if y := t.Year(); y < 1 || y > 9999 {
		return time.Time{}, ErrOutOfRange
	}
	return t, nil
}
