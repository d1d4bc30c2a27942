package gctune

import (
	"context"
	"errors"
	"math"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
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
		{"the smallest limit that takes it", "", MinLimit, DefaultPercent, "default"},
		{"a small container keeps the runtime's", "", MinLimit - 1, 0, "runtime"},
		{"no limit: the runtime's own", "", math.MaxInt64, 0, "runtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := percent(tc.env, tc.limit)
			if got != tc.want || from != tc.wantFrom {
				t.Fatalf("percent(%q, %d) = %d, %q; want %d, %q", tc.env, tc.limit, got, from, tc.want, tc.wantFrom)
			}
		})
	}
}

// keep puts the process's collector settings back after a test that set
// them (they are global, so these tests never run in parallel), and starts
// the test from the runtime's defaults.
func keep(t *testing.T) {
	t.Helper()
	gogc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(gogc)
		debug.SetMemoryLimit(limit)
	})
}

func TestSetLimit(t *testing.T) {
	const gib = 1 << 30
	limited := memlimit.Limit(2 * gib)
	unlimited := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	unreadable := func() (uint64, error) { return 0, errors.New("no cgroup mounted") }
	for _, tc := range []struct {
		name               string
		o                  Options
		container, machine memlimit.Provider
		want               int64
		wantFrom           string
		wantErr            bool
	}{
		{"the container's limit", Options{Ratio: 0.9}, limited, memlimit.Limit(24 * gib), 2 * gib * 9 / 10, "container", false},
		{"a container without a limit: the machine's memory", Options{Ratio: 0.5}, unlimited, memlimit.Limit(24 * gib), 12 * gib, "machine", false},
		{"no cgroup: the machine's memory", Options{Ratio: 0.5}, unreadable, memlimit.Limit(4 * gib), 2 * gib, "machine", false},
		{"nothing readable: none, and why", Options{Ratio: 0.9}, unreadable, unlimited, math.MaxInt64, "none", true},
		{"the operator's GOMEMLIMIT is left as the runtime set it", Options{GOMEMLIMIT: "1GiB", Ratio: 0.9}, limited, limited, math.MaxInt64, "GOMEMLIMIT", false},
		{"AUTOMEMLIMIT=off: none", Options{Ratio: 0}, limited, limited, math.MaxInt64, "none", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep(t)
			s := setLimit(tc.o, tc.container, tc.machine)
			if s.Limit != tc.want || s.LimitFrom != tc.wantFrom || (s.LimitErr != nil) != tc.wantErr {
				t.Fatalf("settings = %+v; want limit %d from %q (error: %v)", s, tc.want, tc.wantFrom, tc.wantErr)
			}
			if got := debug.SetMemoryLimit(-1); got != tc.want {
				t.Fatalf("runtime's limit = %d; want %d", got, tc.want)
			}
		})
	}
}

func TestApplyTakesTheLargerPercentUnderALimit(t *testing.T) {
	keep(t)
	s := Apply(Options{Ratio: 0.5})
	if s.LimitErr != nil || s.LimitFrom == "none" {
		t.Fatalf("settings = %+v; want a limit from this machine or container", s)
	}
	if s.Limit < MinLimit {
		t.Skipf("this machine's limit (%d bytes) is under MinLimit", s.Limit)
	}
	if s.Percent != DefaultPercent || s.PercentFrom != "default" || currentPercent() != DefaultPercent {
		t.Fatalf("settings = %+v, runtime's GOGC %d; want %d from the default", s, currentPercent(), DefaultPercent)
	}
}

func TestApplyLeavesTheOperatorsGOGC(t *testing.T) {
	for _, o := range []Options{
		{GOGC: "150", Ratio: 0.5},       // the runtime read GOGC at start: 137 below stands for it
		{GOGC: "off", Ratio: 0.5},       // likewise
		{Ratio: 0},                      // no limit: the runtime's own
		{GOMEMLIMIT: "off", Ratio: 0.9}, // the operator's "no limit"
	} {
		keep(t)
		debug.SetGCPercent(137)
		s := Apply(o)
		if s.PercentFrom == "default" || s.Percent != 137 || currentPercent() != 137 {
			t.Fatalf("%+v: settings = %+v, runtime's GOGC %d; want 137 left as it was", o, s, currentPercent())
		}
	}
}

// A container resized in place: the watch follows its limit up and down,
// GOGC with it (the larger one only at MinLimit or more), keeps the last
// limit through a failed read, and stops with its context.
func TestWatchFollowsAResize(t *testing.T) {
	keep(t)
	const mib = 1 << 20
	var mu sync.Mutex
	size, fail := uint64(1024*mib), false
	container := func() (uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return 0, errors.New("cgroup unreadable for a moment")
		}
		return size, nil
	}
	machine := func() (uint64, error) { return 0, errors.New("not this one") }
	o := Options{Ratio: 0.5}
	start := setPercent(o, setLimit(o, container, machine), "")

	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan Settings, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watch(ctx, o, start, time.Millisecond, container, machine, func(s Settings) { changes <- s })
	}()
	resize := func(to uint64, unreadable bool) {
		mu.Lock()
		size, fail = to, unreadable
		mu.Unlock()
	}
	expect := func(limit int64, gogc int) {
		t.Helper()
		select {
		case s := <-changes:
			if s.Limit != limit || s.Percent != gogc || s.LimitFrom != "container" {
				t.Fatalf("change = %+v; want limit %d, GOGC %d, from the container", s, limit, gogc)
			}
			if got := debug.SetMemoryLimit(-1); got != limit {
				t.Fatalf("runtime's limit = %d; want %d", got, limit)
			}
			if got := currentPercent(); got != gogc {
				t.Fatalf("runtime's GOGC = %d; want %d", got, gogc)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no change reported; want limit %d, GOGC %d", limit, gogc)
		}
	}
	if start.Limit != 512*mib || start.Percent != DefaultPercent {
		t.Fatalf("start = %+v", start)
	}
	resize(512*mib, false) // half of it under MinLimit: the runtime's GOGC
	expect(256*mib, 100)
	resize(4096*mib, false)
	expect(2048*mib, DefaultPercent)
	resize(0, true) // unreadable: nothing changes, nothing reported
	time.Sleep(20 * time.Millisecond)
	if got := debug.SetMemoryLimit(-1); got != 2048*mib {
		t.Fatalf("runtime's limit after a failed read = %d; want it kept", got)
	}
	resize(2048*mib, false)
	expect(1024*mib, DefaultPercent)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop with its context")
	}
	select {
	case s := <-changes:
		t.Fatalf("a change reported that did not happen: %+v", s)
	default:
	}
}

func TestWatchLeavesTheOperatorsLimit(t *testing.T) {
	keep(t)
	called := false
	provider := func() (uint64, error) { called = true; return 1 << 30, nil }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, o := range []Options{{GOMEMLIMIT: "1GiB", Ratio: 0.9}, {Ratio: 0}} {
		watch(ctx, o, Settings{}, time.Millisecond, provider, provider, func(Settings) { t.Error("changed") })
	}
	if called {
		t.Fatal("read the limit under the operator's own setting")
	}
}
