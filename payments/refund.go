package payments

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/app/reqjson"
)

// RefundStatus is the state of a refund.
type RefundStatus string // @name RefundStatus

// Refund states. pending and requires_review are the open ones: the
// provider has not said (or we did not hear) how it ended; past
// REVIEW_AFTER a pending refund is flagged requires_review for an operator
// (its key stays in progress and it is still looked up). Both keep their
// amount reserved on the payment.
const (
	RefundPending        RefundStatus = "pending"
	RefundSucceeded      RefundStatus = "succeeded"
	RefundFailed         RefundStatus = "failed"
	RefundRequiresReview RefundStatus = "requires_review"
)

// Refund is one row of the refunds ledger, made under its own idempotency
// key. While it is pending or succeeded its amount counts in its
// payment's amount_refunded.
type Refund struct {
	MerchantID        string `gorm:"primaryKey"`
	ID                string `gorm:"primaryKey"`
	PaymentID         string
	IdempotencyKey    string
	Amount            int64
	Currency          string
	Status            RefundStatus
	Reason            string
	Metadata          string
	Provider          string
	ProviderReference string
	ProviderRefundID  string
	FailureCode       string
	FailureMessage    string
	RequestHash       string
	Attempts          int
	CreatedAt         time.Time
	UpdatedAt         time.Time
	// AgeSeconds is the refund's age by the database's clock, where a read
	// fills it in (RefundByKey).
	AgeSeconds float64 `gorm:"column:age_seconds;->"`
	// recheckTaken is the refund's recheck_at as DueRefundRechecks moved
	// it (the database's own text of it), so the recheck ends its row only
	// if nothing moved it again since.
	recheckTaken string
	// recheckLease is Payment's, for DueRefundRechecks.
	recheckLease time.Time
}

// TableName is the table the migrations create.
func (Refund) TableName() string { return "refunds" }

func (r *Refund) age() time.Duration { return time.Duration(r.AgeSeconds * float64(time.Second)) }

// final reports whether the refund's outcome is recorded.
func (r *Refund) final() bool { return r.Status == RefundSucceeded || r.Status == RefundFailed }

// retryable reports whether a failed refund ended with its key released
// (the provider certainly made no refund), so a new claim may refund.
func (r *Refund) retryable() bool {
	return r.Status == RefundFailed && (notSent(r.FailureCode) || r.FailureCode == FailureNotProcessed)
}

// RefundView is the public shape of a refund.
type RefundView struct {
	ID                string          `json:"id" example:"re_3f1e0c9d2b8a47e6a5d4c3b2a1f0e9d8"`
	Object            string          `json:"object" example:"refund"`
	PaymentID         string          `json:"payment_id" example:"pay_5f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6"`
	Amount            int64           `json:"amount" example:"3000"`
	Currency          string          `json:"currency" example:"NGN"`
	Status            RefundStatus    `json:"status" example:"succeeded" enums:"pending,succeeded,failed,requires_review"`
	Reason            string          `json:"reason,omitempty" example:"requested_by_customer"`
	Provider          string          `json:"provider" example:"simulator"`
	ProviderReference string          `json:"provider_reference" example:"or-1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d"`
	ProviderRefundID  string          `json:"provider_refund_id,omitempty" example:"simre_2b6c7d8e"`
	FailureCode       string          `json:"failure_code,omitempty" example:"exceeds_charge"`
	FailureMessage    string          `json:"failure_message,omitempty" example:"The refund exceeds what is left of the charge."`
	Metadata          json.RawMessage `json:"metadata" swaggertype:"object"`
	IdempotencyKey    string          `json:"idempotency_key" example:"refund-7c1b"`
	CreatedAt         time.Time       `json:"created_at" format:"date-time" example:"2026-12-03T10:00:00Z"`
	UpdatedAt         time.Time       `json:"updated_at" format:"date-time" example:"2026-12-03T10:00:01Z"`
} // @name Refund

// View renders the refund for the API.
func (r *Refund) View() RefundView {
	md := json.RawMessage(r.Metadata)
	if len(md) == 0 {
		md = json.RawMessage("{}")
	}
	return RefundView{
		ID: r.ID, Object: "refund", PaymentID: r.PaymentID, Amount: r.Amount, Currency: r.Currency,
		Status: r.Status, Reason: r.Reason, Provider: r.Provider, ProviderReference: r.ProviderReference,
		ProviderRefundID: r.ProviderRefundID, FailureCode: r.FailureCode, FailureMessage: r.FailureMessage,
		Metadata: md, IdempotencyKey: r.IdempotencyKey, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

// renderRefund is the final answer for a settled refund, exactly as the
// create handler sends it and every later settler stores it: 201 with the
// refund, succeeded or failed (a refund the provider refused is a final
// answer too: the payment stays refundable by another key).
func renderRefund(r *Refund) Answer {
	body, _ := json.Marshal(r.View()) // a RefundView always encodes
	return Answer{Status: fiber.StatusCreated, Header: map[string]string{
		fiber.HeaderContentType: fiber.MIMEApplicationJSON,
		fiber.HeaderLocation:    refundLocation(r.ID),
	}, Body: body, ResourceID: r.ID}
}

func refundLocation(id string) string { return "/v1/refunds/" + id }

// CreateRefundRequest is the body of POST /v1/payments/{id}/refunds.
type CreateRefundRequest struct {
	// Amount in minor units; absent: all that is left of the payment.
	Amount json.RawMessage `json:"amount,omitempty" swaggertype:"integer" minimum:"1" example:"3000"`
	// Reason: requested_by_customer, duplicate, fraudulent, or free text of
	// at most 200 characters (simulator: sim_timeout, sim_pending, sim_decline or sim_unavailable picks the refund's outcome).
	Reason string `json:"reason,omitempty" example:"requested_by_customer"`
	// Metadata: up to 50 string keys (≤ 40 chars) with string values (≤ 500 chars, not null), all printable text (no control characters).
	Metadata map[string]*string `json:"metadata,omitempty" swaggertype:"object,string" example:"order_id:1001"`
} // @name CreateRefundRequest

// maxReason bounds a refund's free-text reason, in characters.
const maxReason = 200

// refundInput is a validated CreateRefundRequest; Amount 0 means all that
// is left.
type refundInput struct {
	Amount   int64
	Reason   string
	Metadata string
}

// parseRefund decodes and validates a refund body strictly (reqjson).
func parseRefund(body []byte) (refundInput, *problem.Problem) {
	var req CreateRefundRequest
	if err := reqjson.Decode(body, &req); err != nil {
		return refundInput{}, problem.Invalid(decodeRefusal(err))
	}
	var errs []problem.FieldError
	bad := func(field, reason string) { errs = append(errs, problem.FieldError{Field: field, Reason: reason}) }
	var in refundInput
	if len(req.Amount) > 0 && string(req.Amount) != "null" {
		n, err := strconv.ParseInt(string(req.Amount), 10, 64)
		if err != nil || n <= 0 || n > maxAmount {
			bad("amount", fmt.Sprintf("must be a positive integer in minor units, at most %d", int64(maxAmount)))
		}
		in.Amount = n
	}
	in.Reason = strings.TrimSpace(req.Reason)
	if utf8.RuneCountInString(in.Reason) > maxReason || strings.IndexFunc(in.Reason, unicode.IsControl) >= 0 {
		bad("reason", fmt.Sprintf("must be printable text of at most %d characters", maxReason))
	}
	if msg := checkMetadata(req.Metadata); msg != "" {
		bad("metadata", msg)
	}
	if len(errs) > 0 {
		return refundInput{}, problem.Invalid(errs...)
	}
	in.Metadata = encodeMetadata(req.Metadata)
	return in, nil
}
