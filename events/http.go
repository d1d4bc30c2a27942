package events

import (
	"encoding/base64"
	"encoding/json"
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

// Handler serves the webhook endpoints and events APIs.
type Handler struct {
	svc      *Service
	keys     *idempotency.Store
	merchant func(c *fiber.Ctx) string
}

// NewHandler returns the handlers; merchant reads the authenticated
// merchant's id.
func NewHandler(svc *Service, keys *idempotency.Store, merchant func(c *fiber.Ctx) string) *Handler {
	return &Handler{svc: svc, keys: keys, merchant: merchant}
}

// Routes mounts the routes on r (behind merchant auth); idem is the
// idempotency middleware, which every mutating route takes.
func (h *Handler) Routes(r fiber.Router, idem func(fiber.Handler) fiber.Handler) {
	r.Post("/webhook_endpoints", idem(h.createEndpoint))
	r.Get("/webhook_endpoints", h.listEndpoints)
	r.Get("/webhook_endpoints/:id", h.getEndpoint)
	r.Patch("/webhook_endpoints/:id", idem(h.updateEndpoint))
	r.Delete("/webhook_endpoints/:id", idem(h.deleteEndpoint))
	r.Post("/webhook_endpoints/:id/rotate_secret", idem(h.rotateSecret))
	r.Get("/webhook_endpoints/:id/deliveries", h.deliveries)
	r.Get("/events", h.list)
	r.Get("/events/:id", h.get)
	r.Post("/events/:id/redeliver", idem(h.redeliver))
}

// AdminRoutes mounts the operator's read-only view of a tenant's webhooks
// on r, the admin group (already behind the admin key): its endpoints and
// their deliveries, as the merchant sees them, for an operator answering
// "we get no webhooks". known checks that the path's tenant_id names a
// tenant (tenants' KnownTenant).
func (h *Handler) AdminRoutes(r fiber.Router, known fiber.Handler) {
	r.Get("/tenants/:tenant_id/webhook_endpoints", known, h.adminEndpoints)
	r.Get("/tenants/:tenant_id/webhook_endpoints/:id/deliveries", known, h.adminDeliveries)
}

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

func (h *Handler) claim(c *fiber.Ctx) (idempotency.Claim, error) {
	cl, ok := idempotency.ClaimFrom(c)
	if !ok {
		return cl, errors.New("events: route mounted without the idempotency middleware")
	}
	return cl, nil
}

func decodeEndpoint(c *fiber.Ctx) (EndpointRequest, error) {
	var req EndpointRequest
	if bad := reqjson.Labelled(c.Request().Header.ContentType(), c.Body()); bad != nil {
		return req, bad
	}
	if err := reqjson.Decode(c.Body(), &req); err != nil {
		return req, invalid(reqjson.Refusal(err))
	}
	return req, nil
}

// createEndpoint godoc
// @Summary      Create a webhook endpoint
// @Description  Registers a URL to receive events as Standard Webhooks (webhook-id, webhook-timestamp,
// @Description  webhook-signature: v1,base64 HMAC-SHA256 of "id.timestamp.body" under the secret's key). `events`
// @Description  lists the types to receive (empty or absent: all). The `secret` (whsec_…) is in this answer only.
// @Description  In production the URL must be https and must not reach a private, loopback or link-local address.
// @Tags         webhooks
// @Accept       json
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        Idempotency-Key header string true "One key per endpoint to create" minLength(1) maxLength(255) extensions(x-example=we-create-1)
// @Param        request body CreateEndpointRequest true "The endpoint"
// @Success      201 {object} EndpointView "created; secret shown once"
// @Failure      400 {object} problem.Problem "invalid_request, idempotency_key_missing, idempotency_key_invalid: nothing created"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      409 {object} problem.Problem "idempotency_key_in_use: another request holds this key; retry after Retry-After"
// @Failure      413 {object} problem.Problem "body_too_large (over 1 MiB; nothing stored)"
// @Failure      415 {object} problem.Problem "unsupported_content_encoding: request bodies must not be compressed; unsupported_media_type: a body labelled as something other than JSON"
// @Failure      422 {object} problem.Problem "idempotency_key_mismatch: the key was used with another method, route or body (compared by meaning: RFC 8785 canonical JSON)"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: nothing was done (the database could not be reached, or the gateway was too busy to take the request); retry with the same key after Retry-After"
// @Header       201 {string} Idempotent-Replayed "true when this is the stored answer of an earlier request with this key"
// @Header       409,429,503 {integer} Retry-After "seconds to wait before retrying with the same key"
// @ID           createWebhookEndpoint
// @Router       /v1/webhook_endpoints [post]
func (h *Handler) createEndpoint(c *fiber.Ctx) error {
	claim, err := h.claim(c)
	if err != nil {
		return err
	}
	req, err := decodeEndpoint(c)
	if err != nil {
		return releaseWith(c.UserContext(), h.keys, claim, err)
	}
	a, err := h.svc.CreateEndpoint(c.UserContext(), h.keys, claim, utils.CopyString(h.merchant(c)), req)
	if err != nil {
		return err
	}
	return a.Write(c)
}

// EndpointList is a merchant's endpoints.
type EndpointList struct {
	Data []EndpointView `json:"data"`
} // @name WebhookEndpointList

// listEndpoints godoc
// @Summary      List webhook endpoints
// @Description  The caller's endpoints (at most 16), oldest first; never their secrets.
// @Tags         webhooks
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Success      200 {object} EndpointList
// @Failure      400 {object} problem.Problem "invalid_request: a query parameter (the route takes none)"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @Header       429 {integer} Retry-After "seconds"
// @ID           listWebhookEndpoints
// @Router       /v1/webhook_endpoints [get]
func (h *Handler) listEndpoints(c *fiber.Ctx) error {
	return h.endpointsOf(c, h.merchant(c))
}

// adminEndpoints godoc
// @Summary      List a tenant's webhook endpoints (operators)
// @Description  The tenant's endpoints as the merchant sees them (never their secrets): whether one is disabled, and
// @Description  since when it has been failing.
// @Tags         admin
// @Produce      json
// @Produce      application/problem+json
// @Security     AdminKey
// @Param        tenant_id path string true "Tenant id" extensions(x-example=ten_5f2b9c0e4d1a7b3c8e6f0a12)
// @Success      200 {object} EndpointList
// @Failure      400 {object} problem.Problem "invalid_request: a query parameter (the route takes none)"
// @Failure      401 {object} problem.Problem "unauthorized"
// @Failure      404 {object} problem.Problem "tenant_not_found"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @ID           adminListWebhookEndpoints
// @Router       /admin/v1/tenants/{tenant_id}/webhook_endpoints [get]
func (h *Handler) adminEndpoints(c *fiber.Ctx) error {
	return h.endpointsOf(c, utils.CopyString(c.Params("tenant_id")))
}

// endpointsOf answers merchant m's endpoints.
func (h *Handler) endpointsOf(c *fiber.Ctx, m string) error {
	if err := query.Known(c); err != nil {
		return err // it takes no parameters: a filter would be ignored
	}
	eps, err := h.svc.store.endpoints(c.UserContext(), nil, m)
	if err != nil {
		return err
	}
	out := EndpointList{Data: make([]EndpointView, 0, len(eps))}
	for i := range eps {
		out.Data = append(out.Data, eps[i].view())
	}
	return c.JSON(out)
}

// getEndpoint godoc
// @Summary      Get a webhook endpoint
// @Tags         webhooks
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        id path string true "Endpoint id" extensions(x-example=we_0f1e2d3c4b5a69788796a5b4c3d2e1f0)
// @Success      200 {object} EndpointView
// @Failure      400 {object} problem.Problem "invalid_request: a query parameter (the route takes none)"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      404 {object} problem.Problem "webhook_endpoint_not_found"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @Header       429 {integer} Retry-After "seconds"
// @ID           getWebhookEndpoint
// @Router       /v1/webhook_endpoints/{id} [get]
func (h *Handler) getEndpoint(c *fiber.Ctx) error {
	if err := query.Known(c); err != nil {
		return err // it takes no parameters: one would be ignored
	}
	id := c.Params("id")
	if !wellFormed("we_", id) {
		return errEndpointNotFound
	}
	ep, err := h.svc.store.endpoint(c.UserContext(), nil, h.merchant(c), id)
	if errors.Is(err, ErrNotFound) {
		return errEndpointNotFound
	}
	if err != nil {
		return err
	}
	return c.JSON(ep.view())
}

// updateEndpoint godoc
// @Summary      Update a webhook endpoint
// @Description  Changes url, events, description, or disabled (true stops deliveries; false re-enables and ends a failing streak).
// @Tags         webhooks
// @Accept       json
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        id path string true "Endpoint id" extensions(x-example=we_0f1e2d3c4b5a69788796a5b4c3d2e1f0)
// @Param        Idempotency-Key header string true "One key per change" minLength(1) maxLength(255) extensions(x-example=we-update-1)
// @Param        request body EndpointRequest true "What to change"
// @Success      200 {object} EndpointView
// @Failure      400 {object} problem.Problem "invalid_request, idempotency_key_missing, idempotency_key_invalid"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      404 {object} problem.Problem "webhook_endpoint_not_found"
// @Failure      409 {object} problem.Problem "idempotency_key_in_use: another request holds this key; retry after Retry-After"
// @Failure      413 {object} problem.Problem "body_too_large (over 1 MiB; nothing stored)"
// @Failure      415 {object} problem.Problem "unsupported_content_encoding: request bodies must not be compressed; unsupported_media_type: a body labelled as something other than JSON"
// @Failure      422 {object} problem.Problem "idempotency_key_mismatch: the key was used with another method, route or body (compared by meaning: RFC 8785 canonical JSON)"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: nothing was done (the database could not be reached, or the gateway was too busy to take the request); retry with the same key after Retry-After"
// @Header       200 {string} Idempotent-Replayed "true when this is the stored answer of an earlier request with this key"
// @Header       409,429,503 {integer} Retry-After "seconds to wait before retrying with the same key"
// @ID           updateWebhookEndpoint
// @Router       /v1/webhook_endpoints/{id} [patch]
func (h *Handler) updateEndpoint(c *fiber.Ctx) error {
	claim, err := h.claim(c)
	if err != nil {
		return err
	}
	id := utils.CopyString(c.Params("id"))
	if !wellFormed("we_", id) {
		return releaseWith(c.UserContext(), h.keys, claim, errEndpointNotFound)
	}
	req, err := decodeEndpoint(c)
	if err != nil {
		return releaseWith(c.UserContext(), h.keys, claim, err)
	}
	a, err := h.svc.UpdateEndpoint(c.UserContext(), h.keys, claim, utils.CopyString(h.merchant(c)), id, req)
	if err != nil {
		return err
	}
	return a.Write(c)
}

// deleteEndpoint godoc
// @Summary      Delete a webhook endpoint
// @Tags         webhooks
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        id path string true "Endpoint id" extensions(x-example=we_0f1e2d3c4b5a69788796a5b4c3d2e1f0)
// @Param        Idempotency-Key header string true "One key per deletion" minLength(1) maxLength(255) extensions(x-example=we-delete-1)
// @Success      200 {object} Deleted
// @Failure      400 {object} problem.Problem "invalid_request (a body: the route takes none), idempotency_key_missing, idempotency_key_invalid"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      404 {object} problem.Problem "webhook_endpoint_not_found"
// @Failure      409 {object} problem.Problem "idempotency_key_in_use: another request holds this key; retry after Retry-After"
// @Failure      413 {object} problem.Problem "body_too_large (over 1 MiB; nothing stored)"
// @Failure      415 {object} problem.Problem "unsupported_content_encoding: request bodies must not be compressed"
// @Failure      422 {object} problem.Problem "idempotency_key_mismatch: the key was used with another method, route or body (compared by meaning: RFC 8785 canonical JSON)"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: nothing was done (the database could not be reached, or the gateway was too busy to take the request); retry with the same key after Retry-After"
// @Header       200 {string} Idempotent-Replayed "true when this is the stored answer of an earlier request with this key"
// @Header       409,429,503 {integer} Retry-After "seconds to wait before retrying with the same key"
// @ID           deleteWebhookEndpoint
// @Router       /v1/webhook_endpoints/{id} [delete]
func (h *Handler) deleteEndpoint(c *fiber.Ctx) error {
	claim, err := h.claim(c)
	if err != nil {
		return err
	}
	if err := noBody(c); err != nil {
		return releaseWith(c.UserContext(), h.keys, claim, err)
	}
	id := utils.CopyString(c.Params("id"))
	if !wellFormed("we_", id) {
		return releaseWith(c.UserContext(), h.keys, claim, errEndpointNotFound)
	}
	a, err := h.svc.DeleteEndpoint(c.UserContext(), h.keys, claim, utils.CopyString(h.merchant(c)), id)
	if err != nil {
		return err
	}
	return a.Write(c)
}

// rotateSecret godoc
// @Summary      Rotate a webhook endpoint's secret
// @Description  A new secret, shown in this answer only; for 24 hours deliveries carry a signature under each secret
// @Description  (space-separated in webhook-signature), so a receiver can switch over.
// @Tags         webhooks
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        id path string true "Endpoint id" extensions(x-example=we_0f1e2d3c4b5a69788796a5b4c3d2e1f0)
// @Param        Idempotency-Key header string true "One key per rotation" minLength(1) maxLength(255) extensions(x-example=we-rotate-1)
// @Success      200 {object} EndpointView "rotated; the new secret shown once"
// @Failure      400 {object} problem.Problem "invalid_request (a body: the route takes none), idempotency_key_missing, idempotency_key_invalid"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      404 {object} problem.Problem "webhook_endpoint_not_found"
// @Failure      409 {object} problem.Problem "idempotency_key_in_use: another request holds this key; retry after Retry-After"
// @Failure      413 {object} problem.Problem "body_too_large (over 1 MiB; nothing stored)"
// @Failure      415 {object} problem.Problem "unsupported_content_encoding: request bodies must not be compressed"
// @Failure      422 {object} problem.Problem "idempotency_key_mismatch: the key was used with another method, route or body (compared by meaning: RFC 8785 canonical JSON)"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: nothing was done (the database could not be reached, or the gateway was too busy to take the request); retry with the same key after Retry-After"
// @Header       200 {string} Idempotent-Replayed "true when this is the stored answer of an earlier request with this key"
// @Header       409,429,503 {integer} Retry-After "seconds to wait before retrying with the same key"
// @ID           rotateWebhookEndpointSecret
// @Router       /v1/webhook_endpoints/{id}/rotate_secret [post]
func (h *Handler) rotateSecret(c *fiber.Ctx) error {
	claim, err := h.claim(c)
	if err != nil {
		return err
	}
	if err := noBody(c); err != nil {
		return releaseWith(c.UserContext(), h.keys, claim, err)
	}
	id := utils.CopyString(c.Params("id"))
	if !wellFormed("we_", id) {
		return releaseWith(c.UserContext(), h.keys, claim, errEndpointNotFound)
	}
	a, err := h.svc.RotateSecret(c.UserContext(), h.keys, claim, utils.CopyString(h.merchant(c)), id)
	if err != nil {
		return err
	}
	return a.Write(c)
}

// DeliveryPage is one page of an endpoint's delivery attempts.
type DeliveryPage struct {
	Data       []Delivery `json:"data"`
	HasMore    bool       `json:"has_more" example:"false"`
	NextCursor string     `json:"next_cursor,omitempty"`
} // @name WebhookDeliveryPage

// deliveries godoc
// @Summary      List an endpoint's deliveries
// @Description  Every attempt, newest first: time, status code, latency, error and outcome.
// @Tags         webhooks
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        id     path  string true  "Endpoint id" extensions(x-example=we_0f1e2d3c4b5a69788796a5b4c3d2e1f0)
// @Param        limit  query int    false "Page size, 1 to 100" default(20) minimum(1) maximum(100)
// @Param        cursor query string false "The next_cursor of the previous page"
// @Success      200 {object} DeliveryPage
// @Failure      400 {object} problem.Problem "invalid_request"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      404 {object} problem.Problem "webhook_endpoint_not_found"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @Header       429 {integer} Retry-After "seconds"
// @ID           listWebhookDeliveries
// @Router       /v1/webhook_endpoints/{id}/deliveries [get]
func (h *Handler) deliveries(c *fiber.Ctx) error {
	return h.deliveriesOf(c, h.merchant(c))
}

// adminDeliveries godoc
// @Summary      List a tenant's webhook deliveries (operators)
// @Description  Every attempt to deliver an event to one of the tenant's endpoints, newest first, as the merchant sees
// @Description  them: the status code the endpoint answered, how long it took, the error, and whether another attempt is
// @Description  scheduled.
// @Tags         admin
// @Produce      json
// @Produce      application/problem+json
// @Security     AdminKey
// @Param        tenant_id path  string true  "Tenant id" extensions(x-example=ten_5f2b9c0e4d1a7b3c8e6f0a12)
// @Param        id        path  string true  "Endpoint id" extensions(x-example=we_0f1e2d3c4b5a69788796a5b4c3d2e1f0)
// @Param        limit     query int    false "Page size, 1 to 100" default(20) minimum(1) maximum(100)
// @Param        cursor    query string false "The next_cursor of the previous page"
// @Success      200 {object} DeliveryPage
// @Failure      400 {object} problem.Problem "invalid_request"
// @Failure      401 {object} problem.Problem "unauthorized"
// @Failure      404 {object} problem.Problem "tenant_not_found, webhook_endpoint_not_found"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @ID           adminListWebhookDeliveries
// @Router       /admin/v1/tenants/{tenant_id}/webhook_endpoints/{id}/deliveries [get]
func (h *Handler) adminDeliveries(c *fiber.Ctx) error {
	return h.deliveriesOf(c, utils.CopyString(c.Params("tenant_id")))
}

// deliveriesOf answers a page of the deliveries to merchant m's endpoint
// in the path.
func (h *Handler) deliveriesOf(c *fiber.Ctx, m string) error {
	if err := query.Known(c, "limit", "cursor"); err != nil {
		return err
	}
	id := c.Params("id")
	if !wellFormed("we_", id) {
		return errEndpointNotFound
	}
	if _, err := h.svc.store.endpoint(c.UserContext(), nil, m, id); errors.Is(err, ErrNotFound) {
		return errEndpointNotFound
	} else if err != nil {
		return err
	}
	limit, after, err := page(c, "dlv_")
	if err != nil {
		return err
	}
	rows, err := h.svc.store.Deliveries(c.UserContext(), m, id, limit, after)
	if err != nil {
		return err
	}
	out := DeliveryPage{Data: rows}
	if len(rows) > limit {
		out.HasMore, out.Data = true, rows[:limit]
		last := out.Data[limit-1]
		out.NextCursor = cursorOf(last.At, last.ID)
	}
	if out.Data == nil {
		out.Data = []Delivery{}
	}
	return c.JSON(out)
}

// EventPage documents one page of events (eventPage is what is sent:
// the stored bodies, byte for byte).
type EventPage struct {
	Data       []EventBody `json:"data"`
	HasMore    bool        `json:"has_more" example:"false"`
	NextCursor string      `json:"next_cursor,omitempty"`
} // @name EventPage

type eventPage struct {
	Data       []json.RawMessage `json:"data"`
	HasMore    bool              `json:"has_more"`
	NextCursor string            `json:"next_cursor,omitempty"`
}

// EventBody documents an event as delivered and listed.
type EventBody struct {
	ID        string    `json:"id" example:"evt_0f1e2d3c4b5a69788796a5b4c3d2e1f0"`
	Object    string    `json:"object" example:"event"`
	Type      string    `json:"type" example:"payment.succeeded" enums:"payment.processing,payment.succeeded,payment.failed,payment.requires_review,refund.succeeded,refund.failed,refund.requires_review"`
	CreatedAt time.Time `json:"created_at" format:"date-time"`
	// Data.object is the payment or refund as GET returns it, at the transition.
	Data map[string]any `json:"data"`
} // @name Event

// list godoc
// @Summary      List events
// @Description  The caller's events of the last 30 days, newest first: one per state transition of its payments and
// @Description  refunds, exactly the bodies that were (or are being) delivered to its endpoints.
// @Tags         webhooks
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        type         query string false "Only this type" Enums(payment.processing, payment.succeeded, payment.failed, payment.requires_review, refund.succeeded, refund.failed, refund.requires_review)
// @Param        created_from query string false "Created at or after (RFC 3339)" format(date-time)
// @Param        limit        query int    false "Page size, 1 to 100" default(20) minimum(1) maximum(100)
// @Param        cursor       query string false "The next_cursor of the previous page"
// @Success      200 {object} EventPage
// @Failure      400 {object} problem.Problem "invalid_request"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @Header       429 {integer} Retry-After "seconds"
// @ID           listEvents
// @Router       /v1/events [get]
func (h *Handler) list(c *fiber.Ctx) error {
	if err := query.Known(c, "type", "created_from", "limit", "cursor"); err != nil {
		return err
	}
	p := ListParams{Type: c.Query("type")}
	if p.Type != "" && !known(p.Type) {
		return invalid("type", "must be one of "+strings.Join(Types, ", "))
	}
	if v := c.Query("created_from"); v != "" {
		t, err := reqtime.Parse(v)
		if err != nil {
			return invalid("created_from", "must be an RFC 3339 time, any offset (e.g. 2026-12-01T00:00:00Z), within the years 0001-9999 once in UTC")
		}
		p.CreatedFrom = &t
	}
	var err error
	if p.Limit, p.After, err = page(c, "evt_"); err != nil {
		return err
	}
	rows, err := h.svc.store.List(c.UserContext(), h.merchant(c), p)
	if err != nil {
		return err
	}
	out := eventPage{Data: make([]json.RawMessage, 0, len(rows))}
	if len(rows) > p.Limit {
		out.HasMore, rows = true, rows[:p.Limit]
		last := rows[len(rows)-1]
		out.NextCursor = cursorOf(last.CreatedAt, last.ID)
	}
	for _, e := range rows {
		out.Data = append(out.Data, json.RawMessage(e.Payload))
	}
	return c.JSON(out)
}

// get godoc
// @Summary      Get an event
// @Tags         webhooks
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        id path string true "Event id" extensions(x-example=evt_0f1e2d3c4b5a69788796a5b4c3d2e1f0)
// @Success      200 {object} EventBody
// @Failure      400 {object} problem.Problem "invalid_request: a query parameter (the route takes none)"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      404 {object} problem.Problem "event_not_found"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: the database could not be reached; retry after Retry-After"
// @Header       429 {integer} Retry-After "seconds"
// @ID           getEvent
// @Router       /v1/events/{id} [get]
func (h *Handler) get(c *fiber.Ctx) error {
	if err := query.Known(c); err != nil {
		return err // it takes no parameters: one would be ignored
	}
	id := c.Params("id")
	notFound := problem.New(fiber.StatusNotFound, "event_not_found", "no such event")
	if !wellFormed("evt_", id) {
		return notFound
	}
	e, err := h.svc.store.Get(c.UserContext(), h.merchant(c), id)
	if errors.Is(err, ErrNotFound) {
		return notFound
	}
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(e.Payload)
}

// redeliver godoc
// @Summary      Redeliver an event
// @Description  Enqueues the event again for every endpoint that takes its type now (same webhook-id). An endpoint whose delivery of the event is still waiting or running gets no second one (counted in `in_flight`: redeliver again once it has ended, if it failed); one waiting for a retry after a failure gets it now.
// @Tags         webhooks
// @Produce      json
// @Produce      application/problem+json
// @Security     BearerAuth
// @Param        id path string true "Event id" extensions(x-example=evt_0f1e2d3c4b5a69788796a5b4c3d2e1f0)
// @Param        Idempotency-Key header string true "One key per redelivery" minLength(1) maxLength(255) extensions(x-example=redeliver-1)
// @Success      202 {object} Redelivery
// @Failure      400 {object} problem.Problem "invalid_request (a body: the route takes none), idempotency_key_missing, idempotency_key_invalid"
// @Failure      401 {object} problem.Problem "invalid_token"
// @Failure      403 {object} problem.Problem "tenant_suspended"
// @Failure      404 {object} problem.Problem "event_not_found"
// @Failure      409 {object} problem.Problem "idempotency_key_in_use: another request holds this key; retry after Retry-After"
// @Failure      413 {object} problem.Problem "body_too_large (over 1 MiB; nothing stored)"
// @Failure      415 {object} problem.Problem "unsupported_content_encoding: request bodies must not be compressed"
// @Failure      422 {object} problem.Problem "idempotency_key_mismatch: the key was used with another method, route or body (compared by meaning: RFC 8785 canonical JSON)"
// @Failure      429 {object} problem.Problem "rate_limited (Retry-After)"
// @Failure      500 {object} problem.Problem "internal (quote request_id)"
// @Failure      503 {object} problem.Problem "unavailable: nothing was done (the database could not be reached, or the gateway was too busy to take the request); retry with the same key after Retry-After"
// @Header       202 {string} Idempotent-Replayed "true when this is the stored answer of an earlier request with this key"
// @Header       409,429,503 {integer} Retry-After "seconds to wait before retrying with the same key"
// @ID           redeliverEvent
// @Router       /v1/events/{id}/redeliver [post]
func (h *Handler) redeliver(c *fiber.Ctx) error {
	claim, err := h.claim(c)
	if err != nil {
		return err
	}
	if err := noBody(c); err != nil {
		return releaseWith(c.UserContext(), h.keys, claim, err)
	}
	id := utils.CopyString(c.Params("id"))
	if !wellFormed("evt_", id) {
		return releaseWith(c.UserContext(), h.keys, claim, problem.New(fiber.StatusNotFound, "event_not_found", "no such event"))
	}
	a, err := h.svc.Redeliver(c.UserContext(), h.keys, claim, utils.CopyString(h.merchant(c)), id)
	if err != nil {
		return err
	}
	return a.Write(c)
}

func page(c *fiber.Ctx, prefix string) (int, *Cursor, error) {
	limit := 20
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return 0, nil, invalid("limit", "must be an integer from 1 to 100")
		}
		limit = n
	}
	if v := c.Query("cursor"); v != "" {
		cur, ok := parseCursor(v)
		if !ok || !wellFormed(prefix, cur.ID) {
			return 0, nil, invalid("cursor", "is not a cursor this API returned")
		}
		return limit, &cur, nil
	}
	return limit, nil, nil
}

func cursorOf(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + "." + id))
}

func parseCursor(s string) (Cursor, bool) {
	if len(s) > 128 {
		return Cursor{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, false
	}
	micros, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil {
		return Cursor{}, false
	}
	at, err := reqtime.UnixMicro(n)
	if err != nil {
		return Cursor{}, false
	}
	return Cursor{CreatedAt: at, ID: id}, true
}

// noBody refuses a body on a route that takes none: ignored, it would be
// answered as if the caller had asked for nothing, whatever it meant. No
// body, or an empty JSON object (clients that always send JSON), is none.
func noBody(c *fiber.Ctx) error {
	b := c.Body()
	if len(b) == 0 {
		return nil
	}
	var v map[string]json.RawMessage
	if json.Unmarshal(b, &v) == nil && v != nil && len(v) == 0 {
		return nil
	}
	return problem.Invalid(problem.FieldError{Field: "body", Reason: "this route takes no body; send none (or {})"})
}
