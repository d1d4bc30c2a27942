// Package logthrottle keeps a library's repeated log line from flooding
// the log: River's producer, say, logs an ERROR for every fetch it fails
// while PostgreSQL is away — ten a second — and the one line that matters
// (the gateway's own, saying the database is unavailable) drowns in them.
package logthrottle

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// maxLines bounds the lines remembered: a library that logs ever new
// messages (an id in the text) is then let through, as if unthrottled,
// rather than growing the map.
const maxLines = 1024

// New returns a handler that passes the first record of each level and
// message on to h, and drops the same line again for every after it; the
// next one passed says how many were dropped meanwhile (suppressed). now
// is the clock (nil: time.Now).
func New(h slog.Handler, every time.Duration, now func() time.Time) slog.Handler {
	if now == nil {
		now = time.Now
	}
	return &handler{Handler: h, every: every, now: now, state: &state{lines: map[line]*seen{}}}
}

type line struct {
	level slog.Level
	msg   string
}

type seen struct {
	at         time.Time
	suppressed int
}

type state struct {
	mu    sync.Mutex
	lines map[line]*seen
}

type handler struct {
	slog.Handler
	every time.Duration
	now   func() time.Time
	state *state
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	now := h.now()
	k := line{r.Level, r.Message}
	h.state.mu.Lock()
	s, ok := h.state.lines[k]
	switch {
	case ok && now.Sub(s.at) < h.every:
		s.suppressed++
		h.state.mu.Unlock()
		return nil
	case ok:
		if s.suppressed > 0 {
			r = r.Clone()
			r.AddAttrs(slog.Int("suppressed", s.suppressed), slog.Duration("suppressed_over", now.Sub(s.at)))
		}
		s.at, s.suppressed = now, 0
	case len(h.state.lines) < maxLines:
		h.state.lines[k] = &seen{at: now}
	}
	h.state.mu.Unlock()
	return h.Handler.Handle(ctx, r)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{Handler: h.Handler.WithAttrs(attrs), every: h.every, now: h.now, state: h.state}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{Handler: h.Handler.WithGroup(name), every: h.every, now: h.now, state: h.state}
}
