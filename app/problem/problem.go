// Package problem is the gateway's one error shape on the wire: RFC 9457
// application/problem+json with a stable machine-readable code. Domain
// packages return *Problem from their HTTP handlers (or sentinel errors that
// the app's error handler maps); clients switch on Code, never on Detail.
package problem

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
)

// ContentType is the media type of every error body.
const ContentType = "application/problem+json"

// FieldError names one invalid field of a request body.
type FieldError struct {
	Field  string `json:"field" example:"amount"`
	Reason string `json:"reason" example:"must be a positive integer in minor units"`
} // @name FieldError

// Problem is an RFC 9457 problem detail. It is also an error, so handlers
// can simply return it.
type Problem struct {
	Type      string       `json:"type" example:"urn:oncepay:error:invalid_request"`
	Title     string       `json:"title" example:"Bad Request"`
	Status    int          `json:"status" example:"400"`
	Detail    string       `json:"detail,omitempty" example:"the request body is invalid"`
	Code      string       `json:"code" example:"invalid_request"`
	RequestID string       `json:"request_id,omitempty" example:"3f1c9a8e-7c1e-4f0e-9a51-2b0c6f1e4d2a"`
	Errors    []FieldError `json:"errors,omitempty"`
	// Extensions are extra members (RFC 9457 §3.2), e.g. the payment of a
	// declined charge. They are rendered at the top level of the object.
	Extensions map[string]any `json:"-"`
	// RetryAfter, when positive, is sent as the Retry-After header (seconds).
	RetryAfter int `json:"-"`
} // @name Problem

// New builds a problem with the standard title for status.
func New(status int, code, detail string) *Problem {
	return &Problem{
		Type:   "urn:oncepay:error:" + code,
		Title:  statusTitle(status),
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

// Invalid is the 400 invalid_request problem for a body that fails validation.
func Invalid(fields ...FieldError) *Problem {
	p := New(fiber.StatusBadRequest, "invalid_request", "the request is invalid")
	if len(fields) == 1 {
		p.Detail = fields[0].Field + ": " + fields[0].Reason
	}
	p.Errors = fields
	return p
}

// WithRetryAfter sets the Retry-After seconds and returns p.
func (p *Problem) WithRetryAfter(seconds int) *Problem {
	p.RetryAfter = seconds
	return p
}

// With adds an extension member and returns p.
func (p *Problem) With(name string, value any) *Problem {
	if p.Extensions == nil {
		p.Extensions = map[string]any{}
	}
	p.Extensions[name] = value
	return p
}

// Error implements error; it carries no secrets because details never do.
func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail) }

// As returns the *Problem in err's chain, if any.
func As(err error) (*Problem, bool) {
	var p *Problem
	ok := errors.As(err, &p)
	return p, ok
}

// MarshalJSON renders the standard members and the extensions in one object.
func (p *Problem) MarshalJSON() ([]byte, error) {
	type plain Problem
	base, err := json.Marshal((*plain)(p))
	if err != nil || len(p.Extensions) == 0 {
		return base, err
	}
	ext, err := json.Marshal(p.Extensions)
	if err != nil {
		return nil, err
	}
	// Both are JSON objects: splice "{...base}" and "{...ext}".
	out := make([]byte, 0, len(base)+len(ext))
	out = append(out, base[:len(base)-1]...)
	out = append(out, ',')
	out = append(out, ext[1:]...)
	return out, nil
}

// Body renders p as the exact bytes sent, stamped with the request id.
func (p *Problem) Body(requestID string) []byte {
	cp := *p
	cp.RequestID = requestID
	b, err := json.Marshal(&cp)
	if err != nil {
		// Extensions are the gateway's own values; failing to encode them
		// is a programming error, but the client still deserves a problem.
		b, _ = json.Marshal(New(fiber.StatusInternalServerError, "internal", ""))
	}
	return b
}

// Write sends p as the response.
func Write(c *fiber.Ctx, p *Problem) error {
	if p.RetryAfter > 0 {
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(p.RetryAfter))
	}
	c.Set(fiber.HeaderContentType, ContentType)
	return c.Status(p.Status).Send(p.Body(RequestID(c)))
}

// RequestID is the id the request-id middleware gave this request.
func RequestID(c *fiber.Ctx) string {
	if id, ok := c.Locals("requestid").(string); ok {
		return id
	}
	return ""
}

func statusTitle(status int) string {
	if t := utils.StatusMessage(status); t != "" {
		return t
	}
	return "Error"
}
