// Package gctune sets the Go garbage collector for a gateway instance: a
// memory limit from the container (or the machine), and, under that bound,
// a larger GOGC than the runtime's 100.
//
// Why: a gateway's live heap is small (tens of MiB) and its allocation rate
// high (every request's JSON, SQL arguments and buffers), so at GOGC=100
// the collector runs several times a second and took about a tenth of an
// instance's CPU under load (bench/README.md). GOGC=400 lets the heap grow
// to five times the live heap between cycles. That memory must exist, so
// the larger GOGC is only taken with a memory limit in force: near the
// limit the runtime collects as often as it must, whatever GOGC says.
//
// The operator's own GOGC and GOMEMLIMIT always win (the runtime reads
// them at start; nothing here overrides them). AUTOMEMLIMIT (a ratio, or
// "off") is automemlimit's setting of the share of memory; config
// validates it.
package gctune

import (
	"math"
	"runtime/debug"
	"runtime/metrics"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// DefaultPercent is the GOGC the gateway runs with when the operator set
// none and a memory limit bounds the heap.
const DefaultPercent = 400

// Settings is what the collector runs with, for the start-up log.
type Settings struct {
	// Percent is GOGC (-1: off).
	Percent int
	// PercentFrom says who chose Percent: "GOGC" (the operator), "default"
	// (this package) or "runtime" (the runtime's 100: no memory limit).
	PercentFrom string
	// Limit is GOMEMLIMIT in bytes (math.MaxInt64: none).
	Limit int64
	// LimitErr is why no limit could be read, if one could not.
	LimitErr error
}

// Apply sets the memory limit, then GOGC, and reports both. gogc is the
// operator's GOGC ("": unset); ratio is the share of the container's (or
// machine's) memory the heap is given (0: none; the operator's GOMEMLIMIT
// wins either way). A limit that cannot be read is not fatal: the
// instance runs with the runtime's defaults, and Settings says why.
func Apply(gogc string, ratio float64) Settings {
	var s Settings
	if ratio > 0 {
		s.Limit, s.LimitErr = memlimit.Set(
			memlimit.WithRatio(ratio),
			memlimit.WithProvider(memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)),
		)
	} else {
		s.Limit = debug.SetMemoryLimit(-1)
	}
	s.Percent, s.PercentFrom = percent(gogc, s.Limit)
	if s.PercentFrom == "default" {
		debug.SetGCPercent(s.Percent)
	} else {
		s.Percent = currentPercent()
	}
	return s
}

// percent decides GOGC: the operator's when set, DefaultPercent under a
// memory limit, else the runtime's own.
func percent(env string, limit int64) (int, string) {
	switch {
	case env != "":
		return 0, "GOGC"
	case limit > 0 && limit < math.MaxInt64:
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
