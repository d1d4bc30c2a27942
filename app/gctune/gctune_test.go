package gctune

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestPercent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		env      string
		limit    int64
		want     int
		wantFrom string
	}{
		{"operator's GOGC wins, limit or not", "150", 1 << 30, 0, "GOGC"},
		{"operator's GOGC=off wins", "off", math.MaxInt64, 0, "GOGC"},
		{"a memory limit bounds the heap: the larger default", "", 1 << 30, DefaultPercent, "default"},
		{"no limit: the runtime's own", "", math.MaxInt64, 0, "runtime"},
		{"no limit read: the runtime's own", "", 0, 0, "runtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := percent(tc.env, tc.limit)
			if got != tc.want || from != tc.wantFrom {
				t.Fatalf("percent(%q, %d) = %d, %q; want %d, %q", tc.env, tc.limit, got, from, tc.want, tc.wantFrom)
			}
		})
	}
}

// restore puts the process's collector settings back after a test that
// applied them (they are global, so these tests never run in parallel).
func restore(t *testing.T) {
	t.Helper()
	percent, limit := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	debug.SetGCPercent(percent)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
}

func TestApplySetsALimitAndTheLargerPercent(t *testing.T) {
	restore(t)
	t.Setenv("GOMEMLIMIT", "")
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)

	s := Apply("", 0.5)
	if s.LimitErr != nil {
		t.Fatalf("limit: %v", s.LimitErr)
	}
	if s.Limit <= 0 || s.Limit == math.MaxInt64 {
		t.Fatalf("limit = %d; want the machine's (or container's) memory times 0.5", s.Limit)
	}
	if got := debug.SetMemoryLimit(-1); got != s.Limit {
		t.Fatalf("runtime's limit = %d; Settings say %d", got, s.Limit)
	}
	if s.Percent != DefaultPercent || s.PercentFrom != "default" {
		t.Fatalf("settings = %+v; want GOGC %d from the default", s, DefaultPercent)
	}
	if got := currentPercent(); got != DefaultPercent {
		t.Fatalf("runtime's GOGC = %d; want %d", got, DefaultPercent)
	}
}

func TestApplyLeavesTheOperatorsSettings(t *testing.T) {
	for _, tc := range []struct {
		name           string
		gogc, memlimit string
		ratio          float64
		wantFrom       string
		wantLimit      int64
	}{
		// The runtime read GOGC and GOMEMLIMIT when the process started;
		// Apply must not change what it made of them.
		{"GOGC set", "150", "", 0.5, "GOGC", -1},
		{"GOMEMLIMIT set: the larger default under the operator's limit", "", "1GiB", 0.9, "default", 1 << 40},
		{"automemlimit off, no limit", "", "", 0, "runtime", math.MaxInt64},
		{"automemlimit off under the operator's limit", "", "1GiB", 0, "default", 1 << 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore(t)
			t.Setenv("GOMEMLIMIT", tc.memlimit)
			t.Setenv("AUTOMEMLIMIT", "") // the ratio is the argument (config reads AUTOMEMLIMIT)
			debug.SetGCPercent(137)
			debug.SetMemoryLimit(1 << 40)
			if tc.wantLimit == math.MaxInt64 {
				debug.SetMemoryLimit(math.MaxInt64)
			}

			s := Apply(tc.gogc, tc.ratio)
			if s.PercentFrom != tc.wantFrom {
				t.Fatalf("settings = %+v; want GOGC from %q", s, tc.wantFrom)
			}
			wantPercent := 137
			if tc.wantFrom == "default" {
				wantPercent = DefaultPercent
			}
			if got := currentPercent(); got != wantPercent || s.Percent != wantPercent {
				t.Fatalf("GOGC = %d (settings %d); want %d", got, s.Percent, wantPercent)
			}
			if tc.wantLimit > 0 && s.Limit != tc.wantLimit {
				t.Fatalf("limit = %d; want %d (left as it was)", s.Limit, tc.wantLimit)
			}
		})
	}
}
