package app_test

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app"
	"github.com/oncepay/gateway/app/apptest"
)

// TestJSONBodies: a body labelled as anything but JSON in UTF-8 is 415
// before the idempotency claim (its key stays free for the corrected
// request); an unlabelled body is taken as JSON; the token endpoint takes
// its form and the providers' webhooks whatever they send.
func TestJSONBodies(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	bearer := "Bearer " + m.Token
	body := []byte(`{"amount":5000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success"}`)
	pay := func(key, contentType string) apptest.Response {
		return g.Do("POST", "/v1/payments", body, "Authorization", bearer, "Idempotency-Key", key, "Content-Type", contentType)
	}

	refused := []struct{ name, contentType string }{
		{"Form", "application/x-www-form-urlencoded"},
		{"Text", "text/plain"},
		{"Multipart", "multipart/form-data; boundary=x"},
		{"Latin1", "application/json; charset=iso-8859-1"},
		{"UTF16", "application/json; charset=utf-16"},
		{"Malformed", "application/json; charset"},
		{"JSONSuffix", "application/problem+json"},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			got := pay("mt-"+r.name, r.contentType)
			require.Equal(t, http.StatusUnsupportedMediaType, got.StatusCode, "%s", got.Body)
			var p map[string]any
			require.NoError(t, json.Unmarshal(got.Body, &p))
			require.Equal(t, "unsupported_media_type", p["code"])
			// The key was never claimed: the corrected request charges.
			ok := pay("mt-"+r.name, "application/json")
			require.Equal(t, http.StatusCreated, ok.StatusCode, "%s", ok.Body)
			require.Empty(t, ok.Header.Get("Idempotent-Replayed"))
		})
	}
	for _, ct := range []string{"application/json", "Application/JSON; charset=UTF-8", "application/json;charset=utf-8", ""} {
		got := pay("mt-ok-"+ct, ct)
		require.Equal(t, http.StatusCreated, got.StatusCode, "Content-Type %q: %s", ct, got.Body)
	}

	t.Run("Admin", func(t *testing.T) {
		got := g.Do("POST", "/admin/v1/tenants", []byte(`{"name":"Ada","default_provider":"simulator"}`),
			"Authorization", "Bearer "+apptest.AdminKey, "Content-Type", "text/plain")
		require.Equal(t, http.StatusUnsupportedMediaType, got.StatusCode, "%s", got.Body)
	})
	t.Run("EmptyBodyNeedsNoLabel", func(t *testing.T) {
		other := g.Onboard(nil)
		got := g.Do("POST", "/admin/v1/tenants/"+other.ID+"/credentials", nil,
			"Authorization", "Bearer "+apptest.AdminKey, "Content-Type", "text/plain")
		require.Equal(t, http.StatusCreated, got.StatusCode, "%s", got.Body)
	})
	t.Run("TokenTakesAForm", func(t *testing.T) {
		require.NotEmpty(t, g.Token(m.ClientID, m.ClientSecret))
		// Routing ignores case and a trailing slash; so does the exception.
		got := g.Do("POST", "/V1/Auth/Token/", []byte("grant_type=client_credentials&client_id="+m.ClientID+"&client_secret="+m.ClientSecret),
			"Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusOK, got.StatusCode, "%s", got.Body)
	})
	t.Run("TokenOtherMethods", func(t *testing.T) {
		got := g.Do("GET", "/v1/auth/token", nil)
		require.Equal(t, http.StatusMethodNotAllowed, got.StatusCode, "%s", got.Body)
		require.Equal(t, "POST", got.Header.Get("Allow"))
		var p map[string]any
		require.NoError(t, json.Unmarshal(got.Body, &p))
		require.Equal(t, "method_not_allowed", p["code"])
	})
	t.Run("WebhooksAsSent", func(t *testing.T) {
		// Unsigned, so 404 (the webhook's answer to an unverifiable
		// request), not 415: the label is not looked at.
		got := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, []byte(`{"event":"charge.success"}`), "Content-Type", "text/plain")
		require.Equal(t, http.StatusNotFound, got.StatusCode, "%s", got.Body)
	})
}

// FuzzIsJSON: whatever a client labels its body, the check never panics,
// and what it takes is application/json in UTF-8 or with no charset.
func FuzzIsJSON(f *testing.F) {
	for _, s := range []string{"application/json", "application/json; charset=utf-8", "text/plain", "application/json; charset", "\x00", "application/json; charset=\"utf-8\"", "APPLICATION/JSON;CHARSET=UTF-8;x=\"\\\x00\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, contentType string) {
		if !app.IsJSON(contentType) {
			return
		}
		mt, params, err := mime.ParseMediaType(contentType)
		if err != nil || mt != "application/json" {
			t.Fatalf("%q taken as JSON: %q %v", contentType, mt, err)
		}
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			t.Fatalf("%q taken with charset %q", contentType, cs)
		}
	})
}
