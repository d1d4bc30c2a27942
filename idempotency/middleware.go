package idempotency

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/valyala/fasthttp"

	"github.com/oncepay/gateway/app/logctx"
	"github.com/oncepay/gateway/app/problem"
)

// HeaderKey is the request header that carries the key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed marks an answer replayed from a done key.
const HeaderReplayed = "Idempotent-Replayed"

// Outcomes reported to Config.Observe.
const (
	OutcomeClaimed   = "claimed"
	OutcomeReplayed  = "replayed"
	OutcomeConflict  = "conflict_409"
	OutcomeMismatch  = "mismatch_422"
	OutcomeTakenOver = "taken_over"
	OutcomeReleased  = "released"
	OutcomeInvalid   = "invalid_400"
)

// Config configures Middleware.
type Config struct {
	// Store keeps the keys. Required.
	Store *Store
	// Lease is how long an owner holds a key before a retry may take it
	// over (IDEMPOTENCY_LEASE). It must exceed the provider timeout.
	// Required.
	Lease time.Duration
	// Scope returns the merchant id from the verified token, set by an
	// earlier auth middleware. An empty id is a wiring error: 500. Required.
	Scope func(c *fiber.Ctx) string
	// Observe, if set, is called once per outcome (the Outcome constants),
	// e.g. to count them in metrics. A request that claims and then
	// releases reports both.
	Observe func(outcome string)
	// Admit, when positive, is how many requests at once may be between
	// their first read of the key and the sending of their claim's pending
	// INSERT (Persist or PersistWith) or its release: the part of a request that comes
	// before any provider call. The others wait at the door, first come
	// first served, holding nothing. Without it, when more requests come
	// than the database pool serves, new claims and the recording of
	// charges that already happened wait for a pooled connection in one
	// crowd (database/sql hands a freed connection to a random waiter), so
	// a charged payment's completion can wait past its RecordTimeout and
	// be answered 202 while the gateway is only busy; with it, the queue
	// forms before anything is charged. The app sets it to four times the
	// pool size (DATABASE_ADMIT_CLAIMS): with as many places as
	// connections, places held by requests waiting for a connection that a
	// completion held left the pool short of claims (400 clients on a 1 s
	// provider: p50 1.01 → 1.15 s); with twice as many the door was still
	// nearly full at 360 claims/s and added ~0.1 s to the steady p99.
	Admit int
	// Hold defers each new key's claim to the handler's first write
	// (ClaimParams.Hold): set it only when every handler behind the
	// middleware writes through Persist or PersistWith before it does
	// anything the claim guards (a provider call), and answers
	// ErrLostClaim from them as 409. Then a new key's claim shares a
	// commit — for a payment, a statement — with the handler's first rows,
	// and an invalid body writes nothing. Without it the claim commits
	// before the handler runs, and the handler owns the key from its
	// first line.
	Hold bool
	// Replays, if set, answers retries of done keys this instance has
	// read before from memory (see Replays).
	Replays *Replays
}

// gate admits at most n requests at once, in the order they came (a
// channel's blocked senders are woken first in, first out).
type gate chan struct{}

// enter waits for a place and returns the function that gives it back,
// which may be called any number of times; or ctx's error when the request
// ran out of time at the door, holding nothing. A nil gate admits everyone.
func (g gate) enter(ctx context.Context) (func(), error) {
	if g == nil {
		return func() {}, nil
	}
	select {
	case g <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() { once.Do(func() { <-g }) }, nil
}

// claimKey is the c.Locals key of the request's Claim.
type claimKey struct{}

// ClaimFrom returns the claim the middleware took for this request. ok is
// false when the middleware did not run or did not hand the request on.
func ClaimFrom(c *fiber.Ctx) (Claim, bool) {
	cl, ok := c.Locals(claimKey{}).(Claim)
	return cl, ok
}

// Middleware enforces the idempotency contract of design.md on every
// mutating request (GET, HEAD and OPTIONS pass through untouched):
//
//   - no Idempotency-Key: 400 idempotency_key_missing; an invalid one (see
//     NormalizeKey, or the header sent twice): 400 idempotency_key_invalid.
//     Nothing is stored for a request rejected before the claim.
//   - a new key is claimed and the handler runs with ClaimFrom(c).
//   - a known key with a different method, route or body: 422
//     idempotency_key_mismatch.
//   - a done key: the stored status, headers and body, byte for byte, plus
//     Idempotent-Replayed: true.
//   - a key in progress under a live lease: 409 idempotency_key_in_use with
//     Retry-After: 1.
//   - a key in progress whose lease lapsed: taken over (409 if another
//     request won that race) and the handler runs with Claim.TakenOver.
//
// The handler that gets a claim must end it: Store.Complete (final answer,
// in the transaction of the final state), Store.Release (nothing happened)
// or Store.LeaveInProgress (outcome unknown). If it returns without doing
// any of these — an error, a panic, a crash — the key simply stays in
// progress until its lease lapses, and a retry or the sweeper settles it:
// a possibly-charged request is never forgotten.
func Middleware(cfg Config) fiber.Handler {
	g := newGuard(cfg)
	return func(c *fiber.Ctx) error { return g.serve(c, nil) }
}

// Guard is Middleware wrapped around one handler (route.Post(path,
// guard(handler))), with the same contract. Knowing its handler, it can
// run it twice, and that lets a held claim (Config.Hold) skip the read of
// the key: a new key — nearly every request — costs one round trip fewer.
// The handler then learns the key was already known only when its first
// write (Persist or PersistWith) finds the key's row; the guard discards
// what the handler answered (the 409 of a lost claim), reads the key and
// answers as Middleware would have from that read: the replay, 422, 409,
// or a takeover, for which it runs the handler again with the durable
// claim. A body the handler refuses touches no row (it validates before
// its first write); under a known key the guard reads the key and answers
// from it — 422, or the replay of a body that means the same — as
// Middleware would. Without Hold, Guard is Middleware.
func Guard(cfg Config) func(next fiber.Handler) fiber.Handler {
	g := newGuard(cfg)
	return func(next fiber.Handler) fiber.Handler {
		if next == nil {
			panic("idempotency: Guard needs a handler")
		}
		return func(c *fiber.Ctx) error { return g.serve(c, next) }
	}
}

type guard struct {
	cfg     Config
	observe func(string)
	door    gate
}

func newGuard(cfg Config) *guard {
	if cfg.Store == nil || cfg.Scope == nil || cfg.Lease <= 0 {
		panic("idempotency: Middleware needs Store, Scope and a positive Lease")
	}
	g := &guard{cfg: cfg, observe: cfg.Observe}
	if g.observe == nil {
		g.observe = func(string) {}
	}
	if cfg.Admit > 0 {
		g.door = make(gate, cfg.Admit)
	}
	return g
}

// serve runs the contract for one request; next is the guarded handler,
// or nil for the next one in Fiber's chain.
func (g *guard) serve(c *fiber.Ctx, next fiber.Handler) error {
	cfg, s := g.cfg, g.cfg.Store
	switch c.Method() {
	case fiber.MethodGet, fiber.MethodHead, fiber.MethodOptions:
		return g.next(c, next)
	}
	merchantID := cfg.Scope(c)
	if merchantID == "" {
		slog.ErrorContext(c.UserContext(), "idempotency: no merchant in scope; is the auth middleware mounted first?")
		return problem.Write(c, problem.New(fiber.StatusInternalServerError, "internal", ""))
	}
	values := c.Request().Header.PeekAll(HeaderKey)
	if len(values) == 0 {
		g.observe(OutcomeInvalid)
		return problem.Write(c, problem.New(fiber.StatusBadRequest, "idempotency_key_missing",
			"the Idempotency-Key header is required on this route"))
	}
	key, err := NormalizeKey(string(values[0])) // string() copies Fiber's buffer
	if err != nil || len(values) > 1 {
		g.observe(OutcomeInvalid)
		return problem.Write(c, problem.New(fiber.StatusBadRequest, "idempotency_key_invalid",
			"the Idempotency-Key must be 1 to 255 printable ASCII characters, sent once"))
	}
	merchantID = utils.CopyString(merchantID)
	// The hash is computed now, so Fiber's reused buffers are never kept.
	r := request{merchantID: merchantID, key: key, route: normalPath(c.Path())}
	r.hash = Fingerprint(c.Method(), r.route, c.Body())
	ctx := c.UserContext()
	if hit, ok := cfg.Replays.get(merchantID, key); ok {
		// A done key read before: its answer cannot have changed.
		if !SameRequest(hit.requestHash, r.hash, c.Method(), r.route, c.Body()) {
			g.observe(OutcomeMismatch)
			return Mismatch(c)
		}
		g.observe(OutcomeReplayed)
		c.Set(HeaderReplayed, "true")
		return hit.response.Write(c)
	}
	r.log = &requestLog{requestID: problem.RequestID(c), merchantID: merchantID, key: key}
	ctx = logctx.With(ctx, slog.String("idempotency_key", key))
	c.SetUserContext(ctx)

	// Past the door until the claim is durable (or there is none):
	// leave is called early when the pending claim is sent or dropped.
	leave, err := g.door.enter(ctx)
	if err != nil {
		// Its deadline passed in the queue: nothing was read or
		// written for it, so the same key may be sent again.
		r.log.get().WarnContext(ctx, "idempotency: request timed out waiting for admission; answered 503")
		return problem.Write(c, problem.New(fiber.StatusServiceUnavailable, "unavailable",
			"the gateway is too busy to take this request now; nothing was done; retry with the same Idempotency-Key").WithRetryAfter(1))
	}
	defer leave()

	params := ClaimParams{MerchantID: merchantID, Key: key, RequestHash: r.hash, Lease: cfg.Lease, Hold: cfg.Hold}
	var rec *Record
	var claim Claim
	if next != nil && cfg.Hold {
		// Blind: the claim's INSERT (sent with the handler's first
		// write) is what finds a known key; see Guard.
		claim, rec, err = s.Claim(ctx, params)
	} else {
		// Fast path for retries: a known key is answered from one read (a
		// replay, a mismatch, a conflict or a takeover). The read never
		// decides ownership; only the INSERT of Claim does.
		rec, err = s.Get(ctx, merchantID, key)
		if errors.Is(err, ErrNotFound) {
			claim, rec, err = s.Claim(ctx, params)
		}
	}
	if claim.held != nil {
		claim.held.ended = leave
	} else {
		leave()
	}
	if errors.Is(err, ErrBusy) {
		g.observe(OutcomeConflict)
		return inUse(c)
	}
	if err != nil {
		return unavailable(c, r.log, "claim", err)
	}
	if rec != nil {
		return g.known(c, next, r, rec)
	}
	claim.LegacyHash = LegacyFingerprint(c.Method(), r.route, c.Body())
	if next == nil || !claim.Held() {
		g.observe(OutcomeClaimed)
		return g.run(c, next, claim, r.log, false)
	}
	// A blind claim: if its INSERT finds the key, or the handler refuses
	// the body before sending it, the key is read after all, and a known
	// key is answered from its row — what the handler answered (a 409, a
	// 400) is dropped, as if it had never run.
	var before fasthttp.ResponseHeader
	c.Response().Header.CopyTo(&before)
	err = g.run(c, next, claim, r.log, true)
	found, dropped := claim.held.unsent()
	if !found && !dropped {
		g.observe(OutcomeClaimed)
		return err
	}
	// Refused: dropped by the handler before its INSERT was sent (an
	// INSERT that found the key, or timed out waiting, is dropped too).
	refused := dropped && !found
	// The handler may have spent the request's deadline: the read that
	// decides the answer has a short one of its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readAfterTimeout)
	rec, rerr := s.Get(rctx, merchantID, key)
	cancel()
	switch {
	case errors.Is(rerr, ErrNotFound) && refused:
		// A new key after all: the handler's answer stands.
		g.observe(OutcomeClaimed)
		g.observe(OutcomeReleased)
		return err
	case errors.Is(rerr, ErrNotFound):
		// Released again since the INSERT found it: the client's retry
		// claims it.
		g.observe(OutcomeConflict)
		return inUse(c)
	}
	before.CopyTo(&c.Response().Header)
	c.Response().ResetBody()
	if rerr != nil {
		// Even a refused body: the key may be done with this very request
		// (accepted before, refused now — say its provider was removed),
		// and its answer must not be turned into the handler's 400 while
		// the key cannot be read. Nothing was done; the retry is safe.
		return unavailable(c, r.log, "read", rerr)
	}
	return g.known(c, next, r, rec)
}

// readAfterTimeout bounds Guard's read of a key after its handler ran.
const readAfterTimeout = 2 * time.Second

// request is what serve knows of a request once its key is valid.
type request struct {
	merchantID, key, route, hash string
	log                          *requestLog
}

// requestLog is a request's logger, made when it first logs: slog.With
// formats its attributes when called, which on every request was 1% of
// the gateway's CPU per new payment, for the few requests that log.
type requestLog struct {
	requestID, merchantID, key string
	logger                     *slog.Logger
}

func (l *requestLog) get() *slog.Logger {
	if l.logger == nil {
		l.logger = slog.With("request_id", l.requestID, "merchant_id", l.merchantID, "idempotency_key", l.key)
	}
	return l.logger
}

// known answers a request whose key has a row: the replay, 422, 409, or
// a takeover of a lapsed lease, which runs the handler.
func (g *guard) known(c *fiber.Ctx, next fiber.Handler, r request, rec *Record) error {
	ctx := c.UserContext()
	if !SameRequest(rec.RequestHash, r.hash, c.Method(), r.route, c.Body()) {
		g.observe(OutcomeMismatch)
		return Mismatch(c)
	}
	if rec.Status == StatusDone {
		g.cfg.Replays.add(rec)
		g.observe(OutcomeReplayed)
		c.Set(HeaderReplayed, "true")
		return rec.Response().Write(c)
	}
	if !rec.Lapsed {
		g.observe(OutcomeConflict)
		return inUse(c)
	}
	claim, ok, err := g.cfg.Store.TakeOver(ctx, TakeOverParams{MerchantID: r.merchantID, Key: r.key, RequestHash: rec.RequestHash, Lease: g.cfg.Lease})
	if err != nil {
		return unavailable(c, r.log, "take over", err)
	}
	if !ok {
		// Another retry took it over first (or it just finished or was
		// released): the client's next retry gets the right answer.
		g.observe(OutcomeConflict)
		return inUse(c)
	}
	claim.RequestHash = r.hash
	claim.LegacyHash = LegacyFingerprint(c.Method(), r.route, c.Body())
	g.observe(OutcomeTakenOver)
	r.log.get().InfoContext(ctx, "idempotency: took over a key whose lease lapsed")
	return g.run(c, next, claim, r.log, false)
}

func (g *guard) next(c *fiber.Ctx, next fiber.Handler) error {
	if next == nil {
		return c.Next()
	}
	return next(c)
}

// normalPath is the request path as the router matches it (Fiber's
// default routing ignores case and a trailing slash), so /v1/payments/
// and /V1/Payments are the same request as /v1/payments. Every id the
// gateway issues is lower case.
func normalPath(p string) string {
	if len(p) > 1 {
		p = strings.TrimRight(p, "/")
	}
	return strings.ToLower(p)
}

// Mismatch answers a request that reuses a key for another request.
func Mismatch(c *fiber.Ctx) error {
	return problem.Write(c, MismatchProblem())
}

// MismatchProblem is the 422 of a key reused for another method, route or
// body, for handlers that find the mismatch in their own records.
func MismatchProblem() *problem.Problem {
	return problem.New(fiber.StatusUnprocessableEntity, "idempotency_key_mismatch",
		"this Idempotency-Key was used with a different method, route or body")
}

// unavailable answers a request whose key could not be read or claimed:
// nothing was done for it, so a retry with the same key is safe. A stored
// answer that does not open is no outage a retry outlasts: 500, and the
// log names the likely cause.
func unavailable(c *fiber.Ctx, log *requestLog, op string, err error) error {
	if errors.Is(err, ErrUnreadable) {
		log.get().ErrorContext(c.UserContext(), "idempotency: the key's stored answer does not open (is MASTER_KEY the one it was sealed with?); answered 500", "err", err)
		return problem.Write(c, problem.New(fiber.StatusInternalServerError, "internal", ""))
	}
	log.get().ErrorContext(c.UserContext(), "idempotency: "+op+" failed; answered 503", "err", err)
	return problem.Write(c, problem.New(fiber.StatusServiceUnavailable, "unavailable",
		"the gateway could not reach its database; nothing was done; retry with the same Idempotency-Key").WithRetryAfter(2))
}

func inUse(c *fiber.Ctx) error {
	return problem.Write(c, problem.New(fiber.StatusConflict, "idempotency_key_in_use",
		"a request with this Idempotency-Key is in progress; retry later").WithRetryAfter(1))
}

// run hands the claimed request to the handler and reports how it ended the
// claim. Nothing here changes the key: a handler that ends none of the ways
// leaves it in progress under its lease, by design.
// A blind claim (see Guard) that never became the request's is left to
// serve, which reads the key.
func (g *guard) run(c *fiber.Ctx, next fiber.Handler, claim Claim, log *requestLog, blind bool) error {
	s := g.cfg.Store
	c.Locals(claimKey{}, claim)
	// A claim still pending was neither persisted nor released by the
	// handler (an error or a panic before its first write): its INSERT was
	// never sent, and nothing a claim guards happens before it is, so
	// there is nothing to keep — the key stays free for the retry.
	defer func() {
		if claim.Held() {
			_ = s.Release(c.UserContext(), claim)
		}
	}()
	err := g.next(c, next)
	if found, dropped := claim.held.unsent(); blind && (found || dropped) {
		return err
	}
	switch claim.state.get() {
	case endReleased:
		g.observe(OutcomeReleased)
	case endNone:
		log.get().WarnContext(c.UserContext(), "idempotency: handler did not complete, release or leave its claim; the key stays in progress until its lease lapses")
	}
	return err
}

// Write sends r exactly: its status, its headers and its body bytes.
func (r Response) Write(c *fiber.Ctx) error {
	for k, v := range r.Header {
		c.Set(k, v)
	}
	return c.Status(r.Status).Send(r.Body)
}

// How a handler ended its claim.
const (
	endNone int32 = iota
	endCompleted
	endReleased
	endLeft
)

type claimState struct{ end atomic.Int32 }

func (s *claimState) set(end int32) {
	if s != nil {
		s.end.Store(end)
	}
}

func (s *claimState) get() int32 {
	if s == nil {
		return endNone
	}
	return s.end.Load()
}
