package payments

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/app/query"
	"github.com/oncepay/gateway/app/reqjson"
	"github.com/oncepay/gateway/app/reqtime"
	"github.com/oncepay/gateway/idempotency"
)

// Handler serves the payment routes.
type Handler struct {
	svc      *Service
	merchant func(c *fiber.Ctx) (Merchant, bool)
}

// NewHandler returns the HTTP handlers. merchant reads the authenticated
// caller that the auth middleware put on the request.
func NewHandler(svc *Service, merchant func(c *fiber.Ctx) (Merchant, bool)) *Handler {
	return &Handler{svc: svc, merchant: merchant}
}

// Routes mounts the merchant routes on r, which is already behind merchant
// authentication; idem guards each mutating route with the idempotency
// contract (idempotency.Guard).
func (h *Handler) Routes(r fiber.Router, idem func(fiber.Handler) fiber.Handler) {
	r.Post("/payments", idem(h.create))
	r.Get("/payments", h.list)
	r.Get("/payments/:id", h.get)
	r.Post("/payments/:id/refunds", idem(h.createRefund))
	r.Get("/payments/:id/refunds", h.listRefunds)
	r.Get("/refunds/:id", h.getRefund)
}

func (h *Handler) caller(c *fiber.Ctx) (Merchant, error) {
	m, ok := h.merchant(c)
	if !ok || m.ID == "" {
		return Merchant{}, problem.New(fiber.StatusUnauthorized, "invalid_token", "a merchant token is required")
	}
	return m, nil
}

// create godoc
// @Summary      Create a payment
// @Description  Charges the customer at most once per `Idempotency-Key` (one key per logical payment, scoped to the merchant).
// @Description  Retry with the same key and the byte-identical body until the answer is final (201, 402, 400, 422):
// @Description  a finished payment's answer (201 or 402) is replayed byte for byte with `Idempotent-Replayed: true`;
// @Description  a retry while the first request still holds the key gets 409 `idempotency_key_in_use` with `Retry-After`;
// @Description  the same key with another method, route or body is 422 `idempotency_key_mismatch` (nothing is charged).
// @Description  A body that fails validation (400 `invalid_request`), an amount the provider cannot take in its currency
// @Description  (422 `amount_not_supported`) and a provider that certainly did not charge (503 `provider_unavailable`)
// @Description  release the key, so the app may fix the body or retry with the same key.
// @Description  202 means the provider's answer is not known yet: the payment is `processing`; retry with the same key
// @Description  (after `Retry-After`) or poll `Location` — the gateway settles it with the provider and never charges twice.
// @Description  A missing key is 400 `idempotency_key_missing`; an empty, over-long (> 255) or non-printable-ASCII key
// @Description  is 400 `idempotency_key_invalid`. A finished answer is kept for KEY_TTL (72h by default).
// @Tags         payments
// @Accept       json
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        Idempotency-Key header string true "One key per logical payment (e.g. a UUID), 1 to 255 printable ASCII characters" minLength(1) maxLength(255) extensions(x-example=8e03978e-40d5-43e8-bc93-6894a57f9324)
// @Param        request body CreateRequest true "The payment"
// @Success      201 {object} View "succeeded (final; replayed on retries)"
// @Success      202 {object} View "processing: the outcome is not known yet; retry with the same key or poll Location"
// @Failure      400 {object} problem.Problem "invalid_request (with errors[]; key released), idempotency_key_missing, idempotency_key_invalid"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      402 {object} DeclinedProblem "card_declined: the provider declined (final; replayed on retries)"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      409 {object} problem.Problem "idempotency_key_in_use: another request holds this key; retry after Retry-After"
// @Failure      413 {object} problem.Problem "body_too_large (over 1 MiB; nothing stored)"
// @Failure      415 {object} problem.Problem "unsupported_content_encoding: request bodies must not be compressed; unsupported_media_type: a body labelled as something other than JSON"
// @Failure      422 {object} problem.Problem "idempotency_key_mismatch, amount_not_supported: the key was used with another method, route or body (compared by meaning: RFC 8785 canonical JSON); or the provider cannot take the amount in its currency (Stripe: MGA only in whole ariary; BHD, JOD, KWD, OMR, TND only in multiples of 10 minor units; detail names the rule), nothing was sent and the key was released"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} UnavailableProblem "provider_unavailable, unavailable: nothing was charged (provider_unavailable: the provider refused, the key was released; unavailable: the database could not be reached); retry with the same key after Retry-After"
// @Header       201,202,402 {string} Location "/v1/payments/{id}"
// @Header       201,402 {string} Idempotent-Replayed "true when this is the stored answer of an earlier request with this key"
// @Header       202,409,429,503 {integer} Retry-After "seconds to wait before retrying with the same key"
// @ID           createPayment
// @Router       /v1/payments [post]
func (h *Handler) create(c *fiber.Ctx) error {
	m, err := h.caller(c)
	if err != nil {
		return err
	}
	claim, ok := idempotency.ClaimFrom(c)
	if !ok {
		return errors.New("payments: create mounted without the idempotency middleware")
	}
	if bad := reqjson.Labelled(c.Request().Header.ContentType(), c.Body()); bad != nil {
		return h.svc.refuse(c.UserContext(), claim, bad)
	}
	// The service may keep the body past this handler (it is stored and
	// parsed); Fiber reuses its buffer, so hand it a copy.
	answer, err := h.svc.Create(c.UserContext(), claim, m, bytes.Clone(c.Body()))
	if err != nil {
		return err
	}
	return answer.Write(c)
}

// DeclinedProblem documents the 402 body: a problem with the declined
// payment. A final answer, stored and replayed byte for byte (often written
// by the sweeper or a webhook): it has no request_id; quote X-Request-Id.
type DeclinedProblem struct {
	problem.Problem
	DeclineCode string `json:"decline_code" example:"insufficient_funds"`
	Payment     View   `json:"payment"`
} // @name DeclinedProblem

// UnavailableProblem documents the 503 body of a create: the provider
// certainly did not charge and the key was released; payment_id is the
// payment row the key keeps, which a retry with the same key reuses.
type UnavailableProblem struct {
	problem.Problem
	PaymentID string `json:"payment_id" example:"pay_0193e4a27b4c7d2e9f1a2b3c4d5e6f70"`
} // @name ProviderUnavailableProblem

// RefundUnavailableProblem documents the 503 body of a refund: nothing was
// refunded; refund_id, when the refund was recorded before the provider
// was asked, is the refund the key keeps, which a retry with the same key
// reuses (an unreachable database has none).
type RefundUnavailableProblem struct {
	problem.Problem
	RefundID string `json:"refund_id,omitempty" example:"re_0193e4a27b4c7d2e9f1a2b3c4d5e6f70"`
} // @name RefundUnavailableProblem

// RefundRefusedProblem documents the 400 body of a refund refused before
// anything was sent: with refund_exceeds_remaining, amount_refundable is
// what is left of the payment (minor units).
type RefundRefusedProblem struct {
	problem.Problem
	AmountRefundable *int64 `json:"amount_refundable,omitempty" example:"2000"`
} // @name RefundRefusedProblem

// ProviderDisagreesProblem documents the 409 body of an operator's
// resolution: with provider_disagrees, what the provider said — its
// outcome, and the id and failure code of its charge or refund when it
// gave them.
type ProviderDisagreesProblem struct {
	problem.Problem
	ProviderOutcome       string `json:"provider_outcome,omitempty" example:"pending"`
	ProviderTransactionID string `json:"provider_transaction_id,omitempty" example:"4099260516"`
	ProviderRefundID      string `json:"provider_refund_id,omitempty" example:"1320"`
	ProviderFailureCode   string `json:"provider_failure_code,omitempty" example:"card_declined"`
} // @name ProviderDisagreesProblem

// get godoc
// @Summary      Get a payment
// @Description  One of the caller's payments. Another merchant's payment id is 404, like one that does not exist.
// @Description  Polling a `processing` payment that nobody is working on (its key's lease has lapsed) asks the provider
// @Description  (a lookup, never a charge; at most once every few seconds per payment) and answers the settled state,
// @Description  so the `Location` of a 202 reaches a final state without waiting for the sweeper.
// @Tags         payments
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        id path string true "Payment id" extensions(x-example=pay_5f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6)
// @Success      200 {object} View
// @Failure      400 {object} problem.Problem "invalid_request: a query parameter (the route takes none)"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      404 {object} problem.Problem "payment_not_found"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @Header       429 {integer} Retry-After "seconds"
// @ID           getPayment
// @Router       /v1/payments/{id} [get]
func (h *Handler) get(c *fiber.Ctx) error {
	if err := query.Known(c); err != nil {
		return err // it takes no parameters: one would be ignored
	}
	m, err := h.caller(c)
	if err != nil {
		return err
	}
	id := c.Params("id")
	if !wellFormedID(id) {
		return problem.New(fiber.StatusNotFound, "payment_not_found", "no such payment")
	}
	p, err := h.svc.Poll(c.UserContext(), m.ID, id)
	if errors.Is(err, ErrNotFound) {
		return problem.New(fiber.StatusNotFound, "payment_not_found", "no such payment")
	}
	if err != nil {
		return err
	}
	return c.JSON(p.View())
}

// Page is one page of a listing.
type Page struct {
	Data       []View `json:"data"`
	HasMore    bool   `json:"has_more" example:"true"`
	NextCursor string `json:"next_cursor,omitempty" example:"MjAyNi0xMi0wMlQxMDowMDowMFp8cGF5XzAx"`
} // @name PaymentPage

// list godoc
// @Summary      List payments
// @Description  The caller's payments, newest first, in pages. Pass `next_cursor` back as `cursor` for the next page.
// @Tags         payments
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        status query string false "Only payments in this status" Enums(processing, succeeded, failed, requires_review)
// @Param        created_from query string false "Created at or after (RFC 3339)" format(date-time)
// @Param        created_to   query string false "Created before (RFC 3339)" format(date-time)
// @Param        email        query string false "The customer's email, exactly"
// @Param        metadata[order_id] query string false "A metadata key and value to match (any key: metadata[key]=value, up to 5)"
// @Param        limit  query int    false "Page size, 1 to 100" default(20) minimum(1) maximum(100)
// @Param        cursor query string false "The next_cursor of the previous page"
// @Success      200 {object} Page
// @Failure      400 {object} problem.Problem "invalid_request"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @Header       429 {integer} Retry-After "seconds"
// @ID           listPayments
// @Router       /v1/payments [get]
func (h *Handler) list(c *fiber.Ctx) error {
	m, err := h.caller(c)
	if err != nil {
		return err
	}
	if err := query.Known(c, "status", "created_from", "created_to", "email", "metadata[", "limit", "cursor"); err != nil {
		return err
	}
	params := ListParams{Limit: 20, Status: Status(c.Query("status"))}
	switch params.Status {
	case "", StatusProcessing, StatusSucceeded, StatusFailed, StatusRequiresReview:
	default:
		return problem.Invalid(problem.FieldError{Field: "status", Reason: "must be processing, succeeded, failed or requires_review"})
	}
	if params.Limit, params.After, err = pageParams(c, "pay_"); err != nil {
		return err
	}
	if params.CreatedFrom, params.CreatedTo, err = createdRange(c); err != nil {
		return err
	}
	if params.Email = c.Query("email"); params.Email != "" && !printableText(params.Email, 254) {
		return problem.Invalid(problem.FieldError{Field: "email", Reason: "is not an email address"})
	}
	if params.Metadata, err = metadataFilter(c); err != nil {
		return err
	}
	rows, err := h.svc.store.List(c.UserContext(), m.ID, params)
	if err != nil {
		return err
	}
	page := Page{Data: make([]View, 0, len(rows))}
	if len(rows) > params.Limit {
		page.HasMore = true
		rows = rows[:params.Limit]
		last := rows[len(rows)-1]
		page.NextCursor = encodeCursor(Cursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	for i := range rows {
		page.Data = append(page.Data, rows[i].View())
	}
	return c.JSON(page)
}

// wellFormedID reports whether id could be a payment id: "pay_" and 32
// lowercase hex digits. Anything else names no payment and is not sent to
// the database (NUL bytes and invalid UTF-8 are errors there, not misses).
func wellFormedID(id string) bool { return wellFormed("pay_", id) }

// wellFormed reports whether id is prefix and 32 lowercase hex digits, the
// form of every id the payments package makes.
func wellFormed(prefix, id string) bool {
	if len(id) != len(prefix)+32 || !strings.HasPrefix(id, prefix) {
		return false
	}
	for i := len(prefix); i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// metadataFilter reads metadata[key]=value pairs from the query (at most
// 5; keys of [A-Za-z0-9_.-], values printable, both within metadata's
// limits).
func metadataFilter(c *fiber.Ctx) (map[string]string, error) {
	var out map[string]string
	var bad error
	c.Context().QueryArgs().VisitAll(func(k, v []byte) {
		key := string(k)
		if bad != nil || !strings.HasPrefix(key, "metadata[") {
			return
		}
		name, ok := strings.CutSuffix(strings.TrimPrefix(key, "metadata["), "]")
		val := string(v)
		if !ok || !plainToken(name, maxMetaKey) || strings.Contains(name, "=") || !printableText(val, maxMetaValue) || len(out) == 5 {
			bad = problem.Invalid(problem.FieldError{Field: "metadata",
				Reason: "use up to 5 metadata[key]=value filters, keys of letters, digits, '_', '.' and '-'"})
			return
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = val
	})
	return out, bad
}

// pageParams reads limit (1 to 100, default 20) and cursor (of ids with
// prefix) from the query.
func pageParams(c *fiber.Ctx, prefix string) (limit int, after *Cursor, err error) {
	limit = 20
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return 0, nil, problem.Invalid(problem.FieldError{Field: "limit", Reason: "must be an integer from 1 to 100"})
		}
		limit = n
	}
	if v := c.Query("cursor"); v != "" {
		cur, err := decodeCursor(v)
		if err != nil || !wellFormed(prefix, cur.ID) {
			return 0, nil, problem.Invalid(problem.FieldError{Field: "cursor", Reason: "is not a cursor this API returned"})
		}
		after = &cur
	}
	return limit, after, nil
}

func encodeCursor(c Cursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + c.ID))
}

func decodeCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, err
	}
	ts, id, ok := strings.Cut(string(b), "|")
	if !ok || id == "" {
		return Cursor{}, errors.New("payments: malformed cursor")
	}
	t, err := reqtime.Parse(ts)
	if err != nil {
		return Cursor{}, err
	}
	return Cursor{CreatedAt: t, ID: id}, nil
}

// createRefund godoc
// @Summary      Refund a payment
// @Description  Refunds all or part of a succeeded payment, at most once per `Idempotency-Key` (the same contract as
// @Description  payments: a final answer is replayed byte for byte with `Idempotent-Replayed: true`; 409 while the first
// @Description  request holds the key; 422 for another body or payment under the key). `amount` may be left out: all
// @Description  that is left. The sum of succeeded and pending refunds never exceeds the payment's amount, whatever the
// @Description  concurrency. 201 is final (`succeeded`, or `failed` when the provider refused); 202 means the provider's
// @Description  answer is not known yet: the refund is `pending`; retry with the same key or poll `Location`.
// @Tags         refunds
// @Accept       json
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        id path string true "Payment id" extensions(x-example=pay_5f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6)
// @Param        Idempotency-Key header string true "One key per logical refund, 1 to 255 printable ASCII characters" minLength(1) maxLength(255) extensions(x-example=refund-7c1b)
// @Param        request body CreateRefundRequest true "The refund"
// @Success      201 {object} RefundView "succeeded or failed (final; replayed on retries)"
// @Success      202 {object} RefundView "pending: the outcome is not known yet; retry with the same key or poll Location"
// @Failure      400 {object} RefundRefusedProblem "invalid_request, refund_exceeds_remaining (amount_refundable says what is left), idempotency_key_missing, idempotency_key_invalid: nothing refunded, the key released"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      404 {object} problem.Problem "payment_not_found"
// @Failure      409 {object} problem.Problem "payment_not_refundable, idempotency_key_in_use, provider_account_missing: only a succeeded payment is refunded; or another request holds this key; or the merchant's account with the payment's provider was removed (nothing refunded, the key released)"
// @Failure      413 {object} problem.Problem "body_too_large (over 1 MiB; nothing stored)"
// @Failure      415 {object} problem.Problem "unsupported_content_encoding: request bodies must not be compressed; unsupported_media_type: a body labelled as something other than JSON"
// @Failure      422 {object} problem.Problem "idempotency_key_mismatch, amount_not_supported (the provider cannot take the amount in the payment's currency; detail names the rule): nothing refunded; amount_not_supported released the key"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} RefundUnavailableProblem "provider_unavailable, unavailable: nothing was refunded; retry with the same key after Retry-After"
// @Header       201,202 {string} Location "/v1/refunds/{id}"
// @Header       201 {string} Idempotent-Replayed "true when this is the stored answer of an earlier request with this key"
// @Header       202,409,429,503 {integer} Retry-After "seconds to wait before retrying with the same key"
// @ID           createRefund
// @Router       /v1/payments/{id}/refunds [post]
func (h *Handler) createRefund(c *fiber.Ctx) error {
	m, err := h.caller(c)
	if err != nil {
		return err
	}
	claim, ok := idempotency.ClaimFrom(c)
	if !ok {
		return errors.New("payments: refunds mounted without the idempotency middleware")
	}
	if bad := reqjson.Labelled(c.Request().Header.ContentType(), c.Body()); bad != nil {
		return h.svc.refuse(c.UserContext(), claim, bad)
	}
	answer, err := h.svc.CreateRefund(c.UserContext(), claim, m, utils.CopyString(c.Params("id")), bytes.Clone(c.Body()))
	if err != nil {
		return err
	}
	return answer.Write(c)
}

// RefundPage is one page of a payment's refunds.
type RefundPage struct {
	Data       []RefundView `json:"data"`
	HasMore    bool         `json:"has_more" example:"false"`
	NextCursor string       `json:"next_cursor,omitempty" example:"MjAyNi0xMi0wMlQxMDowMDowMFp8cmVfMDE"`
} // @name RefundPage

// listRefunds godoc
// @Summary      List a payment's refunds
// @Description  The refunds of one of the caller's payments, newest first, in pages.
// @Tags         refunds
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        id     path  string true  "Payment id" extensions(x-example=pay_5f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6)
// @Param        limit  query int    false "Page size, 1 to 100" default(20) minimum(1) maximum(100)
// @Param        cursor query string false "The next_cursor of the previous page"
// @Success      200 {object} RefundPage
// @Failure      400 {object} problem.Problem "invalid_request"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      404 {object} problem.Problem "payment_not_found"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @Header       429 {integer} Retry-After "seconds"
// @ID           listRefunds
// @Router       /v1/payments/{id}/refunds [get]
func (h *Handler) listRefunds(c *fiber.Ctx) error {
	m, err := h.caller(c)
	if err != nil {
		return err
	}
	if err := query.Known(c, "limit", "cursor"); err != nil {
		return err
	}
	id := c.Params("id")
	if !wellFormedID(id) {
		return errPaymentNotFound
	}
	if _, err := h.svc.store.Get(c.UserContext(), m.ID, id); errors.Is(err, ErrNotFound) {
		return errPaymentNotFound
	} else if err != nil {
		return err
	}
	limit, after, err := pageParams(c, "re_")
	if err != nil {
		return err
	}
	rows, err := h.svc.store.ListRefunds(c.UserContext(), m.ID, id, limit, after)
	if err != nil {
		return err
	}
	page := RefundPage{Data: make([]RefundView, 0, len(rows))}
	if len(rows) > limit {
		page.HasMore = true
		rows = rows[:limit]
		last := rows[len(rows)-1]
		page.NextCursor = encodeCursor(Cursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	for i := range rows {
		page.Data = append(page.Data, rows[i].View())
	}
	return c.JSON(page)
}

// getRefund godoc
// @Summary      Get a refund
// @Description  One of the caller's refunds; another merchant's is 404. Polling a `pending` refund nobody is working on
// @Description  asks the provider (a lookup, never a refund; at most once every few seconds) and answers the settled state.
// @Tags         refunds
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        id path string true "Refund id" extensions(x-example=re_3f1e0c9d2b8a47e6a5d4c3b2a1f0e9d8)
// @Success      200 {object} RefundView
// @Failure      400 {object} problem.Problem "invalid_request: a query parameter (the route takes none)"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      404 {object} problem.Problem "refund_not_found"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @Header       429 {integer} Retry-After "seconds"
// @ID           getRefund
// @Router       /v1/refunds/{id} [get]
func (h *Handler) getRefund(c *fiber.Ctx) error {
	if err := query.Known(c); err != nil {
		return err // it takes no parameters: one would be ignored
	}
	m, err := h.caller(c)
	if err != nil {
		return err
	}
	notFound := errRefundNotFound()
	id := c.Params("id")
	if !wellFormed("re_", id) {
		return notFound
	}
	r, err := h.svc.PollRefund(c.UserContext(), m.ID, id)
	if errors.Is(err, ErrNotFound) {
		return notFound
	}
	if err != nil {
		return err
	}
	return c.JSON(r.View())
}
