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
// recheck that finds nothing again makes the failure final for good.

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
	return s.store.DueRechecks(ctx, limit, s.cfg.Lease)
}

// Recheck looks a payment released as never charged up once more and
// settles it: Reopened when the provider has a final outcome, Confirmed
// when it still has nothing (final for good), Pending when it cannot tell
// yet (looked at again after SWEEP_STALE_AFTER).
func (s *Service) Recheck(ctx context.Context, p Payment) (Settlement, error) {
	return s.recheck(ctx, p, true)
}

// recheck is Recheck; scheduled says whether this is the payment's
// scheduled recheck, which alone may end the rechecking (a webhook's
// lookup that finds nothing changes nothing).
func (s *Service) recheck(ctx context.Context, p Payment, scheduled bool) (Settlement, error) {
	later := func(after time.Duration) error {
		if !scheduled {
			return nil
		}
		return s.store.RecheckLater(ctx, p.ID, after)
	}
	res, err := s.lookup(ctx, &p)
	switch {
	case err != nil:
		return Pending, errors.Join(err, later(s.cfg.StaleAfter))
	case res.Outcome.Final():
		return s.reopen(ctx, &p, res)
	case res.Outcome == providers.OutcomeNotFound && scheduled:
		return Confirmed, later(0)
	default:
		return Pending, later(s.cfg.StaleAfter)
	}
}

// lookup asks the payment's provider about its reference.
func (s *Service) lookup(ctx context.Context, p *Payment) (providers.Result, error) {
	prov, err := s.accounts.Provider(ctx, p.MerchantID, p.Provider)
	if err != nil {
		return providers.Result{}, fmt.Errorf("provider account: %w", err)
	}
	start := time.Now()
	res, err := prov.Lookup(ctx, p.ProviderReference)
	s.observeProvider(p.Provider, "lookup", err, time.Since(start))
	return res, err
}

// reopen records the provider's final outcome for a payment released as
// never charged, and re-creates its key done with the answer the handler
// would have sent, in one transaction. Skipped when the payment moved on
// meanwhile (a retry re-opened it and will settle it itself).
func (s *Service) reopen(ctx context.Context, p *Payment, res providers.Result) (Settlement, error) {
	f := outcomeParams(res, s.now())
	var answer Answer
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		ok, err := s.store.reopenSettled(ctx, tx, p.ID, f)
		if err != nil || !ok {
			return errors.Join(err, errSkipped)
		}
		f.applyTo(p)
		p.RecheckAt = nil
		answer = Render(p)
		if p.RequestHash == "" {
			// Made before fingerprints were kept: a retry claims the key
			// afresh, finds the payment final and answers it.
			return nil
		}
		// A retry holding the key now finds the payment final and
		// completes the key from the ledger; otherwise the key comes back
		// done, so the app's retry replays the outcome.
		_, err = s.keys.PutDone(ctx, tx, p.MerchantID, p.IdempotencyKey, p.RequestHash, answer)
		return err
	})
	if errors.Is(err, errSkipped) {
		return Skipped, nil
	}
	if err != nil {
		return "", err
	}
	s.observe(p)
	s.cfg.Log.WarnContext(ctx, "payment re-opened: the provider has the charge it had no record of when the key was released",
		"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider, "status", string(p.Status))
	return Reopened, nil
}

var errSkipped = errors.New("payments: skipped")

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
