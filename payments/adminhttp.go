package payments

import (
	"errors"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/app/query"
	"github.com/oncepay/gateway/app/reqjson"
	"github.com/oncepay/gateway/app/reqtime"
	"github.com/oncepay/gateway/idempotency"
)

// AdminRoutes mounts the operator desk on r, the admin group (already
// behind the admin key).
func (h *Handler) AdminRoutes(r fiber.Router) {
	r.Get("/payments", h.adminSearch)
	r.Get("/payments/:id", h.adminGet)
	r.Post("/payments/:id/resolve", h.adminResolve)
	r.Get("/refunds", h.adminSearchRefunds)
	r.Get("/refunds/:id", h.adminGetRefund)
	r.Post("/refunds/:id/resolve", h.adminResolveRefund)
}

// AdminView is a payment as the operator desk shows it: with its tenant.
type AdminView struct {
	View
	TenantID string `json:"tenant_id" example:"ten_df4a0c1b2e3f405162738495"`
} // @name AdminPayment

// AdminPage is one page of a search.
type AdminPage struct {
	Data       []AdminView `json:"data"`
	HasMore    bool        `json:"has_more" example:"false"`
	NextCursor string      `json:"next_cursor,omitempty" example:"MjAyNi0xMi0wMlQxMDowMDowMFp8cGF5XzAx"`
} // @name AdminPaymentPage

// KeyState is what the gateway knows of a payment's attempts: its
// idempotency key as it stands (absent once purged or released).
type KeyState struct {
	Status       string     `json:"status" example:"in_progress"`
	LeaseLapsed  bool       `json:"lease_lapsed" example:"true"`
	LastAttempt  *time.Time `json:"last_attempt_at,omitempty" format:"date-time"`
	LastLookup   *time.Time `json:"last_poll_lookup_at,omitempty" format:"date-time"`
	CompletedAt  *time.Time `json:"completed_at,omitempty" format:"date-time"`
	StoredStatus int        `json:"stored_status,omitempty" example:"201"`
} // @name AdminKeyState

// AdminDetail is one payment with its refunds and its attempts.
type AdminDetail struct {
	AdminView
	RecheckAt *time.Time   `json:"recheck_at,omitempty" format:"date-time"`
	Key       *KeyState    `json:"key,omitempty"`
	Refunds   []RefundView `json:"refunds"`
	// Review: why the payment went to review and what its provider last
	// answered; absent when it never did.
	Review *ReviewView `json:"review,omitempty"`
} // @name AdminPaymentDetail

// AdminRefund is a refund as the operator desk shows it: with its tenant.
type AdminRefund struct {
	RefundView
	TenantID string `json:"tenant_id" example:"ten_df4a0c1b2e3f405162738495"`
} // @name AdminRefund

// AdminRefundDetail is one refund with why it went to review.
type AdminRefundDetail struct {
	AdminRefund
	// Review: why the refund went to review and what its provider last
	// answered; absent when it never did.
	Review *ReviewView `json:"review,omitempty"`
} // @name AdminRefundDetail

// AdminRefundPage is one page of refunds.
type AdminRefundPage struct {
	Data       []AdminRefund `json:"data"`
	HasMore    bool          `json:"has_more" example:"false"`
	NextCursor string        `json:"next_cursor,omitempty" example:"MjAyNi0xMi0wMlQxMDowMDowMFp8cmVfMDE"`
} // @name AdminRefundPage

// ResolveRequest is an operator's decision.
type ResolveRequest struct {
	Status string `json:"status" enums:"succeeded,failed" example:"failed"`
	Note   string `json:"note" example:"checked at the provider's dashboard: no such charge"`
} // @name ResolveRequest

// adminSearch godoc
// @Summary      Search payments (operators)
// @Description  Payments across tenants, newest first, in pages. The review queue is `status=requires_review`.
// @Tags         admin
// @Produce      json
// @Produce      application/problem+json
// @Security     AdminKey
// @Param        tenant_id          query string false "Only this tenant's"
// @Param        status             query string false "Only in this status" Enums(processing, succeeded, failed, requires_review)
// @Param        provider           query string false "Only through this provider"
// @Param        provider_reference query string false "Our reference at the provider (op-…)"
// @Param        idempotency_key    query string false "The tenant's Idempotency-Key of the payment (with tenant_id)"
// @Param        email              query string false "The customer's email, exactly"
// @Param        created_from       query string false "Created at or after (RFC 3339)" format(date-time)
// @Param        created_to         query string false "Created before (RFC 3339)" format(date-time)
// @Param        limit              query int    false "Page size, 1 to 100" default(20) minimum(1) maximum(100)
// @Param        cursor             query string false "The next_cursor of the previous page"
// @Success      200 {object} AdminPage
// @Failure      400 {object} problem.Problem "invalid_request"
// @Failure      401 {object} problem.Problem "unauthorized"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @ID           adminSearchPayments
// @Router       /admin/v1/payments [get]
func (h *Handler) adminSearch(c *fiber.Ctx) error {
	if err := query.Known(c, "tenant_id", "status", "provider", "provider_reference", "idempotency_key", "email", "created_from", "created_to", "limit", "cursor"); err != nil {
		return err
	}
	p := SearchParams{TenantID: c.Query("tenant_id"), Status: Status(c.Query("status")), Provider: c.Query("provider"),
		ProviderReference: c.Query("provider_reference"), Email: c.Query("email")}
	if err := checkStatusFilter(p.Status); err != nil {
		return err
	}
	for field, v := range map[string]string{"tenant_id": p.TenantID, "provider": p.Provider, "provider_reference": p.ProviderReference} {
		if v != "" && !plainToken(v, 64) {
			return problem.Invalid(problem.FieldError{Field: field, Reason: "is not one the gateway makes"})
		}
	}
	if p.Email != "" && !printableText(p.Email, 254) {
		return problem.Invalid(problem.FieldError{Field: "email", Reason: "is not an email address"})
	}
	var err error
	if p.IdempotencyKey, err = keyFilter(c, p.TenantID); err != nil {
		return err
	}
	if p.CreatedFrom, p.CreatedTo, err = createdRange(c); err != nil {
		return err
	}
	if p.Limit, p.After, err = pageParams(c, "pay_"); err != nil {
		return err
	}
	rows, err := h.svc.store.Search(c.UserContext(), p)
	if err != nil {
		return err
	}
	page := AdminPage{Data: make([]AdminView, 0, len(rows))}
	if len(rows) > p.Limit {
		page.HasMore = true
		rows = rows[:p.Limit]
		last := rows[len(rows)-1]
		page.NextCursor = encodeCursor(Cursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	for i := range rows {
		page.Data = append(page.Data, AdminView{View: rows[i].View(), TenantID: rows[i].MerchantID})
	}
	return c.JSON(page)
}

// adminGet godoc
// @Summary      Get a payment (operators)
// @Description  Any tenant's payment, with its refunds and what the gateway knows of its attempts (the count, the
// @Description  key's last attempt and lease, a pending recheck). A payment that went to review has `review`: why
// @Description  (provider_pending, provider_reversed, amount_mismatch, lookup_failed, provider_account_missing,
// @Description  not_found_yet), when, and the provider's last answer (kept at the flag, and at
// @Description  every sweep while in review). Operators only: a merchant's view never carries it.
// @Tags         admin
// @Produce      json
// @Produce      application/problem+json
// @Security     AdminKey
// @Param        id path string true "Payment id" extensions(x-example=pay_5f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6)
// @Success      200 {object} AdminDetail
// @Failure      400 {object} problem.Problem "invalid_request: a query parameter (the route takes none)"
// @Failure      401 {object} problem.Problem "unauthorized"
// @Failure      404 {object} problem.Problem "payment_not_found"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @ID           adminGetPayment
// @Router       /admin/v1/payments/{id} [get]
func (h *Handler) adminGet(c *fiber.Ctx) error {
	if err := query.Known(c); err != nil {
		return err // it takes no parameters: one would be ignored
	}
	id := c.Params("id")
	if !wellFormedID(id) {
		return errPaymentNotFound
	}
	d, err := h.svc.Detail(c.UserContext(), id)
	if errors.Is(err, ErrNotFound) {
		return errPaymentNotFound
	}
	if err != nil {
		return err
	}
	out := AdminDetail{AdminView: AdminView{View: d.Payment.View(), TenantID: d.Payment.MerchantID},
		RecheckAt: d.Payment.RecheckAt, Refunds: make([]RefundView, 0, len(d.Refunds)), Review: d.Review}
	for i := range d.Refunds {
		out.Refunds = append(out.Refunds, d.Refunds[i].View())
	}
	if k := d.Key; k != nil {
		out.Key = &KeyState{Status: string(k.Status), LeaseLapsed: k.Lapsed, LastAttempt: k.AttemptedAt,
			LastLookup: k.LookedUpAt, CompletedAt: k.CompletedAt, StoredStatus: k.StatusCode}
	}
	return c.JSON(out)
}

// adminResolve godoc
// @Summary      Resolve a payment (operators)
// @Description  Settles a payment in review (or processing, untouched for SWEEP_STALE_AFTER) as succeeded or failed, the
// @Description  way the sweeper would: the ledger, the key's stored answer (the merchant's retry replays the resolution)
// @Description  and the audit event commit together. The provider is asked once more first; when its answer rules the
// @Description  resolution out — final and otherwise; "succeeded" while it is in flight or not there; "failed" while in flight, before review —
// @Description  nothing changes (409 provider_disagrees, with what it said).
// @Tags         admin
// @Accept       json
// @Produce      json
// @Produce      application/problem+json
// @Security     AdminKey
// @Param        id      path string         true "Payment id" extensions(x-example=pay_5f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6)
// @Param        request body ResolveRequest true "The decision"
// @Success      200 {object} AdminView
// @Failure      400 {object} problem.Problem "invalid_request"
// @Failure      401 {object} problem.Problem "unauthorized"
// @Failure      404 {object} problem.Problem "payment_not_found"
// @Failure      409 {object} ProviderDisagreesProblem "payment_final, payment_in_progress, provider_disagrees: already final; being worked on; or the provider's answer rules the resolution out"
// @Failure      413 {object} problem.Problem "body_too_large (over 1 MiB; nothing stored)"
// @Failure      415 {object} problem.Problem "unsupported_content_encoding: request bodies must not be compressed; unsupported_media_type: a body labelled as something other than JSON"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @ID           adminResolvePayment
// @Router       /admin/v1/payments/{id}/resolve [post]
func (h *Handler) adminResolve(c *fiber.Ctx) error {
	id := c.Params("id")
	if !wellFormedID(id) {
		return errPaymentNotFound
	}
	st, note, err := decodeResolution(c)
	if err != nil {
		return err
	}
	p, err := h.svc.Resolve(c.UserContext(), id, Resolution{Status: Status(st), Note: note})
	if errors.Is(err, ErrNotFound) {
		return errPaymentNotFound
	}
	if err != nil {
		return err
	}
	return c.JSON(AdminView{View: p.View(), TenantID: p.MerchantID})
}

// adminSearchRefunds godoc
// @Summary      Search refunds (operators)
// @Description  Refunds across tenants, newest first, in pages. The refunds' review queue is `status=requires_review`:
// @Description  refunds whose outcome the provider has not told past REVIEW_AFTER.
// @Tags         admin
// @Produce      json
// @Produce      application/problem+json
// @Security     AdminKey
// @Param        tenant_id query string false "Only this tenant's"
// @Param        status    query string false "Only in this status" Enums(pending, succeeded, failed, requires_review)
// @Param        idempotency_key query string false "The tenant's Idempotency-Key of the refund (with tenant_id)"
// @Param        limit     query int    false "Page size, 1 to 100" default(20) minimum(1) maximum(100)
// @Param        cursor    query string false "The next_cursor of the previous page"
// @Success      200 {object} AdminRefundPage
// @Failure      400 {object} problem.Problem "invalid_request"
// @Failure      401 {object} problem.Problem "unauthorized"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @ID           adminSearchRefunds
// @Router       /admin/v1/refunds [get]
func (h *Handler) adminSearchRefunds(c *fiber.Ctx) error {
	if err := query.Known(c, "tenant_id", "status", "idempotency_key", "limit", "cursor"); err != nil {
		return err
	}
	p := RefundSearchParams{TenantID: c.Query("tenant_id"), Status: RefundStatus(c.Query("status"))}
	switch p.Status {
	case "", RefundPending, RefundSucceeded, RefundFailed, RefundRequiresReview:
	default:
		return problem.Invalid(problem.FieldError{Field: "status", Reason: "must be pending, succeeded, failed or requires_review"})
	}
	if p.TenantID != "" && !plainToken(p.TenantID, 64) {
		return problem.Invalid(problem.FieldError{Field: "tenant_id", Reason: "is not one the gateway makes"})
	}
	var err error
	if p.IdempotencyKey, err = keyFilter(c, p.TenantID); err != nil {
		return err
	}
	if p.Limit, p.After, err = pageParams(c, "re_"); err != nil {
		return err
	}
	rows, err := h.svc.store.SearchRefunds(c.UserContext(), p)
	if err != nil {
		return err
	}
	page := AdminRefundPage{Data: make([]AdminRefund, 0, len(rows))}
	if len(rows) > p.Limit {
		page.HasMore = true
		rows = rows[:p.Limit]
		last := rows[len(rows)-1]
		page.NextCursor = encodeCursor(Cursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	for i := range rows {
		page.Data = append(page.Data, AdminRefund{RefundView: rows[i].View(), TenantID: rows[i].MerchantID})
	}
	return c.JSON(page)
}

// adminGetRefund godoc
// @Summary      Get a refund (operators)
// @Description  Any tenant's refund, by the id a merchant quotes (its payment is GET /admin/v1/payments/{payment_id}).
// @Description  A refund that went to review has `review`, as a payment's detail does (provider_pending, lookup_failed,
// @Description  provider_account_missing, not_found_yet).
// @Tags         admin
// @Produce      json
// @Produce      application/problem+json
// @Security     AdminKey
// @Param        id path string true "Refund id" extensions(x-example=re_5f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6)
// @Success      200 {object} AdminRefundDetail
// @Failure      400 {object} problem.Problem "invalid_request: a query parameter (the route takes none)"
// @Failure      401 {object} problem.Problem "unauthorized"
// @Failure      404 {object} problem.Problem "refund_not_found"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @ID           adminGetRefund
// @Router       /admin/v1/refunds/{id} [get]
func (h *Handler) adminGetRefund(c *fiber.Ctx) error {
	if err := query.Known(c); err != nil {
		return err // it takes no parameters: one would be ignored
	}
	id := c.Params("id")
	if !wellFormed("re_", id) {
		return errRefundNotFound()
	}
	r, err := h.svc.store.getRefundAny(c.UserContext(), id)
	if errors.Is(err, ErrNotFound) {
		return errRefundNotFound()
	}
	if err != nil {
		return err
	}
	rv, err := h.svc.ReviewOf(c.UserContext(), r.MerchantID, r.ID)
	if err != nil {
		return err
	}
	return c.JSON(AdminRefundDetail{AdminRefund: AdminRefund{RefundView: r.View(), TenantID: r.MerchantID}, Review: rv})
}

// errRefundNotFound is the 404 of a refund id no refund has.
func errRefundNotFound() error {
	return problem.New(fiber.StatusNotFound, "refund_not_found", "no such refund")
}

// adminResolveRefund godoc
// @Summary      Resolve a refund (operators)
// @Description  Settles a refund in review (or pending, untouched for SWEEP_STALE_AFTER) as succeeded or failed, as a
// @Description  payment's resolution does: the refund (a failed one gives its amount back to the payment), its key's
// @Description  stored answer and the audit event commit together, after the provider is asked once more (409
// @Description  provider_disagrees when its answer rules the resolution out, as for a payment).
// @Tags         admin
// @Accept       json
// @Produce      json
// @Produce      application/problem+json
// @Security     AdminKey
// @Param        id      path string         true "Refund id" extensions(x-example=re_3f1e0c9d2b8a47e6a5d4c3b2a1f0e9d8)
// @Param        request body ResolveRequest true "The decision"
// @Success      200 {object} AdminRefund
// @Failure      400 {object} problem.Problem "invalid_request"
// @Failure      401 {object} problem.Problem "unauthorized"
// @Failure      404 {object} problem.Problem "refund_not_found"
// @Failure      409 {object} ProviderDisagreesProblem "refund_final, refund_in_progress, provider_disagrees, provider_account_missing: already final; being worked on; the provider's answer rules the resolution out; or 'failed' for a refund whose provider account was removed (it cannot be asked)"
// @Failure      413 {object} problem.Problem "body_too_large (over 1 MiB; nothing stored)"
// @Failure      415 {object} problem.Problem "unsupported_content_encoding: request bodies must not be compressed; unsupported_media_type: a body labelled as something other than JSON"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "provider_unavailable, unavailable: 'failed' waits for the provider's word (its amount would be refunded again); or the database could not be reached (Retry-After)"
// @Header       503 {integer} Retry-After "seconds"
// @ID           adminResolveRefund
// @Router       /admin/v1/refunds/{id}/resolve [post]
func (h *Handler) adminResolveRefund(c *fiber.Ctx) error {
	notFound := errRefundNotFound()
	id := c.Params("id")
	if !wellFormed("re_", id) {
		return notFound
	}
	st, note, err := decodeResolution(c)
	if err != nil {
		return err
	}
	r, err := h.svc.ResolveRefund(c.UserContext(), id, RefundResolution{Status: RefundStatus(st), Note: note})
	if errors.Is(err, ErrNotFound) {
		return notFound
	}
	if err != nil {
		return err
	}
	return c.JSON(AdminRefund{RefundView: r.View(), TenantID: r.MerchantID})
}

// keyFilter is a search's idempotency_key parameter, as the tenant sent
// the header (normalized as the gateway reads it), or "" when absent; it
// needs tenantID, since keys are per tenant.
func keyFilter(c *fiber.Ctx, tenantID string) (string, error) {
	v := c.Query("idempotency_key")
	if v == "" {
		return "", nil
	}
	key, err := idempotency.NormalizeKey(v)
	if err != nil || tenantID == "" {
		return "", problem.Invalid(problem.FieldError{Field: "idempotency_key",
			Reason: "must be a key as the tenant sent it (1 to 255 printable ASCII characters), with tenant_id: keys are per tenant"})
	}
	return key, nil
}

// decodeResolution reads and checks an operator's decision.
func decodeResolution(c *fiber.Ctx) (status, note string, err error) {
	if bad := reqjson.Labelled(c.Request().Header.ContentType(), c.Body()); bad != nil {
		return "", "", bad
	}
	var req ResolveRequest
	if err := reqjson.Decode(c.Body(), &req); err != nil {
		return "", "", problem.Invalid(decodeRefusal(err))
	}
	if req.Status != string(StatusSucceeded) && req.Status != string(StatusFailed) {
		return "", "", problem.Invalid(problem.FieldError{Field: "status", Reason: "must be succeeded or failed"})
	}
	note = strings.TrimSpace(req.Note)
	if note == "" || !printableText(note, 1000) {
		return "", "", problem.Invalid(problem.FieldError{Field: "note", Reason: "is required: what was checked, 1 to 1000 characters"})
	}
	return req.Status, note, nil
}

func checkStatusFilter(st Status) error {
	switch st {
	case "", StatusProcessing, StatusSucceeded, StatusFailed, StatusRequiresReview:
		return nil
	}
	return problem.Invalid(problem.FieldError{Field: "status", Reason: "must be processing, succeeded, failed or requires_review"})
}

// createdRange reads created_from and created_to (RFC 3339).
func createdRange(c *fiber.Ctx) (from, to *time.Time, err error) {
	read := func(field string) (*time.Time, error) {
		v := c.Query(field)
		if v == "" {
			return nil, nil
		}
		t, err := reqtime.Parse(v)
		if err != nil {
			return nil, problem.Invalid(problem.FieldError{Field: field, Reason: "must be an RFC 3339 time, any offset (e.g. 2026-12-01T00:00:00Z), within the years 0001-9999 once in UTC"})
		}
		return &t, nil
	}
	if from, err = read("created_from"); err != nil {
		return nil, nil, err
	}
	if to, err = read("created_to"); err != nil {
		return nil, nil, err
	}
	return from, to, nil
}

// plainToken reports whether s is 1 to n of [A-Za-z0-9_.=-].
func plainToken(s string, n int) bool {
	if len(s) == 0 || len(s) > n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '.' && c != '-' && c != '=' {
			return false
		}
	}
	return true
}

// printableText reports whether s is valid UTF-8 of at most n bytes with
// no control characters: C0, DEL and C1 (U+009B starts a terminal escape,
// U+0085 breaks a line, in a dashboard or a log as much as a NUL would).
func printableText(s string, n int) bool {
	if len(s) > n {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return false
		}
	}
	return true
}
