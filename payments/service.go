package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/failpoint"
	"github.com/oncepay/gateway/app/ids"
	"github.com/oncepay/gateway/app/logthrottle"
	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/app/ratelimit"
	"github.com/oncepay/gateway/events"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/providers"
)

// Accounts gives the provider account of a merchant. It returns an error
// wrapping providers.ErrUnknownProvider when the merchant has no account
// with that provider.
type Accounts interface {
	Provider(ctx context.Context, merchantID, name string) (providers.Provider, error)
}

// Merchant is the authenticated caller, as the auth middleware knows it.
type Merchant struct {
	ID              string
	DefaultProvider string
	Providers       []string // the provider accounts it may charge through
}

// Config tunes the service.
type Config struct {
	// ReviewAfter is how long a payment may stay processing before the
	// sweeper marks it requires_review (REVIEW_AFTER).
	ReviewAfter time.Duration
	// Lease is the idempotency lease a settler (sweeper, webhook) takes.
	Lease time.Duration
	// StaleAfter is how long after a key's last attempt a provider's "not
	// found" may release it (SWEEP_STALE_AFTER): sooner, the charge may
	// still be on its way.
	StaleAfter time.Duration
	// RecheckAfter is how long after a release as never charged the
	// payment is looked up once more (RECHECK_AFTER).
	RecheckAfter time.Duration
	// PollEvery is how often, at most, polls of one processing payment
	// (GET) ask the provider.
	PollEvery time.Duration
	// RecordTimeout bounds the database work that records a provider's
	// answer: past it (a stalled database) the charge may exist and the
	// answer is 202 processing, the key left in progress.
	RecordTimeout time.Duration
	// Now is the clock of the timestamps this instance writes (updated_at);
	// no decision compares it with anything. nil means time.Now.
	Now func() time.Time
	// Events writes the event of every transition, in the transition's
	// transaction; nil: an emitter on Now.
	Events *events.Emitter
	// SweepProviderRate bounds the sweeper's lookups, per provider, from
	// this instance (SWEEP_PROVIDER_RATE, a second); 0 is unbounded.
	SweepProviderRate float64
	// HookLookups bounds the provider lookups webhooks cause, by
	// hookLookupKey; nil: NewHookLookups, this instance's alone. With
	// REDIS_URL the gateway gives it one shared by every instance, with
	// NewHookLookups as its fallback.
	HookLookups ratelimit.Taker
	// Log receives operational events; nil means slog.Default().
	Log *slog.Logger
	// Observe, if set, counts payments reaching a state, by provider.
	Observe func(provider string, status Status)
	// ObserveProvider, if set, times provider calls: op is charge or
	// lookup, class is ok, not_charged or unknown.
	ObserveProvider func(provider, op, class string, d time.Duration)
}

// Service creates and settles payments.
type Service struct {
	db       *gorm.DB
	store    *Store
	keys     *idempotency.Store
	accounts Accounts
	cfg      Config
	pacer    *pacer
	// outsiders logs what anyone can make the webhook route do — a
	// signature refused, a copy of a signed delivery refused (hookLookups)
	// — once a minute at most for each message, with a count of the rest:
	// a secret set wrong or a replay is worth a WARN, not one per request.
	outsiders *slog.Logger
	// hookLookups bounds the provider lookups webhooks make, per payment
	// (hookLookupBurst): cfg.HookLookups.
	hookLookups ratelimit.Taker
	// charged are the payments an operator failed whose charge at the
	// provider was reported (chargedAfter).
	charged told
	// conflicts are the payments a charge under their reference for
	// another amount was reported about (ours).
	conflicts told
}

// told remembers, for an hour, the payments an ERROR was raised about: a
// condition every sweep and webhook finds again tells a person once an
// hour on each instance, not at every look (720 lines a day a payment).
type told struct {
	mu sync.Mutex
	at map[string]time.Time
}

// first reports whether id was not told about in the hour before now,
// and notes it as told.
func (t *told) first(id string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if at, ok := t.at[id]; ok && now.Sub(at) < time.Hour {
		return false
	}
	if t.at == nil || len(t.at) >= 10_000 {
		t.at = map[string]time.Time{} // bounded: at worst, told again
	}
	t.at[id] = now
	return true
}

// NewService wires a service.
func NewService(db *gorm.DB, keys *idempotency.Store, accounts Accounts, cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Lease == 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.ReviewAfter == 0 {
		cfg.ReviewAfter = 24 * time.Hour
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = 5 * time.Minute
	}
	if cfg.RecheckAfter == 0 {
		cfg.RecheckAfter = time.Hour
	}
	if cfg.PollEvery == 0 {
		cfg.PollEvery = 5 * time.Second
	}
	if cfg.RecordTimeout == 0 {
		cfg.RecordTimeout = 5 * time.Second
	}
	if cfg.Events == nil {
		cfg.Events = events.NewEmitter(cfg.Now)
	}
	if cfg.HookLookups == nil {
		cfg.HookLookups = NewHookLookups()
	}
	return &Service{db: db, store: NewStore(db), keys: keys, accounts: accounts, cfg: cfg, pacer: newPacer(cfg.SweepProviderRate),
		outsiders: slog.New(logthrottle.New(cfg.Log.Handler(), time.Minute, nil)), hookLookups: cfg.HookLookups}
}

// Store exposes the payment store (for reads by handlers and tests).
func (s *Service) Store() *Store { return s.store }

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Microsecond) }

// Answer is what the create handler sends: a final answer (also stored
// under the key) or the unstored 202 of an unknown outcome.
type Answer = idempotency.Response

// Create runs one payment under the request's idempotency claim, and ends
// the claim the way the contract says: validation errors and certain
// non-charges release it (the app may fix the body and reuse the key), final
// outcomes complete it together with the ledger row, and unknown outcomes
// leave it in progress for a retry's takeover or the sweeper.
func (s *Service) Create(ctx context.Context, claim idempotency.Claim, m Merchant, body []byte) (Answer, error) {
	in, bad := parseCreate(body)
	if bad != nil {
		return Answer{}, s.refuse(ctx, claim, bad)
	}
	name := in.Provider
	if name == "" {
		name = m.DefaultProvider
	}
	// The provider is checked against the accounts the auth middleware
	// loaded, not the database: a body that names another provider costs
	// no round trip (the claim is still held, unsent).
	if !contains(m.Providers, name) {
		return Answer{}, s.refuse(ctx, claim, problem.Invalid(problem.FieldError{
			Field: "provider", Reason: fmt.Sprintf("%q is not configured for this merchant", name)}))
	}
	in.Provider = name

	p, redrive, err := s.open(ctx, claim, m.ID, in)
	var waiting recheckFirst
	switch {
	case errors.Is(err, errMismatch):
		return Answer{}, s.release(ctx, claim, idempotency.MismatchProblem())
	case errors.As(err, &waiting):
		return Answer{}, s.release(ctx, claim, waiting.problem(s.now()))
	case err != nil:
		if _, ok := problem.As(err); ok {
			return Answer{}, err
		}
		// Nothing was charged: the ledger row is written before any
		// provider call, and it was not.
		s.cfg.Log.ErrorContext(ctx, "payment could not be opened; answered 503", "merchant_id", m.ID, "err", err)
		return Answer{}, dbUnavailable()
	}
	if final(p.Status) {
		// The ledger already has a final answer for this request (its
		// stored answer was purged after KEY_TTL): answer it again, marked
		// as the replay it is, and never charge.
		a, err := s.complete(ctx, claim, &p)
		return replayed(a), err
	}
	if redrive && p.age() > redriveWindow {
		return s.lookUpInstead(ctx, claim, &p)
	}
	prov, err := s.accounts.Provider(ctx, m.ID, p.Provider)
	if err != nil {
		if redrive {
			// An earlier attempt's outcome is unknown: without the account
			// nobody can tell, so it stays in progress (and in review).
			return s.unknown(ctx, claim, &p)
		}
		// The account vanished since the token was checked: nothing was
		// charged, so this is a certain non-charge.
		return s.notCharged(ctx, claim, &p, err)
	}
	if redrive && claim.TakenOver && !providers.DedupesCharges(prov) {
		// The earlier attempt may have charged at a provider that could
		// make a second charge of the same reference: ask it, as the
		// sweeper would. The charge is sent again only after a lookup has
		// said "not found" SWEEP_STALE_AFTER after that attempt, which
		// releases the payment for the app's next retry.
		return s.lookUpInstead(ctx, claim, &p)
	}
	if claim.TakenOver {
		// This request sends the charge out again: the sweeper's wait for
		// a trustworthy "not found" starts over.
		if err := s.keys.MarkAttempt(ctx, nil, claim); err != nil {
			if errors.Is(err, idempotency.ErrLostClaim) {
				return Answer{}, keyInUse()
			}
			return Answer{}, dbUnavailable()
		}
	}

	// The charge goes out only while the claim certainly owns the key:
	// fencing guards the database writes, not the provider call, so a
	// request stalled past its lease (a slow commit, a pause) must not
	// charge after another owner — or the sweeper's "not found" — took
	// over. Sent in time, the call is bounded by the lease as well.
	cctx, cancelCharge := s.withinLease(ctx, claim)
	defer cancelCharge()
	if cctx.Err() != nil {
		s.cfg.Log.WarnContext(ctx, "claim's lease nearly over before the charge; not sent",
			"merchant_id", m.ID, "payment_id", p.ID)
		return Answer{}, keyInUse()
	}
	failpoint.Hit("before_charge")
	res, err := s.charge(cctx, prov, &p)
	if err == nil && res.Outcome == providers.OutcomeSucceeded {
		// A success for another amount or currency (a partial capture, an
		// FX conversion, a confused proxy) is not this payment's: it stays
		// processing and goes to review (ours), judged as a lookup's and a
		// duplicate's answer are, instead of being recorded as the amount
		// asked for. (Fees a merchant passes on are no other amount: the
		// Paystack adapter reads what was asked from requested_amount,
		// which its transaction objects carry.) A decline moved no money,
		// and Stripe's carries no amount to compare.
		res, err = s.ours(ctx, &p, res, nil)
	}
	failpoint.Hit("after_charge")
	// From here a charge may exist: whatever the database does, the answer
	// is never a 500. Recording gets its own bounded time, so a stalled
	// database yields 202 processing (the key stays in progress, and a
	// retry or the sweeper settles it) instead of a request that hangs.
	rctx, cancel := s.recordContext(ctx)
	defer cancel()
	switch {
	case errors.Is(err, providers.ErrNotCharged) && !redrive:
		return s.notCharged(rctx, claim, &p, err)
	case err != nil:
		// Also a certain non-charge of this attempt when an earlier one's
		// outcome is unknown: that charge may exist, so never release.
		s.cfg.Log.WarnContext(ctx, "payment outcome unknown; left in progress",
			"merchant_id", m.ID, "payment_id", p.ID, "provider", p.Provider, "err", err)
		return s.unknown(rctx, claim, &p)
	case !res.Outcome.Final():
		if res.TransactionID != "" {
			p.ProviderTransactionID = res.TransactionID
		}
		return s.unknown(rctx, claim, &p)
	}
	a, err := s.finish(rctx, claim, &p, res)
	if err != nil {
		if _, ok := problem.As(err); ok {
			return a, err
		}
		s.cfg.Log.ErrorContext(ctx, "provider answered but the outcome could not be recorded; answered 202, left in progress",
			"merchant_id", m.ID, "payment_id", p.ID, "provider", p.Provider, "outcome", string(res.Outcome), "err", err)
		return s.unknown(rctx, claim, &p)
	}
	return a, nil
}

// recordContext is the context of the database work after a provider
// call: the request's values, but its own deadline (RecordTimeout), so a
// request that spent its budget on the provider can still record.
func (s *Service) recordContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RecordTimeout)
}

// recheckFirst: the key's payment was released as never charged more than
// redriveWindow after its first attempt, and its recheck is still to come
// (see open): nothing is sent before it.
type recheckFirst struct {
	at     time.Time
	refund bool
}

func (r recheckFirst) Error() string {
	return "payments: released past the redrive window; recheck first"
}

// problem is the 503 that says when to come back: once the recheck is due.
func (r recheckFirst) problem(now time.Time) *problem.Problem {
	wait := max(1, int(math.Ceil(r.at.Sub(now).Seconds())))
	what, again := "payment", "charged"
	if r.refund {
		what, again = "refund", "sent"
	}
	return problem.New(fiber.StatusServiceUnavailable, "provider_unavailable",
		"the provider had no record of this "+what+" when it was last asked; it is asked once more at "+
			r.at.UTC().Format(time.RFC3339)+" before the "+what+" can be "+again+" again: retry with the same Idempotency-Key after Retry-After").
		WithRetryAfter(wait)
}

// errMismatch: the key's payment was made by another request (its
// fingerprint differs), found after the key's stored answer was purged.
var errMismatch = errors.New("payments: key used by another request")

// replayed marks an answer from the ledger as the replay it is. The
// stored answer never carries the mark; a replay adds it, as the
// middleware does for stored answers.
func replayed(a Answer) Answer {
	if a.Header == nil {
		return a
	}
	h := make(map[string]string, len(a.Header)+1)
	for k, v := range a.Header {
		h[k] = v
	}
	h[idempotency.HeaderReplayed] = "true"
	a.Header = h
	return a
}

// amountRule is the rule an amount breaks when the provider cannot take it
// (its adapter refused it before sending anything: providers.ErrAmount), in
// the adapter's words; ok is false for any other error.
func amountRule(err error) (rule string, ok bool) {
	if !errors.Is(err, providers.ErrAmount) {
		return "", false
	}
	var ae *providers.AmountError
	if errors.As(err, &ae) {
		return ae.Rule, true
	}
	return "it is not an amount the provider takes in this currency", true
}

// amountNotSupported is the 422 for an amount the provider cannot take
// (what: "charged" or "refunded"). Not a 503: no retry of the same body
// will ever succeed. The key is released, so the app may fix the amount
// and reuse it.
func amountNotSupported(rule, what string) *problem.Problem {
	return problem.New(fiber.StatusUnprocessableEntity, "amount_not_supported",
		"the payment provider cannot take this amount: "+rule+"; nothing was "+what+" and the key was released: fix the amount and retry")
}

func dbUnavailable() error {
	return problem.New(fiber.StatusServiceUnavailable, "unavailable",
		"the gateway could not reach its database; nothing was charged; retry with the same Idempotency-Key").WithRetryAfter(2)
}

// leaseMargin is how much of its lease (at most; a tenth of a short lease)
// a request keeps in hand when it sends a charge: the call must end (or be
// abandoned) before the lease does, whatever the clocks' rates.
const leaseMargin = time.Second

// withinLease bounds a provider call made for claim by its lease, less
// leaseMargin: past it another owner may take the key over, and a charge
// or refund still going out would be a second one's; a lookup answered
// after it is work its claim can no longer record.
func (s *Service) withinLease(ctx context.Context, claim idempotency.Claim) (context.Context, context.CancelFunc) {
	return s.leaseBound(ctx, claim.LeaseEnds)
}

// leaseBound is withinLease for a lease that ends at leaseEnds; a zero
// leaseEnds (a webhook's or a poll's look, which holds none) leaves ctx
// as it is.
func (s *Service) leaseBound(ctx context.Context, leaseEnds time.Time) (context.Context, context.CancelFunc) {
	if leaseEnds.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, leaseEnds.Add(-min(leaseMargin, s.cfg.Lease/10)))
}

// redriveWindow is how long after a payment's first attempt a takeover may
// still re-send the charge. Providers dedupe a repeated reference for at
// least this long (Stripe replays an Idempotency-Key for 24 hours; Paystack
// and Flutterwave reject a reused reference for good); past it, a re-sent
// charge could be a second one, so the gateway only looks the charge up.
const redriveWindow = 23 * time.Hour

// lookUpInstead settles an old unknown payment for the app's retry the way
// the sweeper would — Lookup, never Charge — and answers what that gave.
func (s *Service) lookUpInstead(ctx context.Context, claim idempotency.Claim, p *Payment) (Answer, error) {
	st, err := s.settle(ctx, claim, claim.SinceAttempt >= s.cfg.StaleAfter)
	if err != nil {
		return s.unknown(ctx, claim, p)
	}
	switch st {
	case Resolved, Skipped, Reopened: // Reopened: released, then found after all (lookOnceMore)
		return s.storedAnswer(ctx, claim)
	case Released:
		return Answer{}, problem.New(fiber.StatusServiceUnavailable, "provider_unavailable",
			"the provider never received this payment; retry with the same Idempotency-Key to charge it").
			WithRetryAfter(1).With("payment_id", p.ID)
	default:
		return s.unknown(ctx, claim, p)
	}
}

// storedAnswer is the answer a settle stored on claim's key. Skipped also
// means the settle lost the key to another settler (its lease lapsed
// during the lookup): the key is then still in progress, with no answer
// yet, or already released by that settler (gone), and the retry is told
// to come back for it.
func (s *Service) storedAnswer(ctx context.Context, claim idempotency.Claim) (Answer, error) {
	rec, err := s.keys.Get(ctx, claim.MerchantID, claim.Key)
	if errors.Is(err, idempotency.ErrNotFound) {
		return Answer{}, keyInUse()
	}
	if err != nil {
		return Answer{}, err
	}
	if rec.Status != idempotency.StatusDone {
		return Answer{}, keyInUse()
	}
	return rec.Response(), nil
}

// open writes (or re-opens) the payment row before the provider is called,
// so a crash during the call leaves the ledger knowing what to look up.
//
// redrive is true when the key already had a payment whose outcome is
// unknown (a takeover): an earlier attempt may have charged.
func (s *Service) open(ctx context.Context, claim idempotency.Claim, merchantID string, in input) (p Payment, redrive bool, err error) {
	now := s.now()
	// The common case first: a new key and a new payment, claimed and
	// written in one statement.
	p = newPayment(claim, merchantID, in, now)
	var created any
	ok, err := s.keys.PersistWith(ctx, claim, s.store.ClaimedInsert(&p), &created)
	switch {
	case ok:
		return p, false, SetCreated(&p, created)
	case errors.Is(err, idempotency.ErrLostClaim):
		return Payment{}, false, keyInUse()
	case err != nil && !errors.Is(err, errors.ErrUnsupported):
		return Payment{}, false, err
	}
	// Persist commits the claim and the ledger row together (one commit
	// for a new key); for a taken-over key it is a new transaction.
	persist := func(tx *gorm.DB) error {
		redrive = false
		// A new key is the common case: insert first, and read only when
		// the key already has its payment (a retry after a release, a
		// takeover, or a key reused after its answer was purged).
		p = newPayment(claim, merchantID, in, now)
		inserted, err := s.store.InsertNew(ctx, tx, &p)
		if err != nil || inserted {
			return err
		}
		existing, err := s.store.GetByKey(ctx, tx, merchantID, claim.Key)
		if err != nil {
			return err
		}
		if existing.RequestHash != "" && claim.RequestHash != "" &&
			existing.RequestHash != claim.RequestHash && existing.RequestHash != claim.LegacyHash &&
			!(existing.Status == StatusFailed && notSent(existing.FailureCode)) {
			// The key's stored answer is gone (purged) or was never
			// stored (released as not_processed), but the ledger
			// remembers what was asked: this is another request under the
			// same key. Only a certain non-charge (the provider refused
			// the call) frees the key for another body: nothing can land
			// under its reference. A not_processed one may still land.
			return errMismatch
		}
		from, fromCode := existing.Status, existing.FailureCode
		switch {
		case existing.retryable() && existing.FailureCode == FailureNotProcessed && existing.RecheckAt != nil &&
			existing.age() > redriveWindow:
			// Released as never charged, its recheck still to come, and
			// past the window in which a re-sent charge is safe: this
			// attempt could only look the charge up again, and re-opening
			// the payment would put its recheck off — every retry within
			// RECHECK_AFTER would, for ever. It waits for the recheck,
			// which confirms the non-charge (then a retry charges) or
			// finds the charge (then a retry replays it).
			return recheckFirst{at: *existing.RecheckAt}
		case existing.retryable():
			// The key was released after a non-charge: this is a new
			// attempt at the same payment, with the same reference.
			p = existing
			p.apply(in, now)
			p.Status = StatusProcessing
			p.FailureCode, p.FailureMessage = "", ""
			// Released as not_processed with its recheck still to come,
			// the first charge may yet land: this attempt is a re-drive
			// (no refusal releases the key again, and past the
			// providers' dedupe window it only looks up).
			redrive = fromCode == FailureNotProcessed && existing.RecheckAt != nil
		case final(existing.Status):
			p = existing
			if claim.LegacyHash != "" && p.RequestHash == claim.LegacyHash && p.RequestHash != claim.RequestHash {
				p.RequestHash = claim.RequestHash
				return s.store.adoptHash(ctx, tx, merchantID, p.ID, claim.LegacyHash, claim.RequestHash)
			}
			return nil
		default:
			// Taken over (still processing): same payment, same reference;
			// the takeover re-drives the charge, which the provider dedupes.
			p = existing
			redrive = true
		}
		p.Attempts++
		if claim.RequestHash != "" {
			p.RequestHash = claim.RequestHash
		}
		p.UpdatedAt = now
		return s.store.Reopen(ctx, tx, &p, from, fromCode)
	}
	for tries := 1; ; tries++ {
		// A claim already durable (a takeover, or a key whose payment
		// PersistWith found existing) stays this request's whatever fn
		// does: if the payment moved on between the read and the
		// conditional write (a recheck or a webhook re-opened it), read
		// it again and go on from what it is now, rather than answer 409
		// and leave the key in progress, unattended, for a whole lease.
		durable := !claim.Held()
		err = s.keys.Persist(ctx, claim, persist)
		if !errors.Is(err, ErrConflict) || !durable || tries == maxReopenTries {
			break
		}
	}
	if errors.Is(err, idempotency.ErrLostClaim) || errors.Is(err, ErrConflict) {
		return Payment{}, false, keyInUse()
	}
	return p, redrive, err
}

// maxReopenTries bounds how often open re-reads a payment that keeps
// moving on under its durable claim (each move is another settlement, and
// there are few).
const maxReopenTries = 3

// newPayment is the ledger row of a new key's first attempt.
func newPayment(claim idempotency.Claim, merchantID string, in input, now time.Time) Payment {
	p := Payment{
		ID:                ids.New("pay_"),
		MerchantID:        merchantID,
		IdempotencyKey:    claim.Key,
		Status:            StatusProcessing,
		ProviderReference: providers.Reference(merchantID, claim.Key),
		Attempts:          1,
		RequestHash:       claim.RequestHash,
	}
	p.apply(in, now)
	return p
}

func (p *Payment) apply(in input, now time.Time) {
	p.Amount, p.Currency, p.Email = in.Amount, in.Currency, in.Email
	p.PaymentMethod, p.Provider = in.PaymentMethod, in.Provider
	p.Description, p.Metadata = in.Description, in.Metadata
	p.UpdatedAt = now
}

func (s *Service) charge(ctx context.Context, prov providers.Provider, p *Payment) (providers.Result, error) {
	start := time.Now()
	res, err := prov.Charge(ctx, providers.ChargeRequest{
		Reference:     p.ProviderReference,
		Amount:        p.Amount,
		Currency:      p.Currency,
		Email:         p.Email,
		PaymentMethod: p.PaymentMethod,
		Description:   p.Description,
	})
	s.observeProvider(p.Provider, "charge", err, time.Since(start))
	return cleaned(ctx, s.cfg.Log, p.Provider, "charge", res), err
}

// cleaned is what the gateway keeps of a provider's answer
// (providers.Result.Clean), with a WARN naming what was replaced: the
// provider sent what none of its answers should hold.
func cleaned[R interface{ Clean() (R, []string) }](ctx context.Context, log *slog.Logger, provider, op string, r R) R {
	r, dropped := r.Clean()
	if len(dropped) > 0 {
		log.WarnContext(ctx, "the provider's answer holds values the gateway cannot keep; replaced",
			"provider", provider, "op", op, "fields", dropped)
	}
	return r
}

func (s *Service) observeProvider(provider, op string, err error, d time.Duration) {
	if s.cfg.ObserveProvider == nil {
		return
	}
	class := "ok"
	switch {
	case errors.Is(err, providers.ErrNotCharged):
		class = "not_charged"
	case err != nil:
		class = "unknown"
	}
	s.cfg.ObserveProvider(provider, op, class, d)
}

// finish records a final outcome and completes the key with the answer,
// atomically: one statement when the payment is still open (the request
// path), else a transaction that answers from the ledger.
func (s *Service) finish(ctx context.Context, claim idempotency.Claim, p *Payment, res providers.Result) (Answer, error) {
	f := outcomeParams(res, s.now())
	// The common case in one statement: the payment was still open and the
	// claim still owns the key.
	next := *p
	f.applyTo(&next)
	answer := Render(&next)
	ev := paymentEvent(&next)
	if next.Status == StatusSucceeded {
		// The event's object is the answer's body, already encoded: one
		// reflection over the payment fewer per payment.
		ev.Object = events.Encoded(answer.Body)
	}
	event, err := s.cfg.Events.EmitAlong(s.db, ev, "resource")
	if err != nil {
		return Answer{}, err
	}
	applied, err := s.keys.CompleteWith(ctx, claim, answer, finishClaimed(p.MerchantID, p.ID, claim.Key, f), event)
	switch {
	case errors.Is(err, idempotency.ErrLostClaim):
		return Answer{}, keyInUse()
	case errors.Is(err, errors.ErrUnsupported):
		// SQLite: the transaction below.
	case err != nil:
		return Answer{}, err
	case applied:
		*p = next
		s.observe(p)
		return answer, nil
	}
	// Settled by someone else first (or SQLite): complete the key with the
	// ledger's state, in one transaction.
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		ok, err := s.store.Finish(ctx, tx, p.MerchantID, p.ID, f)
		if err != nil {
			return err
		}
		if ok {
			f.applyTo(p)
			if err := s.emit(ctx, tx, p); err != nil {
				return err
			}
		} else {
			// Someone settled it first: the ledger's state is the answer.
			cur, err := s.store.GetByKey(ctx, tx, p.MerchantID, p.IdempotencyKey)
			if err != nil {
				return err
			}
			*p = cur
		}
		answer = Render(p)
		return s.keys.Complete(ctx, tx, claim, answer)
	})
	if errors.Is(err, idempotency.ErrLostClaim) {
		return Answer{}, keyInUse()
	}
	if err != nil {
		return Answer{}, err
	}
	s.observe(p)
	return answer, nil
}

// complete stores the ledger's final answer under the key without touching
// the payment.
func (s *Service) complete(ctx context.Context, claim idempotency.Claim, p *Payment) (Answer, error) {
	answer := Render(p)
	err := s.keys.Complete(ctx, nil, claim, answer)
	if errors.Is(err, idempotency.ErrLostClaim) {
		return Answer{}, keyInUse()
	}
	return answer, err
}

// notCharged records a certain non-charge and releases the key so the app's
// retry charges afresh (same payment, same reference). An amount the
// provider cannot take is the merchant's to fix, not an outage: 422
// amount_not_supported instead of 503.
func (s *Service) notCharged(ctx context.Context, claim idempotency.Claim, p *Payment, cause error) (Answer, error) {
	code, msg := FailureProviderUnavailable, "The provider did not accept the charge; retry later."
	rule, refused := amountRule(cause)
	if refused {
		code, msg = FailureAmountNotSupported, "The provider cannot take this amount: "+rule+"."
	}
	ok, err := s.neverCharged(ctx, claim, p, code, msg)
	switch {
	case errors.Is(err, idempotency.ErrLostClaim):
		return Answer{}, keyInUse()
	case err != nil:
		// The key stays in progress; the sweeper will find nothing at the
		// provider and release it. Nothing was charged.
		s.cfg.Log.ErrorContext(ctx, "could not record a certain non-charge; answered 503, left in progress",
			"payment_id", p.ID, "err", err)
		return Answer{}, dbUnavailable()
	case !ok:
		// Settled meanwhile: the ledger's answer is the answer.
		return s.complete(ctx, claim, p)
	}
	if refused {
		s.cfg.Log.InfoContext(ctx, "provider cannot take the amount; not sent, key released",
			"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider, "err", cause)
		return Answer{}, amountNotSupported(rule, "charged").With("payment_id", p.ID)
	}
	s.cfg.Log.WarnContext(ctx, "provider did not charge; key released",
		"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider, "err", cause)
	return Answer{}, problem.New(fiber.StatusServiceUnavailable, "provider_unavailable",
		"the payment provider is unavailable and did not charge; retry with the same Idempotency-Key").
		WithRetryAfter(5).With("payment_id", p.ID)
}

// neverCharged marks the payment failed with a code that lets the key be
// claimed afresh, and releases the key, in one transaction: both happen
// only while the claim still owns the key (a claim that lost its key to a
// takeover must not touch the ledger). ok is false, with nothing changed,
// when the payment is already final; p is then the ledger's payment.
func (s *Service) neverCharged(ctx context.Context, claim idempotency.Claim, p *Payment, code, msg string) (ok bool, err error) {
	at := s.now()
	f := finishParams{Status: StatusFailed, FailureCode: code, FailureMessage: msg, At: at}
	if code == FailureNotProcessed {
		// "Not found" is the provider's view at one moment; a charge sent
		// before it may still land. Look once more, later.
		f.RecheckAfter = s.cfg.RecheckAfter
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if ok, err = s.store.Finish(ctx, tx, p.MerchantID, p.ID, f); err != nil || !ok {
			return err
		}
		failed := *p
		f.applyTo(&failed)
		if err := s.emit(ctx, tx, &failed); err != nil {
			return err
		}
		return s.keys.ReleaseTx(ctx, tx, claim)
	})
	if err != nil {
		return false, err
	}
	if !ok {
		cur, err := s.store.GetByKey(ctx, nil, p.MerchantID, p.IdempotencyKey)
		if err != nil {
			return false, err
		}
		*p = cur
		return false, nil
	}
	p.Status, p.FailureCode, p.FailureMessage, p.UpdatedAt = StatusFailed, code, msg, at
	s.observe(p)
	return true, nil
}

// unknown answers 202: the payment is processing and its key stays in
// progress, but this request gives up its lease so that the app's retry
// takes over at once and re-drives the charge (the provider dedupes).
func (s *Service) unknown(ctx context.Context, claim idempotency.Claim, p *Payment) (Answer, error) {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.keys.LeaveInProgressTx(ctx, tx, claim); err != nil {
			return err
		}
		return s.emit(ctx, tx, p)
	})
	if err != nil && !errors.Is(err, idempotency.ErrLostClaim) {
		s.cfg.Log.WarnContext(ctx, "could not end lease early", "payment_id", p.ID, "err", err)
	}
	body, err := json.Marshal(p.View())
	if err != nil {
		return Answer{}, err
	}
	return Answer{
		Status: fiber.StatusAccepted,
		Header: map[string]string{
			fiber.HeaderContentType: fiber.MIMEApplicationJSON,
			fiber.HeaderLocation:    location(p.ID),
			fiber.HeaderRetryAfter:  "2",
		},
		Body: body,
	}, nil
}

// release ends the claim with nothing stored and returns cause for the
// handler to answer: for a request whose key holds no work of its own
// (another request's payment, a refund that cannot be opened).
func (s *Service) release(ctx context.Context, claim idempotency.Claim, cause error) error {
	if err := s.keys.Release(ctx, claim); err != nil && !errors.Is(err, idempotency.ErrLostClaim) {
		return fmt.Errorf("payments: release key: %w (while answering %v)", err, cause)
	}
	return cause
}

// refuse ends the claim of a request refused before it did anything (its
// body, its label, its provider) and returns cause: released when fresh,
// left in progress when taken over from work in flight
// (idempotency.Store.Refuse).
func (s *Service) refuse(ctx context.Context, claim idempotency.Claim, cause error) error {
	return s.keys.Refuse(ctx, claim, cause)
}

func (s *Service) observe(p *Payment) {
	if s.cfg.Observe != nil {
		s.cfg.Observe(p.Provider, p.Status)
	}
}

func keyInUse() error {
	return problem.New(fiber.StatusConflict, "idempotency_key_in_use",
		"another request took this Idempotency-Key over; retry to get its answer").WithRetryAfter(1)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func final(s Status) bool { return s == StatusSucceeded || s == StatusFailed }

func location(id string) string { return "/v1/payments/" + id }

// Render is the final answer for a settled payment, exactly as the create
// handler sends it and as every later settler (a takeover, the sweeper, a
// webhook) stores it: 201 with the payment for a success, 402 card_declined
// with the payment for a decline.
func Render(p *Payment) Answer {
	view := p.View()
	header := map[string]string{fiber.HeaderLocation: location(p.ID)}
	if p.Status == StatusSucceeded {
		body, _ := json.Marshal(view) // a View always encodes
		header[fiber.HeaderContentType] = fiber.MIMEApplicationJSON
		return Answer{Status: fiber.StatusCreated, Header: header, Body: body, ResourceID: p.ID}
	}
	msg := p.FailureMessage
	if msg == "" {
		msg = "The payment was declined."
	}
	pr := problem.New(fiber.StatusPaymentRequired, "card_declined", msg).
		With("decline_code", p.FailureCode).With("payment", view)
	header[fiber.HeaderContentType] = problem.ContentType
	return Answer{Status: fiber.StatusPaymentRequired, Header: header, Body: pr.Body(""), ResourceID: p.ID}
}

// paymentEvent is the event of p's current state.
func paymentEvent(p *Payment) events.Params {
	typ := events.PaymentProcessing
	switch p.Status {
	case StatusSucceeded:
		typ = events.PaymentSucceeded
	case StatusFailed:
		typ = events.PaymentFailed
	case StatusRequiresReview:
		typ = events.PaymentRequiresReview
	}
	return events.Params{MerchantID: p.MerchantID, Type: typ, ObjectID: p.ID, Attempt: p.Attempts, Code: p.FailureCode, Object: p.View()}
}

// emit writes the event of p's current state in tx, the transaction of
// the transition to it.
func (s *Service) emit(ctx context.Context, tx *gorm.DB, p *Payment) error {
	return s.cfg.Events.Emit(ctx, tx, paymentEvent(p))
}

// emitAgain is emit for a transition that can happen more than once in
// one attempt (events.Params.After): left is when p entered the state the
// transition leaves.
func (s *Service) emitAgain(ctx context.Context, tx *gorm.DB, p *Payment, left time.Time) error {
	e := paymentEvent(p)
	e.After = left
	return s.cfg.Events.Emit(ctx, tx, e)
}
