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

// ProviderDisagrees is the 409 of a resolution the provider contradicts:
// its answer is final and says otherwise.
func providerDisagrees(res providers.Result) error {
	return problem.New(fiber.StatusConflict, "provider_disagrees",
		"the provider's final answer contradicts this resolution").
		With("provider_outcome", string(res.Outcome)).With("provider_transaction_id", res.TransactionID).
		With("provider_failure_code", res.FailureCode)
}

// Resolve settles a payment in review — or processing, untouched for
// SWEEP_STALE_AFTER — the way the sweeper would, with the operator's
// decision: the payment's final state, its key's stored answer (so the
// merchant's retry replays the resolution) and the audit event commit in
// one transaction. The provider is asked once more first: if its answer is
// final and says otherwise, nothing changes (409 provider_disagrees).
func (s *Service) Resolve(ctx context.Context, id string, r Resolution) (Payment, error) {
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
	if p.Status == StatusProcessing && claim.SinceAttempt < s.cfg.StaleAfter {
		return giveBack(inProgress)
	}
	f := finishParams{Status: r.Status, At: s.now()}
	if r.Status == StatusFailed {
		f.FailureCode, f.FailureMessage = FailureResolved, "Resolved as failed by an operator."
	}
	if res, err := s.lookup(ctx, &p); err == nil && res.Outcome.Final() {
		agrees := (res.Outcome == providers.OutcomeSucceeded) == (r.Status == StatusSucceeded)
		if !agrees {
			return giveBack(providerDisagrees(res))
		}
		f.TransactionID = res.TransactionID
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
	return p, nil
}

// resolvedView is what the audit log keeps of a payment: no payment
// method token (View has none), no customer data beyond the ledger's.
func resolvedView(v View) map[string]any {
	return map[string]any{"status": v.Status, "amount": v.Amount, "currency": v.Currency,
		"failure_code": v.FailureCode, "provider": v.Provider, "provider_reference": v.ProviderReference,
		"provider_transaction_id": v.ProviderTransactionID}
}
