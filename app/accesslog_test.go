package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
)

// A provider that refuses (503 provider_unavailable, nothing charged, the
// key released) is a documented answer: its access line is a warning, not
// an error an on-call engineer would be paged for.
func TestDependencyAnswersAreNotErrors(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	r := g.Pay(m, "down-1", map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_unavailable"})
	require.Equal(t, http.StatusServiceUnavailable, r.StatusCode, "%s", r.Body)
	var seen bool
	for _, line := range strings.Split(g.Logs.String(), "\n") {
		require.NotContains(t, line, `"level":"ERROR"`, "an error-level log line: %s", line)
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "request" && l["status"] == float64(503) {
			seen = true
			require.Equal(t, "WARN", l["level"], line)
		}
	}
	require.True(t, seen, "the 503's access line")
}

// The access line names the request's idempotency key and the resource
// its answer points at, so a merchant's key or a payment id finds it —
// and a key that is not one (control bytes) is not logged.
func TestAccessLineNamesKeyAndResource(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	r := g.Pay(m, "trace-1", map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"})
	require.Equal(t, http.StatusCreated, r.StatusCode, "%s", r.Body)
	loc := r.Header.Get("Location")
	require.NotEmpty(t, loc)
	var seen bool
	for _, line := range strings.Split(g.Logs.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "request" && l["idempotency_key"] == "trace-1" {
			seen = true
			require.Equal(t, loc, l["location"], line)
			require.Equal(t, r.Header.Get("X-Request-Id"), l["request_id"], line)
			require.NotContains(t, l, "remote", "a merchant's line does not name the caller's address")
		}
	}
	require.True(t, seen, "the payment's access line")

	// An operator's does: the audit event's request_id leads here — under
	// /ADMIN/ too, which Fiber routes as /admin/.
	for _, path := range []string{"/admin/v1/tenants/", "/ADMIN/v1/tenants/", "/Admin/v1/tenants/"} {
		admin := g.Admin("GET", path+m.ID, nil)
		require.Equal(t, http.StatusOK, admin.StatusCode, path)
		seen = false
		for _, line := range strings.Split(g.Logs.String(), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "request" && l["request_id"] == admin.Header.Get("X-Request-Id") {
				seen = true
				require.Equal(t, "127.0.0.1", l["remote"], line)
			}
		}
		require.True(t, seen, "the operator's access line for %s", path)
	}
	bad := g.Do("POST", "/v1/payments", []byte(`{}`), "Authorization", "Bearer "+m.Token, "Idempotency-Key", "a\tb")
	require.Equal(t, http.StatusBadRequest, bad.StatusCode)
	require.NotContains(t, g.Logs.String(), "a\\tb", "a malformed key is not logged")
}

// Not only the access line: every line logged while serving a request
// names it — here the WARN of a payment whose answer was lost carries the
// request's id and its Idempotency-Key, so an on-call engineer goes from
// it to the access line and the merchant's retry without timestamps.
func TestRequestPathLinesNameTheirRequest(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	r := g.Pay(m, "lost-1", map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_timeout"})
	require.Equal(t, http.StatusAccepted, r.StatusCode, "%s", r.Body)
	var seen bool
	for _, line := range strings.Split(g.Logs.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "payment outcome unknown; left in progress" {
			seen = true
			require.Equal(t, r.Header.Get("X-Request-Id"), l["request_id"], line)
			require.Equal(t, "lost-1", l["idempotency_key"], line)
		}
		if strings.Contains(line, `"msg":"request"`) {
			require.Equal(t, 1, strings.Count(line, `"request_id"`), "said once: %s", line)
			require.LessOrEqual(t, strings.Count(line, `"idempotency_key"`), 1, "said once: %s", line)
		}
	}
	require.True(t, seen, "the WARN of the lost answer:\n%s", g.Logs.String())
}
