package payments

import (
	"encoding/json"
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/app/reqjson"
	"github.com/oncepay/gateway/providers"
)

// CreateRequest is the body of POST /v1/payments.
type CreateRequest struct {
	// Amount in minor units of the currency (kobo, cents): a positive integer, at most 10^12.
	Amount json.RawMessage `json:"amount" swaggertype:"integer" minimum:"1" maximum:"1000000000000" example:"5000"`
	// Currency is an ISO 4217 code, in any case (stored and answered in upper case).
	Currency string `json:"currency" minLength:"3" maxLength:"3" example:"NGN"`
	// Email of the customer.
	Email string `json:"email" example:"ada@example.com"`
	// PaymentMethod is the provider's token for a saved card or account
	// (simulator: sim_success, sim_decline, sim_insufficient, sim_timeout, sim_unavailable, sim_pending, sim_late, sim_stuck).
	PaymentMethod string `json:"payment_method" example:"sim_success"`
	// Provider overrides the merchant's default provider.
	Provider string `json:"provider,omitempty" example:"simulator"`
	// Description is free text shown to the merchant: printable, one line.
	Description string `json:"description,omitempty" example:"Order #1001"`
	// Metadata: up to 50 string keys (≤ 40 chars) with string values (≤ 500 chars, not null), all printable text (no control characters).
	Metadata map[string]*string `json:"metadata,omitempty" swaggertype:"object,string" example:"order_id:1001"`
} // @name CreatePaymentRequest

// Limits of a payment request.
const (
	maxAmount      = 1_000_000_000_000 // 10^12 minor units
	maxMetadata    = 50
	maxMetaKey     = 40
	maxMetaValue   = 500
	maxDescription = 1000
	maxMethod      = 255
)

// input is a validated CreateRequest.
type input struct {
	Amount        int64
	Currency      string
	Email         string
	PaymentMethod string
	Provider      string
	Description   string
	Metadata      string
}

// parseCreate decodes and validates a request body. Every problem is a 400
// invalid_request naming the fields; nothing has been charged.
func parseCreate(body []byte) (input, *problem.Problem) {
	var req CreateRequest
	if err := reqjson.Decode(body, &req); err != nil {
		return input{}, problem.Invalid(decodeRefusal(err))
	}
	var errs []problem.FieldError
	bad := func(field, reason string) { errs = append(errs, problem.FieldError{Field: field, Reason: reason}) }

	in := input{
		Currency:      strings.ToUpper(strings.TrimSpace(req.Currency)),
		Email:         strings.TrimSpace(req.Email),
		PaymentMethod: req.PaymentMethod,
		Provider:      strings.TrimSpace(req.Provider),
		Description:   req.Description,
	}
	// Parsing the raw token accepts exactly a JSON integer: 50.5, 5e3 and
	// "5000" (a string) are all refused, never rounded.
	if len(req.Amount) == 0 || string(req.Amount) == "null" {
		bad("amount", "is required")
	} else if n, err := strconv.ParseInt(string(req.Amount), 10, 64); err != nil || n <= 0 || n > maxAmount {
		bad("amount", fmt.Sprintf("must be a positive integer in minor units, at most %d", int64(maxAmount)))
	} else {
		in.Amount = n
	}
	if in.Currency == "" {
		bad("currency", "is required")
	} else if _, ok := providers.Exponent(in.Currency); !ok {
		bad("currency", "must be an ISO 4217 currency code")
	}
	if in.Email == "" {
		bad("email", "is required")
	} else if a, err := mail.ParseAddress(in.Email); err != nil || a.Address != in.Email || !printableText(in.Email, 254) {
		bad("email", "must be a plain email address")
	}
	if in.PaymentMethod == "" {
		bad("payment_method", "is required")
	} else if len(in.PaymentMethod) > maxMethod || !printable(in.PaymentMethod) {
		bad("payment_method", "must be at most 255 printable ASCII characters")
	}
	if len(in.Provider) > 64 {
		bad("provider", "is not a provider name")
	}
	if !utf8.ValidString(in.Description) || utf8.RuneCountInString(in.Description) > maxDescription ||
		strings.IndexFunc(in.Description, unicode.IsControl) >= 0 {
		bad("description", fmt.Sprintf("must be printable text (UTF-8, no control characters), at most %d characters", maxDescription))
	}
	if msg := checkMetadata(req.Metadata); msg != "" {
		bad("metadata", msg)
	}
	if len(errs) > 0 {
		return input{}, problem.Invalid(errs...)
	}
	in.Metadata = encodeMetadata(req.Metadata)
	return in, nil
}

// decodeRefusal is a strict decoder's refusal as the field it blames.
func decodeRefusal(err error) problem.FieldError {
	field, reason := reqjson.Refusal(err)
	return problem.FieldError{Field: field, Reason: reason}
}

// checkMetadata is the reason metadata is refused, or "".
func checkMetadata(md map[string]*string) string {
	if len(md) > maxMetadata {
		return fmt.Sprintf("must have at most %d keys", maxMetadata)
	}
	for k, v := range md {
		if v == nil {
			return "values must be strings (null is not one)"
		}
		if k == "" || len(k) > maxMetaKey || len(*v) > maxMetaValue {
			return fmt.Sprintf("keys must be 1 to %d characters and values at most %d", maxMetaKey, maxMetaValue)
		}
		// As a tenant's name or a refund's reason: an escape sequence or a
		// line break in a key or value ends up in dashboards and logs.
		if !printableText(k, maxMetaKey) || !printableText(*v, maxMetaValue) {
			return "keys and values must be printable text (no control characters)"
		}
	}
	return ""
}

// encodeMetadata is metadata checked by checkMetadata as stored: a JSON
// object, keys sorted.
func encodeMetadata(md map[string]*string) string {
	if len(md) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(md) // map keys are sorted: stable bytes
	return string(b)
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
