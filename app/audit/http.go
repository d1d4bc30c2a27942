package audit

import (
	"encoding/base64"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/app/query"
	"github.com/oncepay/gateway/app/reqtime"
)

// Handler serves the log to operators.
type Handler struct{ store *Store }

// NewHandler returns the handler over store.
func NewHandler(store *Store) *Handler { return &Handler{store: store} }

// Routes mounts GET /audit-events on r, the admin group (already behind
// the admin key). There is no route that changes an event.
func (h *Handler) Routes(r fiber.Router) {
	r.Get("/audit-events", h.list)
}

// Page is one page of the log.
type Page struct {
	Data       []Event `json:"data"`
	HasMore    bool    `json:"has_more" example:"false"`
	NextCursor string  `json:"next_cursor,omitempty" example:"MTc2NDc1NjAwMDAwMDAwMC5hdWRfMDE"`
} // @name AuditEventPage

// list godoc
// @Summary      List audit events
// @Description  Every admin action, newest first, in pages: tenants created, updated, suspended, reactivated,
// @Description  credentials rotated, provider secrets changed (names only, never values), payments resolved. Each event
// @Description  was written in the same transaction as its change; the log is append-only (no route changes it).
// @Tags         admin
// @Produce      json
// @Produce      application/problem+json
// @Security     AdminKey
// @Param        tenant_id query string false "Only events about this tenant"
// @Param        action    query string false "Only this action" Enums(tenant.created, tenant.updated, tenant.suspended, tenant.reactivated, tenant.credentials_rotated, tenant.provider_secrets_changed, payment.resolved, refund.resolved, payment.resolution_refused, refund.resolution_refused, webhook_endpoint.disabled, master_key.resealed)
// @Param        target_id query string false "Only events about this object (a payment, refund, tenant or endpoint id)"
// @Param        limit     query int    false "Page size, 1 to 200" default(50) minimum(1) maximum(200)
// @Param        cursor    query string false "The next_cursor of the previous page"
// @Success      200 {object} Page
// @Failure      400 {object} problem.Problem "invalid_request"
// @Failure      401 {object} problem.Problem "unauthorized"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @ID           listAuditEvents
// @Router       /admin/v1/audit-events [get]
func (h *Handler) list(c *fiber.Ctx) error {
	if err := query.Known(c, "tenant_id", "action", "target_id", "limit", "cursor"); err != nil {
		return err
	}
	f := Filter{TenantID: c.Query("tenant_id"), Action: c.Query("action"), TargetID: c.Query("target_id")}
	if f.TenantID != "" && !printableID(f.TenantID) {
		return problem.Invalid(problem.FieldError{Field: "tenant_id", Reason: "is not a tenant id"})
	}
	if f.TargetID != "" && !printableID(f.TargetID) {
		return problem.Invalid(problem.FieldError{Field: "target_id", Reason: "is not an id"})
	}
	if f.Action != "" && !slices.Contains(Actions, f.Action) {
		return problem.Invalid(problem.FieldError{Field: "action", Reason: "must be one of " + strings.Join(Actions, ", ")})
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return problem.Invalid(problem.FieldError{Field: "limit", Reason: "must be an integer from 1 to 200"})
		}
		f.Limit = n
	}
	if v := c.Query("cursor"); v != "" {
		pos, ok := decodeCursor(v)
		if !ok {
			return problem.Invalid(problem.FieldError{Field: "cursor", Reason: "is not a cursor this API returned"})
		}
		f.After = &pos
	}
	events, more, err := h.store.List(c.UserContext(), f)
	if err != nil {
		return err
	}
	page := Page{Data: events, HasMore: more}
	if page.Data == nil {
		page.Data = []Event{}
	}
	if more {
		last := events[len(events)-1]
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(last.At.UnixMicro(), 10) + "." + last.ID))
	}
	return c.JSON(page)
}

func decodeCursor(s string) (Position, bool) {
	if len(s) > 128 {
		return Position{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Position{}, false
	}
	micros, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil || !printableID(id) {
		return Position{}, false
	}
	at, err := reqtime.UnixMicro(n)
	if err != nil {
		return Position{}, false
	}
	return Position{At: at, ID: id}, true
}

// printableID is an id's shape: short, lowercase letters, digits and '_'.
func printableID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}
