package reqtime_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/reqtime"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Time // zero: refused
	}{
		{"2026-12-01T00:00:00Z", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-12-01T05:00:00+05:00", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-12-01T00:00:00.123456789Z", time.Date(2026, 12, 1, 0, 0, 0, 123456789, time.UTC)},
		{"9999-12-31T23:59:59Z", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)},
		{"2026-12-01t00:00:00z", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}, // RFC 3339 §5.6
		{"2026-12-01t05:00:00+05:00", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-12-01x00:00:00Z", time.Time{}},
		{"0001-01-01T00:00:01Z", time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)},
		{"9999-12-31T23:59:59-23:59", time.Time{}}, // the year 10000 in UTC
		{"0001-01-01T00:00:00+00:01", time.Time{}}, // the year 0 in UTC
		{"0000-01-01T00:00:00Z", time.Time{}},
		{"2026-12-01", time.Time{}},
		{"2026-12-01T00:00:00", time.Time{}},
		{"", time.Time{}},
		{"2026-13-01T00:00:00Z", time.Time{}},
		{"2026-12-01T00:00:00Z\x00", time.Time{}},
	} {
		got, err := reqtime.Parse(tc.in)
		if tc.want.IsZero() {
			require.Error(t, err, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		require.True(t, tc.want.Equal(got), "%q: %v", tc.in, got)
		require.Equal(t, time.UTC, got.Location())
	}
}

func TestUnixMicro(t *testing.T) {
	t.Parallel()
	at, err := reqtime.UnixMicro(1796601600000000)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), at)
	for _, n := range []int64{253402300800000000, -62135596800000001, 1 << 62, -(1 << 62)} { // the year 10000, the year 0, beyond
		_, err := reqtime.UnixMicro(n)
		require.ErrorIs(t, err, reqtime.ErrOutOfRange, n)
	}
	_, err = reqtime.UnixMicro(253402300799999999) // the last microsecond of 9999
	require.NoError(t, err)
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"2026-12-01T00:00:00Z", "2026-12-01t00:00:00z", "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+00:01", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := reqtime.Parse(s)
		if err != nil {
			return
		}
		if y := got.Year(); y < 1 || y > 9999 || got.Location() != time.UTC {
			t.Fatalf("%q: %v", s, got)
		}
		// What it returns, written back, is read again as the same time
		// (a cursor round trip).
		again, err := reqtime.Parse(got.Format(time.RFC3339Nano))
		if err != nil || !again.Equal(got) {
			t.Fatalf("%q: %v then %v %v", s, got, again, err)
		}
	})
}
