package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ErrAttemptsExhausted is IncompleteError.Err when WithMaxAttempts ran out.
var ErrAttemptsExhausted = errors.New("client: attempts exhausted")

// ErrProcessing is IncompleteError.Last when the last answer was a 202: the
// gateway does not know the outcome yet (it will settle it; it never charges
// twice for the key).
var ErrProcessing = errors.New("client: payment still processing")

// FieldError names one invalid field of a request.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// Problem is the gateway's RFC 9457 error body. Switch on Code, never on
// Detail.
type Problem struct {
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail,omitempty"`
	Code      string       `json:"code"`
	RequestID string       `json:"request_id,omitempty"`
	Errors    []FieldError `json:"errors,omitempty"`
}

// APIError is an error answer of the gateway: the HTTP status and its
// problem body. Answers CreatePayment treats specially come as
// *DeclinedError, *RequestError and *AuthError, which embed it.
type APIError struct {
	StatusCode int
	Problem
	// RetryAfter is the server's Retry-After, 0 when absent.
	RetryAfter time.Duration
	// Body is the raw answer.
	Body []byte
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "oncepay: %d", e.StatusCode)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.RequestID != "" {
		b.WriteString(" (request_id " + e.RequestID + ")")
	}
	return b.String()
}

// DeclinedError is a 402: the provider declined the payment. It is final;
// a retry with the same key gets the same answer, so ask the customer for
// another payment method and use a new key.
type DeclinedError struct {
	APIError
	// DeclineCode is the provider's reason, e.g. "insufficient_funds".
	DeclineCode string
	// Payment is the failed payment.
	Payment *Payment
}

func (e *DeclinedError) Error() string {
	return fmt.Sprintf("oncepay: payment declined (%s)", e.DeclineCode)
}

// RequestError is a 400 or 422: the request is wrong and retrying it as is
// cannot help. Code says how: invalid_request (Errors names the fields; the
// key was released, so the corrected request may reuse it),
// idempotency_key_mismatch (the key was used for another request),
// idempotency_key_missing or idempotency_key_invalid.
type RequestError struct{ APIError }

// AuthError is a 401 or 403: the credentials are wrong or revoked
// (invalid_client, invalid_token) or the tenant is suspended
// (tenant_suspended).
type AuthError struct{ APIError }

// IncompleteError is returned when a call stopped before a final answer:
// the context ended or the attempts ran out. errors.Is sees both Err and
// Last: errors.Is(err, context.DeadlineExceeded), errors.Is(err,
// ErrProcessing), errors.As(err, &apiErr).
type IncompleteError struct {
	// Err is the context's error or ErrAttemptsExhausted.
	Err error
	// Last is the last non-final outcome: ErrProcessing after a 202, an
	// *APIError (409, 429, 5xx), an *AuthError, a transport error, or nil.
	Last error
	// Attempts is how many requests were sent.
	Attempts int
	// IdempotencyKey is the key of the payment (empty for reads): pass it
	// as CreatePaymentRequest.IdempotencyKey, with the same request, to
	// carry on later without risking a second charge.
	IdempotencyKey string
	// Payment is the processing payment when the last answer was a 202.
	Payment *Payment
}

func (e *IncompleteError) Error() string {
	msg := fmt.Sprintf("oncepay: no final answer after %d attempt(s): %v", e.Attempts, e.Err)
	if e.Last != nil {
		msg += "; last: " + e.Last.Error()
	}
	return msg
}

// Unwrap returns Err and Last.
func (e *IncompleteError) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Last}
}

// apiError decodes an error answer; a body that is not a problem still
// yields the status.
func apiError(a *answer) *APIError {
	e := &APIError{StatusCode: a.status, RetryAfter: a.retryAfter, Body: a.body}
	_ = json.Unmarshal(a.body, &e.Problem)
	if e.Problem.Status == 0 {
		e.Problem.Status = a.status
	}
	if e.Title == "" {
		e.Title = http.StatusText(a.status)
	}
	return e
}

// finalError maps a final error answer to its typed error.
func finalError(a *answer) error {
	e := apiError(a)
	switch a.status {
	case http.StatusPaymentRequired:
		var ext struct {
			DeclineCode string   `json:"decline_code"`
			Payment     *Payment `json:"payment"`
		}
		_ = json.Unmarshal(a.body, &ext)
		return &DeclinedError{APIError: *e, DeclineCode: ext.DeclineCode, Payment: ext.Payment}
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return &RequestError{APIError: *e}
	case http.StatusUnauthorized, http.StatusForbidden:
		return &AuthError{APIError: *e}
	}
	return e
}
