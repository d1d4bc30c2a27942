package app_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
)

// TestJSONBodies: a body labelled as something other than JSON is 415
// unsupported_media_type where it would be decoded — after
// authentication, and before the idempotency key is claimed (the key stays
// free for the corrected request) — while a retry of a finished request is
// answered from its key whatever its label. Labels clients send for JSON
// are taken: none, application/json in any spelling of UTF-8, +json types,
// and text/plain (browsers' fetch with a string body).
func TestJSONBodies(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	bearer := "Bearer " + m.Token
	body := []byte(`{"amount":5000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success"}`)
	pay := func(key, contentType string) apptest.Response {
		return g.Do("POST", "/v1/payments", body, "Authorization", bearer, "Idempotency-Key", key, "Content-Type", contentType)
	}

	for _, r := range []struct{ name, contentType string }{
		{"Form", "application/x-www-form-urlencoded"},
		{"Multipart", "multipart/form-data; boundary=x"},
		{"XML", "application/xml"},
		{"Latin1", "application/json; charset=iso-8859-1"},
		{"UTF16", "application/json; charset=utf-16"},
		{"Malformed", "application/json; charset"},
	} {
		t.Run(r.name, func(t *testing.T) {
			got := pay("mt-"+r.name, r.contentType)
			require.Equal(t, http.StatusUnsupportedMediaType, got.StatusCode, "%s", got.Body)
			require.Equal(t, "unsupported_media_type", got.Code(t))
			ok := pay("mt-"+r.name, "application/json")
			require.Equal(t, http.StatusCreated, ok.StatusCode, "the key was not taken: %s", ok.Body)
			require.Empty(t, ok.Header.Get("Idempotent-Replayed"))
		})
	}
	for _, ct := range []string{"application/json", "Application/JSON; charset=UTF-8", "application/json;charset=utf8",
		"application/merge-patch+json", "text/plain;charset=UTF-8", ""} {
		got := pay("mt-ok-"+ct, ct)
		require.Equal(t, http.StatusCreated, got.StatusCode, "Content-Type %q: %s", ct, got.Body)
	}

	t.Run("RetryOfAFinishedRequestIsAnswered", func(t *testing.T) {
		first := pay("mt-done", "application/json")
		require.Equal(t, http.StatusCreated, first.StatusCode, "%s", first.Body)
		again := pay("mt-done", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusCreated, again.StatusCode, "%s", again.Body)
		require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
		require.Equal(t, first.Body, again.Body)
	})
	t.Run("AuthenticationFirst", func(t *testing.T) {
		got := g.Do("POST", "/v1/payments", body, "Idempotency-Key", "mt-anon", "Content-Type", "text/xml")
		require.Equal(t, http.StatusUnauthorized, got.StatusCode, "%s", got.Body)
	})
	t.Run("Refund", func(t *testing.T) {
		p := pay("mt-refunded", "application/json").JSON(t)["id"].(string)
		got := g.Do("POST", "/v1/payments/"+p+"/refunds", []byte(`{"amount":100}`),
			"Authorization", bearer, "Idempotency-Key", "mt-refund", "Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusUnsupportedMediaType, got.StatusCode, "%s", got.Body)
	})
	t.Run("WebhookEndpoint", func(t *testing.T) {
		got := g.Do("POST", "/v1/webhook_endpoints", []byte(`{"url":"https://example.com/hooks"}`),
			"Authorization", bearer, "Idempotency-Key", "mt-we", "Content-Type", "multipart/form-data; boundary=x")
		require.Equal(t, http.StatusUnsupportedMediaType, got.StatusCode, "%s", got.Body)
	})
	t.Run("Admin", func(t *testing.T) {
		admin := "Bearer " + apptest.AdminKey
		got := g.Do("POST", "/admin/v1/tenants", []byte(`{"name":"Ada","default_provider":"simulator"}`),
			"Authorization", admin, "Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusUnsupportedMediaType, got.StatusCode, "%s", got.Body)
		got = g.Do("PATCH", "/admin/v1/tenants/"+m.ID, []byte(`{"status":"suspended"}`),
			"Authorization", admin, "Content-Type", "text/xml")
		require.Equal(t, http.StatusUnsupportedMediaType, got.StatusCode, "%s", got.Body)
		p := pay("mt-resolved", "application/json").JSON(t)["id"].(string)
		got = g.Do("POST", "/admin/v1/payments/"+p+"/resolve", []byte(`{"status":"failed","note":"x"}`),
			"Authorization", admin, "Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusUnsupportedMediaType, got.StatusCode, "%s", got.Body)
		got = g.Do("POST", "/admin/v1/tenants/"+m.ID+"/credentials", nil, "Authorization", admin, "Content-Type", "text/xml")
		require.Equal(t, http.StatusCreated, got.StatusCode, "an empty body needs no label: %s", got.Body)
	})
	t.Run("TokenOtherMethods", func(t *testing.T) {
		for _, method := range []string{"GET", "PUT", "DELETE"} {
			got := g.Do(method, "/v1/auth/token", nil)
			require.Equal(t, http.StatusMethodNotAllowed, got.StatusCode, "%s: %s", method, got.Body)
			require.Equal(t, "POST", got.Header.Get("Allow"))
			require.Equal(t, "method_not_allowed", got.Code(t))
			require.Equal(t, method+" is not allowed on this path; it takes POST", got.JSON(t)["detail"])
		}
	})
}
