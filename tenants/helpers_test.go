package tenants

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/providers"
)

// fakeProvider remembers the secrets it was built with.
type fakeProvider struct {
	name    string
	secrets providers.Secrets
}

func (fakeProvider) Charge(context.Context, providers.ChargeRequest) (providers.Result, error) {
	return providers.Result{Outcome: providers.OutcomeSucceeded}, nil
}

func (fakeProvider) Lookup(context.Context, string) (providers.Result, error) {
	return providers.Result{Outcome: providers.OutcomeNotFound}, nil
}

func (fakeProvider) Refund(context.Context, providers.RefundRequest) (providers.RefundResult, error) {
	return providers.RefundResult{}, providers.ErrNotCharged
}

func (fakeProvider) LookupRefund(context.Context, providers.RefundLookup) (providers.RefundResult, error) {
	return providers.RefundResult{Outcome: providers.OutcomeNotFound}, nil
}

func (fakeProvider) VerifyWebhook(http.Header, []byte) (providers.Event, error) {
	return providers.Event{}, providers.ErrBadSignature
}

func testRegistry() *providers.Registry {
	reg := providers.NewRegistry()
	for name, required := range map[string][]string{
		"simulator": nil,
		"paystack":  {"secret_key"},
		"stripe":    {"secret_key", "webhook_secret"},
	} {
		reg.Register(name, required, func(s providers.Secrets) (providers.Provider, error) {
			return fakeProvider{name: name, secrets: s}, nil
		})
	}
	return reg
}

// clock is an injectable, advanceable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now().UTC()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// syncBuffer collects log output from concurrent goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

var (
	testMasterKey = bytes.Repeat([]byte{0x42}, 32)
	testJWTSecret = []byte("jwt-secret-jwt-secret-jwt-secret-0001")
	testAdminKey  = "admin-key-0123456789abcdef"
)

func testConfig(c *clock, logs *syncBuffer) Config {
	return Config{
		MasterKey:   testMasterKey,
		AdminAPIKey: testAdminKey,
		JWTSecret:   testJWTSecret,
		Issuer:      "oncepay",
		Audience:    "oncepay-merchant-api",
		TokenTTL:    15 * time.Minute,
		Logger:      slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:         c.Now,
	}
}

// env is one gateway-like app over one test database.
type env struct {
	t     *testing.T
	db    *gorm.DB
	svc   *Service
	app   *fiber.App
	clock *clock
	logs  *syncBuffer
	// seen accumulates every response (headers and body) for leak checks.
	seenMu sync.Mutex
	seen   bytes.Buffer
}

func newEnv(t *testing.T, mods ...func(*Config)) *env {
	t.Helper()
	return newEnvOn(t, dbtest.Postgres(t), newClock(), mods...)
}

func newEnvOn(t *testing.T, db *gorm.DB, c *clock, mods ...func(*Config)) *env {
	t.Helper()
	e := &env{t: t, db: db, clock: c, logs: &syncBuffer{}}
	cfg := testConfig(c, e.logs)
	for _, m := range mods {
		m(&cfg)
	}
	svc, err := NewService(db, testRegistry(), cfg)
	require.NoError(t, err)
	e.svc = svc
	e.app = newTestApp(svc, cfg.Logger)
	return e
}

// newTestApp wires the routes the way app/ does, with an error handler
// that renders problems and turns anything else into a logged 500.
func newTestApp(svc *Service, log *slog.Logger) *fiber.App {
	app := fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
		if p, ok := problem.As(err); ok {
			return problem.Write(c, p)
		}
		log.Error("request failed", "error", err.Error())
		return problem.Write(c, problem.New(fiber.StatusInternalServerError, "internal", ""))
	}})
	h := NewHandler(svc)
	h.AdminRoutes(app.Group("/admin/v1"))
	v1 := app.Group("/v1")
	h.TokenRoutes(v1)
	m := v1.Group("", h.RequireMerchant())
	h.MerchantRoutes(m)
	m.Get("/whoami", func(c *fiber.Ctx) error {
		return c.JSON(fiber.Map{"locals": MerchantID(c), "context": MerchantIDFrom(c.UserContext())})
	})
	return app
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), string(r.body))
	return m
}

func (r resp) code(t *testing.T) string {
	t.Helper()
	c, _ := r.json(t)["code"].(string)
	return c
}

func (e *env) do(method, path, body string, headers ...string) resp {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" && !strings.HasPrefix(body, "grant_type") {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := e.app.Test(req, -1)
	require.NoError(e.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	e.seenMu.Lock()
	_ = res.Header.Write(&e.seen)
	e.seen.Write(b)
	e.seenMu.Unlock()
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

func (e *env) admin(method, path, body string) resp {
	e.t.Helper()
	return e.do(method, path, body, "Authorization", "Bearer "+testAdminKey)
}

// onboard creates a tenant over HTTP and returns id, client id and secret.
func (e *env) onboard(body string) (id, clientID, secret string) {
	e.t.Helper()
	r := e.admin("POST", "/admin/v1/tenants", body)
	require.Equal(e.t, 201, r.status, string(r.body))
	m := r.json(e.t)
	return m["id"].(string), m["client_id"].(string), m["client_secret"].(string)
}

func basic(id, secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(id+":"+secret))
}

func (e *env) tokenReq(clientID, secret string) resp {
	e.t.Helper()
	return e.do("POST", "/v1/auth/token", "grant_type=client_credentials",
		"Content-Type", "application/x-www-form-urlencoded", "Authorization", basic(clientID, secret))
}

func (e *env) token(clientID, secret string) string {
	e.t.Helper()
	r := e.tokenReq(clientID, secret)
	require.Equal(e.t, 200, r.status, string(r.body))
	return r.json(e.t)["access_token"].(string)
}

func (e *env) me(token string) resp {
	e.t.Helper()
	return e.do("GET", "/v1/me", "", "Authorization", "Bearer "+token)
}

// everything is all the output a secret must never appear in.
func (e *env) everything() string {
	e.seenMu.Lock()
	defer e.seenMu.Unlock()
	return e.seen.String() + "\n" + e.logs.String()
}

const simpleTenant = `{"name":"Ada Stores","default_provider":"simulator"}`
