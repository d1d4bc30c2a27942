package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/providers"
)

// A charge can land after the provider said it had none: our call timed
// out, a lookup seconds later found nothing, and the charge was still
// queued at the provider. So a release as never charged (not_processed) is
// provisional. Until a later look shows the charge, the merchant sees the
// payment failed with failure_code not_processed, and a retry with the key
// charges again with the same reference (which the provider dedupes, so it
// answers the landed charge if there is one). The gateway itself looks
// again: once, RECHECK_AFTER after the release (the sweeper, Recheck), and
// whenever the provider's signed webhook says something happened to the
// reference (HandleWebhook). If either finds the charge final, the payment
// is re-opened to that outcome — succeeded — and the key, released, is
// re-created done with the answer, so a retry replays the success. A
// recheck that finds nothing again makes the failure final for good; one
// that finds the charge pending (or cannot ask the provider for a whole
// REVIEW_AFTER) puts the payment back to processing, with its key in
// progress, for the sweeper to settle like any other.

// Recheck results, counted by the sweeper.
const (
	// Reopened: the provider had the charge after all; the payment now
	// has the provider's outcome and its key replays it.
	Reopened Settlement = "reopened"
	// Confirmed: still nothing at the provider; the failure is final.
	Confirmed Settlement = "confirmed"
)

// DueRechecks takes payments whose recheck is due (see Store.DueRechecks),
// for the sweeper; each is then given to Recheck.
func (s *Service) DueRechecks(ctx context.Context, limit int) ([]Payment, error) {
	// Read before the statement that takes the lease: an instant before
	// it ends, whatever the database's clock says.
	leaseEnds := time.Now().Add(s.cfg.Lease)
	due, err := s.store.DueRechecks(ctx, limit, s.cfg.Lease)
	for i := range due {
		due[i].recheckLease = leaseEnds
	}
	return due, err
}

// Recheck looks a payment released as never charged up once more and
// settles it: Reopened when the provider has a final outcome, Confirmed
// when it still has nothing (final for good), Pending when it cannot tell
// yet (looked at again after SWEEP_STALE_AFTER).
func (s *Service) Recheck(ctx context.Context, p Payment) (Settlement, error) {
	return s.recheck(paced(ctx), p, true)
}

// recheck is Recheck; scheduled says whether this is the payment's
// scheduled recheck, which alone may end the rechecking (a webhook's
// lookup that finds nothing changes nothing).
func (s *Service) recheck(ctx context.Context, p Payment, scheduled bool) (Settlement, error) {
	if final(p.Status) && !p.retryable() {
		// Only an operator's resolution the provider had not confirmed
		// is final with a recheck due.
		if !scheduled {
			return Pending, nil
		}
		return s.watchResolution(ctx, p)
	}
	// later reschedules (or, after <= 0, ends) a scheduled recheck and
	// says what it came to: st, or Skipped when a retry re-opened the
	// payment meanwhile.
	later := func(st Settlement, after time.Duration) (Settlement, error) {
		if !scheduled {
			return Pending, nil
		}
		ok, err := s.store.RecheckLater(ctx, p, after)
		if err == nil && !ok {
			st = Skipped
		}
		return st, err
	}
	res, err := s.lookup(ctx, &p)
	switch {
	case errors.Is(err, errNoTurn):
		return later(Pending, s.cfg.StaleAfter)
	case res.Outcome.Final() && err == nil:
		return s.reopen(ctx, &p, res)
	case res.Outcome == providers.OutcomeNotFound && err == nil:
		return later(Confirmed, 0)
	case res.Outcome == providers.OutcomePending && err == nil:
		// The provider has the charge, still in flight: it is no longer
		// "never charged". Back to processing with its key in progress,
		// for the sweeper (and REVIEW_AFTER) to settle like any other.
		return s.reinstate(ctx, &p)
	case scheduled && p.age() >= s.cfg.ReviewAfter:
		// The provider could not be asked for a whole REVIEW_AFTER: the
		// same, so the sweeper flags it for a person.
		st, rerr := s.reinstate(ctx, &p)
		return st, errors.Join(err, rerr)
	default:
		st, lerr := later(Pending, s.cfg.StaleAfter)
		return st, errors.Join(err, lerr)
	}
}

// resolutionWatch bounds how long an operator's resolution is watched
// while the provider still holds the charge pending or cannot be asked.
const resolutionWatch = 7 * 24 * time.Hour

// watchResolution looks up a payment an operator resolved without the
// provider's final answer — it could not be asked, had no record yet, or
// still held the charge (Resolve schedules the look) — and raises an ERROR
// when the answer now contradicts the resolution: a charge made after it
// was failed, or none for one resolved as succeeded. A person settles that
// at the provider or with the merchant; the ledger and the merchant's
// stored answer stay the operator's. The provider's final answer, or no
// record, ends the watch; pending or unreachable, it is looked at again
// every RECHECK_AFTER, for at most resolutionWatch. Webhooks are not
// waited for: a merchant need not have set them up at the provider.
func (s *Service) watchResolution(ctx context.Context, p Payment) (Settlement, error) {
	res, err := s.lookup(ctx, &p)
	if err == nil && p.Status == StatusSucceeded {
		// A refund made through the gateway while the provider was asked
		// reads there as reversed or not charged: the alarms below weigh
		// what is refunded now, not what the take read. Unread, the
		// take's amount stands: the provider's answer is still weighed,
		// not dropped for a database blip.
		if cur, gerr := s.store.getTx(ctx, nil, p.MerchantID, p.ID); gerr == nil {
			p.AmountRefunded = cur.AmountRefunded
		} else {
			s.cfg.Log.WarnContext(ctx, "watching an operator's resolution: could not read what is refunded now; weighing the amount read before the lookup",
				"merchant_id", p.MerchantID, "payment_id", p.ID, "err", gerr)
		}
	}
	next := time.Duration(0) // the watch ends
	switch {
	case errors.Is(err, errNoTurn):
		next, err = s.cfg.StaleAfter, nil
	case errors.Is(err, providers.ErrReferenceConflict):
		// The reference holds another charge (logged): the provider can
		// never tell about this one.
		err = nil
	// Reversed: charged and given back since, outside the gateway; final at
	// the provider. Nothing is owed on a payment resolved as failed; one
	// resolved as succeeded and refunded through the gateway since is the
	// "since refunded" case below.
	case err == nil && res.Reversed && p.Status == StatusFailed:
		s.cfg.Log.InfoContext(ctx, "a payment an operator resolved as failed was charged and has been reversed at the provider since; nothing is owed",
			"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider)
	case err == nil && res.Reversed && p.AmountRefunded == 0:
		s.cfg.Log.ErrorContext(ctx, "a payment an operator resolved as succeeded has been reversed at the provider (refunded or charged back there); settle it with the merchant",
			"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider, "amount", p.Amount, "currency", p.Currency)
	case err != nil || (res.Outcome == providers.OutcomePending && !res.Reversed):
		if s.now().Sub(p.UpdatedAt) < resolutionWatch {
			next = s.cfg.RecheckAfter
			break
		}
		s.cfg.Log.WarnContext(ctx, "stopped watching a payment an operator resolved: the provider still gives no final answer",
			"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider, "status", string(p.Status))
	case res.Outcome == providers.OutcomeSucceeded && p.Status == StatusFailed:
		s.chargedAfter(ctx, &p, res)
	case res.Outcome != providers.OutcomeSucceeded && p.Status == StatusSucceeded && p.AmountRefunded > 0:
		// A charge refunded since reads as failed at some providers
		// (Paystack's "reversed"): no alarm about a charge that was made.
		s.cfg.Log.WarnContext(ctx, "a payment an operator resolved as succeeded, since refunded, reads as not charged at the provider; check it there",
			"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider, "provider_outcome", string(res.Outcome))
	case res.Outcome != providers.OutcomeSucceeded && p.Status == StatusSucceeded:
		s.cfg.Log.ErrorContext(ctx, "the provider has no charge for a payment an operator resolved as succeeded; settle it with the merchant",
			"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider,
			"provider_outcome", string(res.Outcome), "amount", p.Amount, "currency", p.Currency)
	}
	_, lerr := s.store.lookLater(ctx, p, next)
	st := Confirmed
	if next > 0 {
		st = Pending
	}
	return st, errors.Join(err, lerr)
}

// lookup asks the payment's provider about its reference.
func (s *Service) lookup(ctx context.Context, p *Payment) (providers.Result, error) {
	prov, err := s.accounts.Provider(ctx, p.MerchantID, p.Provider)
	if err != nil {
		return providers.Result{}, fmt.Errorf("provider account: %w", err)
	}
	// A scheduled recheck's turn must come within its lease, as a claim's
	// (pace): a recheck still waiting when the lease ends is taken again,
	// by this run's next batch or another instance, and looked up twice.
	if err := s.pace(ctx, p.Provider, p.recheckLease); err != nil {
		return providers.Result{}, err
	}
	lctx, cancel := s.leaseBound(ctx, p.recheckLease)
	defer cancel()
	start := time.Now()
	res, err := prov.Lookup(lctx, p.ProviderReference)
	s.observeProvider(p.Provider, "lookup", err, time.Since(start))
	return s.ours(ctx, p, cleaned(ctx, s.cfg.Log, p.Provider, "lookup", res), err)
}

// reopen records the provider's final outcome for a payment released as
// never charged, and re-creates its key done with the answer the handler
// would have sent, in one transaction. Skipped when the payment moved on
// since it was read (a retry re-opened it and will settle it itself).
//
// The order of the writes is the request path's — the key first, then the
// payment — so a retry claiming the key at the same moment waits on this
// transaction (or this one on the retry's claim) instead of deadlocking.
// The answer is rendered from the payment as read inside the transaction,
// and the payment's update is conditional on its attempt count too, so the
// stored answer can only ever be the ledger's.
func (s *Service) reopen(ctx context.Context, read *Payment, res providers.Result) (Settlement, error) {
	f := outcomeParams(res, s.now())
	var p Payment
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if p, err = s.store.GetByKey(ctx, tx, read.MerchantID, read.IdempotencyKey); err != nil {
			return err
		}
		if !p.retryable() {
			return errSkipped
		}
		f.applyTo(&p)
		p.RecheckAt = nil
		if p.RequestHash != "" {
			// If a retry holds the key, PutDone waits for it; if the retry
			// then re-opened the payment, the update below finds it moved
			// on and all of this rolls back. Made before fingerprints were
			// kept (no hash), the key stays free: a retry claims it, finds
			// the payment final and answers it.
			if _, err := s.keys.PutDone(ctx, tx, p.MerchantID, p.IdempotencyKey, p.RequestHash, Render(&p)); err != nil {
				return err
			}
		}
		ok, err := s.store.reopenSettled(ctx, tx, p.MerchantID, p.ID, p.Attempts, f)
		if err != nil {
			return err
		}
		if !ok {
			return errSkipped
		}
		return s.emit(ctx, tx, &p)
	})
	if errors.Is(err, errSkipped) {
		return Skipped, nil
	}
	if err != nil {
		return "", err
	}
	*read = p
	s.observe(&p)
	s.cfg.Log.WarnContext(ctx, "payment re-opened: the provider has the charge it had no record of when the key was released",
		"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider, "status", string(p.Status))
	return Reopened, nil
}

var errSkipped = errors.New("payments: skipped")

// reinstate puts a payment released as never charged back to processing,
// with its key in progress (lease lapsed, attempt now), in one transaction
// that writes the key first (see reopen). Skipped when a retry holds the
// key or moved the payment on.
func (s *Service) reinstate(ctx context.Context, read *Payment) (Settlement, error) {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		p, err := s.store.GetByKey(ctx, tx, read.MerchantID, read.IdempotencyKey)
		if err != nil {
			return err
		}
		if !p.retryable() || p.RequestHash == "" {
			// (Made before fingerprints were kept, the key could not be
			// bound to its request again: it is rechecked later instead.)
			return errSkipped
		}
		ok, err := s.keys.Reinstate(ctx, tx, p.MerchantID, p.IdempotencyKey, p.RequestHash, p.ID)
		if err != nil {
			return err
		}
		if !ok {
			return errSkipped
		}
		ok, err = s.store.reopenSettled(ctx, tx, p.MerchantID, p.ID, p.Attempts, finishParams{Status: StatusProcessing, At: s.now()})
		if err == nil && !ok {
			err = errSkipped
		}
		if err != nil {
			return err
		}
		back := p
		back.Status, back.FailureCode, back.FailureMessage, back.RecheckAt = StatusProcessing, "", "", nil
		// The attempt's first processing event was written at its 202:
		// this one, after the release, is another transition.
		return s.emitAgain(ctx, tx, &back, p.UpdatedAt)
	})
	if errors.Is(err, errSkipped) {
		return Skipped, nil
	}
	if err != nil {
		return "", err
	}
	read.Status, read.FailureCode, read.FailureMessage, read.RecheckAt = StatusProcessing, "", "", nil
	s.observe(read)
	s.cfg.Log.WarnContext(ctx, "payment back to processing: released as never charged, but the provider has it pending (or cannot tell past REVIEW_AFTER)",
		"merchant_id", read.MerchantID, "payment_id", read.ID, "provider", read.Provider)
	return Pending, nil
}

// outcomeParams is the state change for a provider's final result.
func outcomeParams(res providers.Result, at time.Time) finishParams {
	f := finishParams{Status: StatusSucceeded, TransactionID: res.TransactionID, At: at}
	if res.Outcome == providers.OutcomeFailed {
		f.Status = StatusFailed
		f.FailureCode = res.FailureCode
		if f.FailureCode == "" {
			f.FailureCode = "card_declined"
		}
		f.FailureMessage = res.FailureMessage
	}
	return f
}

// pollTimeout bounds the lookup a GET makes, so polling a payment at a
// slow provider still answers promptly (with processing).
const pollTimeout = 5 * time.Second

// Poll returns the merchant's payment; a payment still open whose key's
// lease has lapsed (nobody is working on it) is first settled the way the
// sweeper would — Lookup, never Charge — at most once per PollEvery, so a
// merchant polling Location does not wait for the sweeper. A lookup that
// fails or says nothing new leaves the payment as it was.
func (s *Service) Poll(ctx context.Context, merchantID, id string) (Payment, error) {
	p, err := s.store.Get(ctx, merchantID, id)
	if err != nil || (p.Status != StatusProcessing && p.Status != StatusRequiresReview) {
		return p, err
	}
	claim, ok, err := s.keys.TakeOver(ctx, idempotency.TakeOverParams{
		MerchantID: merchantID, Key: p.IdempotencyKey, Lease: s.cfg.Lease, Every: s.cfg.PollEvery,
	})
	if err != nil || !ok {
		if err != nil {
			s.cfg.Log.WarnContext(ctx, "poll: could not take the key over", "payment_id", p.ID, "err", err)
		}
		return p, nil
	}
	lctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	st, err := s.settle(lctx, claim, claim.SinceAttempt >= s.cfg.StaleAfter)
	if err != nil {
		s.cfg.Log.WarnContext(ctx, "poll: settle", "payment_id", p.ID, "settlement", string(st), "err", err)
	}
	if cur, err := s.store.Get(ctx, merchantID, id); err == nil {
		p = cur
	}
	return p, nil
}
