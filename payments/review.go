package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/gateway/providers"
)

// ReviewReason is why the gateway put a payment or a refund in review.
type ReviewReason string // @name ReviewReason

// The reasons, as the operator desk shows them (reviewDetails says each in
// words).
const (
	// ReviewProviderPending: the provider has it, still pending (a
	// checkout abandoned, a refund waiting on the customer).
	ReviewProviderPending ReviewReason = "provider_pending"
	// ReviewReversed: charged, then given back at the provider (refunded at
	// its dashboard, or charged back): neither a success nor a decline.
	ReviewReversed ReviewReason = "provider_reversed"
	// ReviewAmountMismatch: the charge under the payment's reference is
	// another one: for another amount or currency (the answer's, when the
	// provider gave them).
	ReviewAmountMismatch ReviewReason = "amount_mismatch"
	// ReviewLookupFailed: the provider could not be asked (provider_error).
	ReviewLookupFailed ReviewReason = "lookup_failed"
	// ReviewAccountMissing: the merchant's account with the provider was
	// removed, so nobody can ask it.
	ReviewAccountMissing ReviewReason = "provider_account_missing"
	// ReviewNotFoundYet: the provider has no record of it, but its last
	// attempt is too recent for that to release it.
	ReviewNotFoundYet ReviewReason = "not_found_yet"
)

// reviewDetails are the reasons in words, for the on-call engineer.
var reviewDetails = map[ReviewReason]string{
	ReviewProviderPending: "the provider still holds it pending past REVIEW_AFTER: check it at the provider's dashboard",
	ReviewReversed:        "the provider charged it and has given the money back since (refunded at its dashboard, or charged back): settle it with the merchant",
	ReviewAmountMismatch:  "the provider's charge under this reference is for another amount or currency than the payment's: not this payment's",
	ReviewLookupFailed:    "the provider could not be asked for all of REVIEW_AFTER (provider_error says how it failed last)",
	ReviewAccountMissing:  "the merchant's account with this provider was removed: nobody can ask it",
	ReviewNotFoundYet:     "the provider has no record of it, but its last attempt is too recent for that to be trusted",
}

// review is a row of reviews (migration 20): why its target is in review,
// and what the provider last answered about it. Provider fields hold only
// what an answer's Clean kept, and an error only as its class: a
// provider's error text can carry a request's URL or body, which
// responses never show.
type review struct {
	MerchantID          string `gorm:"primaryKey"`
	TargetID            string `gorm:"primaryKey"`
	Reason              ReviewReason
	FlaggedAt           time.Time
	ProviderOutcome     string
	ProviderID          string
	ProviderFailureCode string
	ProviderMessage     string
	ProviderAmount      *int64
	ProviderCurrency    string
	ProviderError       string
	AskedAt             *time.Time
}

// TableName is the table the migrations create.
func (review) TableName() string { return "reviews" }

// otherCharge is ours's refusal of a final answer about another charge:
// the answer is kept for the review it may lead to, not passed on.
type otherCharge struct {
	res providers.Result
	err error
}

func (e *otherCharge) Error() string { return e.err.Error() }
func (e *otherCharge) Unwrap() error { return e.err }

// asked is one look at the provider: its answer or its error, and when
// (nil: it was not asked).
type asked struct {
	res providers.Result
	err error
	at  *time.Time
}

// askedRefund is asked for a refund's lookup.
func askedRefund(res providers.RefundResult, err error, at *time.Time) asked {
	return asked{res: providers.Result{Outcome: res.Outcome, TransactionID: res.RefundID,
		FailureCode: res.FailureCode, FailureMessage: res.FailureMessage}, err: err, at: at}
}

// why is what a flag for review keeps of a: the reason it gives, and the
// answer.
func (a asked) why() review {
	rv := review{AskedAt: a.at}
	res := a.res
	var oc *otherCharge
	switch {
	case errors.Is(a.err, providers.ErrUnknownProvider):
		rv.Reason, rv.AskedAt = ReviewAccountMissing, nil
	case errors.As(a.err, &oc):
		rv.Reason, res = ReviewAmountMismatch, oc.res
	case errors.Is(a.err, providers.ErrReferenceConflict):
		// An adapter's own finding of another charge (its Charge's, today;
		// a Lookup may say so too under the contract): the same reason,
		// without the answer.
		rv.Reason = ReviewAmountMismatch
	case a.err != nil:
		rv.Reason, rv.ProviderError = ReviewLookupFailed, errorClass(a.err)
	case res.Reversed:
		rv.Reason = ReviewReversed
	case res.Outcome == providers.OutcomeNotFound:
		rv.Reason = ReviewNotFoundYet
	default:
		rv.Reason = ReviewProviderPending
	}
	rv.ProviderOutcome, rv.ProviderID = string(res.Outcome), res.TransactionID
	rv.ProviderFailureCode, rv.ProviderMessage, rv.ProviderCurrency = res.FailureCode, res.FailureMessage, res.Currency
	if res.Amount != 0 || res.Currency != "" {
		amount := res.Amount
		rv.ProviderAmount = &amount
	}
	if res.Reversed {
		rv.ProviderOutcome = "reversed"
	}
	return rv
}

// errorClass names how a call to a provider failed, never in its words.
func errorClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, providers.ErrNotCharged):
		return "refused"
	case errors.Is(err, providers.ErrUnknown):
		return "unknown"
	default:
		return "error"
	}
}

// flagReview records why target is being flagged, in tx: the transaction
// of the flag itself. A target flagged again (reinstated since, and back)
// keeps only the latest reason.
func (s *Store) flagReview(ctx context.Context, tx *gorm.DB, merchantID, targetID string, at time.Time, rv review) error {
	rv.MerchantID, rv.TargetID, rv.FlaggedAt = merchantID, targetID, at
	err := s.exec(ctx, tx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "merchant_id"}, {Name: "target_id"}},
		UpdateAll: true,
	}).Create(&rv).Error
	return interpret("flag review", err)
}

// reviewAnswer refreshes the provider's last answer of a target still in
// review, in tx (the sweep's own write of its key); the reason stays the
// flag's. A target flagged before reviews existed has no row: nothing.
func (s *Store) reviewAnswer(ctx context.Context, tx *gorm.DB, merchantID, targetID string, rv review) error {
	err := s.exec(ctx, tx).Model(&review{}).Where("merchant_id = ? AND target_id = ?", merchantID, targetID).
		Updates(map[string]any{"provider_outcome": rv.ProviderOutcome, "provider_id": rv.ProviderID,
			"provider_failure_code": rv.ProviderFailureCode, "provider_message": rv.ProviderMessage,
			"provider_amount": rv.ProviderAmount, "provider_currency": rv.ProviderCurrency,
			"provider_error": rv.ProviderError, "asked_at": rv.AskedAt}).Error
	return interpret("review answer", err)
}

// reviewOf returns the review of a target, found false when it has none.
func (s *Store) reviewOf(ctx context.Context, merchantID, targetID string) (rv review, found bool, err error) {
	err = s.exec(ctx, nil).Where("merchant_id = ? AND target_id = ?", merchantID, targetID).Take(&rv).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return review{}, false, nil
	}
	if err != nil {
		return review{}, false, fmt.Errorf("payments: review of %s: %w", targetID, err)
	}
	return rv, true, nil
}

// ReviewOf is why the payment or refund targetID (pay_… or re_…) of a
// merchant went to review, for the operator desk; nil when it never did
// (or did before the gateway kept reasons).
func (s *Service) ReviewOf(ctx context.Context, merchantID, targetID string) (*ReviewView, error) {
	rv, found, err := s.store.reviewOf(ctx, merchantID, targetID)
	if err != nil || !found {
		return nil, err
	}
	return rv.view(), nil
}

// ReviewView is why a payment or refund is (or was) in review, for
// operators only: never in a merchant's view. The reason can name another
// charge under the merchant's reference (made outside the gateway, perhaps
// by another system) and how the gateway's calls failed — the gateway's
// business, settled by an operator; a merchant sees requires_review and,
// once resolved, the outcome.
type ReviewView struct {
	Reason ReviewReason `json:"reason" example:"amount_mismatch" enums:"provider_pending,provider_reversed,amount_mismatch,lookup_failed,provider_account_missing,not_found_yet"`
	Detail string       `json:"detail" example:"the provider's charge under this reference is for another amount or currency than the payment's: not this payment's"`
	// When the gateway put it in review.
	FlaggedAt time.Time `json:"flagged_at" format:"date-time" example:"2026-12-04T10:00:00Z"`
	// The provider's last answer: at the flag, then at
	// each sweep while in review. Absent when it could not be asked.
	ProviderAnswer *ProviderAnswer `json:"provider_answer,omitempty"`
} // @name Review

// ProviderAnswer is what a provider last said about a charge or refund,
// as the gateway keeps it (cleaned: never a raw payload).
type ProviderAnswer struct {
	// When the gateway asked.
	AskedAt     time.Time `json:"asked_at" format:"date-time" example:"2026-12-04T10:00:00Z"`
	Outcome     string    `json:"outcome,omitempty" example:"succeeded" enums:"succeeded,failed,pending,not_found,reversed"`
	ID          string    `json:"id,omitempty" example:"4099260516"`
	FailureCode string    `json:"failure_code,omitempty" example:"insufficient_funds"`
	Message     string    `json:"message,omitempty" example:"Insufficient funds"`
	// Amount and Currency: the charge as the provider reported it, where
	// its answer carried them.
	Amount   *int64 `json:"amount,omitempty" example:"4000"`
	Currency string `json:"currency,omitempty" example:"NGN"`
	// Error: how asking failed (timeout, refused, unknown, error), instead
	// of an answer.
	Error string `json:"error,omitempty" example:"timeout"`
} // @name ProviderAnswer

// view renders rv for the operator desk.
func (rv *review) view() *ReviewView {
	v := &ReviewView{Reason: rv.Reason, Detail: reviewDetails[rv.Reason], FlaggedAt: rv.FlaggedAt.UTC()}
	if rv.AskedAt != nil {
		v.ProviderAnswer = &ProviderAnswer{AskedAt: rv.AskedAt.UTC(), Outcome: rv.ProviderOutcome, ID: rv.ProviderID,
			FailureCode: rv.ProviderFailureCode, Message: rv.ProviderMessage, Amount: rv.ProviderAmount,
			Currency: rv.ProviderCurrency, Error: rv.ProviderError}
	}
	return v
}
