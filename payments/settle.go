package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/providers"
)

// Settlement is what settling a stuck key did.
type Settlement string

// The results of Settle, counted by the sweeper.
const (
	// Resolved: the provider's final outcome is recorded and the key
	// completed with the answer the handler would have sent.
	Resolved Settlement = "resolved"
	// Released: the provider never saw the charge (or nothing was ever
	// recorded); the key was released so the app's retry charges afresh.
	Released Settlement = "released"
	// Pending: the provider could not tell yet; the key stays in progress.
	Pending Settlement = "pending"
	// Review: still unresolved after REVIEW_AFTER; the payment is marked
	// requires_review and the key stays in progress.
	Review Settlement = "review"
	// Skipped: the payment was already final (a duplicate settler).
	Skipped Settlement = "skipped"
)

// Settle finishes the payment of a key whose outcome was left unknown. The
// caller (the sweeper) has taken the key over, so it owns the claim. Settle
// never creates a charge: it asks the provider with Lookup, and a charge
// the provider never saw is released, not made — but only once the key's
// last attempt is SWEEP_STALE_AFTER old (claim.SinceAttempt, the
// database's clock), and the payment is looked up once more after
// RECHECK_AFTER (Recheck).
//
// Its lookups are paced (SWEEP_PROVIDER_RATE).
func (s *Service) Settle(ctx context.Context, claim idempotency.Claim) (Settlement, error) {
	ctx = paced(ctx)
	mayRelease := claim.SinceAttempt >= s.cfg.StaleAfter
	if strings.HasPrefix(claim.ResourceID, "re_") {
		return s.settleRefund(ctx, claim, mayRelease)
	}
	if claim.ResourceID == "" {
		// A refund's key names its refund from its first commit on; one
		// claimed again after a release by a version before 2026-12-07
		// does not. Its refund, last sent by the key's request (the same
		// fingerprint), is found by key — before a payment of the same
		// key string, whose answer may have been purged long ago.
		refund, err := s.refundOfKey(ctx, claim)
		if err != nil {
			return "", err
		}
		if refund {
			return s.settleRefund(ctx, claim, mayRelease)
		}
	}
	return s.settle(ctx, claim, mayRelease)
}

// refundOfKey reports whether claim's key, which names no resource, is a
// refund's: a refund has the key, and the key's request is the one that
// refund last went out with.
func (s *Service) refundOfKey(ctx context.Context, claim idempotency.Claim) (bool, error) {
	r, err := s.store.RefundByKey(ctx, nil, claim.MerchantID, claim.Key)
	if errors.Is(err, ErrNotFound) {
		return false, nil // the common case: a payment's key
	}
	if err != nil {
		return false, err
	}
	rec, err := s.keys.Get(ctx, claim.MerchantID, claim.Key)
	if err != nil {
		return false, err
	}
	return rec.RequestHash == r.RequestHash, nil
}

// anotherRequests reports whether a key in progress belongs to another
// request than the one that made its final payment or refund (made by
// hash): a request that reused the key after its answer was purged, with
// another body, and died before its mismatch released the key. Completing
// the key would hand that request the other one's answer on its retry;
// released, the retry is told it is a mismatch. An unknown hash on either
// side (rows from before fingerprints) is taken as the same request.
func (s *Service) anotherRequests(ctx context.Context, claim idempotency.Claim, hash string) (bool, error) {
	if hash == "" {
		return false, nil
	}
	rec, err := s.keys.Get(ctx, claim.MerchantID, claim.Key)
	if err != nil {
		return false, err
	}
	return rec.RequestHash != "" && rec.RequestHash != hash, nil
}

// settle is Settle; mayRelease says whether "the provider does not know the
// reference" may release the key. Only a settler that knows the last
// attempt is SWEEP_STALE_AFTER old may conclude that: a webhook or a poll
// can come a moment after a timeout, while the charge is still on its way
// to the provider.
func (s *Service) settle(ctx context.Context, claim idempotency.Claim, mayRelease bool) (Settlement, error) {
	p, err := s.store.GetByKey(ctx, nil, claim.MerchantID, claim.Key)
	if errors.Is(err, ErrNotFound) {
		// The ledger row commits before any provider call, so no row means
		// no charge was attempted: the claim died before it did anything.
		return Released, s.keys.Release(ctx, claim)
	}
	if err != nil {
		return "", err
	}
	if p.retryable() {
		// Failed as never charged (not_processed, provider_unavailable), but
		// the release that should have followed did not happen (a crash, a
		// cancelled context): release now, or the key would be completed
		// as a permanent decline of a payment nobody ever charged.
		return Released, s.keys.Release(ctx, claim)
	}
	if final(p.Status) {
		others, err := s.anotherRequests(ctx, claim, p.RequestHash)
		if err != nil {
			return "", err
		}
		if others {
			return Released, s.keys.Release(ctx, claim)
		}
		if _, err := s.complete(ctx, claim, &p); err != nil {
			return "", err
		}
		return Skipped, nil
	}
	prov, err := s.accounts.Provider(ctx, p.MerchantID, p.Provider)
	if err != nil {
		// The merchant's account was removed: nobody can ask the provider.
		err = fmt.Errorf("provider account: %w", err)
		return s.stillUnknown(ctx, claim, &p, err, asked{err: err})
	}
	if err := s.pace(ctx, p.Provider, claim.LeaseEnds); err != nil {
		// The run ended while waiting its turn: nothing asked, the key
		// left for the next run.
		rctx, cancel := s.recordContext(ctx)
		defer cancel()
		return Pending, errors.Join(err, s.keys.LeaveInProgress(rctx, claim))
	}
	// Within the claim's lease, like a charge: the turn came in its first
	// half, and a lookup still running past it would be answered to a
	// worker that may no longer own the key.
	lctx, cancelLookup := s.withinLease(ctx, claim)
	start, at := time.Now(), s.now()
	res, err := prov.Lookup(lctx, p.ProviderReference)
	cancelLookup()
	s.observeProvider(p.Provider, "lookup", err, time.Since(start))
	res, err = s.ours(ctx, &p, cleaned(ctx, s.cfg.Log, p.Provider, "lookup", res), err)
	// Recording what the provider said gets its own time: a lookup that
	// used up the caller's budget must still end the claim properly.
	caller := ctx
	ctx, cancel := s.recordContext(ctx)
	defer cancel()
	looked := asked{res: res, err: err, at: &at}
	if err != nil {
		return s.stillUnknown(ctx, claim, &p, err, looked)
	}
	switch res.Outcome {
	case providers.OutcomeSucceeded, providers.OutcomeFailed:
		if _, err := s.finish(ctx, claim, &p, res); err != nil {
			return "", err
		}
		s.cfg.Log.InfoContext(ctx, "payment settled by lookup", "merchant_id", p.MerchantID, "payment_id", p.ID,
			"idempotency_key", claim.Key, "provider", p.Provider, "outcome", string(res.Outcome))
		return Resolved, nil
	case providers.OutcomeNotFound:
		if !mayRelease {
			return s.stillUnknown(ctx, claim, &p, nil, looked)
		}
		ok, err := s.neverCharged(ctx, claim, &p, FailureNotProcessed,
			"The provider never received the charge; retry with the same Idempotency-Key.")
		if err != nil {
			return "", err
		}
		if !ok {
			if _, err := s.complete(ctx, claim, &p); err != nil {
				return "", err
			}
			return Skipped, nil
		}
		s.cfg.Log.InfoContext(ctx, "payment released: the provider has no record of it (failed not_processed; its key free for a retry, a recheck scheduled)",
			"merchant_id", p.MerchantID, "payment_id", p.ID, "idempotency_key", claim.Key, "provider", p.Provider)
		return s.lookOnceMore(caller, p), nil
	default:
		return s.stillUnknown(ctx, claim, &p, nil, looked)
	}
}

// ours passes a lookup's final answer (and a charge's success) on only
// when the charge it found is p's own: the amount and currency p asked for. Anything else under p's
// reference is another charge (one made with the merchant's public key at
// a checkout, a reference reused by another system): it must neither
// settle p as succeeded nor fail it, so it becomes an unknown outcome
// wrapping ErrReferenceConflict — p stays processing, and after
// REVIEW_AFTER a person reviews it, as for the same conflict found by a
// Charge. An ERROR: it is never bad input, and someone should look now.
func (s *Service) ours(ctx context.Context, p *Payment, res providers.Result, err error) (providers.Result, error) {
	if err != nil || !res.Outcome.Final() || // pending: nothing settled by it (Stripe's not-yet-found carries no amount)
		(res.Amount == p.Amount && strings.EqualFold(res.Currency, p.Currency)) {
		return res, err
	}
	level := slog.LevelError
	if !s.conflicts.first(p.ID, time.Now()) {
		level = slog.LevelInfo // told within the hour
	}
	s.cfg.Log.Log(ctx, level, "the provider's charge under this payment's reference is for another amount or currency; not settled by it",
		"merchant_id", p.MerchantID, "payment_id", p.ID, "idempotency_key", p.IdempotencyKey, "provider", p.Provider, "amount", p.Amount, "currency", p.Currency,
		"provider_amount", res.Amount, "provider_currency", res.Currency, "provider_outcome", string(res.Outcome))
	return providers.Result{}, &otherCharge{res: res,
		err: fmt.Errorf("payments: lookup of %s: %w: %w", p.ID, providers.ErrUnknown, providers.ErrReferenceConflict)}
}

// stillUnknown leaves the key in progress for the next run, and after
// ReviewAfter flags the payment for a human, with why (looked: the
// provider's answer, or why it could not be asked), for the operator desk.
func (s *Service) stillUnknown(ctx context.Context, claim idempotency.Claim, p *Payment, cause error, looked asked) (Settlement, error) {
	result := Pending
	if p.age() >= s.cfg.ReviewAfter && p.Status == StatusProcessing {
		// Flagged only while the claim still owns the key.
		err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := s.keys.LeaveInProgressTx(ctx, tx, claim); err != nil {
				return err
			}
			at := s.now()
			ok, err := s.store.MarkReview(ctx, tx, p.MerchantID, p.ID, at)
			if err != nil {
				return err
			}
			if ok {
				if err := s.store.flagReview(ctx, tx, p.MerchantID, p.ID, at, looked.why()); err != nil {
					return err
				}
			}
			flagged := *p
			flagged.Status = StatusRequiresReview
			// Once per stay in processing: a payment reinstated after
			// a release can come to review again in the same attempt.
			return s.emitAgain(ctx, tx, &flagged, p.UpdatedAt)
		})
		if errors.Is(err, idempotency.ErrLostClaim) {
			return Skipped, nil
		}
		if err != nil {
			return "", err
		}
		p.Status = StatusRequiresReview
		s.observe(p)
		// An error: a person must act (README: the review queue).
		s.cfg.Log.ErrorContext(ctx, "payment requires review: the provider gave no final outcome (pending, not found yet, or could not be asked) within REVIEW_AFTER",
			"merchant_id", p.MerchantID, "payment_id", p.ID, "idempotency_key", claim.Key, "provider", p.Provider,
			"reason", string(looked.why().Reason))
		result = Review
	} else {
		var err error
		if p.Status == StatusRequiresReview {
			result = Review
			err = s.stillInReview(ctx, claim, p.MerchantID, p.ID, looked)
		} else {
			err = s.keys.LeaveInProgress(ctx, claim)
		}
		if err != nil && !errors.Is(err, idempotency.ErrLostClaim) {
			return "", err
		}
	}
	if cause != nil {
		return result, fmt.Errorf("payments: settle %s: %w", p.ID, cause)
	}
	return result, nil
}

// stillInReview leaves the key of a target already in review in progress
// and, in the same transaction, keeps the provider's answer the sweep got
// as its review's last: what the operator desk shows is the latest look,
// not the one a day old that flagged it. Only a look that was made
// counts: an account still missing has nothing new to say.
func (s *Service) stillInReview(ctx context.Context, claim idempotency.Claim, merchantID, targetID string, looked asked) error {
	rv := looked.why()
	if rv.AskedAt == nil {
		return s.keys.LeaveInProgress(ctx, claim)
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.keys.LeaveInProgressTx(ctx, tx, claim); err != nil {
			return err
		}
		return s.store.reviewAnswer(ctx, tx, merchantID, targetID, rv)
	})
}

// lookOnceMore looks a payment just released as never charged up again,
// now that its key is free: Reopened when the provider has the charge
// final after all (its key re-created done with the answer), Pending when
// it has it in flight (back to processing, its key in progress), Released
// otherwise. A charge that landed while the release's lookup was out had
// its webhook answered "deferred" (the key was the releasing settler's),
// and a provider that took that 200 as delivered never sends it again:
// without this look the payment would read failed, and a merchant might
// charge the customer anew, until its scheduled recheck RECHECK_AFTER
// later. A charge that lands after this look finds the key free: its
// webhook re-opens the payment itself. The look is the caller's, in its
// budget and at its pace (ctx: the sweep's, a poll's, a retry's); what it
// cannot settle is left to that recheck, so its failure is only logged.
func (s *Service) lookOnceMore(ctx context.Context, p Payment) Settlement {
	// As a recheck's: a turn at the sweeper's pace within half a lease or
	// none (the recheck is there), the lookup within the lease.
	p.recheckLease = time.Now().Add(s.cfg.Lease)
	res, err := s.lookup(ctx, &p)
	if err != nil {
		if !errors.Is(err, errNoTurn) && ctx.Err() == nil && !conflicted(err) {
			s.cfg.Log.WarnContext(ctx, "could not look a released payment up once more; its recheck is scheduled",
				"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider, "err", err)
		}
		return Released
	}
	rctx, cancel := s.recordContext(ctx)
	defer cancel()
	st := Released
	switch {
	case res.Outcome.Final():
		st, err = s.reopen(rctx, &p, res)
	case res.Outcome == providers.OutcomePending:
		st, err = s.reinstate(rctx, &p)
	}
	if err != nil && !conflicted(err) {
		s.cfg.Log.WarnContext(ctx, "could not record what a released payment's second look found; its recheck is scheduled",
			"merchant_id", p.MerchantID, "payment_id", p.ID, "provider", p.Provider, "err", err)
	}
	if err != nil || (st != Reopened && st != Pending) {
		return Released
	}
	return st
}
