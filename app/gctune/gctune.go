// Package gctune sets the Go garbage collector for a gateway instance at
// start: a soft memory limit from the container's memory limit (or the
// machine's memory), and, under a limit large enough, a larger GOGC than the
// runtime's 100.
//
// Why: a gateway's live heap is small (tens of MiB) and its allocation rate
// high (every request's JSON, SQL arguments and buffers), so at GOGC=100
// the collector runs several times a second and took about a tenth of an
// instance's CPU under load (bench/README.md). GOGC=400 lets the heap grow
// to about five times the live heap between cycles; with 2,000 requests in
// flight an instance's peak memory about doubled (178 → 364 MiB). That
// memory must exist, so the larger GOGC is taken only under a memory limit
// of at least MinLimit: near the limit the runtime collects as often as it
// must (up to about half the CPU), whatever GOGC says. A smaller container
// keeps the runtime's 100.
//
// The operator's own GOGC and GOMEMLIMIT always win: the runtime read them
// at start, and nothing here overrides them. Watch reads the limit again
// every RefreshEvery, so a container resized in place gets the limit (and
// the GOGC) of its new size without a restart.
package gctune

import (
	"context"
	"errors"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// DefaultPercent is the GOGC the gateway runs with when the operator set
// none and a memory limit of at least MinLimit bounds the heap.
const DefaultPercent = 400

// MinLimit is the smallest memory limit under which DefaultPercent is
// taken: below it the doubled peak of a busy instance would not fit.
const MinLimit = 512 << 20

// Options are the operator's settings, as config read them.
type Options struct {
	// GOGC and GOMEMLIMIT are the environment's values ("": unset); the
	// runtime has already applied them.
	GOGC, GOMEMLIMIT string
	// Ratio is the share of the container's (or machine's) memory set as
	// the limit when GOMEMLIMIT is unset (AUTOMEMLIMIT; 0: none).
	Ratio float64
}

// Settings is what the collector runs with, for the start-up log.
type Settings struct {
	// Percent is GOGC (-1: off).
	Percent int
	// PercentFrom says who chose Percent: "GOGC" (the operator), "default"
	// (DefaultPercent) or "runtime" (its 100: no limit, or one under
	// MinLimit).
	PercentFrom string
	// Limit is the memory limit in bytes (math.MaxInt64: none).
	Limit int64
	// LimitFrom says where Limit came from: "GOMEMLIMIT", "container"
	// (the cgroup's limit), "machine" (its memory, outside a limited
	// container) or "none".
	LimitFrom string
	// LimitErr is why no limit could be read, if one could not.
	LimitErr error
}

// Apply sets the memory limit, then GOGC, and reports both. A limit that
// cannot be read is not fatal: the instance runs with the runtime's
// defaults, and Settings says why.
func Apply(o Options) Settings {
	return setPercent(o, setLimit(o, memlimit.FromCgroup, memlimit.FromSystem), "")
}

// setPercent decides GOGC for s's limit, sets it when gctune chose it,
// and returns s with it. prevFrom is who chose the GOGC before ("" at
// start): going from the default back to the runtime's puts back 100,
// which the runtime ran with when the operator set no GOGC.
func setPercent(o Options, s Settings, prevFrom string) Settings {
	s.Percent, s.PercentFrom = percent(o.GOGC, s.Limit)
	switch {
	case s.PercentFrom == "default":
		debug.SetGCPercent(s.Percent)
	case s.PercentFrom == "runtime" && prevFrom == "default":
		s.Percent = 100
		debug.SetGCPercent(s.Percent)
	default:
		s.Percent = currentPercent()
	}
	return s
}

// RefreshEvery is how often Watch reads the memory limit again: a resize
// is rare, and one read is a few small files under /sys/fs/cgroup.
const RefreshEvery = time.Minute

// Watch reads the container's (or machine's) memory every interval until
// ctx ends and applies a changed limit — Kubernetes resizes a pod's
// containers in place, and an instance that kept its old limit would
// either collect as if it had memory it lost (and be killed) or hold to a
// limit far below its new size. GOGC follows the new limit as Apply
// would have chosen it, unless the operator set GOGC. changed hears every
// change of either (for the log). From s, what Apply returned; nothing is
// watched when the operator set GOMEMLIMIT or no ratio.
func Watch(ctx context.Context, o Options, s Settings, every time.Duration, changed func(Settings)) {
	watch(ctx, o, s, every, memlimit.FromCgroup, memlimit.FromSystem, changed)
}

func watch(ctx context.Context, o Options, s Settings, every time.Duration, container, machine memlimit.Provider, changed func(Settings)) {
	if o.GOMEMLIMIT != "" || o.Ratio <= 0 || o.Ratio > 1 || every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next, ok := reapply(o, s, container, machine)
		if ok && (next.Limit != s.Limit || next.Percent != s.Percent) {
			changed(next)
		}
		s = next
	}
}

// reapply reads the limit again and sets it, and the GOGC gctune chose
// for it, when they changed from prev. A read that fails keeps prev (a
// transient error must not lift a limit): ok is false then.
func reapply(o Options, prev Settings, container, machine memlimit.Provider) (Settings, bool) {
	next := setLimit(o, container, machine)
	if next.LimitErr != nil {
		return prev, false
	}
	return setPercent(o, next, prev.PercentFrom), true
}

// setLimit sets the runtime's memory limit to o.Ratio of what container
// reports, or of what machine does when container reports no limit (or
// cannot be read), unless the operator set GOMEMLIMIT or no ratio.
func setLimit(o Options, container, machine memlimit.Provider) Settings {
	current := Settings{Limit: debug.SetMemoryLimit(-1), LimitFrom: "none"}
	switch {
	case o.GOMEMLIMIT != "":
		current.LimitFrom = "GOMEMLIMIT"
		return current
	case o.Ratio <= 0 || o.Ratio > 1:
		return current
	}
	from := "container"
	total, err := container()
	if err != nil {
		from = "machine"
		var merr error
		if total, merr = machine(); merr != nil {
			current.LimitErr = errors.Join(err, merr)
			return current
		}
	}
	f := float64(total) * o.Ratio
	if f < 1 {
		current.LimitErr = errors.New("gctune: no memory reported")
		return current
	}
	limit := int64(math.MaxInt64) // more than anyone has: no limit
	if f < 1<<62 {
		limit = int64(f)
	}
	debug.SetMemoryLimit(limit)
	return Settings{Limit: limit, LimitFrom: from}
}

// percent decides GOGC: the operator's when set, DefaultPercent under a
// memory limit of at least MinLimit, else the runtime's own.
func percent(env string, limit int64) (int, string) {
	switch {
	case env != "":
		return 0, "GOGC"
	case limit >= MinLimit && limit < math.MaxInt64:
		return DefaultPercent, "default"
	default:
		return 0, "runtime"
	}
}

// currentPercent reads GOGC without changing it.
func currentPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	return int(s[0].Value.Uint64())
}
