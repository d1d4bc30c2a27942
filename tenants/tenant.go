// Package tenants owns the gateway's merchants: their records, the client
// credentials they exchange for access tokens, and their provider accounts
// (provider secrets encrypted at rest). It serves the admin API
// (/admin/v1/tenants), the token endpoint (POST /v1/auth/token), the
// middleware that authenticates every merchant route, and GET /v1/me.
//
// Invariants:
//
//   - A merchant id is only ever taken from a verified token (sub claim),
//     never from a body or header.
//   - Client secrets are stored as an HMAC-SHA256 under a key derived from
//     MASTER_KEY and compared in constant time; a rotated secret stops
//     working at once, and so do the tokens issued for it.
//   - Provider secrets are sealed with AES-256-GCM (key derived from
//     MASTER_KEY, additional data = tenant id + provider), are write-only,
//     and never appear in a response, a log line or a String().
//   - A suspended tenant's tokens stop working within Config.StatusCacheTTL
//     (at most 2s) on every instance, and at once on the instance that
//     suspended it.
package tenants

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/oncepay/gateway/providers"
)

// Tenant statuses.
const (
	StatusActive    = "active"
	StatusSuspended = "suspended"
)

// Errors the service returns. Handlers map them to problem codes.
var (
	// ErrNotFound: no tenant with that id.
	ErrNotFound = errors.New("tenants: tenant not found")
	// ErrProviderNotConfigured: the tenant has no account for that provider
	// (and the provider cannot run without secrets).
	ErrProviderNotConfigured = errors.New("tenants: provider not configured for tenant")
	// ErrInvalidClient: unknown client id, wrong or revoked secret.
	ErrInvalidClient = errors.New("tenants: invalid client credentials")
	// ErrInvalidToken: the access token does not verify, has expired, or
	// names a tenant or credential that no longer exists.
	ErrInvalidToken = errors.New("tenants: invalid access token")
	// ErrTokenExpired: an access token the gateway signed has expired
	// (wraps ErrInvalidToken). Told apart because a client that reads it
	// fetches a new token, while any other refusal is a bug to fix; only a
	// token whose signature verified is ever called expired, so it tells
	// an outsider nothing.
	ErrTokenExpired = fmt.Errorf("%w: expired", ErrInvalidToken)
	// ErrSuspended: the tenant is suspended.
	ErrSuspended = errors.New("tenants: tenant suspended")
)

// AlreadyCreatedError: a Create under an idempotency key that created a
// tenant already. It carries the tenant's id, never its credentials: the
// client secret exists in clear only in the first answer (only its hash is
// stored), so a replay cannot show it again.
type AlreadyCreatedError struct{ TenantID string }

func (e *AlreadyCreatedError) Error() string {
	return "tenants: this idempotency key already created tenant " + e.TenantID
}

// MaxIdempotencyKeyLen is the longest Idempotency-Key a creation takes,
// as on the merchant routes.
const MaxIdempotencyKeyLen = 255

// ValidIdempotencyKey reports whether k is 1 to MaxIdempotencyKeyLen
// printable ASCII characters, the merchant routes' rule. A leading double
// quote is refused rather than read as an RFC 8941 sf-string: the bare
// and quoted forms could not be told apart.
func ValidIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > MaxIdempotencyKeyLen || k[0] == '"' {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// FieldError names one invalid field of a request.
type FieldError struct {
	Field  string
	Reason string
}

// ValidationError is returned when parameters fail validation; it lists
// every invalid field. Reasons never quote a secret.
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Reason
	}
	return "tenants: invalid: " + strings.Join(parts, "; ")
}

func (e *ValidationError) add(field, reason string) {
	e.Fields = append(e.Fields, FieldError{Field: field, Reason: reason})
}

func (e *ValidationError) orNil() error {
	if e == nil || len(e.Fields) == 0 {
		return nil
	}
	return e
}

// Tenant is a merchant as the rest of the gateway sees it. It holds no
// secrets. Providers lists the provider names the tenant can charge through
// (its provider accounts, plus registered providers that need no secrets,
// such as the simulator), sorted.
type Tenant struct {
	ID              string
	Name            string
	Status          string
	DefaultProvider string
	Providers       []string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// Active reports whether the tenant may use the merchant API.
func (t Tenant) Active() bool { return t.Status == StatusActive }

func (t Tenant) clone() Tenant {
	t.Providers = slices.Clone(t.Providers)
	return t
}

// Credentials are a client id and its secret. The secret exists in clear
// only in the value returned by Create or RotateCredentials, to be shown
// once; it is redacted from every String, GoString and log value.
type Credentials struct {
	TenantID     string
	ClientID     string
	ClientSecret string
	CreatedAt    time.Time
}

// String redacts the secret.
func (c Credentials) String() string {
	return fmt.Sprintf("tenants.Credentials{TenantID:%s ClientID:%s ClientSecret:[redacted]}", c.TenantID, c.ClientID)
}

// GoString redacts the secret from %#v.
func (c Credentials) GoString() string { return c.String() }

// LogValue redacts the secret from slog output.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("tenant_id", c.TenantID), slog.String("client_id", c.ClientID))
}

// CreateParams onboard a tenant. Status defaults to active. DefaultProvider
// must be registered and configured: present in Providers, or a provider
// that needs no secrets. Providers maps provider names to their secrets.
//
// IdempotencyKey, when set, names this creation: a second Create under it
// creates nothing and returns an *AlreadyCreatedError naming the tenant
// the first made.
type CreateParams struct {
	Name            string
	Status          string
	DefaultProvider string
	Providers       map[string]providers.Secrets
	IdempotencyKey  string
}

// String redacts the provider secrets.
func (p CreateParams) String() string {
	return fmt.Sprintf("tenants.CreateParams{Name:%q Status:%q DefaultProvider:%q Providers:%v}",
		p.Name, p.Status, p.DefaultProvider, secretNames(p.Providers))
}

// GoString redacts the provider secrets from %#v.
func (p CreateParams) GoString() string { return p.String() }

// LogValue redacts the provider secrets from slog output.
func (p CreateParams) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", p.Name), slog.String("default_provider", p.DefaultProvider),
		slog.Any("providers", secretNames(p.Providers)))
}

// UpdateParams change a tenant; nil fields are left alone. In Providers, a
// name mapped to non-nil secrets creates or replaces that provider account;
// a name mapped to nil removes it.
type UpdateParams struct {
	Name            *string
	Status          *string
	DefaultProvider *string
	Providers       map[string]providers.Secrets
}

// String redacts the provider secrets.
func (p UpdateParams) String() string {
	return fmt.Sprintf("tenants.UpdateParams{Name:%s Status:%s DefaultProvider:%s Providers:%v}",
		deref(p.Name), deref(p.Status), deref(p.DefaultProvider), secretNames(p.Providers))
}

// GoString redacts the provider secrets from %#v.
func (p UpdateParams) GoString() string { return p.String() }

// LogValue redacts the provider secrets from slog output.
func (p UpdateParams) LogValue() slog.Value {
	return slog.GroupValue(slog.Any("providers", secretNames(p.Providers)))
}

// Token is an issued access token. AccessToken is a bearer credential and
// is redacted from String, GoString and log values.
type Token struct {
	AccessToken string
	TokenType   string // always "Bearer"
	ExpiresIn   time.Duration
	ExpiresAt   time.Time
}

// String redacts the token.
func (t Token) String() string {
	return fmt.Sprintf("tenants.Token{TokenType:%s ExpiresAt:%s AccessToken:[redacted]}", t.TokenType, t.ExpiresAt.Format(time.RFC3339))
}

// GoString redacts the token from %#v.
func (t Token) GoString() string { return t.String() }

// LogValue redacts the token from slog output.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(slog.String("token_type", t.TokenType), slog.Time("expires_at", t.ExpiresAt))
}

// ListParams select one page of tenants, oldest first. Limit is 1..100
// (0 means DefaultPageSize); Cursor is the NextCursor of the previous page.
type ListParams struct {
	Limit  int
	Cursor string
	// Status keeps only tenants in it (active or suspended; "": all).
	Status string
	// Name keeps only tenants whose name contains it, case folded ("": all).
	Name string
}

// Page is one page of tenants. NextCursor is empty on the last page.
type Page struct {
	Tenants    []Tenant
	NextCursor string
}

// Page sizes for List.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// secretNames lists the provider names of a secrets map, sorted, marking
// removals, so params can be printed without their values.
func secretNames(m map[string]providers.Secrets) []string {
	out := make([]string, 0, len(m))
	for name, s := range m {
		if s == nil {
			name += "(remove)"
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q", *s)
}
