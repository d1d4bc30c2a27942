// Package logctx carries a request's identifiers in its context to every
// log line written with that context, so the WARN of a payment left in
// progress or the ERROR of one that could not be recorded can be tied to
// its request and its Idempotency-Key without matching timestamps.
package logctx

import (
	"context"
	"log/slog"
	"slices"
)

type key struct{}

// With returns ctx carrying attrs as well as those it carries already.
func With(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(key{}).([]slog.Attr)
	return context.WithValue(ctx, key{}, append(slices.Clip(prev), attrs...))
}

// Handler returns h adding, to each record it handles, the attributes the
// record's context carries, but for keys the line already has — on the
// record or given to the logger (Logger.With) — so no line names two
// request ids. Under a group (Logger.WithGroup) nothing is added: the ids
// would be nested in it, under a name no query looks for.
func Handler(h slog.Handler) slog.Handler {
	if _, ok := h.(*handler); ok {
		return h
	}
	return &handler{Handler: h}
}

type handler struct {
	slog.Handler
	have    []string // keys given by WithAttrs, at the top level
	grouped bool
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if attrs, ok := ctx.Value(key{}).([]slog.Attr); ok && !h.grouped {
		for _, a := range attrs {
			if !slices.Contains(h.have, a.Key) && !has(r, a.Key) {
				r.AddAttrs(a)
			}
		}
	}
	return h.Handler.Handle(ctx, r)
}

func has(r slog.Record, k string) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == k
		return !found
	})
	return found
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	c := &handler{Handler: h.Handler.WithAttrs(as), have: h.have, grouped: h.grouped}
	if !h.grouped {
		c.have = slices.Clip(h.have)
		for _, a := range as {
			c.have = append(c.have, a.Key)
		}
	}
	return c
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &handler{Handler: h.Handler.WithGroup(name), have: h.have, grouped: true}
}
