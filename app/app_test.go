package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app"
	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/config"
)

func newApp(t *testing.T, logs io.Writer) *app.App {
	t.Helper()
	env := apptest.BaseEnv(dbtest.PostgresURL(t), t.TempDir())
	cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	a, err := app.New(cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return a
}

func problemOf(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	return p
}

func TestPanicIsA500ProblemAndTheCauseIsLoggedNotSent(t *testing.T) {
	t.Parallel()
	logs := &apptest.SyncBuffer{}
	a := newApp(t, logs)
	a.Fiber().Get("/boom", func(*fiber.Ctx) error { panic("secret internal detail") })
	resp, err := a.Fiber().Test(httptest.NewRequest("GET", "/boom", nil), -1)
	require.NoError(t, err)
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	p := problemOf(t, resp)
	require.Equal(t, "internal", p["code"])
	require.NotEmpty(t, p["request_id"])
	require.NotContains(t, p["detail"], "secret internal detail")
	require.Contains(t, logs.String(), "secret internal detail")
	require.Contains(t, logs.String(), p["request_id"].(string))
}

func TestUnknownRouteIsA404Problem(t *testing.T) {
	t.Parallel()
	a := newApp(t, io.Discard)
	resp, err := a.Fiber().Test(httptest.NewRequest("GET", "/nope", nil), -1)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	p := problemOf(t, resp)
	require.Equal(t, "not_found", p["code"])
	// Not Fiber's "Cannot GET /nope": the caller's path is not echoed.
	require.NotContains(t, p["detail"], "/nope")
	require.Contains(t, p["detail"], "/swagger")
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	a := newApp(t, io.Discard)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := a.Fiber().Test(httptest.NewRequest("GET", path, nil), -1)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
	require.NoError(t, a.Close())
	resp, err := a.Fiber().Test(httptest.NewRequest("GET", "/readyz", nil), -1)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "no database, not ready")
	require.Equal(t, "unavailable", problemOf(t, resp)["code"])
}

// A pool whose every connection is busy is not a database that is down:
// /readyz asks over a connection of its own, so a load balancer does not
// take every instance out at once under load.
func TestReadinessWithEveryPooledConnectionBusy(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("DATABASE_MAX_CONNS", "2"))
	sqlDB, err := g.App.DB().DB()
	require.NoError(t, err)
	ctx := context.Background()
	for range 2 {
		conn, err := sqlDB.Conn(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
	}
	r := g.Do("GET", "/readyz", nil)
	require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
	require.Equal(t, "ok", r.JSON(t)["database"])
}

func TestAdminBodyOver1MiBIs413(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	r := g.Oversized("POST", "/admin/v1/tenants", app.BodyLimit+1, "Authorization", "Bearer "+apptest.AdminKey)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.StatusCode)
	require.Equal(t, "body_too_large", r.Code(t))
	// Refused by the server before any middleware: an id all the same.
	require.NotEmpty(t, r.Header.Get("X-Request-Id"))
	require.Equal(t, r.Header.Get("X-Request-Id"), r.JSON(t)["request_id"])
	require.Contains(t, g.Logs.String(), `"request_id":"`+r.Header.Get("X-Request-Id")+`"`, "and it is logged")
}

// TestGracefulShutdownDrainsInFlightRequests sends SIGTERM to the real
// binary while a payment is waiting on the provider: the payment still
// completes and is answered, and the process exits cleanly.
func TestGracefulShutdownDrainsInFlightRequests(t *testing.T) {
	t.Parallel()
	env := apptest.BaseEnv(dbtest.PostgresURL(t), t.TempDir())
	env["SIMULATOR_LATENCY"] = "1500ms"
	p := apptest.StartProcess(t, apptest.Binary(t), env)
	m := p.Onboard(nil)

	type result struct {
		r   apptest.Response
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := p.TryPay(m, "drain-1", map[string]any{
			"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"})
		done <- result{r, err}
	}()
	// Wait until the request is inside the gateway (its key is claimed).
	db, err := database.Open(p.DBURL, database.Options{MaxOpenConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(db) })
	require.Eventually(t, func() bool {
		var n int64
		db.Table("idempotency_keys").Where("merchant_id = ? AND key = ?", m.ID, "drain-1").Count(&n)
		return n == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, p.Signal(syscall.SIGTERM))

	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, http.StatusCreated, res.r.StatusCode, string(res.r.Body))
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not exit after SIGTERM")
	}
}

// TestRequestID: a client's X-Request-ID names the request only when it is
// 1 to 128 visible ASCII characters; otherwise the gateway makes one up and
// logs the client's (cut and escaped) beside it.
func TestRequestID(t *testing.T) {
	t.Parallel()
	logs := &apptest.SyncBuffer{}
	a := newApp(t, logs)
	long := strings.Repeat("a", 128)
	cases := []struct {
		name, sent string
		accepted   bool
		logged     string // client_request_id in the access log, for a refused id
	}{
		{"Absent", "", false, ""},
		{"Plain", "req-1001", true, ""},
		{"EveryVisibleCharacter", "!\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~", true, ""},
		{"Exactly128", long, true, ""},
		{"TooLong", long + "b", false, long},
		{"Space", "req 1001", false, "req 1001"},
		{"Tab", "req\t1001", false, `req\t1001`},
		{"NotASCII", "réq", false, `r\u00e9q`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest("GET", "/nope-"+tc.name, nil)
			if tc.sent != "" {
				req.Header.Set("X-Request-ID", tc.sent)
			}
			resp, err := a.Fiber().Test(req, -1)
			require.NoError(t, err)
			id := resp.Header.Get("X-Request-ID")
			require.Equal(t, id, problemOf(t, resp)["request_id"], "the body quotes the id the header carries")
			if tc.accepted {
				require.Equal(t, tc.sent, id)
			} else {
				_, err := uuid.Parse(id)
				require.NoError(t, err, "a generated id: %q", id)
			}
			var line map[string]any
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, `"path":"/nope-`+tc.name+`"`) {
					require.NoError(t, json.Unmarshal([]byte(l), &line))
				}
			}
			require.NotNil(t, line, "no access log line")
			require.Equal(t, id, line["request_id"])
			if tc.logged == "" {
				require.NotContains(t, line, "client_request_id")
			} else {
				require.Equal(t, tc.logged, line["client_request_id"])
			}
		})
	}
}

// Turned on in production (a staging load test), the simulator is a WARN
// at every start: its payments move no money.
func TestTheSimulatorOnInProductionIsAWarning(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("GATEWAY_ENV", "production"), apptest.Env("SIMULATOR_ENABLED", "true"))
	require.Contains(t, g.Logs.String(), "the simulator provider is on in production")
	require.Contains(t, g.Logs.String(), `"level":"WARN"`)
}

// With SIMULATOR_ENABLED=false (production's default) no tenant can use
// the simulator: it would record succeeded payments, and send signed
// payment.succeeded events, with no money behind them.
func TestTheSimulatorOffIsNoProvider(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("SIMULATOR_ENABLED", "false"))
	refused := func(r apptest.Response, field string) {
		t.Helper()
		require.Equal(t, http.StatusBadRequest, r.StatusCode, "%s", r.Body)
		require.Equal(t, "invalid_request", r.Code(t))
		require.Contains(t, string(r.Body), `"field":"`+field+`"`)
	}

	refused(g.Admin("POST", "/admin/v1/tenants", map[string]any{"name": "Ada", "default_provider": "simulator"}), "default_provider")
	m := g.Onboard(map[string]any{"default_provider": "paystack",
		"providers": map[string]any{"paystack": map[string]any{"secret_key": "sk_test_sim_off"}}})
	r := g.Admin("GET", "/admin/v1/tenants/"+m.ID, nil)
	require.Equal(t, []any{"paystack"}, r.JSON(t)["providers"])
	refused(g.Admin("PATCH", "/admin/v1/tenants/"+m.ID, map[string]any{"default_provider": "simulator"}), "default_provider")
	refused(g.Pay(m, "sim-off", map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com",
		"payment_method": "sim_success", "provider": "simulator"}), "provider")
}

// A route that takes no query parameter refuses one, cache-busters
// included, as the lists refuse one they do not take: a filter is never
// silently ignored (README, "Errors").
func TestSingleResourceRoutesTakeNoQuery(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	pay := g.Pay(m, "no-query", map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"})
	require.Equal(t, http.StatusCreated, pay.StatusCode, "%s", pay.Body)
	payment := pay.JSON(t)["id"].(string)
	bearer := []string{"Authorization", "Bearer " + m.Token}
	refund := g.Do("POST", "/v1/payments/"+payment+"/refunds", []byte(`{"amount":1000}`),
		append(bearer, "Idempotency-Key", "no-query-refund", "Content-Type", "application/json")...)
	require.Equal(t, http.StatusCreated, refund.StatusCode, "%s", refund.Body)
	receiver := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(receiver.Close)
	endpoint := g.Do("POST", "/v1/webhook_endpoints", []byte(`{"url":"`+receiver.URL+`"}`),
		append(bearer, "Idempotency-Key", "no-query-endpoint", "Content-Type", "application/json")...)
	require.Equal(t, http.StatusCreated, endpoint.StatusCode, "%s", endpoint.Body)
	events := g.Get(m, "/v1/events").JSON(t)["data"].([]any)
	require.NotEmpty(t, events)
	admin := []string{"Authorization", "Bearer " + apptest.AdminKey}

	for _, route := range []struct {
		path string
		auth []string
	}{
		{"/v1/payments/" + payment, bearer},
		{"/v1/refunds/" + refund.JSON(t)["id"].(string), bearer},
		{"/v1/webhook_endpoints/" + endpoint.JSON(t)["id"].(string), bearer},
		{"/v1/events/" + events[0].(map[string]any)["id"].(string), bearer},
		{"/v1/me", bearer},
		{"/admin/v1/payments/" + payment, admin},
		{"/admin/v1/tenants/" + m.ID, admin},
	} {
		require.Equal(t, http.StatusOK, g.Do("GET", route.path, nil, route.auth...).StatusCode, route.path)
		r := g.Do("GET", route.path+"?_=1733580000", nil, route.auth...)
		require.Equal(t, http.StatusBadRequest, r.StatusCode, "%s: %s", route.path, r.Body)
		require.Equal(t, "invalid_request", r.Code(t), route.path)
		require.Contains(t, string(r.Body), `"field":"_"`, route.path)
	}
}

// An operator request's id is always the gateway's own (the client's is
// logged beside it): audit rows carry it to the access log line, and a
// caller must not give its changes another request's id.
func TestAdminRequestsGetTheGatewaysOwnID(t *testing.T) {
	t.Parallel()
	logs := &apptest.SyncBuffer{}
	a := newApp(t, logs)
	// Fiber routes paths case-insensitively: /ADMIN/ is the admin API too.
	upper := httptest.NewRequest("GET", "/ADMIN/v1/tenants", nil)
	upper.Header.Set("X-Request-ID", "req-of-someone-else")
	resp, err := a.Fiber().Test(upper, -1)
	require.NoError(t, err)
	_, err = uuid.Parse(resp.Header.Get("X-Request-ID"))
	require.NoError(t, err, "a generated id under /ADMIN/")
	req := httptest.NewRequest("GET", "/admin/v1/tenants", nil)
	req.Header.Set("X-Request-ID", "req-of-someone-else")
	resp, err = a.Fiber().Test(req, -1)
	require.NoError(t, err)
	id := resp.Header.Get("X-Request-ID")
	_, err = uuid.Parse(id)
	require.NoError(t, err, "a generated id: %q", id)
	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"path":"/admin/v1/tenants"`) {
			require.NoError(t, json.Unmarshal([]byte(l), &line))
		}
	}
	require.NotNil(t, line, "no access log line")
	require.Equal(t, id, line["request_id"])
	require.Equal(t, "req-of-someone-else", line["client_request_id"])
}
