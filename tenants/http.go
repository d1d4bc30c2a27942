package tenants

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/oncepay/gateway/app/audit"
	"github.com/oncepay/gateway/app/logthrottle"
	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/app/query"
	"github.com/oncepay/gateway/app/reqjson"
	"github.com/oncepay/gateway/providers"
)

// Handler serves the tenants HTTP API.
type Handler struct {
	svc *Service
	// refusals logs admin requests refused for their key, at most once a
	// minute with a count of the rest: someone is trying keys, or a
	// caller still has an old one, and either is worth a look — but an
	// unauthenticated stream must not flood the log.
	refusals *slog.Logger
}

// NewHandler returns the handlers of svc.
func NewHandler(svc *Service) *Handler {
	return &Handler{svc: svc, refusals: slog.New(logthrottle.New(svc.log.Handler(), time.Minute, nil))}
}

// AdminRoutes mounts the admin-key check on r (the /admin/v1 group: every
// route under it requires the key) and the /tenants routes.
func (h *Handler) AdminRoutes(r fiber.Router) {
	r.Use(h.requireAdmin)
	r.Post("/tenants", h.createTenant)
	r.Get("/tenants", h.listTenants)
	r.Get("/tenants/:id", h.getTenant)
	r.Patch("/tenants/:id", h.updateTenant)
	r.Post("/tenants/:id/credentials", h.rotateCredentials)
}

// KnownTenant lets a request on through only when the path parameter
// param names a tenant, and answers 404 tenant_not_found otherwise: for
// other packages' operator routes under /admin/v1/tenants/{id}, so a
// mistyped id is told as such instead of reading as a tenant with nothing.
func (h *Handler) KnownTenant(param string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if _, err := h.svc.Get(c.UserContext(), utils.CopyString(c.Params(param))); err != nil {
			return toProblem(err)
		}
		return c.Next()
	}
}

// TokenRoutes mounts POST /auth/token on r (the /v1 group). Register it
// before the RequireMerchant group: it authenticates clients itself.
func (h *Handler) TokenRoutes(r fiber.Router) {
	r.Post("/auth/token", h.issueToken)
	// Any other method is 405 here, not the merchant group's 401 for a
	// missing bearer token: a client asking the token endpoint for a token
	// has no token to send.
	r.All("/auth/token", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderAllow, fiber.MethodPost)
		return fiber.ErrMethodNotAllowed
	})
}

// MerchantRoutes mounts GET /me on r, which must already be behind
// RequireMerchant.
func (h *Handler) MerchantRoutes(r fiber.Router) {
	r.Get("/me", h.me)
}

// --- request and response bodies (the wire shapes, not the GORM models) ---

// CreateTenantRequest onboards a tenant.
type CreateTenantRequest struct {
	Name            string                       `json:"name" example:"Ada Stores"`
	Status          string                       `json:"status,omitempty" enums:"active,suspended" example:"active"`
	DefaultProvider string                       `json:"default_provider" example:"simulator"`
	Providers       map[string]map[string]string `json:"providers,omitempty"`
} // @name CreateTenantRequest

// String redacts the provider secrets.
func (r CreateTenantRequest) String() string { return "tenants.CreateTenantRequest{redacted}" }

// GoString redacts the provider secrets.
func (r CreateTenantRequest) GoString() string { return r.String() }

// LogValue redacts secrets from slog output.
func (r CreateTenantRequest) LogValue() slog.Value { return slog.StringValue("redacted") }

// UpdateTenantRequest changes a tenant; absent fields stay as they are. A
// provider mapped to secrets creates or replaces that account; a provider
// mapped to null removes it.
type UpdateTenantRequest struct {
	Name            *string                      `json:"name,omitempty" example:"Ada Stores Ltd"`
	Status          *string                      `json:"status,omitempty" enums:"active,suspended" example:"suspended"`
	DefaultProvider *string                      `json:"default_provider,omitempty" example:"paystack"`
	Providers       map[string]map[string]string `json:"providers,omitempty"`
} // @name UpdateTenantRequest

// String redacts the provider secrets.
func (r UpdateTenantRequest) String() string { return "tenants.UpdateTenantRequest{redacted}" }

// GoString redacts the provider secrets.
func (r UpdateTenantRequest) GoString() string { return r.String() }

// LogValue redacts secrets from slog output.
func (r UpdateTenantRequest) LogValue() slog.Value { return slog.StringValue("redacted") }

// TenantResponse is a tenant. It never carries a secret.
type TenantResponse struct {
	ID              string    `json:"id" example:"ten_5f2b9c0e4d1a7b3c8e6f0a12"`
	Name            string    `json:"name" example:"Ada Stores"`
	Status          string    `json:"status" enums:"active,suspended" example:"active"`
	DefaultProvider string    `json:"default_provider" example:"simulator"`
	Providers       []string  `json:"providers" example:"paystack,simulator"`
	CreatedAt       time.Time `json:"created_at" format:"date-time" example:"2025-01-02T15:04:05Z"`
	UpdatedAt       time.Time `json:"updated_at" format:"date-time" example:"2025-01-02T15:04:05Z"`
} // @name Tenant

// CreatedTenantResponse is a new tenant with its first credentials; the
// client secret is shown here once and cannot be read again.
type CreatedTenantResponse struct {
	TenantResponse
	ClientID     string `json:"client_id" example:"cli_9a8b7c6d5e4f3a2b1c0d9e8f"`
	ClientSecret string `json:"client_secret" example:"sk_Vb3k0cQ2m9Xr7Yt1Hn5Lp8Ws4Ej6Fa0Zd2Gu7Ki9Oq1"`
} // @name CreatedTenant

// String redacts the client secret.
func (r CreatedTenantResponse) String() string {
	return "tenants.CreatedTenantResponse{ID:" + r.ID + " ClientID:" + r.ClientID + " ClientSecret:[redacted]}"
}

// GoString redacts the client secret.
func (r CreatedTenantResponse) GoString() string { return r.String() }

// LogValue redacts secrets from slog output.
func (r CreatedTenantResponse) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", r.ID), slog.String("client_id", r.ClientID))
}

// CredentialsResponse is a new credential pair, shown once.
type CredentialsResponse struct {
	TenantID     string    `json:"tenant_id" example:"ten_5f2b9c0e4d1a7b3c8e6f0a12"`
	ClientID     string    `json:"client_id" example:"cli_9a8b7c6d5e4f3a2b1c0d9e8f"`
	ClientSecret string    `json:"client_secret" example:"sk_Vb3k0cQ2m9Xr7Yt1Hn5Lp8Ws4Ej6Fa0Zd2Gu7Ki9Oq1"`
	CreatedAt    time.Time `json:"created_at" format:"date-time" example:"2025-01-02T15:04:05Z"`
} // @name Credentials

// String redacts the client secret.
func (r CredentialsResponse) String() string {
	return "tenants.CredentialsResponse{TenantID:" + r.TenantID + " ClientID:" + r.ClientID + " ClientSecret:[redacted]}"
}

// GoString redacts the client secret.
func (r CredentialsResponse) GoString() string { return r.String() }

// LogValue redacts secrets from slog output.
func (r CredentialsResponse) LogValue() slog.Value {
	return slog.GroupValue(slog.String("tenant_id", r.TenantID), slog.String("client_id", r.ClientID))
}

// TenantListResponse is one page of tenants, oldest first.
type TenantListResponse struct {
	Data []TenantResponse `json:"data"`
	// NextCursor is passed as ?cursor= for the next page; absent on the
	// last page.
	NextCursor string `json:"next_cursor,omitempty" example:"MTczNTgzMDI0NTAwMDAwMC50ZW5fNWYy"`
	// HasMore says whether there is a next page, as on every other list.
	HasMore bool `json:"has_more" example:"false"`
} // @name TenantPage

// TokenResponse is an OAuth 2.0 access token response (RFC 6749 §5.1).
type TokenResponse struct {
	AccessToken string `json:"access_token" example:"eyJhbGciOiJIUzI1NiIsImtpZCI6IjNmYTg1ZjY0NTc1YmI3ZTQiLCJ0eXAiOiJKV1QifQ.e30.sig"`
	TokenType   string `json:"token_type" example:"Bearer"`
	ExpiresIn   int    `json:"expires_in" example:"900"`
} // @name Token

// TenantAlreadyCreatedProblem documents the 409 of a create under an
// Idempotency-Key that made a tenant already: which one.
type TenantAlreadyCreatedProblem struct {
	problem.Problem
	TenantID string `json:"tenant_id" example:"ten_5f2b9c0e4d1a7b3c8e6f0a12"`
} // @name TenantAlreadyCreatedProblem

// TokenProblem documents a refused token request: a problem whose error
// member is RFC 6749 §5.2's code, for OAuth client libraries.
type TokenProblem struct {
	problem.Problem
	// RFC 6749 §5.2: invalid_request, invalid_client, unsupported_grant_type or unauthorized_client.
	Error string `json:"error" example:"invalid_client" enums:"invalid_request,invalid_client,unsupported_grant_type,unauthorized_client"`
} // @name TokenProblem

// String redacts the token.
func (r TokenResponse) String() string { return "tenants.TokenResponse{redacted}" }

// GoString redacts the token.
func (r TokenResponse) GoString() string { return r.String() }

// LogValue redacts secrets from slog output.
func (r TokenResponse) LogValue() slog.Value { return slog.StringValue("redacted") }

func tenantResponse(t Tenant) TenantResponse {
	ps := t.Providers
	if ps == nil {
		ps = []string{}
	}
	return TenantResponse{ID: t.ID, Name: t.Name, Status: t.Status, DefaultProvider: t.DefaultProvider,
		Providers: ps, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
}

// --- admin API ---

// createTenant onboards a tenant.
//
//	@Summary		Onboard a tenant
//	@Description	Creates a tenant with its provider accounts and first client credentials. The client_secret is returned once and cannot be read again. Provider secrets are write-only: no endpoint returns them. The default provider must be registered and configured (the simulator needs no secrets). Send an Idempotency-Key to make a retry after a lost answer safe: a second request under a key that created a tenant creates nothing and is answered 409 tenant_already_created with that tenant's id (tenant_id, and Location), never its client_secret, which was only ever in the first answer; rotate its credentials for a new one. Without the header each call creates another tenant.
//	@Tags			admin
//	@Accept			json
//	@Produce		json
//	@Produce		application/problem+json
//	@Param			Idempotency-Key	header	string	false	"Names this creation (1 to 255 printable ASCII characters, kept for good): a retry under it creates nothing"	maxLength(255)
//	@Param			body	body		CreateTenantRequest	true	"The tenant"
//	@Success		201		{object}	CreatedTenantResponse
//	@Header			201		{string}	Location	"/admin/v1/tenants/{id}"
//	@Failure		400		{object}	problem.Problem	"invalid_request, idempotency_key_invalid"
//	@Failure		415		{object}	problem.Problem	"unsupported_content_encoding: request bodies must not be compressed; unsupported_media_type: a body labelled as something other than JSON"
//	@Failure		401		{object}	problem.Problem	"unauthorized"
//	@Failure		409		{object}	TenantAlreadyCreatedProblem	"tenant_already_created: the Idempotency-Key created a tenant already (its id in tenant_id and Location; its client secret is not shown again: rotate its credentials)"
//	@Header			409		{string}	Location	"/admin/v1/tenants/{id}"
//	@Failure		413		{object}	problem.Problem	"body_too_large (over 1 MiB; nothing stored)"
//	@Failure		500		{object}	problem.Problem	"internal (quote request_id)"
//	@Failure		503	{object}	problem.Problem	"unavailable: the database could not be reached; retry after Retry-After"
//	@Security		AdminKey
//	@ID				createTenant
//	@Router			/admin/v1/tenants [post]
func (h *Handler) createTenant(c *fiber.Ctx) error {
	var key string
	if keys := c.Request().Header.PeekAll("Idempotency-Key"); len(keys) > 0 {
		key = string(keys[0]) // string() copies Fiber's buffer
		if len(keys) > 1 || !ValidIdempotencyKey(key) {
			return problem.New(fiber.StatusBadRequest, "idempotency_key_invalid",
				"the Idempotency-Key must be 1 to 255 printable ASCII characters, not starting with a double quote, sent once")
		}
	}
	var req CreateTenantRequest
	if p := decodeJSON(c, &req); p != nil {
		return p
	}
	t, creds, err := h.svc.Create(c.UserContext(), CreateParams{
		Name: req.Name, Status: req.Status, DefaultProvider: req.DefaultProvider, Providers: toSecrets(req.Providers),
		IdempotencyKey: key,
	})
	var again *AlreadyCreatedError
	if errors.As(err, &again) {
		// A refusal, not the first 201 again: that answer's client secret
		// is stored only as a hash, and a 2xx without it would read, to a
		// script, as a tenant whose secret is empty.
		c.Location(strings.TrimSuffix(c.Path(), "/") + "/" + again.TenantID)
		return problem.New(fiber.StatusConflict, "tenant_already_created",
			"this Idempotency-Key already created tenant "+again.TenantID+"; its client secret was shown once, in that answer, "+
				"and is not shown again: POST /admin/v1/tenants/"+again.TenantID+"/credentials issues new credentials").
			With("tenant_id", again.TenantID)
	}
	if err != nil {
		return toProblem(err)
	}
	noStore(c)
	c.Location(strings.TrimSuffix(c.Path(), "/") + "/" + t.ID)
	return c.Status(fiber.StatusCreated).JSON(CreatedTenantResponse{
		TenantResponse: tenantResponse(t), ClientID: creds.ClientID, ClientSecret: creds.ClientSecret,
	})
}

// listTenants pages through tenants.
//
//	@Summary		List tenants
//	@Description	Tenants oldest first, in keyset pages, optionally only those in a status or whose name contains some text (case folded). Pass next_cursor back as cursor, with the same filters, for the next page; the last page has no next_cursor.
//	@Tags			admin
//	@Produce		json
//	@Produce		application/problem+json
//	@Param			status	query		string	false	"Only tenants in this status"	Enums(active, suspended)
//	@Param			name	query		string	false	"Only tenants whose name contains this, case folded (at most 200 characters)"	maxLength(200)
//	@Param			limit	query		int		false	"Page size"	minimum(1)	maximum(100)	default(20)
//	@Param			cursor	query		string	false	"next_cursor of the previous page"
//	@Success		200		{object}	TenantListResponse
//	@Failure		400		{object}	problem.Problem	"invalid_request"
//	@Failure		401		{object}	problem.Problem	"unauthorized"
//	@Failure		500		{object}	problem.Problem	"internal (quote request_id)"
//	@Failure		503	{object}	problem.Problem	"unavailable: the database could not be reached; retry after Retry-After"
//	@Security		AdminKey
//	@ID				listTenants
//	@Router			/admin/v1/tenants [get]
func (h *Handler) listTenants(c *fiber.Ctx) error {
	if err := query.Known(c, "status", "name", "limit", "cursor"); err != nil {
		return err
	}
	p := ListParams{Cursor: utils.CopyString(c.Query("cursor")), Status: utils.CopyString(c.Query("status")),
		Name: utils.CopyString(c.Query("name"))}
	if s := c.Query("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return problem.Invalid(problem.FieldError{Field: "limit", Reason: "must be an integer"})
		}
		if n == 0 {
			n = -1 // an explicit 0 is out of range, not "the default"
		}
		p.Limit = n
	}
	page, err := h.svc.List(c.UserContext(), p)
	if err != nil {
		return toProblem(err)
	}
	out := TenantListResponse{Data: make([]TenantResponse, len(page.Tenants)), NextCursor: page.NextCursor, HasMore: page.NextCursor != ""}
	for i, t := range page.Tenants {
		out.Data[i] = tenantResponse(t)
	}
	return c.JSON(out)
}

// getTenant shows one tenant.
//
//	@Summary		Get a tenant
//	@Description	The tenant, with the names of its configured providers (never their secrets).
//	@Tags			admin
//	@Produce		json
//	@Produce		application/problem+json
//	@Param			id	path		string	true	"Tenant id"	extensions(x-example=ten_5f2b9c0e4d1a7b3c8e6f0a12)
//	@Success		200	{object}	TenantResponse
//	@Failure		400	{object}	problem.Problem	"invalid_request: a query parameter (the route takes none)"
//	@Failure		401	{object}	problem.Problem	"unauthorized"
//	@Failure		404	{object}	problem.Problem	"tenant_not_found"
//	@Failure		500	{object}	problem.Problem	"internal (quote request_id)"
//	@Failure		503	{object}	problem.Problem	"unavailable: the database could not be reached; retry after Retry-After"
//	@Security		AdminKey
//	@ID				getTenant
//	@Router			/admin/v1/tenants/{id} [get]
func (h *Handler) getTenant(c *fiber.Ctx) error {
	if err := query.Known(c); err != nil {
		return err // it takes no parameters: one would be ignored
	}
	t, err := h.svc.Get(c.UserContext(), utils.CopyString(c.Params("id")))
	if err != nil {
		return toProblem(err)
	}
	return c.JSON(tenantResponse(t))
}

// updateTenant changes a tenant.
//
//	@Summary		Update a tenant
//	@Description	Changes name, status, default provider and provider accounts. A provider mapped to secrets creates or replaces that account (names must be registered; secrets must carry the provider's required keys); mapped to null it is removed. The default provider must stay configured. Suspending a tenant stops its tokens within seconds.
//	@Tags			admin
//	@Accept			json
//	@Produce		json
//	@Produce		application/problem+json
//	@Param			id		path		string				true	"Tenant id"	extensions(x-example=ten_5f2b9c0e4d1a7b3c8e6f0a12)
//	@Param			body	body		UpdateTenantRequest	true	"The changes"
//	@Success		200		{object}	TenantResponse
//	@Failure		400		{object}	problem.Problem	"invalid_request"
//	@Failure		415		{object}	problem.Problem	"unsupported_content_encoding: request bodies must not be compressed; unsupported_media_type: a body labelled as something other than JSON"
//	@Failure		401		{object}	problem.Problem	"unauthorized"
//	@Failure		404		{object}	problem.Problem	"tenant_not_found"
//	@Failure		413		{object}	problem.Problem	"body_too_large (over 1 MiB; nothing stored)"
//	@Failure		500		{object}	problem.Problem	"internal (quote request_id)"
//	@Failure		503	{object}	problem.Problem	"unavailable: the database could not be reached; retry after Retry-After"
//	@Security		AdminKey
//	@ID				updateTenant
//	@Router			/admin/v1/tenants/{id} [patch]
func (h *Handler) updateTenant(c *fiber.Ctx) error {
	var req UpdateTenantRequest
	if p := decodeJSON(c, &req); p != nil {
		return p
	}
	t, err := h.svc.Update(c.UserContext(), utils.CopyString(c.Params("id")), UpdateParams{
		Name: req.Name, Status: req.Status, DefaultProvider: req.DefaultProvider, Providers: toSecrets(req.Providers),
	})
	if err != nil {
		return toProblem(err)
	}
	return c.JSON(tenantResponse(t))
}

// rotateCredentials replaces a tenant's client credentials.
//
//	@Summary		Rotate client credentials
//	@Description	Issues a new client_id and client_secret (shown once) and revokes the old ones at once: the old secret no longer gets tokens and tokens issued for it stop working. Not idempotent: every call issues a new pair.
//	@Tags			admin
//	@Produce		json
//	@Produce		application/problem+json
//	@Param			id	path		string	true	"Tenant id"	extensions(x-example=ten_5f2b9c0e4d1a7b3c8e6f0a12)
//	@Success		201	{object}	CredentialsResponse
//	@Failure		401	{object}	problem.Problem	"unauthorized"
//	@Failure		404	{object}	problem.Problem	"tenant_not_found"
//	@Failure		413	{object}	problem.Problem	"body_too_large (over 1 MiB; nothing stored)"
//	@Failure		415	{object}	problem.Problem	"unsupported_content_encoding: request bodies must not be compressed"
//	@Failure		500	{object}	problem.Problem	"internal (quote request_id)"
//	@Failure		503	{object}	problem.Problem	"unavailable: the database could not be reached; retry after Retry-After"
//	@Security		AdminKey
//	@ID				rotateCredentials
//	@Router			/admin/v1/tenants/{id}/credentials [post]
func (h *Handler) rotateCredentials(c *fiber.Ctx) error {
	creds, err := h.svc.RotateCredentials(c.UserContext(), utils.CopyString(c.Params("id")))
	if err != nil {
		return toProblem(err)
	}
	noStore(c)
	return c.Status(fiber.StatusCreated).JSON(CredentialsResponse{
		TenantID: creds.TenantID, ClientID: creds.ClientID, ClientSecret: creds.ClientSecret, CreatedAt: creds.CreatedAt,
	})
}

func (h *Handler) requireAdmin(c *fiber.Ctx) error {
	key, ok := bearerToken(c.Get(fiber.HeaderAuthorization))
	valid, previous := h.svc.adminKeyValid(key)
	if !ok || !valid {
		h.refusals.WarnContext(c.UserContext(), "admin request refused: missing or wrong admin API key",
			"method", c.Method(), "path", c.Path(), "remote", c.IP(), "request_id", c.GetRespHeader(fiber.HeaderXRequestID))
		c.Set(fiber.HeaderWWWAuthenticate, "Bearer")
		return problem.New(fiber.StatusUnauthorized, "unauthorized", "a valid admin API key is required (Authorization: Bearer)")
	}
	if previous {
		// So the operator can tell which callers still need the new key
		// before ADMIN_API_KEY_PREVIOUS is removed.
		ua := c.Get(fiber.HeaderUserAgent)
		if len(ua) > 200 {
			ua = ua[:200]
		}
		h.svc.log.WarnContext(c.UserContext(), "admin request with ADMIN_API_KEY_PREVIOUS; switch its caller to ADMIN_API_KEY",
			"method", c.Method(), "path", c.Path(), "remote", c.IP(), "user_agent", ua,
			"request_id", c.GetRespHeader(fiber.HeaderXRequestID))
		c.SetUserContext(audit.WithPreviousAdminKey(c.UserContext()))
	}
	return c.Next()
}

// --- token endpoint ---

// issueToken is the OAuth 2.0 client-credentials grant.
//
//	@Summary		Get an access token
//	@Description	OAuth 2.0 client-credentials grant (RFC 6749 §4.4). Authenticate the client one way (RFC 6749 §2.3.1): HTTP Basic `client_id:client_secret` (client_secret_basic, the ClientBasic scheme), or `client_id` and `client_secret` in this form (client_secret_post); both at once is 400 `invalid_request`. Send `grant_type=client_credentials`. The token is a short-lived JWT for the merchant API (`Authorization: Bearer` followed by the token); fetch a new one before `expires_in` runs out or on a 401. Safe to retry: each call simply issues a new token. A refusal of the grant (400, 401, 403) is problem+json whose `error` member is RFC 6749 §5.2's code (invalid_request, invalid_client, unsupported_grant_type; unauthorized_client for a suspended tenant) beside the gateway's own `code`.
//	@ID				issueToken
//	@Tags			auth
//	@Accept			x-www-form-urlencoded
//	@Produce		json
//	@Produce		application/problem+json
//	@Param			grant_type		formData	string	true	"Grant type"	Enums(client_credentials)
//	@Param			client_id		formData	string	false	"client_secret_post: the client id (leave out with HTTP Basic)"		extensions(x-example=)
//	@Param			client_secret	formData	string	false	"client_secret_post: the client secret (leave out with HTTP Basic)"	extensions(x-example=)
//	@Success		200				{object}	TokenResponse
//	@Failure		400				{object}	TokenProblem	"invalid_request, unsupported_grant_type"
//	@Failure		401				{object}	TokenProblem	"invalid_client"
//	@Failure		403				{object}	TokenProblem	"tenant_suspended (error: unauthorized_client)"
//	@Failure		413				{object}	problem.Problem	"body_too_large (over 1 MiB; nothing stored)"
//	@Failure		415				{object}	problem.Problem	"unsupported_content_encoding: request bodies must not be compressed"
//	@Failure		500				{object}	problem.Problem	"internal (quote request_id)"
//	@Failure		503	{object}	problem.Problem	"unavailable: the database could not be reached; retry after Retry-After"
//	@Security		ClientBasic
//	@x-security-optional	true
//	@Router			/v1/auth/token [post]
func (h *Handler) issueToken(c *fiber.Ctx) error {
	err := h.grant(c)
	if p, ok := problem.As(err); ok {
		if e := oauthError(p); e != "" {
			cp := *p
			cp.Extensions = maps.Clone(p.Extensions)
			return cp.With("error", e)
		}
	}
	return err
}

// oauthError is RFC 6749 §5.2's error code for a refused token request,
// carried beside the problem's own code so that OAuth client libraries can
// read why; "" for a failure that is not the client's (5xx).
func oauthError(p *problem.Problem) string {
	switch p.Code {
	case "invalid_request", "invalid_client", "unsupported_grant_type":
		return p.Code
	case "tenant_suspended":
		return "unauthorized_client"
	}
	return ""
}

// TwoCredentials refuses a request with Authorization sent more than
// once: the gateway reads the first; a proxy or log in front may read the
// last, and then a request is charged to one caller while another is seen
// making it.
func TwoCredentials(c *fiber.Ctx) error {
	if len(c.Request().Header.PeekAll(fiber.HeaderAuthorization)) > 1 {
		return problem.New(fiber.StatusBadRequest, "invalid_request",
			"Authorization is sent more than once; send it once")
	}
	return nil
}

// grant is the grant of issueToken, without RFC 6749's error member.
func (h *Handler) grant(c *fiber.Ctx) error {
	if err := TwoCredentials(c); err != nil {
		return err
	}
	// The form is the request: a query is never read, so it is refused
	// rather than ignored.
	if err := query.Known(c); err != nil {
		return err
	}
	mt, _, err := mime.ParseMediaType(string(c.Request().Header.ContentType()))
	if err != nil || mt != fiber.MIMEApplicationForm {
		// 400 invalid_request, not 415: RFC 6749 §5.2's answer, which
		// OAuth client libraries read. The detail says what to send,
		// since the usual mistake is sending nothing (curl -u without -d).
		if len(c.Body()) == 0 {
			return problem.New(fiber.StatusBadRequest, "invalid_request",
				"send grant_type=client_credentials as an application/x-www-form-urlencoded body")
		}
		return problem.New(fiber.StatusBadRequest, "invalid_request",
			"the body must be application/x-www-form-urlencoded (grant_type=client_credentials), not JSON or another type")
	}
	args := c.Request().PostArgs()
	grants := args.PeekMulti("grant_type")
	switch {
	case len(grants) == 0:
		return problem.New(fiber.StatusBadRequest, "invalid_request", "grant_type is required")
	case len(grants) > 1:
		return problem.New(fiber.StatusBadRequest, "invalid_request", "grant_type must be sent once")
	case string(grants[0]) != "client_credentials":
		return problem.New(fiber.StatusBadRequest, "unsupported_grant_type", "only grant_type=client_credentials is supported")
	}
	formID, formSecret, inForm, p := formCredentials(args.PeekMulti)
	if p != nil {
		return p
	}
	header := c.Get(fiber.HeaderAuthorization)
	var id, secret string
	var ok bool
	switch {
	case inForm && header != "":
		// RFC 6749 §2.3.1: a client MUST NOT use more than one method.
		return problem.New(fiber.StatusBadRequest, "invalid_request",
			"authenticate the client one way: HTTP Basic or client_id and client_secret in the body, not both")
	case inForm:
		id, secret, ok = formID, formSecret, formID != "" && formSecret != ""
	default:
		id, secret, ok = parseBasicAuth(header)
	}
	if !ok {
		return invalidClient(c)
	}
	tok, err := h.svc.IssueToken(c.UserContext(), id, secret)
	switch {
	case errors.Is(err, ErrInvalidClient):
		return invalidClient(c)
	case err != nil:
		return toProblem(err)
	}
	noStore(c)
	return c.JSON(TokenResponse{AccessToken: tok.AccessToken, TokenType: tok.TokenType, ExpiresIn: int(tok.ExpiresIn / time.Second)})
}

// formCredentials reads client_secret_post credentials from the form.
// An empty field counts as absent (forms, Swagger UI's among them, send
// empty fields); inForm is true when either field has a value. Each field
// may come once and is bounded like the Basic header.
func formCredentials(peek func(key string) [][]byte) (id, secret string, inForm bool, p *problem.Problem) {
	var vals [2]string
	for i, name := range [2]string{"client_id", "client_secret"} {
		vs := peek(name)
		if len(vs) > 1 {
			return "", "", false, problem.New(fiber.StatusBadRequest, "invalid_request", name+" must be sent once")
		}
		if len(vs) == 1 {
			if len(vs[0]) > maxBasicLen {
				return "", "", false, problem.New(fiber.StatusBadRequest, "invalid_request", name+" is too long")
			}
			vals[i] = string(vs[0])
		}
	}
	return vals[0], vals[1], vals[0] != "" || vals[1] != "", nil
}

func invalidClient(c *fiber.Ctx) error {
	c.Set(fiber.HeaderWWWAuthenticate, `Basic realm="oncepay", charset="UTF-8"`)
	return problem.New(fiber.StatusUnauthorized, "invalid_client", "client authentication failed")
}

// maxBasicLen bounds the Authorization header the Basic parser will decode.
const maxBasicLen = 1024

// parseBasicAuth reads "Basic base64(id:secret)". Per RFC 6749 §2.3.1 both
// parts are form-urlencoded before encoding; ours are URL-safe anyway.
func parseBasicAuth(header string) (id, secret string, ok bool) {
	if len(header) > maxBasicLen {
		return "", "", false
	}
	scheme, rest, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil {
		return "", "", false
	}
	rawID, rawSecret, found := strings.Cut(string(raw), ":")
	if !found {
		return "", "", false
	}
	if id, err = url.QueryUnescape(rawID); err != nil {
		return "", "", false
	}
	if secret, err = url.QueryUnescape(rawSecret); err != nil {
		return "", "", false
	}
	if id == "" || secret == "" {
		return "", "", false
	}
	return id, secret, true
}

// bearerToken reads "Bearer <token>" (scheme case-insensitive).
func bearerToken(header string) (string, bool) {
	scheme, tok, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	if tok == "" || strings.ContainsAny(tok, " \t") {
		return "", false
	}
	return tok, true
}

// --- merchant authentication ---

type tenantKey struct{}

type merchantCtxKey struct{}

// RequireMerchant authenticates a merchant route: a valid access token
// (Authorization: Bearer) of an active tenant. It puts the tenant in the
// request's locals and its id in c.UserContext(), so handlers read it with
// MerchantID or CurrentTenant and services with MerchantIDFrom.
func (h *Handler) RequireMerchant() fiber.Handler {
	return func(c *fiber.Ctx) error {
		raw, ok := bearerToken(c.Get(fiber.HeaderAuthorization))
		if !ok {
			return invalidToken(c, "a bearer access token is required")
		}
		t, err := h.svc.Authenticate(c.UserContext(), raw)
		switch {
		case errors.Is(err, ErrTokenExpired):
			// RFC 6750 §3's own example: the description tells a client's
			// developer to refresh, not to debug.
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer error="invalid_token", error_description="The access token expired"`)
			return problem.New(fiber.StatusUnauthorized, "invalid_token",
				"the access token has expired; get a new one from POST /v1/auth/token")
		case errors.Is(err, ErrInvalidToken):
			return invalidToken(c, "the access token is invalid")
		case err != nil:
			return toProblem(err)
		}
		c.Locals(tenantKey{}, t)
		c.SetUserContext(ContextWithMerchant(c.UserContext(), t.ID))
		return c.Next()
	}
}

func invalidToken(c *fiber.Ctx, detail string) error {
	c.Set(fiber.HeaderWWWAuthenticate, `Bearer error="invalid_token"`)
	return problem.New(fiber.StatusUnauthorized, "invalid_token", detail)
}

// MerchantID is the authenticated merchant's id, or "" outside
// RequireMerchant.
func MerchantID(c *fiber.Ctx) string {
	t, _ := CurrentTenant(c)
	return t.ID
}

// CurrentTenant is the authenticated tenant (as of at most
// Config.StatusCacheTTL ago).
func CurrentTenant(c *fiber.Ctx) (Tenant, bool) {
	t, ok := c.Locals(tenantKey{}).(Tenant)
	return t, ok
}

// MerchantIDFrom is the authenticated merchant's id carried by ctx, or "".
func MerchantIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(merchantCtxKey{}).(string)
	return id
}

// ContextWithMerchant returns ctx carrying the merchant id, as
// RequireMerchant does; for tests and background jobs acting for a tenant.
func ContextWithMerchant(ctx context.Context, merchantID string) context.Context {
	return context.WithValue(ctx, merchantCtxKey{}, merchantID)
}

// me shows the authenticated tenant.
//
//	@Summary		The authenticated tenant
//	@Description	The tenant the access token belongs to, with the names of its configured providers.
//	@Tags			merchant
//	@Produce		json
//	@Produce		application/problem+json
//	@Success		200	{object}	TenantResponse
//	@Failure		400	{object}	problem.Problem	"invalid_request: a query parameter (the route takes none)"
//	@Failure		401	{object}	problem.Problem	"invalid_token"
//	@Failure		403	{object}	problem.Problem	"tenant_suspended"
//	@Failure		429	{object}	problem.Problem	"rate_limited (Retry-After)"
//	@Failure		500	{object}	problem.Problem	"internal (quote request_id)"
//	@Failure		503	{object}	problem.Problem	"unavailable: the database could not be reached; retry after Retry-After"
//	@Header			429	{integer}	Retry-After	"seconds"
//	@Security		BearerAuth
//	@ID				getMe
//	@Router			/v1/me [get]
func (h *Handler) me(c *fiber.Ctx) error {
	if err := query.Known(c); err != nil {
		return err // it takes no parameters: one would be ignored
	}
	t, ok := CurrentTenant(c)
	if !ok {
		return invalidToken(c, "a bearer access token is required")
	}
	return c.JSON(tenantResponse(t))
}

// --- helpers ---

// toProblem maps service errors to problems; anything else is returned as
// is, for the app's error handler to answer 500.
func toProblem(err error) error {
	var ve *ValidationError
	switch {
	case errors.As(err, &ve):
		fields := make([]problem.FieldError, len(ve.Fields))
		for i, f := range ve.Fields {
			fields[i] = problem.FieldError{Field: f.Field, Reason: f.Reason}
		}
		return problem.Invalid(fields...)
	case errors.Is(err, ErrNotFound):
		return problem.New(fiber.StatusNotFound, "tenant_not_found", "no tenant with this id")
	case errors.Is(err, ErrSuspended):
		return problem.New(fiber.StatusForbidden, "tenant_suspended", "the tenant is suspended")
	}
	return err
}

func noStore(c *fiber.Ctx) {
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(fiber.HeaderPragma, "no-cache")
}

func toSecrets(m map[string]map[string]string) map[string]providers.Secrets {
	if m == nil {
		return nil
	}
	out := make(map[string]providers.Secrets, len(m))
	for k, v := range m {
		out[k] = providers.Secrets(v) // nil (JSON null) stays nil: remove
	}
	return out
}

// decodeJSON strictly decodes one JSON object: unknown fields, trailing data
// and wrong types are 400s naming the field. Reasons never echo the body,
// which may hold secrets.
func decodeJSON(c *fiber.Ctx, dst any) *problem.Problem {
	if bad := reqjson.Labelled(c.Request().Header.ContentType(), c.Body()); bad != nil {
		return bad
	}
	trimmed := bytes.TrimSpace(c.Body())
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return problem.Invalid(problem.FieldError{Field: "body", Reason: "must be a JSON object"})
	}
	// Strict names and bytes first (no duplicate or case-folded members,
	// only UTF-8), so that nothing reads another value than the one
	// applied; unknown names, NULs and syntax keep the field-level answers
	// below.
	var e *reqjson.Error
	if err := reqjson.Check(trimmed, dst); errors.As(err, &e) &&
		(e.Kind == reqjson.Duplicate || e.Kind == reqjson.CaseFolded || e.Kind == reqjson.Encoding) {
		return problem.Invalid(problem.FieldError{Field: "body", Reason: e.Reason})
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonProblem(trimmed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return problem.Invalid(problem.FieldError{Field: "body", Reason: "must hold a single JSON object"})
	}
	return nil
}

func jsonProblem(body []byte, err error) *problem.Problem {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return problem.Invalid(problem.FieldError{Field: "body", Reason: fmt.Sprintf("malformed JSON at byte %d", syn.Offset)})
	case errors.As(err, &typ):
		field := reqjson.TypeErrorField(body, err)
		if field == "" {
			field = "body"
		}
		return problem.Invalid(problem.FieldError{Field: field, Reason: "must be " + reqjson.JSONType(typ.Type)})
	case errors.Is(err, io.ErrUnexpectedEOF):
		return problem.Invalid(problem.FieldError{Field: "body", Reason: "malformed JSON: unexpected end"})
	}
	// encoding/json has no typed error for unknown fields.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		return problem.Invalid(problem.FieldError{Field: name, Reason: "unknown field"})
	}
	return problem.Invalid(problem.FieldError{Field: "body", Reason: "malformed JSON"})
}
