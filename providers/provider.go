// Package providers defines the contract every payment provider adapter keeps,
// and the pieces they share: outcomes, error classes and our charge reference.
//
// The contract (design.md, "Providers"):
//
//   - Charge carries our Reference. A repeated Charge with the same reference
//     returns the first charge's outcome and never charges twice: a provider's
//     "duplicate reference" answer is looked up, not reported as a failure.
//   - Lookup only reads. It never creates a charge.
//   - Errors are classified. A decline is not an error: it is a Result with
//     OutcomeFailed. An error is either ErrNotCharged (the provider certainly
//     did not charge: safe to release the idempotency key) or ErrUnknown (the
//     charge may exist: leave the key in progress for a retry or the sweeper).
//
// Adapters know nothing about the database or HTTP handlers of the gateway.
package providers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
)

// Outcome is what a provider says happened to a charge.
type Outcome string

// The outcomes a Charge or Lookup can report.
const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"    // declined: final
	OutcomePending   Outcome = "pending"   // accepted, not settled yet
	OutcomeNotFound  Outcome = "not_found" // Lookup only: the provider never saw the reference
)

// Final reports whether the outcome ends a payment.
func (o Outcome) Final() bool { return o == OutcomeSucceeded || o == OutcomeFailed }

// ChargeRequest is one charge, in our terms. Amount is in minor units of
// Currency (ISO 4217, upper case).
type ChargeRequest struct {
	Reference     string
	Amount        int64
	Currency      string
	Email         string
	PaymentMethod string
	Description   string
}

// Result is a provider's answer about one charge.
type Result struct {
	Outcome       Outcome
	TransactionID string // the provider's own id, when it gave one
	// FailureCode is a stable snake_case reason for OutcomeFailed
	// (card_declined, insufficient_funds, ...); FailureMessage is safe to show
	// a merchant (never a raw provider payload).
	FailureCode    string
	FailureMessage string
	// Amount (minor units) and Currency (ISO 4217, upper case) are the
	// charge as the provider reports it, wherever its answer carries them;
	// zero and empty where it did not. A reference can hold a charge that
	// is not ours (made with the merchant's public key at a checkout, say:
	// shared/providers.md 1.4, 2.3), so the gateway settles a payment by a
	// lookup only when they are the payment's own.
	Amount   int64
	Currency string
	// Reversed: the provider made the charge and has since given the money
	// back outside the gateway (Paystack's "reversed": refunded at its
	// dashboard, or charged back). Outcome is then OutcomePending — final
	// at the provider, but neither a success to record (the merchant would
	// ship for money it no longer has) nor a decline (money did move): a
	// payment the gateway has not settled goes to review, where a person
	// settles it with the merchant.
	Reversed bool
}

// RefundRequest is one refund, in our terms. Reference is our refund
// reference (RefundReference: deterministic per merchant and refund key);
// the charge is named by its reference and, when the provider gave one,
// its transaction id. Amount is in minor units of Currency.
type RefundRequest struct {
	Reference       string
	ChargeReference string
	TransactionID   string
	Amount          int64
	Currency        string
	// Reason is free text (or duplicate, fraudulent,
	// requested_by_customer), passed on where the provider takes one.
	Reason string
}

// RefundLookup names a refund to look up: our refund reference and the
// charge it refunds. RefundID is the provider's own id of the refund when
// an earlier answer gave one (RefundResult.RefundID): an adapter that can
// fetch a refund by its id does so, and checks it carries our reference;
// without it the refund is found by our reference. TransactionID, when
// set, saves the adapter finding the charge by its reference.
type RefundLookup struct {
	Reference       string
	ChargeReference string
	TransactionID   string
	RefundID        string
}

// RefundResult is a provider's answer about one refund: OutcomeSucceeded
// (the money is on its way back), OutcomeFailed (final: the provider
// refused or the refund failed), OutcomePending (accepted, not settled
// yet), or OutcomeNotFound (LookupRefund only: the provider has no refund
// with our reference).
type RefundResult struct {
	Outcome        Outcome
	RefundID       string // the provider's own id, when it gave one
	FailureCode    string
	FailureMessage string
}

// Event is a verified webhook, reduced to what the gateway acts on: which of
// our references it is about. The gateway re-checks the outcome with Lookup
// (LookupRefund for a refund event) before changing any state, so nothing
// else in the payload is trusted: not even a refund event's status.
type Event struct {
	Type string
	// Reference is our charge reference: the charge the event is about, or
	// the charge a refund event refunds. Empty when the payload names no
	// charge of ours (acknowledge and ignore).
	Reference string
	// Refund reports that the event is about a refund of a charge
	// (Paystack refund.*, Flutterwave refund.*, Stripe charge.refunded and
	// refund.*): the gateway then looks up that charge's pending refunds
	// rather than the charge.
	Refund bool
	// RefundReference is our refund reference when a refund event's
	// payload echoes it (Stripe's refund metadata, Flutterwave's comment);
	// Paystack's refund events carry no merchant note, so it is empty there.
	RefundReference string
	// TransactionID is the provider's id of the refunded charge when a
	// refund event names it (Flutterwave's tx_id, Stripe's payment_intent),
	// for an event whose payload does not carry our charge reference. It is
	// only set on refund events.
	TransactionID string
}

// Provider is one provider account: an adapter bound to one tenant's secrets.
type Provider interface {
	// Charge creates (or, for a reference already used, finds) the charge.
	// Errors wrap ErrNotCharged or ErrUnknown; a decline is a Result.
	Charge(ctx context.Context, req ChargeRequest) (Result, error)
	// Lookup reports what happened to the charge with this reference. It
	// never creates anything. Errors wrap ErrNotCharged or ErrUnknown, and
	// mean "could not tell", never "not found" (that is OutcomeNotFound).
	Lookup(ctx context.Context, reference string) (Result, error)
	// VerifyWebhook authenticates a webhook delivery by its signature over
	// the raw body and returns the event. Errors wrap ErrBadSignature or
	// ErrBadPayload.
	VerifyWebhook(header http.Header, body []byte) (Event, error)
	// Refund creates (or, for a refund reference already used, finds) a
	// refund of a charge, carrying our refund reference where the
	// provider keeps it, so that a repeated Refund never refunds twice.
	// Errors are classified as for Charge: ErrNotCharged means the
	// provider certainly made no refund; ErrUnknown that it may have. A
	// refusal (nothing left to refund, insufficient balance) is a Result
	// with OutcomeFailed.
	Refund(ctx context.Context, req RefundRequest) (RefundResult, error)
	// LookupRefund reports what happened to the refund with our reference.
	// It never creates anything; OutcomeNotFound when the provider has no
	// such refund.
	LookupRefund(ctx context.Context, req RefundLookup) (RefundResult, error)
}

// ChargeDeduper is implemented by a provider that makes one charge of a
// reference however often it is sent (shared/providers.md): Stripe replays
// a request's Idempotency-Key for 24 hours, Paystack refuses a reference
// it has seen ("Duplicate Transaction Reference", documented), the
// simulator keeps one charge per reference. Flutterwave's v3 documents no
// such thing — what a reused tx_ref gets is unconfirmed, and its guidance
// is to query the status before retrying a create — so its adapter is
// not one. The gateway re-sends a charge whose earlier attempt's outcome
// is unknown (a retry taking the key over) only to a ChargeDeduper; any
// other is asked first, and sent the charge again only once the lookup
// has said "not found" for SWEEP_STALE_AFTER and released the payment.
type ChargeDeduper interface {
	Provider
	DedupesCharges()
}

// DedupesCharges reports whether p is a ChargeDeduper.
func DedupesCharges(p Provider) bool {
	_, ok := p.(ChargeDeduper)
	return ok
}

// RefundDeduper is implemented by a provider that makes one refund of a
// refund reference however often it is sent (Stripe by the request's
// Idempotency-Key, the simulator by the reference). Paystack and
// Flutterwave do not: their adapters find an earlier refund only among
// the charge's listed refunds, so a refund sent again before the provider
// lists the first is made twice. The gateway never sends a refund to a
// provider that is not a RefundDeduper again while an earlier attempt may
// still be on its way to that list (for RECHECK_AFTER after it was sent).
// A provider says so itself: one that does not is taken not to dedupe.
type RefundDeduper interface {
	Provider
	DedupesRefunds()
}

// DedupesRefunds reports whether p is a RefundDeduper.
func DedupesRefunds(p Provider) bool {
	_, ok := p.(RefundDeduper)
	return ok
}

// Secrets are a tenant's credentials for one provider, as the admin sent them
// (e.g. {"secret_key": "sk_test_..."}). They are write-only: never logged,
// never returned.
type Secrets map[string]string

// String hides the values so that a Secrets printed by accident leaks nothing.
func (s Secrets) String() string { return fmt.Sprintf("providers.Secrets(%d keys, redacted)", len(s)) }

// GoString hides the values from %#v too.
func (s Secrets) GoString() string { return s.String() }

// Error classes. Adapters wrap them (fmt.Errorf("paystack: %w: ...", ErrUnknown)).
var (
	// ErrNotCharged: the provider certainly did not create a charge
	// (connection refused, rejected before processing, bad credentials).
	ErrNotCharged = errors.New("provider did not charge or refund")
	// ErrUnknown: the charge may or may not exist (timeout, 5xx, cut
	// connection, unreadable answer).
	ErrUnknown = errors.New("provider outcome unknown")
	// ErrBadSignature: a webhook whose signature does not verify.
	ErrBadSignature = errors.New("webhook signature invalid")
	// ErrNoWebhooks: the provider sends none (the simulator), so its
	// webhook route is no endpoint at all.
	ErrNoWebhooks = errors.New("the provider sends no webhooks")
	// ErrBadPayload: a webhook whose signature verified but whose body we
	// cannot read.
	ErrBadPayload = errors.New("webhook payload invalid")
	// ErrBadSecrets: the secrets given for an account are incomplete.
	ErrBadSecrets = errors.New("provider secrets invalid")
	// ErrUnknownProvider: no adapter of that name.
	ErrUnknownProvider = errors.New("unknown provider")
)

// RefundReference is our refund reference for a refund's idempotency key
// of a merchant: like Reference, deterministic, per merchant, and safe in
// every provider's charset, and never equal to a charge reference.
func RefundReference(merchantID, key string) string {
	h := sha256.New()
	h.Write([]byte("refund"))
	h.Write([]byte{0})
	h.Write([]byte(merchantID))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "or-" + hex.EncodeToString(h.Sum(nil))[:40]
}

// Reference is our charge reference for an idempotency key of a merchant. It
// is deterministic, so every retry of a key (by the app, a takeover or the
// sweeper) carries the same reference and the provider dedupes; it differs
// between merchants using the same key; and it is safe in every provider's
// charset (Paystack allows only alphanumerics, '-', '.', '=').
func Reference(merchantID, key string) string {
	h := sha256.New()
	h.Write([]byte(merchantID))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "op-" + hex.EncodeToString(h.Sum(nil))[:40]
}
