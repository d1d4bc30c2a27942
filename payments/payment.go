// Package payments is the payment resource: creating a payment under an
// idempotency claim, reading and listing a merchant's payments, and settling
// a payment whose outcome was left unknown (the sweeper and webhooks).
//
// A payment row is written before the provider is called, so that whatever
// happens next — an answer, a timeout, a crash — the ledger knows which
// provider and reference to ask. The row's final state and the idempotency
// key's stored answer then commit together (one statement on PostgreSQL,
// a transaction on SQLite): a replay never disagrees with the ledger.
package payments

import (
	"encoding/json"
	"errors"
	"slices"
	"time"
)

// Status is the state of a payment.
type Status string // @name PaymentStatus

// Payment states. processing is the only non-final one; requires_review is
// a processing payment the provider would not settle within REVIEW_AFTER.
const (
	StatusProcessing     Status = "processing"
	StatusSucceeded      Status = "succeeded"
	StatusFailed         Status = "failed"
	StatusRequiresReview Status = "requires_review"
)

// Failure codes the gateway itself sets (providers add decline codes).
const (
	// FailureProviderUnavailable: the provider certainly did not charge;
	// the key was released and a retry may charge afresh.
	FailureProviderUnavailable = "provider_unavailable"
	// FailureNotProcessed: the sweeper found the provider had no record of
	// the charge, long after the last attempt; the key was released. It is
	// provisional: the payment is looked up once more after RECHECK_AFTER,
	// and a signed webhook or that lookup showing the charge re-opens it as
	// succeeded (and its key replays the success).
	FailureNotProcessed = "not_processed"
	// FailureAmountNotSupported: the provider cannot take the amount in
	// its currency (Stripe: MGA only in whole ariary, three-decimal
	// currencies only in multiples of 10), so the adapter refused it
	// before sending anything; the key was released, as for
	// provider_unavailable, and a retry may fix the amount.
	FailureAmountNotSupported = "amount_not_supported"
)

// Sentinel errors.
var (
	ErrNotFound = errors.New("payments: not found")
	// ErrConflict means a conditional write found the payment moved on
	// since it was read (another settler, a retry).
	ErrConflict = errors.New("payments: payment changed concurrently")
)

// retryableCodes are the failure codes of a payment whose key was
// released: nothing was charged as far as the gateway knows, and a new
// claim of the key may charge (with the same reference).
var retryableCodes = []string{FailureProviderUnavailable, FailureAmountNotSupported, FailureNotProcessed}

// notSent reports whether a failure code is a certain non-charge (or
// non-refund): the provider refused the call, or it was never sent, so
// nothing can land under the reference and the key is free even for
// another body. not_processed is not one: the first charge may still land.
func notSent(code string) bool {
	return code == FailureProviderUnavailable || code == FailureAmountNotSupported
}

// Payment is one row of the ledger. Payments are kept forever.
type Payment struct {
	ID                    string `gorm:"primaryKey"`
	MerchantID            string
	IdempotencyKey        string
	Amount                int64
	Currency              string
	Status                Status
	Provider              string
	ProviderReference     string
	ProviderTransactionID string
	FailureCode           string
	FailureMessage        string
	Email                 string
	PaymentMethod         string
	Description           string
	Metadata              string // a JSON object, as validated
	Attempts              int
	// AmountRefunded is the sum of the payment's succeeded and pending
	// refunds; it never exceeds Amount (see Store.reserve).
	AmountRefunded int64
	// RequestHash is the fingerprint of the request that made the payment
	// (idempotency.Fingerprint), kept for life: after its key's stored
	// answer is purged, the same request is answered from the ledger and
	// another one under the key is a mismatch. Empty on payments made
	// before fingerprints were kept.
	RequestHash string
	// RecheckAt, when set, is when a payment released as never charged
	// (not_processed) is looked up once more: a "not found" is not proof
	// that no charge will land. On a final payment it is the next look of
	// a watched operator resolution (Service.watchResolution).
	RecheckAt *time.Time
	// CreatedAt is the database's time (as every time the gateway
	// compares); UpdatedAt is the writing instance's.
	CreatedAt time.Time
	UpdatedAt time.Time
	// AgeSeconds is how old the payment was when read, by the database's
	// clock; only reads that need it (GetByKey) fill it in.
	AgeSeconds float64 `gorm:"column:age_seconds;->"`
	// recheckLease is, by this process's clock, an instant before the
	// lease DueRechecks took on the payment's recheck ends: its lookup is
	// made within it, as a claim's is.
	recheckLease time.Time
	// recheckTaken is recheck_at as DueRechecks wrote it when it took the
	// payment's recheck (the database's text of it; empty when not taken
	// that way): the recheck's outcome is written only while it is still
	// that take and no provider's news came since (Store.lookLater).
	recheckTaken string
}

// age is AgeSeconds as a duration.
func (p *Payment) age() time.Duration { return time.Duration(p.AgeSeconds * float64(time.Second)) }

// TableName is the table the migrations create.
func (Payment) TableName() string { return "payments" }

// retryable reports whether a failed payment ended with the key released,
// so that a new claim of the key may charge again.
func (p *Payment) retryable() bool {
	return p.Status == StatusFailed && slices.Contains(retryableCodes, p.FailureCode)
}

// View is the public shape of a payment. The payment method token is not
// echoed back.
type View struct {
	ID                    string          `json:"id" example:"pay_0193e4a27b4c7d2e9f1a2b3c4d5e6f70"`
	Object                string          `json:"object" example:"payment"`
	Amount                int64           `json:"amount" example:"5000"`
	AmountRefunded        int64           `json:"amount_refunded" example:"0"`
	Currency              string          `json:"currency" example:"NGN"`
	Status                Status          `json:"status" example:"succeeded" enums:"processing,succeeded,failed,requires_review"`
	Provider              string          `json:"provider" example:"simulator"`
	ProviderReference     string          `json:"provider_reference" example:"op-5f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6f7a8b9c0"`
	ProviderTransactionID string          `json:"provider_transaction_id,omitempty" example:"sim_2b6c7d8e"`
	FailureCode           string          `json:"failure_code,omitempty" example:"card_declined"`
	FailureMessage        string          `json:"failure_message,omitempty" example:"The card was declined."`
	Email                 string          `json:"email" example:"ada@example.com"`
	Description           string          `json:"description,omitempty" example:"Order #1001"`
	Metadata              json.RawMessage `json:"metadata" swaggertype:"object,string" example:"order_id:1001"`
	IdempotencyKey        string          `json:"idempotency_key" example:"8e03978e-40d5-43e8-bc93-6894a57f9324"`
	Attempts              int             `json:"attempts" example:"1"`
	CreatedAt             time.Time       `json:"created_at" format:"date-time" example:"2026-12-02T10:00:00Z"`
	UpdatedAt             time.Time       `json:"updated_at" format:"date-time" example:"2026-12-02T10:00:01Z"`
} // @name Payment

// View renders the payment for the API.
func (p *Payment) View() View {
	md := json.RawMessage(p.Metadata)
	if len(md) == 0 {
		md = json.RawMessage("{}")
	}
	return View{
		ID: p.ID, Object: "payment", Amount: p.Amount, AmountRefunded: p.AmountRefunded, Currency: p.Currency, Status: p.Status,
		Provider: p.Provider, ProviderReference: p.ProviderReference,
		ProviderTransactionID: p.ProviderTransactionID,
		FailureCode:           p.FailureCode, FailureMessage: p.FailureMessage,
		Email: p.Email, Description: p.Description, Metadata: md,
		IdempotencyKey: p.IdempotencyKey, Attempts: p.Attempts,
		CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(),
	}
}
