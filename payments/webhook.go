package payments

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/app/ratelimit"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/providers"
)

// WebhookResult says what a verified webhook did.
type WebhookResult struct {
	// Status: ignored (no payment with that reference), final (already
	// settled: duplicates and late events are harmless), deferred (the
	// request that owns the key is still running and will settle it),
	// reopened (a payment released as never charged had the charge after
	// all), refunds_settled (a refund event: the payment's pending refunds
	// looked up and settled), or a Settlement (resolved, released, pending,
	// review).
	Status    string `json:"status" example:"resolved"`
	PaymentID string `json:"payment_id,omitempty" example:"pay_5f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6"`
} // @name WebhookResult

// HandleWebhook authenticates a provider's webhook for a tenant by its
// signature under that tenant's provider secret, and settles the payment it
// is about exactly as the sweeper would: the event is only a hint, the
// outcome comes from a Lookup.
func (s *Service) HandleWebhook(ctx context.Context, provider, tenantID string, header http.Header, body []byte) (WebhookResult, error) {
	// The route is unauthenticated: a 404 for an unknown tenant beside a
	// 401 for a known one would tell anyone which tenant ids exist, and
	// which providers each uses. Every refusal before a signature verifies
	// is the same answer; only the log says which it was, for on-call.
	prov, err := s.accounts.Provider(ctx, tenantID, provider)
	if errors.Is(err, providers.ErrUnknownProvider) {
		s.outsiders.WarnContext(ctx, "webhook for no such endpoint refused", "merchant_id", tenantID, "provider", provider,
			"why", "no such tenant, or no account of the tenant with this provider")
		return WebhookResult{}, badSignature()
	}
	if err != nil {
		return WebhookResult{}, err
	}
	ev, err := prov.VerifyWebhook(header, body)
	switch {
	case errors.Is(err, providers.ErrNoWebhooks):
		// Every tenant has the simulator in development: a 404 here beside
		// the 401 of an unknown tenant would be the same oracle.
		s.outsiders.WarnContext(ctx, "webhook for a provider that sends none refused", "merchant_id", tenantID, "provider", provider)
		return WebhookResult{}, badSignature()
	case errors.Is(err, providers.ErrBadSignature):
		s.outsiders.WarnContext(ctx, "webhook signature invalid", "merchant_id", tenantID, "provider", provider)
		return WebhookResult{}, badSignature()
	case err != nil:
		return WebhookResult{}, problem.Invalid(problem.FieldError{Field: "body", Reason: "is not a webhook event this provider sends"})
	}
	if ev.Reference == "" && !(ev.Refund && ev.TransactionID != "") {
		return WebhookResult{Status: "ignored"}, nil
	}
	if !providers.Token(ev.Reference) || !providers.Token(ev.TransactionID) || !providers.Token(ev.RefundReference) {
		// Nothing the gateway made or a provider gave it looks like this
		// (a NUL, bytes that are not UTF-8, a page of text): no payment of
		// ours, so not a value to hand the database.
		s.cfg.Log.InfoContext(ctx, "webhook naming no reference of ours ignored",
			"merchant_id", tenantID, "provider", provider, "event", ev.Type)
		return WebhookResult{Status: "ignored"}, nil
	}
	var p Payment
	if ev.Reference != "" {
		p, err = s.store.GetByReference(ctx, tenantID, ev.Reference)
	} else {
		p, err = s.store.GetByTransactionID(ctx, tenantID, provider, ev.TransactionID)
	}
	if errors.Is(err, ErrNotFound) {
		s.cfg.Log.InfoContext(ctx, "webhook for an unknown reference ignored",
			"merchant_id", tenantID, "provider", provider, "event", ev.Type)
		return WebhookResult{Status: "ignored"}, nil
	}
	if err != nil {
		return WebhookResult{}, err
	}
	if p.Provider != provider {
		return WebhookResult{Status: "ignored"}, nil
	}
	if looksUp(ev, &p) {
		if ok, wait := s.hookLookups.Take(ctx, hookLookupKey(ev, &p)); !ok {
			return WebhookResult{}, s.webhookLookupRefused(ctx, ev, &p, provider, wait)
		}
	}
	if ev.Refund {
		settled, deferred, err := s.settleRefundsOf(ctx, p, ev.RefundReference)
		if err != nil {
			s.cfg.Log.WarnContext(ctx, "webhook refund settle failed", "payment_id", p.ID, "err", err)
			return WebhookResult{}, problem.New(fiber.StatusServiceUnavailable, "provider_unavailable",
				"could not confirm the event with the provider; retry later").WithRetryAfter(30)
		}
		st := "final"
		switch {
		case settled > 0:
			st = "refunds_settled"
		case deferred > 0:
			st = "deferred"
		}
		return WebhookResult{Status: st, PaymentID: p.ID}, nil
	}
	if p.retryable() {
		// Released as never charged, and now the provider says something
		// happened to the reference: a charge that landed late. Look it up
		// (the event is only a hint) and re-open the payment if it is there.
		st, err := s.recheck(ctx, p, false)
		if conflicted(err) {
			st, err = Pending, nil
		}
		if err != nil {
			s.cfg.Log.WarnContext(ctx, "webhook recheck failed", "payment_id", p.ID, "err", err)
			return WebhookResult{}, problem.New(fiber.StatusServiceUnavailable, "provider_unavailable",
				"could not confirm the event with the provider; retry later").WithRetryAfter(30)
		}
		if st == Pending {
			// Nothing final at the provider yet: the payment stays failed,
			// and its scheduled recheck (if any) stays scheduled.
			st = "final"
		}
		return WebhookResult{Status: string(st), PaymentID: p.ID}, nil
	}
	if final(p.Status) {
		if p.Status == StatusFailed && p.FailureCode == FailureResolved {
			err := s.chargedAfterResolution(ctx, &p)
			if err != nil && !conflicted(err) {
				// This event may be the only word of a late charge: the
				// provider must send it again. (Another charge under the
				// reference is logged, and no retry changes it.)
				s.cfg.Log.WarnContext(ctx, "webhook for a payment an operator failed: lookup failed", "payment_id", p.ID, "err", err)
				return WebhookResult{}, problem.New(fiber.StatusServiceUnavailable, "provider_unavailable",
					"could not confirm the event with the provider; retry later").WithRetryAfter(30)
			}
		}
		return WebhookResult{Status: "final", PaymentID: p.ID}, nil
	}
	claim, ok, err := s.keys.TakeOver(ctx, idempotency.TakeOverParams{MerchantID: tenantID, Key: p.IdempotencyKey, Lease: s.cfg.Lease})
	if err != nil {
		return WebhookResult{}, err
	}
	if !ok {
		return WebhookResult{Status: "deferred", PaymentID: p.ID}, nil
	}
	st, err := s.settle(ctx, claim, false)
	if conflicted(err) {
		st, err = Pending, nil
	}
	if err != nil {
		// The provider could not tell us now; it will retry the webhook,
		// and the sweeper is there regardless.
		s.cfg.Log.WarnContext(ctx, "webhook settle failed", "payment_id", p.ID, "err", err)
		return WebhookResult{}, problem.New(fiber.StatusServiceUnavailable, "provider_unavailable",
			"could not confirm the event with the provider; retry later").WithRetryAfter(30)
	}
	return WebhookResult{Status: string(st), PaymentID: p.ID}, nil
}

// badSignature is the one answer to a webhook refused before its
// signature verified, whatever the reason (HandleWebhook).
func badSignature() *problem.Problem {
	return problem.New(fiber.StatusUnauthorized, "invalid_signature", "the webhook signature does not verify")
}

// Paystack and Flutterwave sign the body alone, with no time in it, so a
// delivery seen once (in a proxy's log, at a misrouted endpoint) can be
// posted again by anyone, for ever, and every copy verifies. A copy changes
// nothing (the event is only a hint; the outcome comes from a lookup), but
// each one about a payment still open at the provider has it looked up
// there, on the merchant's API quota. Copies cannot be refused as bodies
// seen before: the provider's own resend after the charge moved on can be
// byte-identical, and must settle. So the lookups are bounded instead: per
// payment (per refund, for a refund's event), hookLookupBurst at once, then
// one every hookLookupEvery. A provider never comes near that: it sends an
// event or two per change (Stripe's payment_intent.succeeded and
// charge.succeeded), and its resends minutes apart. Most copies cost
// nothing anyway: a payment final in the ledger is answered from it.
//
// Past the bound the delivery is answered 503 with Retry-After, for the
// provider to send it again, and not 200, which would be final: a payment
// released as never charged, or one an operator failed, is looked at again
// seldom if at all (its one recheck; a watch every RECHECK_AFTER), and the
// event may be the only word of its charge. Paystack resends a delivery not answered 200 three
// minutes later (four times, then hourly for 72 hours), Stripe anything
// outside 2xx with backoff for three days: by then the bucket has refilled.
// If the copies go on meanwhile, they themselves have the payment looked
// up every hookLookupEvery, so no news waits longer than that. Flutterwave's
// resends are not documented (shared/providers.md 2.6), so a refusal never
// rests on them: what is still processing the sweeper settles regardless,
// and a final payment whose charge may yet turn up is given a recheck
// within hookLookupEvery (webhookLookupRefused). 503 rather than 429: the status any
// sender takes as transient, and the one this route already answers when
// the provider cannot be asked.
//
// With REDIS_URL the buckets are in Redis, one per payment for every
// instance (Config.HookLookups): a copy posted to each of N instances
// spends the one bound, not N. Without it, or while Redis does not answer,
// they are each instance's, and a flood costs up to N times as many
// lookups.
const (
	hookLookupBurst = 5
	hookLookupEvery = 30 * time.Second
)

// NewHookLookups is this instance's bound on the lookups webhooks cause:
// Config.HookLookups when none is given, and the rate and burst (and the
// fallback) of the one the gateway shares in Redis.
func NewHookLookups() *ratelimit.Limiter {
	return ratelimit.New(ratelimit.Config{Rate: 1 / hookLookupEvery.Seconds(), Burst: hookLookupBurst})
}

// webhookLookupRefused answers an event past its payment's lookup bound
// (503, for the provider to send it again) and, for a final payment whose
// charge may yet turn up, has the sweeper look it up once the bound has
// refilled: a provider that does not resend (Flutterwave's resends are not
// documented) would otherwise leave a late charge unseen for good, once the
// payment's own recheck has ended. A payment still open the sweeper settles
// anyway; a refund's event, its refund's own recheck.
func (s *Service) webhookLookupRefused(ctx context.Context, ev providers.Event, p *Payment, provider string, wait time.Duration) error {
	s.outsiders.WarnContext(ctx, "webhook for a payment looked up moments ago refused; the provider sends it again",
		"merchant_id", p.MerchantID, "provider", provider, "payment_id", p.ID, "event", ev.Type)
	// Not for a payment older than REVIEW_AFTER less a margin: a
	// scheduled recheck that cannot ask the provider past REVIEW_AFTER
	// reinstates the payment for review (recheck), which a settled
	// payment's copies of a webhook must never cause. A charge landing a
	// day after its release is not what this is for. (By this clock: the
	// hour's margin covers its skew from the database's.) An operator's
	// failed resolution is at any age: its look is a watch, which raises
	// an ERROR for a charge and never reinstates (watchResolution).
	resolved := p.Status == StatusFailed && p.FailureCode == FailureResolved
	if !ev.Refund && final(p.Status) && (resolved || s.now().Sub(p.CreatedAt)+hookLookupEvery+time.Hour < s.cfg.ReviewAfter) {
		if err := s.store.LookAgainBy(ctx, p.MerchantID, p.ID, p.Status, p.Attempts, hookLookupEvery); err != nil {
			return err // 503 unavailable: the provider sends it again
		}
	}
	return problem.New(fiber.StatusServiceUnavailable, "rate_limited",
		"this payment was looked up with the provider moments ago; retry later").
		WithRetryAfter(ratelimit.RetryAfterSeconds(wait))
}

// looksUp reports whether the provider is asked about a verified event
// naming p: every event of a payment still open and every refund's, and
// those of the two final payments whose charge may yet turn up (released
// as never charged, failed by an operator).
func looksUp(ev providers.Event, p *Payment) bool {
	return ev.Refund || !final(p.Status) || p.retryable() ||
		(p.Status == StatusFailed && p.FailureCode == FailureResolved)
}

// hookLookupKey is the bucket of ev's lookups: its payment's, or for a
// refund's event its refund's, so that the events of several refunds of one
// payment settling together are not taken for copies of one another.
func hookLookupKey(ev providers.Event, p *Payment) string {
	k := p.MerchantID + "/" + p.ID
	if ev.Refund {
		k += "/refund/" + ev.RefundReference
	}
	return k
}

// conflicted reports whether err is only that the provider's charge under
// the payment's reference is another one (logged where it was found): no
// retry of the event can change that, so it is answered, not 503 — the
// provider would send it again for days, each time a lookup and an ERROR.
// The payment stays as it was, for the sweeper and, past REVIEW_AFTER, a
// person.
func conflicted(err error) bool {
	return err != nil && errors.Is(err, providers.ErrReferenceConflict)
}

// WebhookRoutes mounts the provider webhooks on r (the /v1 group, without
// merchant authentication: the signature is the authentication).
func (h *Handler) WebhookRoutes(r fiber.Router) {
	r.Post("/webhooks/:provider/:tenant_id", h.webhook)
}

// webhook godoc
// @Summary      Receive a provider webhook
// @Description  Providers call this with the tenant's id in the path. The signature (x-paystack-signature,
// @Description  verif-hash / flutterwave-signature, Stripe-Signature) under that tenant's provider secret is the
// @Description  authentication. A verified event for a payment still processing is re-checked with the provider
// @Description  (Lookup) and settles the payment and its idempotency key exactly as the sweeper would. Duplicate and
// @Description  out-of-order events are harmless; an unknown reference is acknowledged and ignored. An unknown tenant
// @Description  is answered as a bad signature, and no sooner (every such refusal takes at least 50 ms), so the route
// @Description  tells nobody which tenant ids exist. The lookups events
// @Description  make are bounded per payment (five at once, then one every 30 s), so copies of a delivery cost no
// @Description  more than that at the provider: past it the event is answered 503 rate_limited, for the provider to
// @Description  send it again.
// @Tags         webhooks
// @Accept       json
// @Produce      json
// @Produce      application/problem+json
// @Param        provider  path string true "paystack, flutterwave or stripe"
// @Param        tenant_id path string true "The merchant's tenant id"
// @Success      200 {object} WebhookResult
// @Failure      400 {object} problem.Problem "invalid_request (unreadable event)"
// @Failure      401 {object} problem.Problem "invalid_signature: the signature does not verify, or there is nothing to verify it with (no such tenant, no account with the provider, a provider that sends none); the answer does not say which, the gateway's log does"
// @Failure      413 {object} problem.Problem "body_too_large"
// @Failure      500 {object} problem.Problem "internal (the provider retries the webhook)"
// @Failure      503 {object} problem.Problem "provider_unavailable, rate_limited, unavailable: the provider could not be asked, or was asked about this payment moments ago, or the database could not be reached; the provider retries"
// @Header       503 {integer} Retry-After "seconds"
// @ID           receiveWebhook
// @Router       /v1/webhooks/{provider}/{tenant_id} [post]
func (h *Handler) webhook(c *fiber.Ctx) error {
	header := http.Header{}
	for k, vs := range c.GetReqHeaders() {
		for _, v := range vs {
			header.Add(k, v)
		}
	}
	start := time.Now()
	res, err := h.svc.HandleWebhook(c.UserContext(), utils.CopyString(c.Params("provider")), utils.CopyString(c.Params("tenant_id")), header, c.Body())
	if err != nil {
		if unverified(err) {
			noSooner(c.UserContext(), start.Add(refusalFloor))
		}
		return err
	}
	return c.JSON(res)
}

// refusalFloor is the least time a webhook refused before its signature
// verified is answered in. The answers are one (badSignature), but not
// their times: an unknown tenant costs the database two reads, while a
// known tenant's account is cached and its bad signature refused in
// microseconds, so timing the refusals would tell which tenant ids exist.
// Every such refusal takes at least this long, well above those reads. A
// provider never waits on it: its signed deliveries are not refused.
const refusalFloor = 50 * time.Millisecond

// unverified reports whether err is the refusal of a webhook whose
// signature did not verify (badSignature).
func unverified(err error) bool {
	var p *problem.Problem
	return errors.As(err, &p) && p.Code == badSignature().Code
}

// noSooner returns at t, or when ctx ends.
func noSooner(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// chargedAfterResolution looks up a payment an operator resolved as
// failed — allowed in review while the provider still had it pending —
// once the resolution has committed and whenever the provider says
// something happened to it, and raises an ERROR if the provider charged it
// after all: the ledger and the provider now disagree, and a person must
// refund the charge at the provider (or the customer keeps what they paid
// for). Nothing is changed here: the merchant was answered failed, and its
// key replays that. The error is the lookup's: nobody could tell.
func (s *Service) chargedAfterResolution(ctx context.Context, p *Payment) error {
	res, err := s.lookup(ctx, p)
	if err != nil || res.Outcome != providers.OutcomeSucceeded {
		return err
	}
	s.chargedAfter(ctx, p, res)
	return nil
}

// chargedAfter is the ERROR of a charge the provider made for a payment an
// operator resolved as failed. The charge is final news: the payment's
// watch, if any, ends with it, so the next look does not say it again.
func (s *Service) chargedAfter(ctx context.Context, p *Payment, res providers.Result) {
	level := slog.LevelError
	if !s.charged.first(p.ID, time.Now()) {
		// Told within the hour: every copy of the provider's event finds
		// it again, and anyone may post copies.
		level = slog.LevelInfo
	}
	s.cfg.Log.Log(ctx, level, "the provider charged a payment an operator resolved as failed; refund it at the provider",
		"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider,
		"provider_transaction_id", res.TransactionID, "amount", p.Amount, "currency", p.Currency)
	if _, err := s.store.lookLater(ctx, *p, 0); err != nil {
		s.cfg.Log.WarnContext(ctx, "could not end the watch of a resolved payment", "payment_id", p.ID, "err", err)
	}
}
