// Package apptest runs the real gateway for tests: the full app on its own
// fresh database (a PostgreSQL schema by default), served on a loopback
// listener, with helpers to onboard merchants and call the API over HTTP.
package apptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/gateway/app"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/config"
)

// AdminKey is the admin API key of every test gateway.
const AdminKey = "test-admin-key-0123456789abcdef"

// Gateway is a running test gateway.
type Gateway struct {
	T      testing.TB
	App    *app.App
	URL    string
	DBURL  string
	Client *http.Client
	Logs   *SyncBuffer
}

// Option changes the environment a test gateway starts with.
type Option func(*options)

type options struct {
	env  map[string]string
	onDB []func(*gorm.DB) error
}

// Env sets one environment variable.
func Env(name, value string) Option { return func(o *options) { o.env[name] = value } }

// SQLite runs the gateway on a fresh SQLite file instead of PostgreSQL.
func SQLite() Option { return func(o *options) { o.env["DATABASE_URL"] = "" } }

// OnDB runs fn on the gateway's database once the app is built, before it
// serves or starts its jobs: where a test registers GORM callbacks, which
// registered on a running app's database race its background reads. A
// callback that acts only later is armed by the test (an atomic.Bool).
func OnDB(fn func(db *gorm.DB) error) Option {
	return func(o *options) { o.onDB = append(o.onDB, fn) }
}

// BaseEnv is the environment of a test gateway on the database at dbURL
// (empty: SQLite under dataDir). It is also what subprocess tests pass to
// the real binary.
func BaseEnv(dbURL, dataDir string) map[string]string {
	return map[string]string{
		"GATEWAY_ENV":           "development",
		"DATA_DIR":              dataDir,
		"DATABASE_URL":          dbURL,
		"ADMIN_API_KEY":         AdminKey,
		"JWT_SECRET":            "test-jwt-secret-0123456789abcdef0123456789",
		"MASTER_KEY":            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
		"LOG_LEVEL":             "warn",
		"PROVIDER_TIMEOUT":      "2s",
		"IDEMPOTENCY_LEASE":     "5s",
		"SWEEP_STALE_AFTER":     "5s",
		"RATE_LIMIT_PER_SECOND": "0",
		// A sim_pending charge or refund settles only when a test says so
		// (its settle_at): ten seconds of a loaded machine's wall time
		// would settle it under a test that means it pending.
		"SIMULATOR_SETTLE_AFTER": "1h",
	}
}

// postgresPlaceholder marks "a fresh PostgreSQL schema, please" until
// Start makes one; SQLite() replaces it with "" (the embedded store).
const postgresPlaceholder = "postgres://apptest"

// Start runs a gateway for the test and stops it when the test ends.
func Start(t testing.TB, opts ...Option) *Gateway {
	t.Helper()
	a, logs, dbURL := Build(t, opts...)
	g, _ := Serve(t, a, logs)
	g.DBURL = dbURL
	return g
}

// Build is Start without serving: the app (its jobs not started), its log
// and its database's URL, for a test that must change the app before it
// runs — a GORM callback registered on a running app's database races its
// background reads — and then Serve it.
func Build(t testing.TB, opts ...Option) (a *app.App, logs *SyncBuffer, dbURL string) {
	t.Helper()
	dir := t.TempDir()
	o := options{env: BaseEnv(postgresPlaceholder, dir)}
	for _, opt := range opts {
		opt(&o)
	}
	env := o.env
	if env["DATABASE_URL"] == postgresPlaceholder {
		env["DATABASE_URL"] = dbtest.PostgresURL(t)
	}
	cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	logs = &SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(io.MultiWriter(logs), &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, err = app.New(cfg, log)
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	for _, fn := range o.onDB {
		if err := fn(a.DB()); err != nil {
			t.Fatalf("apptest: %v", err)
		}
	}
	return a, logs, env["DATABASE_URL"]
}

// Serve runs a built app on a free local port for the test: the Gateway
// to call it (Logs is logs, which may be nil), and stop, which shuts it
// down and returns what Serve returned. The test's end stops it too, if
// stop was not called.
func Serve(t testing.TB, a *app.App, logs *SyncBuffer) (g *Gateway, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	var once sync.Once
	var served error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case served = <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("apptest: gateway did not stop")
			}
		})
		return served
	}
	t.Cleanup(func() { _ = stop() })
	return &Gateway{T: t, App: a, URL: "http://" + ln.Addr().String(), Client: NewClient(), Logs: logs}, stop
}

// NewClient is an HTTP client that keeps enough idle connections for
// concurrent tests and benchmarks (the default keeps two per host).
func NewClient() *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute},
	}
}

// Response is a finished HTTP exchange with its raw body.
type Response struct {
	*http.Response
	Body []byte
}

// JSON decodes the body into a map.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("apptest: body is not JSON: %v: %s", err, r.Body)
	}
	return m
}

// Code is the problem code of an error body.
func (r Response) Code(t testing.TB) string {
	t.Helper()
	c, _ := r.JSON(t)["code"].(string)
	return c
}

// Do sends a request; headers are name, value pairs.
func (g *Gateway) Do(method, path string, body []byte, headers ...string) Response {
	g.T.Helper()
	r, err := g.Try(method, path, body, headers...)
	if err != nil {
		g.T.Fatalf("apptest: %s %s: %v", method, path, err)
	}
	return r
}

// Try is Do for requests that may fail at the transport (a killed gateway).
func (g *Gateway) Try(method, path string, body []byte, headers ...string) (Response, error) {
	req, err := http.NewRequest(method, g.URL+path, bytes.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := g.Client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Response: resp, Body: b}, nil
}

// Admin calls the admin API with the admin key.
func (g *Gateway) Admin(method, path string, body any) Response {
	g.T.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	return g.Do(method, path, b, "Authorization", "Bearer "+AdminKey)
}

// Merchant is an onboarded tenant with a valid token.
type Merchant struct {
	ID, ClientID, ClientSecret, Token string
}

// Onboard creates a tenant (default provider simulator unless the body
// says otherwise) and fetches a token for it.
func (g *Gateway) Onboard(body map[string]any) Merchant {
	g.T.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["name"]; !ok {
		body["name"] = "Test Merchant"
	}
	if _, ok := body["default_provider"]; !ok {
		body["default_provider"] = "simulator"
	}
	r := g.Admin("POST", "/admin/v1/tenants", body)
	if r.StatusCode != http.StatusCreated {
		g.T.Fatalf("apptest: onboard: %d %s", r.StatusCode, r.Body)
	}
	m := r.JSON(g.T)
	out := Merchant{ID: str(m["id"]), ClientID: str(m["client_id"]), ClientSecret: str(m["client_secret"])}
	out.Token = g.Token(out.ClientID, out.ClientSecret)
	return out
}

// Token exchanges client credentials for an access token.
func (g *Gateway) Token(clientID, secret string) string {
	g.T.Helper()
	form := url.Values{"grant_type": {"client_credentials"}}.Encode()
	req, _ := http.NewRequest("POST", g.URL+"/v1/auth/token", strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(clientID+":"+secret)))
	resp, err := g.Client.Do(req)
	if err != nil {
		g.T.Fatalf("apptest: token: %v", err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&tok) != nil || tok.AccessToken == "" {
		g.T.Fatalf("apptest: token: status %d", resp.StatusCode)
	}
	return tok.AccessToken
}

// Pay posts a payment for m with an idempotency key.
func (g *Gateway) Pay(m Merchant, key string, body any) Response {
	g.T.Helper()
	return g.Do("POST", "/v1/payments", payBody(body), "Authorization", "Bearer "+m.Token, "Idempotency-Key", key)
}

// TryPay is Pay for a gateway that may die mid-request.
func (g *Gateway) TryPay(m Merchant, key string, body any) (Response, error) {
	return g.Try("POST", "/v1/payments", payBody(body), "Authorization", "Bearer "+m.Token, "Idempotency-Key", key)
}

func payBody(body any) []byte {
	if b, ok := body.([]byte); ok {
		return b
	}
	b, _ := json.Marshal(body)
	return b
}

// Get calls a merchant GET route.
func (g *Gateway) Get(m Merchant, path string) Response {
	g.T.Helper()
	return g.Do("GET", path, nil, "Authorization", "Bearer "+m.Token)
}

func str(v any) string { s, _ := v.(string); return s }

// Oversized sends only the head of a request that declares a body of size
// bytes, over a raw connection, and reads the answer. The gateway refuses
// a body over its limit from the Content-Length alone; sending the bytes
// would race its close against the client's write (a reset instead of the
// 413 under test).
func (g *Gateway) Oversized(method, path string, size int, headers ...string) Response {
	g.T.Helper()
	u, err := url.Parse(g.URL)
	if err != nil {
		g.T.Fatalf("apptest: %v", err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		g.T.Fatalf("apptest: %v", err)
	}
	defer conn.Close()
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", method, path, u.Host, size)
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&head, "%s: %s\r\n", headers[i], headers[i+1])
	}
	head.WriteString("\r\n")
	if _, err := io.WriteString(conn, head.String()); err != nil {
		g.T.Fatalf("apptest: %v", err)
	}
	req, _ := http.NewRequest(method, g.URL+path, nil)
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		g.T.Fatalf("apptest: read answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Response{Response: resp, Body: b}
}
