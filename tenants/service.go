package tenants

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/audit"
	"github.com/oncepay/gateway/app/reqtime"
	"github.com/oncepay/gateway/providers"
)

// Config is what the service needs from the gateway's configuration.
type Config struct {
	MasterKey      []byte        // 32 bytes: seals provider secrets, keys the client-secret hash
	MasterPrevious []byte        // optional: the master key being rotated out, still opens and verifies
	AdminAPIKey    string        // at least 16 bytes
	AdminPrevious  string        // optional: the admin key being rotated out, still accepted
	JWTSecret      []byte        // at least 32 bytes
	JWTPrevious    []byte        // optional: the key before the last rotation, still verifies
	Issuer         string        // "oncepay" when empty
	Audience       string        // "oncepay-merchant-api" when empty
	TokenTTL       time.Duration // 15m when zero
	StatusCacheTTL time.Duration // 0..2s; 0 reads the tenant on every request
	// Logger receives the service's events (never a secret); slog.Default()
	// when nil.
	Logger *slog.Logger
	// Now is the clock, for tests; time.Now when nil.
	Now func() time.Time
}

// String redacts every key.
func (c Config) String() string {
	return fmt.Sprintf("tenants.Config{Issuer:%q Audience:%q TokenTTL:%s StatusCacheTTL:%s MasterKey:[redacted] MasterPrevious:[redacted] AdminAPIKey:[redacted] AdminPrevious:[redacted] JWTSecret:[redacted] JWTPrevious:[redacted]}",
		c.Issuer, c.Audience, c.TokenTTL, c.StatusCacheTTL)
}

// GoString redacts every key from %#v.
func (c Config) GoString() string { return c.String() }

// LogValue redacts every key from slog output.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("issuer", c.Issuer), slog.String("audience", c.Audience),
		slog.Duration("token_ttl", c.TokenTTL), slog.Duration("status_cache_ttl", c.StatusCacheTTL))
}

// MaxStatusCacheTTL bounds how long a suspension may take to reach every
// instance.
const MaxStatusCacheTTL = 2 * time.Second

// Service manages tenants, credentials, provider accounts and tokens. It is
// safe for concurrent use.
type Service struct {
	db     *gorm.DB
	reg    *providers.Registry
	cfg    Config
	keys   *keyring
	signer *signer
	cache  *ttlCache[principal]
	// accounts keeps built provider accounts: decrypting secrets and
	// reading two rows for every charge would double a payment's reads.
	accounts *ttlCache[providers.Provider]
	log      *slog.Logger
	now      func() time.Time
	// dummyHash is compared against when a client id is unknown, so a
	// miss costs the same as a wrong secret.
	dummyHash []byte
}

// NewService validates cfg and returns the service.
func NewService(db *gorm.DB, reg *providers.Registry, cfg Config) (*Service, error) {
	if db == nil || reg == nil {
		return nil, errors.New("tenants: NewService needs a database and a provider registry")
	}
	if cfg.Issuer == "" {
		cfg.Issuer = "oncepay"
	}
	if cfg.Audience == "" {
		cfg.Audience = "oncepay-merchant-api"
	}
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = 15 * time.Minute
	}
	switch {
	case len(cfg.AdminAPIKey) < 16:
		return nil, errors.New("tenants: admin API key must be at least 16 bytes")
	case len(cfg.AdminPrevious) > 0 && len(cfg.AdminPrevious) < 16:
		return nil, errors.New("tenants: previous admin API key must be at least 16 bytes")
	case len(cfg.JWTSecret) < 32:
		return nil, errors.New("tenants: JWT secret must be at least 32 bytes")
	case len(cfg.JWTPrevious) > 0 && len(cfg.JWTPrevious) < 32:
		return nil, errors.New("tenants: previous JWT secret must be at least 32 bytes")
	case cfg.TokenTTL < time.Minute || cfg.TokenTTL > 24*time.Hour:
		return nil, errors.New("tenants: token TTL must be between 1m and 24h")
	case cfg.StatusCacheTTL < 0 || cfg.StatusCacheTTL > MaxStatusCacheTTL:
		return nil, fmt.Errorf("tenants: status cache TTL must be between 0 and %s", MaxStatusCacheTTL)
	}
	keys, err := newKeyring(cfg.MasterKey, cfg.MasterPrevious)
	if err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Service{
		db: db, reg: reg, cfg: cfg, keys: keys,
		signer: newSigner(cfg, now),
		// The caches time a length (StatusCacheTTL) with this process's
		// monotonic clock, not now: the database-corrected clock steps when
		// its offset is measured again, and a step back of an hour kept a
		// suspended tenant's or a revoked credential's entry an hour.
		cache:     newTTLCache[principal](cfg.StatusCacheTTL, time.Now),
		accounts:  newTTLCache[providers.Provider](cfg.StatusCacheTTL, time.Now),
		log:       log,
		now:       now,
		dummyHash: mac(keys.hashKeys[0], newClientSecret()),
	}, nil
}

// stamp is the service clock in UTC at microsecond precision, the finest
// PostgreSQL keeps, so keyset cursors round-trip exactly.
func (s *Service) stamp() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// Create onboards a tenant with its provider accounts and first
// credentials. Errors: *ValidationError.
func (s *Service) Create(ctx context.Context, p CreateParams) (Tenant, Credentials, error) {
	v := &ValidationError{}
	name := strings.TrimSpace(p.Name)
	checkName(v, name)
	status := p.Status
	if status == "" {
		status = StatusActive
	}
	checkStatus(v, status)
	s.checkAccounts(v, p.Providers)
	for _, name := range sortedKeys(p.Providers) {
		if p.Providers[name] == nil && s.reg.Has(name) {
			// null removes an account on update; a new tenant has none,
			// and the answer and the audit record list only accounts made.
			v.add("providers."+name, "must be an object of secrets (null removes an account, and a new tenant has none)")
		}
	}
	if p.DefaultProvider == "" {
		v.add("default_provider", "is required")
	} else if reason := s.defaultProblem(p.DefaultProvider, p.Providers[p.DefaultProvider] != nil); reason != "" {
		v.add("default_provider", reason)
	}
	if err := v.orNil(); err != nil {
		return Tenant{}, Credentials{}, err
	}

	at := s.stamp()
	row := tenantRow{ID: newTenantID(), Name: name, Status: status, DefaultProvider: p.DefaultProvider, CreatedAt: at, UpdatedAt: at}
	creds := Credentials{TenantID: row.ID, ClientID: newClientID(), ClientSecret: newClientSecret(), CreatedAt: at}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if p.IdempotencyKey != "" {
			claimed, err := claimCreateKey(tx, p.IdempotencyKey, row.ID, at)
			if err != nil {
				return err
			}
			if !claimed {
				id, err := createdUnder(tx, p.IdempotencyKey)
				if err != nil {
					return err
				}
				return &AlreadyCreatedError{TenantID: id}
			}
		}
		if err := insertTenant(tx, &row); err != nil {
			return err
		}
		if err := s.writeAccounts(tx, row.ID, p.Providers, at); err != nil {
			return err
		}
		hash, keyID := s.keys.hashSecret(creds.ClientSecret)
		if err := insertCredential(tx, &credentialRow{ClientID: creds.ClientID, TenantID: row.ID,
			SecretHash: hash, CreatedAt: at}, keyID); err != nil {
			return err
		}
		after := auditView(s.toTenant(row, sortedKeys(p.Providers)))
		after.ClientID = creds.ClientID
		return audit.Record(ctx, tx, audit.Change{Action: audit.TenantCreated, TargetType: "tenant",
			TargetID: row.ID, TenantID: row.ID, After: after})
	})
	var again *AlreadyCreatedError
	if errors.As(err, &again) {
		s.log.InfoContext(ctx, "tenant creation replayed: nothing created", "tenant_id", again.TenantID)
		return Tenant{}, Credentials{}, again
	}
	if err != nil {
		return Tenant{}, Credentials{}, fmt.Errorf("tenants: create: %w", err)
	}
	t := s.toTenant(row, sortedKeys(p.Providers))
	s.log.InfoContext(ctx, "tenant created", "tenant_id", t.ID, "client_id", creds.ClientID,
		"default_provider", t.DefaultProvider, "providers", t.Providers)
	return t, creds, nil
}

// auditedTenant is what the audit log keeps of a tenant: its non-secret
// fields (never a secret, a hash or a provider secret's value).
type auditedTenant struct {
	Name            string   `json:"name"`
	Status          string   `json:"status"`
	DefaultProvider string   `json:"default_provider"`
	Providers       []string `json:"providers"`
	ClientID        string   `json:"client_id,omitempty"`
}

func auditView(t Tenant) auditedTenant {
	return auditedTenant{Name: t.Name, Status: t.Status, DefaultProvider: t.DefaultProvider, Providers: t.Providers}
}

// recordUpdate writes the events of an update: a suspension or a
// reactivation is its own action, provider secrets changed another (by
// name), and any other change an update.
func recordUpdate(ctx context.Context, tx *gorm.DB, before, after Tenant, secretsChanged []string) error {
	b, a := auditView(before), auditView(after)
	rec := func(action string, note string) error {
		return audit.Record(ctx, tx, audit.Change{Action: action, TargetType: "tenant", TargetID: after.ID,
			TenantID: after.ID, Before: b, After: a, Note: note})
	}
	if before.Status != after.Status {
		action := audit.TenantSuspended
		if after.Status == StatusActive {
			action = audit.TenantReactivated
		}
		if err := rec(action, ""); err != nil {
			return err
		}
	}
	if len(secretsChanged) > 0 {
		if err := rec(audit.ProviderSecretsSet, "providers: "+strings.Join(secretsChanged, ", ")); err != nil {
			return err
		}
	}
	if b.Name != a.Name || b.DefaultProvider != a.DefaultProvider || (before.Status == after.Status && len(secretsChanged) == 0) {
		return rec(audit.TenantUpdated, "")
	}
	return nil
}

// Get returns the tenant. Errors: ErrNotFound.
func (s *Service) Get(ctx context.Context, id string) (Tenant, error) {
	db := s.db.WithContext(ctx)
	row, err := getTenant(db, id, false)
	if err != nil {
		return Tenant{}, err
	}
	names, err := accountNames(db, id)
	if err != nil {
		return Tenant{}, err
	}
	return s.toTenant(row, names[id]), nil
}

// List returns one page of tenants, oldest first. Errors: *ValidationError
// (limit, cursor).
func (s *Service) List(ctx context.Context, p ListParams) (Page, error) {
	v := &ValidationError{}
	limit := p.Limit
	if limit == 0 {
		limit = DefaultPageSize
	}
	if limit < 1 || limit > MaxPageSize {
		v.add("limit", fmt.Sprintf("must be between 1 and %d", MaxPageSize))
	}
	if p.Status != "" {
		checkStatus(v, p.Status)
	}
	if p.Name != "" {
		switch {
		case utf8.RuneCountInString(p.Name) > 200:
			v.add("name", "must be at most 200 characters")
		case !printable(p.Name):
			v.add("name", "must be printable text")
		}
	}
	var after *pageKey
	if p.Cursor != "" {
		k, err := decodeCursor(p.Cursor)
		if err != nil {
			v.add("cursor", "is not a cursor this API returned")
		}
		after = &k
	}
	if err := v.orNil(); err != nil {
		return Page{}, err
	}
	db := s.db.WithContext(ctx)
	rows, err := listTenants(db, tenantFilter{status: p.Status, name: p.Name}, after, limit+1)
	if err != nil {
		return Page{}, fmt.Errorf("tenants: list: %w", err)
	}
	var page Page
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[len(rows)-1]
		page.NextCursor = encodeCursor(pageKey{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	names, err := accountNames(db, ids...)
	if err != nil {
		return Page{}, fmt.Errorf("tenants: list: %w", err)
	}
	page.Tenants = make([]Tenant, len(rows))
	for i, r := range rows {
		page.Tenants[i] = s.toTenant(r, names[r.ID])
	}
	return page, nil
}

// Update changes a tenant. Errors: ErrNotFound, *ValidationError.
func (s *Service) Update(ctx context.Context, id string, p UpdateParams) (Tenant, error) {
	v := &ValidationError{}
	cols := map[string]any{}
	if p.Name != nil {
		name := strings.TrimSpace(*p.Name)
		checkName(v, name)
		cols["name"] = name
	}
	if p.Status != nil {
		checkStatus(v, *p.Status)
		cols["status"] = *p.Status
	}
	if p.DefaultProvider != nil {
		if *p.DefaultProvider == "" {
			v.add("default_provider", "must not be empty")
		}
		cols["default_provider"] = *p.DefaultProvider
	}
	s.checkAccounts(v, p.Providers)
	if err := v.orNil(); err != nil {
		return Tenant{}, err
	}

	at := s.stamp()
	var out Tenant
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		row, err := getTenant(tx, id, true)
		if err != nil {
			return err
		}
		names, err := accountNames(tx, id)
		if err != nil {
			return err
		}
		before := s.toTenant(row, names[id])
		have := map[string]bool{}
		for _, n := range names[id] {
			have[n] = true
		}
		for n, sec := range p.Providers {
			have[n] = sec != nil
		}
		// The default must stay usable when it or the accounts change; a
		// status-only change must work even for a tenant in a bad state.
		if p.DefaultProvider != nil || len(p.Providers) > 0 {
			def := row.DefaultProvider
			if p.DefaultProvider != nil {
				def = *p.DefaultProvider
			}
			if reason := s.defaultProblem(def, have[def]); reason != "" {
				return &ValidationError{Fields: []FieldError{{Field: "default_provider", Reason: reason}}}
			}
		}
		if len(cols) > 0 || len(p.Providers) > 0 {
			cols["updated_at"] = at
			if err := updateTenant(tx, id, cols); err != nil {
				return err
			}
		}
		if err := s.writeAccounts(tx, id, p.Providers, at); err != nil {
			return err
		}
		row, err = getTenant(tx, id, false)
		if err != nil {
			return err
		}
		names, err = accountNames(tx, id)
		if err != nil {
			return err
		}
		out = s.toTenant(row, names[id])
		return recordUpdate(ctx, tx, before, out, secretNames(p.Providers))
	})
	if err != nil {
		var ve *ValidationError
		if errors.Is(err, ErrNotFound) || errors.As(err, &ve) {
			return Tenant{}, err
		}
		return Tenant{}, fmt.Errorf("tenants: update: %w", err)
	}
	s.cache.forget(id)
	s.accounts.forget(id)
	s.log.InfoContext(ctx, "tenant updated", "tenant_id", id, "status", out.Status,
		"default_provider", out.DefaultProvider, "providers_changed", secretNames(p.Providers))
	return out, nil
}

// RotateCredentials issues new credentials for the tenant and revokes the
// old ones at once, together with every token issued for them. Errors:
// ErrNotFound.
func (s *Service) RotateCredentials(ctx context.Context, tenantID string) (Credentials, error) {
	at := s.stamp()
	creds := Credentials{TenantID: tenantID, ClientID: newClientID(), ClientSecret: newClientSecret(), CreatedAt: at}
	var revoked int64
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if _, err := getTenant(tx, tenantID, true); err != nil {
			return err
		}
		n, err := revokeCredentials(tx, tenantID, at)
		if err != nil {
			return err
		}
		revoked = n
		hash, keyID := s.keys.hashSecret(creds.ClientSecret)
		if err := insertCredential(tx, &credentialRow{ClientID: creds.ClientID, TenantID: tenantID,
			SecretHash: hash, CreatedAt: at}, keyID); err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.Change{Action: audit.CredentialsRotated, TargetType: "tenant",
			TargetID: tenantID, TenantID: tenantID,
			After: map[string]any{"client_id": creds.ClientID, "credentials_revoked": n}})
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Credentials{}, err
		}
		return Credentials{}, fmt.Errorf("tenants: rotate credentials: %w", err)
	}
	s.cache.forget(tenantID)
	s.log.InfoContext(ctx, "credentials rotated", "tenant_id", tenantID, "client_id", creds.ClientID, "revoked", revoked)
	return creds, nil
}

// IssueToken exchanges client credentials for an access token. Errors:
// ErrInvalidClient (unknown id, wrong or revoked secret), ErrSuspended.
func (s *Service) IssueToken(ctx context.Context, clientID, clientSecret string) (Token, error) {
	db := s.db.WithContext(ctx)
	cred, err := getCredential(db, clientID)
	if errors.Is(err, errCredentialNotFound) {
		s.keys.secretMatches(clientSecret, s.dummyHash)
		s.log.InfoContext(ctx, "token refused", "reason", "unknown client")
		return Token{}, ErrInvalidClient
	}
	if err != nil {
		return Token{}, fmt.Errorf("tenants: issue token: %w", err)
	}
	ok, keyID := s.keys.secretMatches(clientSecret, cred.SecretHash)
	if !ok {
		s.log.InfoContext(ctx, "token refused", "reason", "wrong secret", "client_id", cred.ClientID)
		return Token{}, ErrInvalidClient
	}
	if cred.RevokedAt == nil {
		s.rehashIfStale(ctx, cred, clientSecret, keyID)
	}
	if cred.RevokedAt != nil {
		s.log.InfoContext(ctx, "token refused", "reason", "revoked credential", "client_id", cred.ClientID)
		return Token{}, ErrInvalidClient
	}
	row, err := getTenant(db, cred.TenantID, false)
	if err != nil {
		return Token{}, fmt.Errorf("tenants: issue token: %w", err)
	}
	if row.Status != StatusActive {
		s.log.InfoContext(ctx, "token refused", "reason", "tenant suspended", "merchant_id", row.ID)
		return Token{}, ErrSuspended
	}
	raw, exp, err := s.signer.sign(row.ID, cred.ClientID)
	if err != nil {
		return Token{}, err
	}
	s.log.InfoContext(ctx, "token issued", "merchant_id", row.ID, "client_id", cred.ClientID, "expires_at", exp)
	return Token{AccessToken: raw, TokenType: "Bearer", ExpiresIn: s.cfg.TokenTTL, ExpiresAt: exp}, nil
}

// rehashIfStale stores a client secret's hash again under the current
// master key when it matched under another (matched is that key's id),
// and records the key of a hash made under the current one before ids
// were recorded, so that after a rotation the previous key can be retired
// without asking every merchant for new credentials, and Reseal can tell
// when that is. It replaces only the hash it verified: a credential
// rotated meanwhile keeps its new one. A failure costs nothing but a retry
// at the next token request, so it is logged and the token still issued.
func (s *Service) rehashIfStale(ctx context.Context, cred credentialRow, secret, matched string) {
	rehash := matched != s.keys.currentKey()
	if !rehash {
		recorded, err := credentialKey(s.db.WithContext(ctx), cred.ClientID)
		if err != nil {
			s.log.WarnContext(ctx, "client secret's hash key not read; tried again at its next token request",
				"client_id", cred.ClientID, "err", err)
			return
		}
		if recorded == matched {
			return
		}
	}
	hash, keyID := s.keys.hashSecret(secret)
	n, err := replaceSecretHash(s.db.WithContext(ctx), cred.ClientID, cred.SecretHash, hash, keyID)
	if err != nil {
		s.log.WarnContext(ctx, "client secret not rehashed under the current MASTER_KEY; tried again at its next token request",
			"client_id", cred.ClientID, "err", err)
		return
	}
	switch {
	case n == 1 && rehash:
		s.log.InfoContext(ctx, "client secret rehashed under the current MASTER_KEY", "client_id", cred.ClientID)
	case n == 1:
		s.log.DebugContext(ctx, "client secret's hash key recorded", "client_id", cred.ClientID)
	}
}

// Authenticate verifies an access token and returns its tenant. Errors:
// ErrInvalidToken (bad token, unknown tenant, revoked credential),
// ErrSuspended. The tenant's status is at most StatusCacheTTL old.
func (s *Service) Authenticate(ctx context.Context, raw string) (Tenant, error) {
	c, err := s.signer.parse(raw)
	if err != nil {
		s.log.DebugContext(ctx, "token rejected", "reason", err.Error())
		if errors.Is(err, ErrTokenExpired) {
			return Tenant{}, ErrTokenExpired
		}
		return Tenant{}, ErrInvalidToken
	}
	p, ok, epoch := s.cache.get(c.Subject, c.ClientID)
	if !ok {
		p, err = s.loadPrincipal(ctx, c.Subject, c.ClientID)
		if err != nil {
			return Tenant{}, err
		}
		s.cache.put(c.Subject, c.ClientID, p, epoch)
	}
	switch {
	case !p.found:
		s.log.DebugContext(ctx, "token rejected", "reason", "tenant or credential gone", "merchant_id", c.Subject)
		return Tenant{}, ErrInvalidToken
	case !p.tenant.Active():
		return Tenant{}, ErrSuspended
	}
	return p.tenant.clone(), nil
}

func (s *Service) loadPrincipal(ctx context.Context, tenantID, clientID string) (principal, error) {
	db := s.db.WithContext(ctx)
	cred, err := getCredential(db, clientID)
	if errors.Is(err, errCredentialNotFound) {
		return principal{}, nil
	}
	if err != nil {
		return principal{}, fmt.Errorf("tenants: authenticate: %w", err)
	}
	if cred.TenantID != tenantID || cred.RevokedAt != nil {
		return principal{}, nil
	}
	t, err := s.Get(ctx, tenantID)
	if errors.Is(err, ErrNotFound) {
		return principal{}, nil
	}
	if err != nil {
		return principal{}, fmt.Errorf("tenants: authenticate: %w", err)
	}
	return principal{found: true, tenant: t}, nil
}

// Provider builds the tenant's adapter for the named provider from its
// decrypted account secrets. A registered provider that needs no secrets
// (the simulator) works without an account. Errors: ErrNotFound (no such
// tenant), ErrProviderNotConfigured, or the registry's errors.
func (s *Service) Provider(ctx context.Context, tenantID, name string) (providers.Provider, error) {
	p, ok, epoch := s.accounts.get(tenantID, name)
	if ok {
		return p, nil
	}
	p, err := s.provider(ctx, tenantID, name)
	if err == nil {
		s.accounts.put(tenantID, name, p, epoch)
	}
	return p, err
}

func (s *Service) provider(ctx context.Context, tenantID, name string) (providers.Provider, error) {
	db := s.db.WithContext(ctx)
	acct, err := getAccount(db, tenantID, name)
	switch {
	case errors.Is(err, errAccountNotFound):
		if _, err := getTenant(db, tenantID, false); err != nil {
			return nil, err
		}
		if !s.needsNoSecrets(name) {
			return nil, fmt.Errorf("%w: %q", ErrProviderNotConfigured, name)
		}
		return s.reg.New(name, providers.Secrets{})
	case err != nil:
		return nil, fmt.Errorf("tenants: provider account: %w", err)
	}
	secrets, err := s.keys.open(tenantID, name, acct.Secrets)
	if err != nil {
		return nil, fmt.Errorf("tenants: provider account %s of %s: %w", name, tenantID, err)
	}
	return s.reg.New(name, secrets)
}

// adminKeyValid compares a presented admin key in constant time, with
// ADMIN_API_KEY and, during a rotation, ADMIN_API_KEY_PREVIOUS (both
// compared whatever the first gives, so the time says nothing). previous
// reports that the previous key was the one presented.
func (s *Service) adminKeyValid(key string) (ok, previous bool) {
	if key == "" {
		return false, false
	}
	cur := equalConstantTime(key, s.cfg.AdminAPIKey)
	prev := s.cfg.AdminPrevious != "" && equalConstantTime(key, s.cfg.AdminPrevious)
	return cur || prev, prev && !cur
}

func (s *Service) writeAccounts(tx *gorm.DB, tenantID string, accts map[string]providers.Secrets, at time.Time) error {
	for _, name := range sortedKeys(accts) {
		sec := accts[name]
		if sec == nil {
			if err := deleteAccount(tx, tenantID, name); err != nil {
				return err
			}
			continue
		}
		blob, err := s.keys.seal(tenantID, name, sec)
		if err != nil {
			return err
		}
		if err := upsertAccount(tx, &accountRow{TenantID: tenantID, Provider: name, Secrets: blob, CreatedAt: at, UpdatedAt: at}); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) toTenant(r tenantRow, accounts []string) Tenant {
	names := slices.Clone(accounts)
	for _, n := range s.reg.Names() {
		if s.needsNoSecrets(n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return Tenant{
		ID: r.ID, Name: r.Name, Status: r.Status, DefaultProvider: r.DefaultProvider,
		Providers: slices.Compact(names),
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

func (s *Service) needsNoSecrets(name string) bool {
	return s.reg.Validate(name, providers.Secrets{}) == nil
}

// defaultProblem says why name cannot be the default provider, or "".
func (s *Service) defaultProblem(name string, hasAccount bool) string {
	switch {
	case !s.reg.Has(name):
		return "unknown provider; one of: " + strings.Join(s.reg.Names(), ", ")
	case !hasAccount && !s.needsNoSecrets(name):
		return "provider is not configured for this tenant; add its secrets under providers"
	}
	return ""
}

// Limits on provider secrets, so an account row stays small.
const (
	maxSecretKeys   = 16
	maxSecretKeyLen = 64
	maxSecretValLen = 4096
)

func (s *Service) checkAccounts(v *ValidationError, accts map[string]providers.Secrets) {
	for _, name := range sortedKeys(accts) {
		field := "providers." + name
		sec := accts[name]
		if !s.reg.Has(name) {
			v.add(field, "unknown provider; one of: "+strings.Join(s.reg.Names(), ", "))
			continue
		}
		if sec == nil {
			continue // removal
		}
		if len(sec) > maxSecretKeys {
			v.add(field, fmt.Sprintf("at most %d secrets", maxSecretKeys))
			continue
		}
		bad := false
		for k, val := range sec {
			// A control character (a newline pasted in with the key) can
			// go in no provider's request: refused here, not found out on
			// the first charge.
			if k == "" || len(k) > maxSecretKeyLen || len(val) > maxSecretValLen || !printable(k) || !printable(val) {
				bad = true
			}
		}
		if bad {
			v.add(field, fmt.Sprintf("secret names must be 1-%d bytes and values at most %d bytes, both printable text (no control characters)", maxSecretKeyLen, maxSecretValLen))
			continue
		}
		if err := s.reg.Validate(name, sec); err != nil {
			v.add(field, secretsReason(err))
		}
	}
}

// secretsReason turns a registry validation error into a reason. The
// registry names missing keys, never values.
func secretsReason(err error) string {
	if errors.Is(err, providers.ErrBadSecrets) {
		if _, missing, ok := strings.Cut(err.Error(), "missing "); ok {
			return "missing required secrets: " + missing
		}
		if _, takes, ok := strings.Cut(err.Error(), "unknown names; it takes "); ok {
			return "unknown secret names; this provider takes: " + takes
		}
	}
	return "invalid secrets"
}

// printable reports whether s is UTF-8 without control characters.
func printable(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
}

func checkName(v *ValidationError, name string) {
	switch {
	case name == "":
		v.add("name", "is required")
	case utf8.RuneCountInString(name) > 200:
		v.add("name", "must be at most 200 characters")
	case !printable(name):
		v.add("name", "must be printable text")
	}
}

func checkStatus(v *ValidationError, status string) {
	if status != StatusActive && status != StatusSuspended {
		v.add("status", "must be active or suspended")
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Cursors are opaque to clients: base64url("<unix micros>.<tenant id>").
func encodeCursor(k pageKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.CreatedAt.UnixMicro(), 10) + "." + k.ID))
}

func decodeCursor(s string) (pageKey, error) {
	errBad := errors.New("bad cursor")
	if len(s) > 128 {
		return pageKey{}, errBad
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return pageKey{}, errBad
	}
	micros, id, ok := strings.Cut(string(b), ".")
	if !ok || !strings.HasPrefix(id, "ten_") || !idChars(id[len("ten_"):]) {
		// Checked here, so a NUL or a byte that is not UTF-8 is the
		// client's 400, never a value the database refuses.
		return pageKey{}, errBad
	}
	n, err := strconv.ParseInt(micros, 10, 64)
	if err != nil || n < 0 {
		return pageKey{}, errBad
	}
	at, err := reqtime.UnixMicro(n)
	if err != nil {
		return pageKey{}, errBad
	}
	return pageKey{CreatedAt: at, ID: id}, nil
}

// idChars reports whether s can be the body of an id the gateway made
// (hex today; letters, digits, '-' and '_' allowed), 1 to 64 bytes.
func idChars(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// principal is what the middleware needs about a token's subject.
type principal struct {
	found  bool // the tenant exists and the credential is live
	tenant Tenant
}

// ttlCache keeps values per (tenant, name) for a TTL ≤ 2s so that a hot
// merchant costs one read per TTL, and a suspension, a rotation or a change
// of provider secrets reaches every instance within it (at once on the
// instance that made it: it forgets the tenant). A TTL of 0 disables it.
type ttlCache[V any] struct {
	ttl time.Duration
	now func() time.Time
	mu  sync.Mutex
	m   map[[2]string]cacheEntry[V]
	// epoch counts forgets. A value read from the database before a forget
	// may be stale (the change that caused the forget happened after the
	// read), so put keeps it only if no forget happened since its get.
	epoch uint64
}

type cacheEntry[V any] struct {
	v       V
	expires time.Time
}

// maxCacheEntries bounds a cache; when full it starts over.
const maxCacheEntries = 10_000

func newTTLCache[V any](ttl time.Duration, now func() time.Time) *ttlCache[V] {
	return &ttlCache[V]{ttl: ttl, now: now, m: map[[2]string]cacheEntry[V]{}}
}

// get returns the cached value, or on a miss the epoch to hand to put.
func (c *ttlCache[V]) get(tenantID, name string) (v V, ok bool, epoch uint64) {
	if c.ttl <= 0 {
		return v, false, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[[2]string{tenantID, name}]
	if !ok || !c.now().Before(e.expires) {
		return v, false, c.epoch
	}
	return e.v, true, c.epoch
}

// put caches v, read from the database after the get that returned epoch.
func (c *ttlCache[V]) put(tenantID, name string, v V, epoch uint64) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch {
		return // forgotten meanwhile: v may predate the change
	}
	if len(c.m) >= maxCacheEntries {
		clear(c.m)
	}
	// The key outlives the request: it must own its bytes. Fiber's route
	// parameters are zero-copy views of a buffer the next request on the
	// connection writes over, so a key made of them would come to name
	// another tenant — and hand that tenant this one's provider account.
	c.m[[2]string{strings.Clone(tenantID), strings.Clone(name)}] = cacheEntry[V]{v: v, expires: c.now().Add(c.ttl)}
}

func (c *ttlCache[V]) forget(tenantID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	for k := range c.m {
		if k[0] == tenantID {
			delete(c.m, k)
		}
	}
}
