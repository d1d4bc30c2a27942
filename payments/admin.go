package payments

import (
	"context"
	"errors"

	"github.com/gofiber/fiber/v2"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/audit"
	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/providers"
)

// FailureResolved is the failure code of a payment an operator resolved
// as failed.
const FailureResolved = "resolved_by_operator"

// Detail is what the operator desk shows of one payment: the payment, its
// refunds, and what the gateway knows of its attempts.
type Detail struct {
	Payment Payment
	Refunds []Refund
	Key     *idempotency.Record // nil once purged (or released)
	// Review is why the payment went to review; nil when it never did (or
	// did before the gateway kept reasons, migration 20).
	Review *ReviewView
}

// Detail returns a payment of any tenant with its refunds and its key.
func (s *Service) Detail(ctx context.Context, id string) (Detail, error) {
	p, err := s.store.getAny(ctx, id)
	if err != nil {
		return Detail{}, err
	}
	refunds, err := s.store.ListRefunds(ctx, p.MerchantID, p.ID, 100, nil)
	if err != nil {
		return Detail{}, err
	}
	d := Detail{Payment: p, Refunds: refunds}
	if d.Review, err = s.ReviewOf(ctx, p.MerchantID, p.ID); err != nil {
		return Detail{}, err
	}
	if rec, err := s.keys.Get(ctx, p.MerchantID, p.IdempotencyKey); err == nil {
		d.Key = rec
	} else if !errors.Is(err, idempotency.ErrNotFound) {
		return Detail{}, err
	}
	return d, nil
}

// Resolution is an operator's decision on a payment the gateway could not
// settle.
type Resolution struct {
	Status Status // succeeded or failed
	Note   string
}

// contradicts reports whether the provider's answer rules out an
// operator's decision (succeeded, or failed). An operator decides what the
// provider cannot tell — it cannot be asked, or a reference holds another
// charge — never against what it says, or the ledger and the provider part
// for good (nothing looks at a resolved payment again):
//   - a final answer must be the decision;
//   - a charge or refund the provider has and is still working on (pending,
//     with its id) may yet succeed or fail: not "succeeded", and "failed"
//     only when abandonable — a payment in review (pending past
//     REVIEW_AFTER: abandoned at a checkout, waiting on the customer, a
//     state the provider never leaves by itself); should it be charged
//     after all, HandleWebhook, and Resolve's look once it has committed,
//     raise an ERROR. Never a refund: providers hold refunds pending for
//     days and then pay them out, and a failed one gives its amount back to
//     be refunded again — the customer would be refunded twice;
//   - nothing there (not found, or pending with nothing found, as Stripe's
//     search answers before it has indexed a charge) can only have failed.
func contradicts(outcome providers.Outcome, providerID string, succeeded, abandonable bool) bool {
	switch {
	case outcome.Final():
		return (outcome == providers.OutcomeSucceeded) != succeeded
	case outcome == providers.OutcomePending && providerID != "":
		return succeeded || !abandonable
	default:
		return succeeded
	}
}

// providerDisagrees is the 409 of a resolution the provider's answer rules
// out (contradicts). idField names the provider's id of the charge or
// refund.
func providerDisagrees(outcome providers.Outcome, idField, id, failureCode string) error {
	detail := "the provider's final answer contradicts this resolution"
	switch {
	case outcome == providers.OutcomePending && id != "":
		detail = "the provider is still working on it, or waiting there for someone to act: wait for it to settle (the sweeper records it), or act at the provider"
	case !outcome.Final():
		detail = "the provider has no record of it: it cannot have succeeded"
	}
	p := problem.New(fiber.StatusConflict, "provider_disagrees", detail).With("provider_outcome", string(outcome))
	if id != "" {
		p = p.With(idField, id)
	}
	if failureCode != "" {
		p = p.With("provider_failure_code", failureCode)
	}
	return p
}

// Resolve settles a payment in review or processing, its last attempt
// SWEEP_STALE_AFTER old, the way the sweeper would, with the operator's
// decision: the payment's final state, its key's stored answer (so the
// merchant's retry replays the resolution) and the audit event commit in
// one transaction. The provider is asked once more first: if its answer
// rules the decision out (contradicts), nothing changes (409
// provider_disagrees).
func (s *Service) Resolve(ctx context.Context, id string, r Resolution) (Payment, error) {
	p, err := s.resolve(ctx, id, r)
	if pr, ok := problem.As(err); ok && pr.Code != "provider_disagrees" && p.ID != "" {
		// Refused for the payment's state (final, being worked on, the
		// provider unreachable): an operator acted all the same, and every
		// operator action is audited. provider_disagrees records its own,
		// with the provider's answer.
		s.refused(ctx, audit.Change{Action: audit.PaymentResolutionRefused, TargetType: "payment", TargetID: p.ID,
			TenantID: p.MerchantID, Before: resolvedView(p.View()), After: refusal(string(r.Status), pr), Note: r.Note})
	}
	return p, err
}

// refusal is what the audit log keeps of a resolution refused for the
// state of its payment or refund: the decision, and the answer's code.
func refusal(decision string, pr *problem.Problem) map[string]any {
	return map[string]any{"decision": decision, "refused": pr.Code}
}

func (s *Service) resolve(ctx context.Context, id string, r Resolution) (Payment, error) {
	p, err := s.store.getAny(ctx, id)
	if err != nil {
		return Payment{}, err
	}
	if final(p.Status) {
		return p, problem.New(fiber.StatusConflict, "payment_final", "the payment is final already")
	}
	inProgress := problem.New(fiber.StatusConflict, "payment_in_progress",
		"a request or settler is working on this payment, or its last attempt is recent; retry later").WithRetryAfter(5)
	claim, ok, err := s.keys.TakeOver(ctx, idempotency.TakeOverParams{MerchantID: p.MerchantID, Key: p.IdempotencyKey, Lease: s.cfg.Lease})
	if err != nil {
		return Payment{}, err
	}
	if !ok {
		return p, inProgress
	}
	giveBack := func(cause error) (Payment, error) {
		if err := s.keys.LeaveInProgress(ctx, claim); err != nil && !errors.Is(err, idempotency.ErrLostClaim) {
			return p, errors.Join(cause, err)
		}
		return p, cause
	}
	// Read again now the key is ours: a retry may have taken it over
	// between the first read and the takeover (and re-sent the charge).
	if p, err = s.store.getAny(ctx, id); err != nil {
		return giveBack(err)
	}
	if final(p.Status) {
		return giveBack(problem.New(fiber.StatusConflict, "payment_final", "the payment was settled meanwhile"))
	}
	// In review too: a retry may have re-sent the charge moments ago.
	if claim.SinceAttempt < s.cfg.StaleAfter {
		return giveBack(inProgress)
	}
	f := finishParams{Status: r.Status, At: s.now()}
	if r.Status == StatusFailed {
		f.FailureCode, f.FailureMessage = FailureResolved, "Resolved as failed by an operator."
	}
	// told: the provider gave a final answer, which the decision is.
	// another: the reference holds another charge (ours logged it), so the
	// provider can never tell; the decision stands, unwatched.
	told := false
	res, err := s.lookup(ctx, &p)
	another := errors.Is(err, providers.ErrReferenceConflict)
	if err == nil && res.Reversed {
		// Charged and given back since (refunded at the provider's
		// dashboard, charged back): final there, and never to settle. The
		// merchant has no money for it, so "failed" is its answer, in
		// review or not; "succeeded" would have it ship.
		if r.Status == StatusSucceeded {
			s.refused(ctx, audit.Change{Action: audit.PaymentResolutionRefused, TargetType: "payment", TargetID: p.ID,
				TenantID: p.MerchantID, Before: resolvedView(p.View()), After: refusedView(string(r.Status), res), Note: r.Note})
			return giveBack(problem.New(fiber.StatusConflict, "provider_disagrees",
				"the provider reversed this charge (refunded at its dashboard, or charged back): resolve it as failed, and settle with the merchant").
				With("provider_outcome", "reversed").With("provider_transaction_id", res.TransactionID))
		}
		f.TransactionID, told = res.TransactionID, true
	} else if err == nil {
		if contradicts(res.Outcome, res.TransactionID, r.Status == StatusSucceeded, p.Status == StatusRequiresReview) {
			s.refused(ctx, audit.Change{Action: audit.PaymentResolutionRefused, TargetType: "payment", TargetID: p.ID,
				TenantID: p.MerchantID, Before: resolvedView(p.View()), After: refusedView(string(r.Status), res), Note: r.Note})
			return giveBack(providerDisagrees(res.Outcome, "provider_transaction_id", res.TransactionID, res.FailureCode))
		}
		if res.Outcome.Final() {
			f.TransactionID, told = res.TransactionID, true
		}
	}
	watched := !told && !another
	if watched {
		// Looked up again until the provider answers for good.
		f.RecheckAfter = s.cfg.RecheckAfter
	}
	before := p.View()
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		ok, err := s.store.Finish(ctx, tx, p.MerchantID, p.ID, f)
		if err != nil {
			return err
		}
		if !ok {
			return errSkipped
		}
		f.applyTo(&p)
		if err := s.keys.Complete(ctx, tx, claim, Render(&p)); err != nil {
			return err
		}
		if err := s.emit(ctx, tx, &p); err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.Change{Action: audit.PaymentResolved, TargetType: "payment", TargetID: p.ID,
			TenantID: p.MerchantID, Before: resolvedView(before), After: resolvedView(p.View()), Note: r.Note})
	})
	switch {
	case errors.Is(err, errSkipped):
		cur, _ := s.store.getAny(ctx, id)
		return cur, problem.New(fiber.StatusConflict, "payment_final", "the payment was settled meanwhile")
	case errors.Is(err, idempotency.ErrLostClaim):
		return p, inProgress
	case err != nil:
		return Payment{}, err
	}
	s.observe(&p)
	s.cfg.Log.WarnContext(ctx, "payment resolved by an operator", "merchant_id", p.MerchantID, "payment_id", p.ID, "status", string(p.Status))
	if p.Status == StatusFailed && watched {
		// The charge may have landed since the look above, and its webhook
		// come while the key was ours and been put off (deferred) for us
		// to settle: look once more at once (the watch looks again later).
		if err := s.chargedAfterResolution(ctx, &p); err != nil {
			s.cfg.Log.WarnContext(ctx, "payment resolved as failed: the provider could not be asked again now; the watch looks again after RECHECK_AFTER",
				"merchant_id", p.MerchantID, "payment_id", p.ID, "err", err)
		}
	}
	return p, nil
}

// refused records a resolution the provider's answer ruled out: nothing
// changed, but an operator tried it, which the audit log keeps as it keeps
// every operator action. A record that cannot be written does not turn the
// refusal into an error.
func (s *Service) refused(ctx context.Context, c audit.Change) {
	if err := audit.Record(ctx, s.db, c); err != nil {
		s.cfg.Log.WarnContext(ctx, "a refused resolution could not be audited", "target_id", c.TargetID, "err", err)
	}
}

// refusedView is what the audit log keeps of a refused resolution: the
// operator's decision and the provider's answer that ruled it out.
func refusedView(decision string, res providers.Result) map[string]any {
	return map[string]any{"decision": decision, "provider_outcome": string(res.Outcome),
		"provider_id": res.TransactionID, "provider_failure_code": res.FailureCode}
}

// resolvedView is what the audit log keeps of a payment: no payment
// method token (View has none), no customer data beyond the ledger's.
func resolvedView(v View) map[string]any {
	return map[string]any{"status": v.Status, "amount": v.Amount, "currency": v.Currency,
		"failure_code": v.FailureCode, "provider": v.Provider, "provider_reference": v.ProviderReference,
		"provider_transaction_id": v.ProviderTransactionID}
}

// RefundResolution is an operator's decision on a refund the gateway could
// not settle.
type RefundResolution struct {
	Status RefundStatus // succeeded or failed
	Note   string
}

// ResolveRefund settles a refund in review or pending, its last attempt
// SWEEP_STALE_AFTER old, as Resolve does a payment: the refund's outcome (a
// failed one giving its amount back to the payment), its key's stored
// answer and the audit event commit in one transaction, after the
// provider is asked once more and does not rule the decision out.
func (s *Service) ResolveRefund(ctx context.Context, id string, d RefundResolution) (Refund, error) {
	r, err := s.resolveRefund(ctx, id, d)
	if pr, ok := problem.As(err); ok && pr.Code != "provider_disagrees" && r.ID != "" {
		// As for a payment (Resolve): audited, refused or not.
		s.refused(ctx, audit.Change{Action: audit.RefundResolutionRefused, TargetType: "refund", TargetID: r.ID,
			TenantID: r.MerchantID, Before: refundAuditView(&r), After: refusal(string(d.Status), pr), Note: d.Note})
	}
	return r, err
}

func (s *Service) resolveRefund(ctx context.Context, id string, d RefundResolution) (Refund, error) {
	r, err := s.store.getRefundAny(ctx, id)
	if err != nil {
		return Refund{}, err
	}
	if r.final() {
		return r, problem.New(fiber.StatusConflict, "refund_final", "the refund is final already")
	}
	inProgress := problem.New(fiber.StatusConflict, "refund_in_progress",
		"a request or settler is working on this refund, or its last attempt is recent; retry later").WithRetryAfter(5)
	claim, ok, err := s.keys.TakeOver(ctx, idempotency.TakeOverParams{MerchantID: r.MerchantID, Key: r.IdempotencyKey, Lease: s.cfg.Lease})
	if err != nil {
		return Refund{}, err
	}
	if !ok {
		return r, inProgress
	}
	giveBack := func(cause error) (Refund, error) {
		if err := s.keys.LeaveInProgress(ctx, claim); err != nil && !errors.Is(err, idempotency.ErrLostClaim) {
			return r, errors.Join(cause, err)
		}
		return r, cause
	}
	// Read again now the key is ours (see Resolve).
	if r, err = s.store.getRefundAny(ctx, id); err != nil {
		return giveBack(err)
	}
	if r.final() {
		return giveBack(problem.New(fiber.StatusConflict, "refund_final", "the refund was settled meanwhile"))
	}
	wait := s.cfg.StaleAfter
	if d.Status == RefundFailed {
		// An operator's "failed" gives the amount back for the merchant to
		// refund again, as a release does: it waits as long since the last
		// send (refundReleaseAfter), a refund in review included.
		wait = max(wait, s.refundReleaseAfter(ctx, &r))
	}
	if claim.SinceAttempt < wait {
		return giveBack(inProgress)
	}
	f := refundParams{Status: d.Status, At: s.now()}
	if d.Status == RefundFailed {
		f.FailureCode, f.FailureMessage = FailureResolved, "Resolved as failed by an operator."
	}
	res, err := s.lookupRefund(ctx, &r)
	if errors.Is(err, providers.ErrUnknownProvider) && d.Status == RefundFailed {
		return giveBack(problem.New(fiber.StatusConflict, "provider_account_missing",
			"the merchant has no account with this refund's provider ("+r.Provider+") any more, and a refund is resolved as failed only on its word; "+
				"add the account back, or settle it at the provider"))
	}
	if err != nil && d.Status == RefundFailed {
		// Failing a refund gives its amount back to be refunded again:
		// only on the provider's word, or the customer may be refunded
		// twice.
		s.cfg.Log.WarnContext(ctx, "refund resolution put off: the provider cannot be asked", "refund_id", r.ID, "err", err)
		return giveBack(problem.New(fiber.StatusServiceUnavailable, "provider_unavailable",
			"the provider cannot be asked now, and a refund is resolved as failed only on its word; retry later").WithRetryAfter(30))
	}
	if err == nil {
		if contradicts(res.Outcome, res.RefundID, d.Status == RefundSucceeded, false) {
			s.refused(ctx, audit.Change{Action: audit.RefundResolutionRefused, TargetType: "refund", TargetID: r.ID,
				TenantID: r.MerchantID, Before: refundAuditView(&r),
				After: refusedView(string(d.Status), providers.Result{Outcome: res.Outcome, TransactionID: res.RefundID, FailureCode: res.FailureCode}),
				Note:  d.Note})
			return giveBack(providerDisagrees(res.Outcome, "provider_refund_id", res.RefundID, res.FailureCode))
		}
		if res.Outcome.Final() {
			f.RefundID = res.RefundID
		}
	}
	// Without the provider's final answer (it had no record, or could not
	// be asked about a "succeeded") the resolution is watched, as a
	// payment's is (watchRefundResolution).
	watched := err != nil || !res.Outcome.Final()
	before := refundAuditView(&r)
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		ok, err := s.store.finishRefund(ctx, tx, r.MerchantID, r.ID, f)
		if err != nil {
			return err
		}
		if !ok {
			return errSkipped
		}
		if watched {
			if err := s.store.scheduleRefundRecheck(ctx, tx, r.MerchantID, r.ID, s.cfg.RecheckAfter); err != nil {
				return err
			}
		}
		f.applyTo(&r)
		if r.Status == RefundFailed {
			if err := s.store.unreserve(ctx, tx, r.MerchantID, r.PaymentID, r.Amount); err != nil {
				return err
			}
		}
		if err := s.keys.Complete(ctx, tx, claim, renderRefund(&r)); err != nil {
			return err
		}
		if err := s.emitRefund(ctx, tx, &r); err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.Change{Action: audit.RefundResolved, TargetType: "refund", TargetID: r.ID,
			TenantID: r.MerchantID, Before: before, After: refundAuditView(&r), Note: d.Note})
	})
	switch {
	case errors.Is(err, errSkipped):
		cur, _ := s.store.getRefundAny(ctx, id)
		return cur, problem.New(fiber.StatusConflict, "refund_final", "the refund was settled meanwhile")
	case errors.Is(err, idempotency.ErrLostClaim):
		return r, inProgress
	case err != nil:
		return Refund{}, err
	}
	s.cfg.Log.WarnContext(ctx, "refund resolved by an operator", "merchant_id", r.MerchantID, "refund_id", r.ID,
		"payment_id", r.PaymentID, "status", string(r.Status))
	return r, nil
}

// refundAuditView is what the audit log keeps of a refund.
func refundAuditView(r *Refund) map[string]any {
	return map[string]any{"status": r.Status, "amount": r.Amount, "currency": r.Currency, "payment_id": r.PaymentID,
		"failure_code": r.FailureCode, "provider": r.Provider, "provider_reference": r.ProviderReference,
		"provider_refund_id": r.ProviderRefundID}
}
