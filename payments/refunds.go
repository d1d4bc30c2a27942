package payments

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/audit"
	"github.com/oncepay/gateway/app/failpoint"
	"github.com/oncepay/gateway/app/ids"
	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/events"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/providers"
)

// Refunds follow the payment protocol exactly, under their own keys: the
// refund row is written (and its amount reserved on the payment) in the
// claim's commit, before the provider is called; the outcome and the
// key's stored answer commit together; an unknown outcome leaves the key
// in progress for a retry's takeover (which re-sends the refund with the
// same reference: every adapter dedupes it), a poll, a webhook or the
// sweeper (which only looks it up). A double refund is the mirror image of
// a double charge, and is kept out the same way.

// Refund problems.
var (
	errPaymentNotFound = problem.New(fiber.StatusNotFound, "payment_not_found", "no such payment")
	errNotRefundable   = problem.New(fiber.StatusConflict, "payment_not_refundable", "only a succeeded payment can be refunded")
)

func exceedsRemaining(remaining int64) error {
	return problem.New(fiber.StatusBadRequest, "refund_exceeds_remaining",
		"the refund exceeds what is left of the payment").With("amount_refundable", remaining)
}

// heldRetryAfter is the Retry-After, in seconds, of a refund held until
// RECHECK_AFTER at a provider that does not dedupe refunds.
const heldRetryAfter = 30

// refundClaimErr marks an error found while opening a refund, for which
// the claim is released (nothing was done) and the error answered.
type refundClaimErr struct{ err error }

func (e refundClaimErr) Error() string { return e.err.Error() }
func (e refundClaimErr) Unwrap() error { return e.err }

// CreateRefund runs one refund of the merchant's payment under the
// request's idempotency claim, ending the claim as Create does.
func (s *Service) CreateRefund(ctx context.Context, claim idempotency.Claim, m Merchant, paymentID string, body []byte) (Answer, error) {
	in, bad := parseRefund(body)
	if bad != nil {
		return Answer{}, s.refuse(ctx, claim, bad)
	}
	if !wellFormedID(paymentID) {
		// refuse, not release: the fingerprint lowercases the path, so a
		// retry of a refund in flight may reach here with the id's case
		// changed, holding that refund's key.
		return Answer{}, s.refuse(ctx, claim, errPaymentNotFound)
	}
	r, redrive, err := s.openRefund(ctx, claim, m.ID, paymentID, in)
	var rce refundClaimErr
	var waiting recheckFirst
	switch {
	case errors.As(err, &rce):
		return Answer{}, s.release(ctx, claim, rce.err)
	case errors.Is(err, errMismatch):
		return Answer{}, s.release(ctx, claim, idempotency.MismatchProblem())
	case errors.As(err, &waiting):
		return Answer{}, s.release(ctx, claim, waiting.problem(s.now()))
	case err != nil:
		if _, ok := problem.As(err); ok {
			return Answer{}, err
		}
		s.cfg.Log.ErrorContext(ctx, "refund could not be opened; answered 503", "merchant_id", m.ID, "err", err)
		return Answer{}, dbUnavailable()
	}
	if r.final() {
		// Final in the ledger already (its stored answer was purged).
		a, err := s.completeRefund(ctx, claim, &r)
		return replayed(a), err
	}
	if redrive && r.age() > redriveWindow {
		return s.lookUpRefundInstead(ctx, claim, &r)
	}
	prov, err := s.accounts.Provider(ctx, m.ID, r.Provider)
	if err != nil {
		if redrive {
			return s.unknownRefund(ctx, claim, &r)
		}
		return s.refundNotSent(ctx, claim, &r, err)
	}
	if redrive && claim.TakenOver && !providers.DedupesRefunds(prov) {
		// The earlier attempt may have reached a provider that would make
		// a second refund of the same reference, and its list may not show
		// the first yet: look it up, and send it again only after a
		// release, which waits RECHECK_AFTER (refundReleaseAfter). While
		// it waits, the app is asked to come back less often: each retry
		// is a look-up at the provider, and the provider's own event
		// settles the refund the moment it lands.
		a, err := s.lookUpRefundInstead(ctx, claim, &r)
		if err == nil && a.Status == fiber.StatusAccepted {
			a.Header[fiber.HeaderRetryAfter] = strconv.Itoa(heldRetryAfter)
		}
		return a, err
	}
	if claim.TakenOver {
		if err := s.keys.MarkAttempt(ctx, nil, claim); err != nil {
			if errors.Is(err, idempotency.ErrLostClaim) {
				return Answer{}, keyInUse()
			}
			return Answer{}, dbUnavailable()
		}
	}
	// Sent only within the claim's lease, and bounded by it (see Create).
	cctx, cancelRefund := s.withinLease(ctx, claim)
	defer cancelRefund()
	if cctx.Err() != nil {
		return Answer{}, keyInUse()
	}
	p, err := s.store.Get(ctx, m.ID, r.PaymentID)
	if err != nil {
		return s.unknownRefund(ctx, claim, &r) // nothing sent; the key stays for a retry
	}
	failpoint.Hit("before_refund")
	start := time.Now()
	res, err := prov.Refund(cctx, providers.RefundRequest{
		Reference: r.ProviderReference, ChargeReference: p.ProviderReference, TransactionID: p.ProviderTransactionID,
		Amount: r.Amount, Currency: r.Currency, Reason: r.Reason,
	})
	s.observeProvider(r.Provider, "refund", err, time.Since(start))
	res = cleaned(ctx, s.cfg.Log, r.Provider, "refund", res)
	failpoint.Hit("after_refund")
	rctx, cancel := s.recordContext(ctx)
	defer cancel()
	switch {
	case errors.Is(err, providers.ErrNotCharged) && !redrive:
		return s.refundNotSent(rctx, claim, &r, err)
	case err != nil:
		s.cfg.Log.WarnContext(ctx, "refund outcome unknown; left in progress",
			"merchant_id", m.ID, "refund_id", r.ID, "provider", r.Provider, "err", err)
		return s.unknownRefund(rctx, claim, &r)
	case !res.Outcome.Final():
		return s.unknownRefund(rctx, claim, &r)
	}
	a, err := s.finishRefund(rctx, claim, &r, res)
	if err != nil {
		if _, ok := problem.As(err); ok {
			return a, err
		}
		s.cfg.Log.ErrorContext(ctx, "refund answered but its outcome could not be recorded; answered 202, left in progress",
			"merchant_id", m.ID, "refund_id", r.ID, "err", err)
		return s.unknownRefund(rctx, claim, &r)
	}
	return a, nil
}

// openRefund writes (or re-opens) the refund row, reserving its amount on
// the payment, in the claim's commit. redrive is true when an earlier
// attempt's outcome is unknown (a takeover of a pending refund).
func (s *Service) openRefund(ctx context.Context, claim idempotency.Claim, merchantID, paymentID string, in refundInput) (r Refund, redrive bool, err error) {
	now := s.now()
	err = s.keys.Persist(ctx, claim, func(tx *gorm.DB) error {
		existing, err := s.store.RefundByKey(ctx, tx, merchantID, claim.Key)
		switch {
		case errors.Is(err, ErrNotFound):
			// A key a payment holds is that payment's request for good:
			// its key's stored answer purged (KEY_TTL), the key is claimed
			// afresh here, and a refund made under it would leave the
			// payment's own retry a 422 instead of the ledger's answer.
			if _, err := s.store.GetByKey(ctx, tx, merchantID, claim.Key); err == nil {
				return errMismatch
			} else if !errors.Is(err, ErrNotFound) {
				return err
			}
			return s.newRefund(ctx, tx, claim, merchantID, paymentID, in, &r)
		case err != nil:
			return err
		}
		if existing.PaymentID != paymentID ||
			(existing.RequestHash != "" && existing.RequestHash != claim.RequestHash && existing.RequestHash != claim.LegacyHash &&
				!(existing.Status == RefundFailed && notSent(existing.FailureCode))) {
			return errMismatch
		}
		r = existing
		// The key names its refund, as newRefund's does: a key claimed
		// afresh after a release is a new row, and a settler that found
		// none there would take it for a payment's (Settle).
		if claim.ResourceID != r.ID {
			if err := s.keys.SetResource(ctx, tx, claim, r.ID); err != nil {
				return err
			}
		}
		from, fromCode, fromAttempts := r.Status, r.FailureCode, r.Attempts
		pastWindow := r.retryable() && fromCode == FailureNotProcessed && r.age() > redriveWindow
		if pastWindow {
			// As for a payment (see open): released as never made, past
			// the window in which sending it again is safe, a retry could
			// only look it up — and each would put the recheck off. It
			// waits for the recheck; once that has confirmed the provider
			// has none, it is sent again.
			at, due, err := s.store.refundRecheckDue(ctx, tx, merchantID, r.ID)
			if err != nil {
				return err
			}
			if due {
				return recheckFirst{at: at, refund: true}
			}
		}
		switch {
		case r.retryable():
			// Released after a certain non-refund: a new attempt, with the
			// same reference, whose amount is reserved again. After the
			// provider was unavailable (it never had the refund), what
			// this request asks for — its body may differ — and without an
			// amount all that is left now. After not_processed the same
			// reference is sent again, to find the refund the provider may
			// have made after all (Stripe dedupes it; the other adapters
			// look the reference up first): the first attempt's amount,
			// however much is left now.
			want := in.Amount
			if fromCode == FailureNotProcessed {
				want = r.Amount
			}
			_, amount, err := s.reserveAmount(ctx, tx, merchantID, paymentID, want)
			if err != nil {
				return err
			}
			r.Amount, r.Reason, r.Metadata = amount, in.Reason, in.Metadata
			r.Status, r.FailureCode, r.FailureMessage = RefundPending, "", ""
			redrive = fromCode == FailureNotProcessed && !pastWindow
		case r.final():
			return nil // answered from the ledger
		default:
			redrive = true // taken over: re-sent with the same reference
		}
		r.Attempts++
		r.RequestHash = claim.RequestHash
		r.UpdatedAt = now
		// Again, for a refund created by a version that recorded the id
		// at the payment's completion instead (a rolling deploy).
		if err := s.store.recordTransaction(ctx, tx, merchantID, paymentID); err != nil {
			return err
		}
		return s.store.reopenRefund(ctx, tx, &r, from, fromCode, fromAttempts)
	})
	if errors.Is(err, idempotency.ErrLostClaim) || errors.Is(err, ErrConflict) {
		return Refund{}, false, keyInUse()
	}
	return r, redrive, err
}

// newRefund reserves the amount and inserts the refund of a first claim.
func (s *Service) newRefund(ctx context.Context, tx *gorm.DB, claim idempotency.Claim, merchantID, paymentID string, in refundInput, r *Refund) error {
	p, amount, err := s.reserveAmount(ctx, tx, merchantID, paymentID, in.Amount)
	if err != nil {
		return err
	}
	*r = Refund{
		MerchantID: merchantID, ID: ids.New("re_"), PaymentID: paymentID, IdempotencyKey: claim.Key,
		Amount: amount, Currency: p.Currency, Status: RefundPending, Reason: in.Reason, Metadata: in.Metadata,
		Provider: p.Provider, ProviderReference: providers.RefundReference(merchantID, claim.Key),
		RequestHash: claim.RequestHash, Attempts: 1,
	}
	if err := s.store.insertRefund(ctx, tx, r); err != nil {
		return err
	}
	// Committed before the provider hears of the refund, so its event,
	// if it names the charge only by transaction id, finds the payment.
	if err := s.store.recordTransaction(ctx, tx, merchantID, paymentID); err != nil {
		return err
	}
	// The key names its refund, so a settler knows what it holds.
	return s.keys.SetResource(ctx, tx, claim, r.ID)
}

// reserveAmount reserves want on the payment, or all that is left of it
// when want is zero, and returns the payment as read and the amount. The
// payment is read under its row lock, so what is left cannot change
// before the reservation: a refund in flight failing meanwhile (its amount
// given back in its own transaction) is either seen or waits, and a "no
// room" answer never names an amount_refundable that would have fitted.
func (s *Service) reserveAmount(ctx context.Context, tx *gorm.DB, merchantID, paymentID string, want int64) (Payment, int64, error) {
	p, err := s.store.getForUpdate(ctx, tx, merchantID, paymentID)
	if errors.Is(err, ErrNotFound) {
		return Payment{}, 0, refundClaimErr{errPaymentNotFound}
	}
	if err != nil {
		return Payment{}, 0, err
	}
	if p.Status != StatusSucceeded {
		return Payment{}, 0, refundClaimErr{errNotRefundable}
	}
	left := p.Amount - p.AmountRefunded
	amount := want
	if amount == 0 {
		amount = left
	}
	if amount <= 0 || amount > left {
		return Payment{}, 0, refundClaimErr{exceedsRemaining(max(left, 0))}
	}
	ok, err := s.store.reserve(ctx, tx, merchantID, paymentID, amount)
	if err != nil {
		return Payment{}, 0, err
	}
	if !ok {
		return Payment{}, 0, ErrConflict // changed under the lock: cannot happen
	}
	return p, amount, nil
}

// finishRefund records a final refund outcome and completes the key with
// the answer, in one transaction; a failed refund gives its amount back.
func (s *Service) finishRefund(ctx context.Context, claim idempotency.Claim, r *Refund, res providers.RefundResult) (Answer, error) {
	var answer Answer
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.settleRefundTx(ctx, tx, r, res); err != nil {
			return err
		}
		answer = renderRefund(r)
		return s.keys.Complete(ctx, tx, claim, answer)
	})
	if errors.Is(err, idempotency.ErrLostClaim) {
		return Answer{}, keyInUse()
	}
	return answer, err
}

// settleRefundTx writes a refund's final outcome (giving a failed one's
// amount back) or, if another settler was first, reads the ledger's.
func (s *Service) settleRefundTx(ctx context.Context, tx *gorm.DB, r *Refund, res providers.RefundResult) error {
	f := refundParams{Status: RefundSucceeded, RefundID: res.RefundID, At: s.now()}
	if res.Outcome == providers.OutcomeFailed {
		f.Status, f.FailureCode, f.FailureMessage = RefundFailed, res.FailureCode, res.FailureMessage
		if f.FailureCode == "" {
			f.FailureCode = "refund_failed"
		}
	}
	ok, err := s.store.finishRefund(ctx, tx, r.MerchantID, r.ID, f)
	if err != nil {
		return err
	}
	if !ok {
		cur, err := s.store.RefundByKey(ctx, tx, r.MerchantID, r.IdempotencyKey)
		if err != nil {
			return err
		}
		*r = cur
		return nil
	}
	f.applyTo(r)
	if r.Status == RefundFailed {
		if err := s.store.unreserve(ctx, tx, r.MerchantID, r.PaymentID, r.Amount); err != nil {
			return err
		}
	}
	return s.emitRefund(ctx, tx, r)
}

// emitRefund writes the event of a refund's final state (or its flag for
// review) in tx.
func (s *Service) emitRefund(ctx context.Context, tx *gorm.DB, r *Refund) error {
	typ := events.RefundSucceeded
	switch r.Status {
	case RefundFailed:
		typ = events.RefundFailed
	case RefundRequiresReview:
		typ = events.RefundRequiresReview
	}
	return s.cfg.Events.Emit(ctx, tx, events.Params{MerchantID: r.MerchantID, Type: typ, ObjectID: r.ID, Attempt: r.Attempts, Code: r.FailureCode, Object: r.View()})
}

// completeRefund stores the ledger's final answer under the key.
func (s *Service) completeRefund(ctx context.Context, claim idempotency.Claim, r *Refund) (Answer, error) {
	answer := renderRefund(r)
	err := s.keys.Complete(ctx, nil, claim, answer)
	if errors.Is(err, idempotency.ErrLostClaim) {
		return Answer{}, keyInUse()
	}
	return answer, err
}

// refundNotSent records a certain non-refund (failed, provider
// unavailable: the amount given back) and releases the key, so the app's
// retry refunds afresh with the same reference. An amount the provider
// cannot take is 422 amount_not_supported, as for a payment.
func (s *Service) refundNotSent(ctx context.Context, claim idempotency.Claim, r *Refund, cause error) (Answer, error) {
	code, msg := FailureProviderUnavailable, "The provider did not accept the refund; retry later."
	rule, refused := amountRule(cause)
	if refused {
		code, msg = FailureAmountNotSupported, "The provider cannot take this amount: "+rule+"."
	}
	ok, err := s.neverRefunded(ctx, claim, r, code, msg)
	switch {
	case errors.Is(err, idempotency.ErrLostClaim):
		return Answer{}, keyInUse()
	case err != nil:
		s.cfg.Log.ErrorContext(ctx, "could not record a certain non-refund; answered 503, left in progress", "refund_id", r.ID, "err", err)
		return Answer{}, dbUnavailable()
	case !ok:
		return s.completeRefund(ctx, claim, r)
	}
	if refused {
		s.cfg.Log.InfoContext(ctx, "provider cannot take the refund's amount; not sent, key released",
			"merchant_id", r.MerchantID, "payment_id", r.PaymentID, "refund_id", r.ID, "provider", r.Provider, "err", cause)
		return Answer{}, amountNotSupported(rule, "refunded").With("refund_id", r.ID)
	}
	s.cfg.Log.WarnContext(ctx, "provider did not refund; key released", "merchant_id", r.MerchantID, "payment_id", r.PaymentID, "refund_id", r.ID, "provider", r.Provider, "err", cause)
	if errors.Is(cause, providers.ErrUnknownProvider) {
		// An operator removed the merchant's account with the payment's
		// provider: no retry can help until one is added back.
		return Answer{}, problem.New(fiber.StatusConflict, "provider_account_missing",
			"the merchant has no account with this payment's provider ("+r.Provider+") any more; nothing was refunded; "+
				"retry with the same Idempotency-Key once an operator has added it back").With("refund_id", r.ID)
	}
	return Answer{}, problem.New(fiber.StatusServiceUnavailable, "provider_unavailable",
		"the payment provider is unavailable and did not refund; retry with the same Idempotency-Key").
		WithRetryAfter(5).With("refund_id", r.ID)
}

// neverRefunded fails a pending refund with a code that lets its key be
// claimed afresh, gives its amount back and releases the key, in one
// transaction, only while the claim owns the key. ok is false when the
// refund was already final (r is then the ledger's).
func (s *Service) neverRefunded(ctx context.Context, claim idempotency.Claim, r *Refund, code, msg string) (ok bool, err error) {
	f := refundParams{Status: RefundFailed, FailureCode: code, FailureMessage: msg, At: s.now()}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if ok, err = s.store.finishRefund(ctx, tx, r.MerchantID, r.ID, f); err != nil || !ok {
			return err
		}
		if err := s.store.unreserve(ctx, tx, r.MerchantID, r.PaymentID, r.Amount); err != nil {
			return err
		}
		failed := *r
		f.applyTo(&failed)
		if err := s.emitRefund(ctx, tx, &failed); err != nil {
			return err
		}
		if code == FailureNotProcessed {
			// Provisional: looked up once more, RECHECK_AFTER from now.
			if err := s.store.scheduleRefundRecheck(ctx, tx, r.MerchantID, r.ID, s.cfg.RecheckAfter); err != nil {
				return err
			}
		}
		return s.keys.ReleaseTx(ctx, tx, claim)
	})
	if err != nil {
		return false, err
	}
	if !ok {
		cur, err := s.store.RefundByKey(ctx, nil, r.MerchantID, r.IdempotencyKey)
		if err != nil {
			return false, err
		}
		*r = cur
		return false, nil
	}
	f.applyTo(r)
	return true, nil
}

// unknownRefund answers 202 with the refund pending; the key stays in
// progress but this request gives up its lease.
func (s *Service) unknownRefund(ctx context.Context, claim idempotency.Claim, r *Refund) (Answer, error) {
	if err := s.keys.LeaveInProgress(ctx, claim); err != nil && !errors.Is(err, idempotency.ErrLostClaim) {
		s.cfg.Log.WarnContext(ctx, "could not end lease early", "refund_id", r.ID, "err", err)
	}
	body, err := json.Marshal(r.View())
	if err != nil {
		return Answer{}, err
	}
	return Answer{Status: fiber.StatusAccepted, Header: map[string]string{
		fiber.HeaderContentType: fiber.MIMEApplicationJSON,
		fiber.HeaderLocation:    refundLocation(r.ID),
		fiber.HeaderRetryAfter:  "2",
	}, Body: body}, nil
}

// lookUpRefundInstead settles an old pending refund for a retry by lookup.
func (s *Service) lookUpRefundInstead(ctx context.Context, claim idempotency.Claim, r *Refund) (Answer, error) {
	st, err := s.settleRefund(ctx, claim, claim.SinceAttempt >= s.cfg.StaleAfter)
	if err != nil {
		return s.unknownRefund(ctx, claim, r)
	}
	switch st {
	case Resolved, Skipped, Reopened: // Reopened: released, then found made after all (lookRefundOnceMore)
		return s.storedAnswer(ctx, claim)
	case Released:
		return Answer{}, problem.New(fiber.StatusServiceUnavailable, "provider_unavailable",
			"the provider never received this refund; retry with the same Idempotency-Key to send it").
			WithRetryAfter(1).With("refund_id", r.ID)
	default:
		return s.unknownRefund(ctx, claim, r)
	}
}

// settleRefund is settle for a key whose resource is a refund: LookupRefund,
// never Refund; a refund the provider never saw is released (and its
// amount given back) only when mayRelease.
func (s *Service) settleRefund(ctx context.Context, claim idempotency.Claim, mayRelease bool) (Settlement, error) {
	r, err := s.store.RefundByKey(ctx, nil, claim.MerchantID, claim.Key)
	if errors.Is(err, ErrNotFound) {
		return Released, s.keys.Release(ctx, claim)
	}
	if err != nil {
		return "", err
	}
	if r.retryable() {
		return Released, s.keys.Release(ctx, claim)
	}
	if r.final() {
		others, err := s.anotherRequests(ctx, claim, r.RequestHash)
		if err != nil {
			return "", err
		}
		if others {
			return Released, s.keys.Release(ctx, claim)
		}
		if _, err := s.completeRefund(ctx, claim, &r); err != nil {
			return "", err
		}
		return Skipped, nil
	}
	if err := s.pace(ctx, r.Provider, claim.LeaseEnds); err != nil {
		// The run ended while waiting its turn: nothing asked, the key
		// left for the next run.
		rctx, cancel := s.recordContext(ctx)
		defer cancel()
		return Pending, errors.Join(err, s.keys.LeaveInProgress(rctx, claim))
	}
	lctx, cancelLookup := s.withinLease(ctx, claim)
	at := s.now()
	res, err := s.lookupRefund(lctx, &r)
	cancelLookup()
	caller := ctx
	ctx, cancel := s.recordContext(ctx)
	defer cancel()
	mayRelease = mayRelease && claim.SinceAttempt >= s.refundReleaseAfter(ctx, &r)
	if err != nil || !res.Outcome.Final() && res.Outcome != providers.OutcomeNotFound ||
		res.Outcome == providers.OutcomeNotFound && !mayRelease {
		return s.refundStillUnknown(ctx, claim, &r, err, askedRefund(res, err, &at))
	}
	if res.Outcome == providers.OutcomeNotFound {
		ok, err := s.neverRefunded(ctx, claim, &r, FailureNotProcessed,
			"The provider never received the refund; retry with the same Idempotency-Key.")
		if err != nil {
			return "", err
		}
		if !ok {
			if _, err := s.completeRefund(ctx, claim, &r); err != nil {
				return "", err
			}
			return Skipped, nil
		}
		s.cfg.Log.InfoContext(ctx, "refund released: the provider has no record of it (failed not_processed; its amount given back, its key free for a retry, a recheck scheduled)",
			"merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID, "idempotency_key", claim.Key, "provider", r.Provider)
		return s.lookRefundOnceMore(caller, r), nil
	}
	if _, err := s.finishRefund(ctx, claim, &r, res); err != nil {
		return "", err
	}
	s.cfg.Log.InfoContext(ctx, "refund settled by lookup", "merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID,
		"idempotency_key", claim.Key, "provider", r.Provider, "outcome", string(res.Outcome))
	return Resolved, nil
}

// lookRefundOnceMore is lookOnceMore for a refund just released as never
// made: Reopened when the provider has made it after all (re-opened as
// succeeded, its key re-created done), Pending when it has it in flight
// (back to pending, its key in progress), Released otherwise. A refund
// that landed while the release's lookup was out had its event put off
// (the key was held), and the merchant, told it failed, might refund the
// customer again before its recheck RECHECK_AFTER later.
func (s *Service) lookRefundOnceMore(ctx context.Context, r Refund) Settlement {
	// A turn at the sweeper's pace within half a lease or none (the
	// recheck is there), the lookup within the lease, as a recheck's.
	leaseEnds := time.Now().Add(s.cfg.Lease)
	res, err := providers.RefundResult{}, s.pace(ctx, r.Provider, leaseEnds)
	if err == nil {
		lctx, cancel := s.leaseBound(ctx, leaseEnds)
		res, err = s.lookupRefund(lctx, &r)
		cancel()
	}
	if err != nil {
		if !errors.Is(err, errNoTurn) && ctx.Err() == nil {
			s.cfg.Log.WarnContext(ctx, "could not look a released refund up once more; its recheck is scheduled",
				"merchant_id", r.MerchantID, "refund_id", r.ID, "provider", r.Provider, "err", err)
		}
		return Released
	}
	if res.Outcome != providers.OutcomeSucceeded && res.Outcome != providers.OutcomePending {
		return Released
	}
	rctx, cancel := s.recordContext(ctx)
	defer cancel()
	st, err := s.reopenReleasedRefund(rctx, r, res)
	switch {
	case err != nil:
		s.cfg.Log.WarnContext(ctx, "could not record what a released refund's second look found; its recheck is scheduled",
			"merchant_id", r.MerchantID, "refund_id", r.ID, "provider", r.Provider, "err", err)
		return Released
	case st == Reopened && res.Outcome == providers.OutcomePending:
		return Pending
	case st == Reopened:
		return Reopened
	}
	return Released
}

// refundReleaseAfter is how long after a refund was last sent "the provider
// does not have it" may release it, letting the app's retry send it again:
// SWEEP_STALE_AFTER where the provider dedupes the refund's reference, and
// RECHECK_AFTER — the bound on how late a provider may land what it was
// sent — where it does not (providers.RefundDeduper), since a refund
// sent again before the provider lists the first is made twice.
func (s *Service) refundReleaseAfter(ctx context.Context, r *Refund) time.Duration {
	prov, err := s.accounts.Provider(ctx, r.MerchantID, r.Provider)
	if err != nil || !providers.DedupesRefunds(prov) {
		return s.cfg.RecheckAfter // unknown: the longer wait
	}
	return s.cfg.StaleAfter
}

// refundStillUnknown leaves a refund's key in progress for the next run
// and, after ReviewAfter, flags the refund requires_review for a human —
// only while the claim still owns the key (as stillUnknown for payments),
// with why (looked) for the operator desk.
func (s *Service) refundStillUnknown(ctx context.Context, claim idempotency.Claim, r *Refund, cause error, looked asked) (Settlement, error) {
	if cause != nil {
		cause = fmt.Errorf("payments: settle refund %s: %w", r.ID, cause)
	}
	if r.Status == RefundRequiresReview || r.age() < s.cfg.ReviewAfter {
		var err error
		if r.Status == RefundRequiresReview {
			err = s.stillInReview(ctx, claim, r.MerchantID, r.ID, looked)
		} else {
			err = s.keys.LeaveInProgress(ctx, claim)
		}
		if err != nil && !errors.Is(err, idempotency.ErrLostClaim) {
			return "", errors.Join(cause, err)
		}
		if r.Status == RefundRequiresReview {
			return Review, cause
		}
		return Pending, cause
	}
	flagged := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.keys.LeaveInProgressTx(ctx, tx, claim); err != nil {
			return err
		}
		at := s.now()
		ok, err := s.store.markRefundReview(ctx, tx, r.MerchantID, r.ID, at)
		if err != nil || !ok {
			return err
		}
		if err := s.store.flagReview(ctx, tx, r.MerchantID, r.ID, at, looked.why()); err != nil {
			return err
		}
		flagged = true
		r.Status, r.UpdatedAt = RefundRequiresReview, at
		return s.emitRefund(ctx, tx, r)
	})
	switch {
	case errors.Is(err, idempotency.ErrLostClaim):
		return Skipped, cause
	case err != nil:
		return "", errors.Join(cause, err)
	case flagged:
		// An error: a person must act (README: the review queue).
		s.cfg.Log.ErrorContext(ctx, "refund requires review: the provider gave no final outcome (pending, not found yet, or could not be asked) within REVIEW_AFTER",
			"merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID, "idempotency_key", claim.Key, "provider", r.Provider,
			"reason", string(looked.why().Reason))
	}
	return Review, cause
}

// lookupRefund asks the refund's provider about its reference.
func (s *Service) lookupRefund(ctx context.Context, r *Refund) (providers.RefundResult, error) {
	prov, err := s.accounts.Provider(ctx, r.MerchantID, r.Provider)
	if err != nil {
		return providers.RefundResult{}, err
	}
	p, err := s.store.Get(ctx, r.MerchantID, r.PaymentID)
	if err != nil {
		return providers.RefundResult{}, err
	}
	start := time.Now()
	res, err := prov.LookupRefund(ctx, providers.RefundLookup{
		Reference: r.ProviderReference, ChargeReference: p.ProviderReference, TransactionID: p.ProviderTransactionID,
		RefundID: r.ProviderRefundID,
	})
	s.observeProvider(r.Provider, "refund_lookup", err, time.Since(start))
	return cleaned(ctx, s.cfg.Log, r.Provider, "refund_lookup", res), err
}

// PollRefund returns the merchant's refund; a pending one nobody works on
// is first settled by lookup, at most once per PollEvery (as Poll).
func (s *Service) PollRefund(ctx context.Context, merchantID, id string) (Refund, error) {
	r, err := s.store.GetRefund(ctx, merchantID, id)
	if err != nil || r.final() {
		return r, err
	}
	claim, ok, err := s.keys.TakeOver(ctx, idempotency.TakeOverParams{
		MerchantID: merchantID, Key: r.IdempotencyKey, Lease: s.cfg.Lease, Every: s.cfg.PollEvery,
	})
	if err != nil || !ok {
		return r, nil
	}
	lctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	if st, err := s.settleRefund(lctx, claim, claim.SinceAttempt >= s.cfg.StaleAfter); err != nil {
		s.cfg.Log.WarnContext(ctx, "poll: settle refund", "refund_id", r.ID, "settlement", string(st), "err", err)
	}
	if cur, err := s.store.GetRefund(ctx, merchantID, id); err == nil {
		r = cur
	}
	return r, nil
}

// settleRefundsOf settles a payment's pending refunds for a provider's
// refund event — by LookupRefund each, never trusting the event's own
// status, and never releasing (a webhook cannot know a refund is late).
// Refunds whose key is being worked on are left to their owner.
func (s *Service) settleRefundsOf(ctx context.Context, p Payment, refundReference string) (settled, deferred int, err error) {
	pending, err := s.store.pendingRefunds(ctx, p.MerchantID, p.ID)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range pending {
		if refundReference != "" && r.ProviderReference != refundReference {
			continue
		}
		claim, ok, err := s.keys.TakeOver(ctx, idempotency.TakeOverParams{MerchantID: r.MerchantID, Key: r.IdempotencyKey, Lease: s.cfg.Lease})
		if err != nil {
			return settled, deferred, err
		}
		if !ok {
			deferred++
			continue
		}
		st, err := s.settleRefund(ctx, claim, false)
		if err != nil {
			return settled, deferred, err
		}
		if st == Resolved || st == Skipped {
			settled++
		}
	}
	released, err := s.store.releasedRefunds(ctx, p.MerchantID, p.ID)
	if err != nil {
		return settled, deferred, err
	}
	for _, r := range released {
		if refundReference != "" && r.ProviderReference != refundReference {
			continue
		}
		st, err := s.recheckRefund(ctx, r)
		if err != nil {
			return settled, deferred, err
		}
		if st == Reopened {
			settled++
		}
	}
	if refundReference != "" && settled == 0 && deferred == 0 {
		// Not one this event has just settled: that was looked up.
		failed, err := s.refundFailedSince(ctx, p, refundReference)
		if err != nil {
			return settled, deferred, err
		}
		if failed {
			settled++
		}
	}
	return settled, deferred, nil
}

// refundFailedSince looks up the payment's succeeded refund under
// reference, for the provider's event naming it: a refund can fail after
// it succeeded (Stripe's refund.updated when the customer's card or
// account has closed since; the money goes back to the merchant's
// balance). One the provider now has failed is failed in the ledger too —
// its amount given back to the payment, to be refunded again some other
// way, and a refund.failed event telling the merchant — in one
// transaction, conditional on it still being succeeded. The key's stored
// answer stays what was answered then.
//
// Only the provider's refund the ledger recorded counts: a look-up by
// reference can find another under it (a refund released and sent again),
// and failing ours for that one's failure would give back an amount the
// customer was refunded — a second refund could follow.
//
// This event may be the only word of the failure (nothing looks at a
// succeeded refund again), so a look-up that cannot be made fails it, for
// the provider to send it again — but for a merchant's provider account
// removed since, which no retry changes: a WARN.
func (s *Service) refundFailedSince(ctx context.Context, p Payment, reference string) (failed bool, err error) {
	r, err := s.store.succeededRefund(ctx, p.MerchantID, p.ID, reference)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	res, err := s.lookupRefund(ctx, &r)
	if errors.Is(err, providers.ErrUnknownProvider) {
		s.cfg.Log.WarnContext(ctx, "refund event: the merchant has no account with the refund's provider any more; the refund it names is not looked up",
			"refund_id", r.ID, "provider", r.Provider)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if res.Outcome != providers.OutcomeFailed {
		return false, nil
	}
	return s.failSince(ctx, &r, res)
}

// failSince fails succeeded refund r, which the provider's answer res says
// has failed since (refundFailedSince): only when res is about the
// provider's refund the ledger recorded.
func (s *Service) failSince(ctx context.Context, r *Refund, res providers.RefundResult) (failed bool, err error) {
	if r.ProviderRefundID == "" || res.RefundID != r.ProviderRefundID {
		s.cfg.Log.ErrorContext(ctx, "the provider has a failed refund under a succeeded refund's reference that is not the one recorded; the ledger is unchanged: check it at the provider",
			"merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID, "provider", r.Provider,
			"provider_refund_id", r.ProviderRefundID, "failed_provider_refund_id", res.RefundID)
		return false, nil
	}
	f := refundParams{Status: RefundFailed, FailureCode: cmp.Or(res.FailureCode, "refund_failed"), FailureMessage: res.FailureMessage, At: s.now()}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		ok, err := s.store.failSucceededRefund(ctx, tx, r.MerchantID, r.ID, f)
		if err != nil || !ok {
			return err
		}
		f.applyTo(r)
		if err := s.store.unreserve(ctx, tx, r.MerchantID, r.PaymentID, r.Amount); err != nil {
			return err
		}
		failed = true
		return s.emitRefund(ctx, tx, r)
	})
	if err != nil {
		return false, err
	}
	if failed {
		s.cfg.Log.WarnContext(ctx, "a refund the provider had reported succeeded has failed since; its amount is given back to the payment",
			"merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID, "provider", r.Provider,
			"amount", r.Amount, "currency", r.Currency, "failure_code", r.FailureCode)
	}
	return failed, nil
}

// A refund, like a charge, can land after the provider said it had none:
// released as not_processed, it is provisional. The app's retry with the
// key sends the same reference again, which the provider dedupes to the
// refund it made; and a provider's signed refund event for the payment
// makes the gateway look again (recheckRefund). If the provider has the
// refund succeeded, the refund is re-opened to succeeded — its amount
// reserved again and its key re-created done with the answer, so a retry
// replays it.

// DueRefundRechecks takes refunds whose recheck is due (see
// Store.DueRefundRechecks), for the sweeper; each is then given to
// RecheckRefund.
func (s *Service) DueRefundRechecks(ctx context.Context, limit int) ([]Refund, error) {
	leaseEnds := time.Now().Add(s.cfg.Lease) // as DueRechecks
	due, err := s.store.DueRefundRechecks(ctx, limit, s.cfg.Lease)
	for i := range due {
		due[i].recheckLease = leaseEnds
	}
	return due, err
}

// RecheckRefund is the scheduled look, RECHECK_AFTER after its release, at
// a refund released as not_processed: Reopened when the provider has it
// (succeeded, or pending: back to pending for the sweeper), Confirmed when
// it still has nothing (final for good), Skipped when a retry moved the
// refund on; a lookup that fails, or a refund the provider has whose
// amount other refunds in flight hold, is looked at again after
// SWEEP_STALE_AFTER (Pending).
func (s *Service) RecheckRefund(ctx context.Context, r Refund) (Settlement, error) {
	if r.Status == RefundSucceeded || (r.Status == RefundFailed && r.FailureCode == FailureResolved) {
		return s.watchRefundResolution(ctx, r)
	}
	st := Skipped
	var err error
	if r.Status == RefundFailed && r.FailureCode == FailureNotProcessed {
		st, err = s.recheckRefund(paced(ctx), r)
	}
	if st == Pending && err == nil {
		return st, nil // its amount held by refunds in flight: rescheduled
	}
	rctx, cancel := s.recordContext(ctx)
	defer cancel()
	if errors.Is(err, errNoTurn) {
		return Pending, s.store.refundRecheckLater(rctx, r.MerchantID, r.ID, r.Attempts, s.cfg.StaleAfter, r.recheckTaken)
	}
	if err != nil && s.now().Sub(r.UpdatedAt) < s.cfg.ReviewAfter {
		return Pending, errors.Join(err, s.store.refundRecheckLater(rctx, r.MerchantID, r.ID, r.Attempts, s.cfg.StaleAfter, r.recheckTaken))
	}
	if err != nil {
		// The provider could not be asked for a whole REVIEW_AFTER since
		// the release: the failure stands, and a person is told (a
		// provider's event for the refund still makes the gateway look).
		s.cfg.Log.WarnContext(ctx, "refund recheck given up: the provider could not be asked since the release, REVIEW_AFTER ago; the refund stays failed not_processed",
			"merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID, "provider", r.Provider, "err", err)
		st = Pending
	}
	return st, errors.Join(err, s.store.refundRecheckLater(rctx, r.MerchantID, r.ID, r.Attempts, 0, r.recheckTaken))
}

// watchRefundResolution is watchResolution for a refund an operator
// resolved without the provider's final answer (ResolveRefund schedules
// it): an ERROR when the provider's answer now contradicts the resolution —
// a refund made after "failed" gave its amount back (the customer may be
// refunded twice), or none after "succeeded" (the customer was not
// refunded). A succeeded refund made by a retry after a release, whose
// recheck was left, is looked at once the same way: it agrees, or, failed
// at the provider since, is failed in the ledger as the provider's event
// would have it (failSince) — no operator's call stands in the way.
func (s *Service) watchRefundResolution(ctx context.Context, r Refund) (Settlement, error) {
	err := s.pace(paced(ctx), r.Provider, r.recheckLease)
	var res providers.RefundResult
	if err == nil {
		lctx, cancel := s.leaseBound(ctx, r.recheckLease)
		res, err = s.lookupRefund(lctx, &r)
		cancel()
	}
	next := time.Duration(0) // the watch ends
	switch {
	case errors.Is(err, errNoTurn):
		next, err = s.cfg.StaleAfter, nil
	case err == nil && res.Outcome == providers.OutcomePending && res.RefundID != "" && r.Status == RefundFailed:
		// The provider has the refund after all, in flight: ResolveRefund
		// would have refused "failed" for it, and it is usually paid out.
		s.cfg.Log.ErrorContext(ctx, "the provider has a refund in flight that an operator resolved as failed; its amount was given back and may be refunded twice",
			"merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID, "provider", r.Provider,
			"provider_refund_id", res.RefundID, "amount", r.Amount, "currency", r.Currency)
	case err != nil || res.Outcome == providers.OutcomePending:
		if s.now().Sub(r.UpdatedAt) < resolutionWatch {
			next = s.cfg.RecheckAfter
			break
		}
		s.cfg.Log.WarnContext(ctx, "stopped watching a refund an operator resolved: the provider still gives no final answer",
			"merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID, "provider", r.Provider, "status", string(r.Status))
	case res.Outcome == providers.OutcomeSucceeded && r.Status == RefundFailed:
		s.cfg.Log.ErrorContext(ctx, "the provider made a refund an operator resolved as failed; its amount was given back and may be refunded twice",
			"merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID, "provider", r.Provider,
			"provider_refund_id", res.RefundID, "amount", r.Amount, "currency", r.Currency)
	case res.Outcome == providers.OutcomeFailed && r.Status == RefundSucceeded:
		operator, aerr := s.resolvedByOperator(ctx, &r)
		if aerr != nil {
			// Whose call the ledger holds is unknown: looked at again.
			next, err = s.cfg.StaleAfter, aerr
			break
		}
		if operator {
			s.cfg.Log.ErrorContext(ctx, "the provider has no refund for one an operator resolved as succeeded; the customer was not refunded",
				"merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID, "provider", r.Provider,
				"provider_outcome", string(res.Outcome), "amount", r.Amount, "currency", r.Currency)
			break
		}
		// The recheck a release left, of a refund sent again and made
		// since: no operator's call to keep. The provider has failed it
		// since (a card closed), and this look may be the only word of it
		// (no webhook set up, or lost): the ledger follows the provider,
		// as for that webhook.
		fctx, cancel := s.recordContext(ctx)
		_, err = s.failSince(fctx, &r, res)
		cancel()
		if err != nil {
			// Not recorded: the watch goes on.
			next = s.cfg.StaleAfter
		}
	case res.Outcome != providers.OutcomeSucceeded && r.Status == RefundSucceeded:
		s.cfg.Log.ErrorContext(ctx, "the provider has no refund for one an operator resolved as succeeded; the customer was not refunded",
			"merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID, "provider", r.Provider,
			"provider_outcome", string(res.Outcome), "amount", r.Amount, "currency", r.Currency)
	}
	rctx, cancel := s.recordContext(ctx)
	defer cancel()
	st := Confirmed
	if next > 0 {
		st = Pending
	}
	return st, errors.Join(err, s.store.refundRecheckLater(rctx, r.MerchantID, r.ID, r.Attempts, next, r.recheckTaken))
}

// resolvedByOperator reports whether an operator resolved refund r, by
// the audit log: a succeeded refund is watched either for that or for the
// recheck its release left.
func (s *Service) resolvedByOperator(ctx context.Context, r *Refund) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&audit.Event{}).
		Where("target_type = ? AND target_id = ? AND tenant_id = ? AND action = ?", "refund", r.ID, r.MerchantID, audit.RefundResolved).
		Limit(1).Count(&n).Error
	return n > 0, err
}

// recheckRefund looks a refund released as not_processed up once more. One
// the provider has succeeded is re-opened as succeeded; one it has pending
// (in flight after all) goes back to pending, its key in progress again,
// for the sweeper to settle like any other. Anything else (not found,
// failed) leaves it as it is.
func (s *Service) recheckRefund(ctx context.Context, r Refund) (Settlement, error) {
	if err := s.pace(ctx, r.Provider, r.recheckLease); err != nil {
		return "", err
	}
	lctx, cancelLookup := s.leaseBound(ctx, r.recheckLease)
	res, err := s.lookupRefund(lctx, &r)
	cancelLookup()
	if err != nil {
		return "", err
	}
	if res.Outcome != providers.OutcomeSucceeded && res.Outcome != providers.OutcomePending {
		return Confirmed, nil
	}
	ctx, cancel := s.recordContext(ctx)
	defer cancel()
	return s.reopenReleasedRefund(ctx, r, res)
}

// keyOfRefund reports whether r's key, which exists, is r's own: a
// request for r holds it (or has finished with it), rather than another
// request that reused the key string after r's release.
func (s *Service) keyOfRefund(ctx context.Context, r *Refund) (bool, error) {
	rec, err := s.keys.Get(ctx, r.MerchantID, r.IdempotencyKey)
	switch {
	case errors.Is(err, idempotency.ErrNotFound), errors.Is(err, idempotency.ErrUnreadable):
		return false, nil // gone again, or sealed: another request's
	case err != nil:
		return false, err
	}
	return rec.ResourceID == r.ID || rec.RequestHash == r.RequestHash, nil
}

// reopenReleasedRefund re-opens a refund released as not_processed that
// the provider has after all — as succeeded, or as pending when still in
// flight — in one transaction that writes in the request path's order (the
// key, then the payment's reservation, then the refund), so a retry
// claiming the key at the same moment waits on it, or it on the retry,
// instead of deadlocking. Skipped when the refund moved on since it was
// read (a retry re-opened it and settles it itself).
func (s *Service) reopenReleasedRefund(ctx context.Context, read Refund, res providers.RefundResult) (Settlement, error) {
	f := refundParams{Status: RefundSucceeded, RefundID: res.RefundID, At: s.now()}
	if res.Outcome == providers.OutcomePending {
		f.Status = RefundPending
	}
	var r Refund
	var from int
	taken, held := false, false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if r, err = s.store.RefundByKey(ctx, tx, read.MerchantID, read.IdempotencyKey); err != nil {
			return err
		}
		if r.ID != read.ID || r.Status != RefundFailed || r.FailureCode != FailureNotProcessed {
			return errSkipped
		}
		from = r.Attempts
		f.applyTo(&r)
		if r.RequestHash == "" && f.Status == RefundPending {
			// Made before fingerprints were kept, the key cannot be bound
			// to its request again: left as it is.
			return errSkipped
		}
		// The key: done with the answer, or in progress (its lease lapsed)
		// for the sweeper. Made before fingerprints were kept, a
		// succeeded refund's key stays free: a retry claims it, finds the
		// refund final and answers it.
		if r.RequestHash != "" {
			var ok bool
			if f.Status == RefundSucceeded {
				ok, err = s.keys.PutDone(ctx, tx, r.MerchantID, r.IdempotencyKey, r.RequestHash, renderRefund(&r))
			} else {
				ok, err = s.keys.Reinstate(ctx, tx, r.MerchantID, r.IdempotencyKey, r.RequestHash, r.ID)
			}
			if err != nil {
				return err
			}
			if !ok {
				mine, err := s.keyOfRefund(ctx, &r)
				if err != nil {
					return err
				}
				if mine {
					// A retry has the key (this waited for its claim to
					// commit): it sends the refund again, which finds the
					// one the provider made, and settles it itself.
					return errSkipped
				}
				// The key string went to another request since the
				// release (keys are the merchant's, whatever they are
				// for): a succeeded refund is re-opened without it; one
				// still in flight, which would need its key for the
				// sweeper, waits for the provider's event of its outcome.
				if f.Status == RefundPending {
					return errSkipped
				}
			}
		}
		// Under the payment's row lock, a refund failing in another
		// transaction (its amount given back there) is seen whole by the
		// reads below, or not at all: read between its commit and a
		// "no room", it looked like room taken for good, and a refund the
		// provider made was left failed.
		if err := s.store.lockPayment(ctx, tx, r.MerchantID, r.PaymentID); err != nil {
			return err
		}
		ok, err := s.store.reserve(ctx, tx, r.MerchantID, r.PaymentID, r.Amount)
		if err != nil {
			return err
		}
		if !ok {
			// No room — unless the refund moved on meanwhile (a retry
			// without a fingerprint re-opened it, its amount with it).
			cur, err := s.store.RefundByKey(ctx, tx, read.MerchantID, read.IdempotencyKey)
			if err != nil {
				return err
			}
			taken = cur.Status == RefundFailed && cur.FailureCode == FailureNotProcessed && cur.Attempts == from
			if taken {
				// Refunds still in flight may hold the room only for a
				// while: the provider may refuse them (it has this one).
				if held, err = s.store.inFlightCouldMakeRoom(ctx, tx, r.MerchantID, r.PaymentID, r.ID, r.Amount); err != nil {
					return err
				}
			}
			return errSkipped
		}
		if ok, err = s.store.reopenReleasedRefund(ctx, tx, r.MerchantID, r.ID, from, f); err != nil {
			return err
		}
		if !ok {
			return errSkipped
		}
		if f.Status == RefundPending {
			return nil // its event comes with its outcome
		}
		return s.emitRefund(ctx, tx, &r)
	})
	switch {
	case err != nil && !errors.Is(err, errSkipped):
		return "", err
	case held && s.now().Sub(read.UpdatedAt) < s.cfg.ReviewAfter:
		// Its amount is held by refunds the provider has not finished:
		// if one fails, the room comes back. Looked at again after
		// SWEEP_STALE_AFTER (until REVIEW_AFTER since the release), by
		// the sweeper's recheck, instead of a person told now.
		s.cfg.Log.WarnContext(ctx, "refund found at the provider after its release as not_processed, but its amount is held by refunds still in flight: looked at again when they may have ended",
			"merchant_id", read.MerchantID, "refund_id", read.ID, "payment_id", read.PaymentID, "provider", read.Provider,
			"amount", read.Amount, "provider_status", string(res.Outcome))
		if err := s.store.recheckReleasedRefundAgain(ctx, read.MerchantID, read.ID, from, s.cfg.StaleAfter); err != nil {
			return "", err
		}
		return Pending, nil
	case taken:
		// The amount went to other refunds after the release: the
		// provider has refunded (or is refunding) more than the ledger
		// can hold. Only a person can settle that with the merchant.
		s.cfg.Log.ErrorContext(ctx, "refund found at the provider after its release as not_processed, but its amount has since gone to other refunds: the provider refunded more than the ledger shows; resolve with the merchant",
			"merchant_id", read.MerchantID, "refund_id", read.ID, "payment_id", read.PaymentID, "provider", read.Provider,
			"amount", read.Amount, "provider_status", string(res.Outcome))
		return Skipped, nil
	case err != nil:
		return Skipped, nil
	}
	s.cfg.Log.WarnContext(ctx, "refund re-opened: the provider has the refund it had no record of when the key was released",
		"merchant_id", r.MerchantID, "refund_id", r.ID, "payment_id", r.PaymentID, "provider", r.Provider, "status", string(r.Status))
	return Reopened, nil
}
