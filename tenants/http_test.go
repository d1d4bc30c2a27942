package tenants

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
)

func TestOnboardTokenMe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.admin("POST", "/admin/v1/tenants",
		`{"name":"Ada Stores","default_provider":"simulator","providers":{"paystack":{"secret_key":"sk_test_x"}}}`)
	require.Equal(t, 201, r.status, string(r.body))
	require.Equal(t, "no-store", r.header.Get("Cache-Control"))
	m := r.json(t)
	id := m["id"].(string)
	require.True(t, strings.HasPrefix(id, "ten_"))
	require.Equal(t, "/admin/v1/tenants/"+id, r.header.Get("Location"))
	require.True(t, strings.HasPrefix(m["client_id"].(string), "cli_"))
	require.True(t, strings.HasPrefix(m["client_secret"].(string), "sk_"))
	require.Equal(t, []any{"paystack", "simulator"}, m["providers"])
	require.Equal(t, "active", m["status"])

	tr := e.tokenReq(m["client_id"].(string), m["client_secret"].(string))
	require.Equal(t, 200, tr.status, string(tr.body))
	require.Equal(t, "no-store", tr.header.Get("Cache-Control"))
	tok := tr.json(t)
	require.Equal(t, "Bearer", tok["token_type"])
	require.EqualValues(t, 900, tok["expires_in"])

	me := e.me(tok["access_token"].(string))
	require.Equal(t, 200, me.status, string(me.body))
	mm := me.json(t)
	require.Equal(t, id, mm["id"])
	require.Equal(t, "Ada Stores", mm["name"])
	require.Equal(t, "active", mm["status"])
	require.Equal(t, "simulator", mm["default_provider"])
	require.Equal(t, []any{"paystack", "simulator"}, mm["providers"])

	who := e.do("GET", "/v1/whoami", "", "Authorization", "Bearer "+tok["access_token"].(string)).json(t)
	require.Equal(t, id, who["locals"])
	require.Equal(t, id, who["context"])

	got := e.admin("GET", "/admin/v1/tenants/"+id, "")
	require.Equal(t, 200, got.status)
	require.Equal(t, id, got.json(t)["id"])
	require.NotContains(t, string(got.body), "client_secret")
	require.NotContains(t, e.everything()[len(r.body):], "sk_test_x")
}

// mint signs arbitrary claims the way an attacker (or a misconfigured
// peer) might.
func mint(t *testing.T, method jwt.SigningMethod, key any, kid string, mod func(*accessClaims)) string {
	t.Helper()
	now := time.Now()
	c := accessClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: "oncepay", Subject: "ten_000000000000000000000000", Audience: jwt.ClaimStrings{"oncepay-merchant-api"},
			ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute)), IssuedAt: jwt.NewNumericDate(now), ID: "j1",
		},
		ClientID: "cli_x",
	}
	if mod != nil {
		mod(&c)
	}
	tok := jwt.NewWithClaims(method, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

func TestMerchantAuthFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, cid, secret := e.onboard(simpleTenant)
	good := e.token(cid, secret)
	require.Equal(t, 200, e.me(good).status)

	kid := keyID(testJWTSecret)
	sub := func(c *accessClaims) { c.Subject = id; c.ClientID = cid }
	with := func(f func(*accessClaims)) func(*accessClaims) {
		return func(c *accessClaims) { sub(c); f(c) }
	}
	otherKey := []byte("another-secret-another-secret-0000")

	cases := []struct {
		name    string
		header  string
		expired bool // told apart: the client refreshes
	}{
		{"MissingHeader", "", false},
		{"NotBearerScheme", "Basic " + good, false},
		{"EmptyBearer", "Bearer ", false},
		{"Garbled", "Bearer not.a.jwt", false},
		{"GarbledBase64", "Bearer !!!!.????.****", false},
		{"TruncatedSignature", "Bearer " + good[:len(good)-4], false},
		{"AlgNone", "Bearer " + mint(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, kid, sub), false},
		{"HS512", "Bearer " + mint(t, jwt.SigningMethodHS512, testJWTSecret, kid, sub), false},
		{"WrongKeySameKid", "Bearer " + mint(t, jwt.SigningMethodHS256, otherKey, kid, sub), false},
		{"WrongKeyOwnKid", "Bearer " + mint(t, jwt.SigningMethodHS256, otherKey, keyID(otherKey), sub), false},
		{"NoKid", "Bearer " + mint(t, jwt.SigningMethodHS256, testJWTSecret, "", sub), false},
		{"WrongAudience", "Bearer " + mint(t, jwt.SigningMethodHS256, testJWTSecret, kid, with(func(c *accessClaims) { c.Audience = jwt.ClaimStrings{"other-api"} })), false},
		{"WrongIssuer", "Bearer " + mint(t, jwt.SigningMethodHS256, testJWTSecret, kid, with(func(c *accessClaims) { c.Issuer = "evil" })), false},
		{"NoExpiry", "Bearer " + mint(t, jwt.SigningMethodHS256, testJWTSecret, kid, with(func(c *accessClaims) { c.ExpiresAt = nil })), false},
		{"Expired", "Bearer " + mint(t, jwt.SigningMethodHS256, testJWTSecret, kid, with(func(c *accessClaims) {
			c.ExpiresAt = jwt.NewNumericDate(e.clock.Now().Add(-time.Minute)) // by the verifier's clock, frozen at newEnv
		})), true},
		// Only a token the gateway signed is ever called expired.
		{"ExpiredUnderAnotherKey", "Bearer " + mint(t, jwt.SigningMethodHS256, otherKey, kid, with(func(c *accessClaims) {
			c.ExpiresAt = jwt.NewNumericDate(e.clock.Now().Add(-time.Minute))
		})), false},
		{"IssuedInFuture", "Bearer " + mint(t, jwt.SigningMethodHS256, testJWTSecret, kid, with(func(c *accessClaims) {
			c.IssuedAt = jwt.NewNumericDate(time.Now().Add(time.Hour))
		})), false},
		// Signed with the key (leaked, say), but living longer than any
		// token the gateway issues: refused, so a forged token dies
		// within TOKEN_TTL of the key's rotation like an issued one.
		{"LongerThanTokenTTL", "Bearer " + mint(t, jwt.SigningMethodHS256, testJWTSecret, kid, with(func(c *accessClaims) {
			c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(10 * 365 * 24 * time.Hour))
		})), false},
		{"LongerThanTokenTTLCanBe", "Bearer " + mint(t, jwt.SigningMethodHS256, testJWTSecret, kid, with(func(c *accessClaims) {
			c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(MaxTokenTTL + time.Minute))
		})), false},
		{"NoIssuedAt", "Bearer " + mint(t, jwt.SigningMethodHS256, testJWTSecret, kid, with(func(c *accessClaims) { c.IssuedAt = nil })), false},
		{"UnknownTenant", "Bearer " + mint(t, jwt.SigningMethodHS256, testJWTSecret, kid, with(func(c *accessClaims) { c.Subject = "ten_nope" })), false},
		{"CredentialOfAnotherTenant", "Bearer " + mint(t, jwt.SigningMethodHS256, testJWTSecret, kid, with(func(c *accessClaims) { c.ClientID = "cli_other" })), false},
		{"AdminKeyAsMerchantToken", "Bearer " + testAdminKey, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r resp
			if tc.header == "" {
				r = e.do("GET", "/v1/me", "")
			} else {
				r = e.do("GET", "/v1/me", "", "Authorization", tc.header)
			}
			require.Equal(t, 401, r.status, string(r.body))
			require.Equal(t, "invalid_token", r.code(t))
			require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
			if tc.expired {
				require.Equal(t, `Bearer error="invalid_token", error_description="The access token expired"`, r.header.Get("WWW-Authenticate"))
				require.Contains(t, string(r.body), "the access token has expired")
				return
			}
			require.Equal(t, `Bearer error="invalid_token"`, r.header.Get("WWW-Authenticate"))
			require.NotContains(t, string(r.body), "expired")
		})
	}

	t.Run("ExpiredByClock", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		_, cid, secret := e.onboard(simpleTenant)
		tok := e.token(cid, secret)
		require.Equal(t, 200, e.me(tok).status)
		e.clock.Advance(15*time.Minute + clockSkew + time.Second)
		r := e.me(tok)
		require.Equal(t, 401, r.status)
		require.Equal(t, "invalid_token", r.code(t))
		require.Contains(t, r.header.Get("WWW-Authenticate"), `error_description="The access token expired"`)
	})
}

func TestAdminAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, cid, secret := e.onboard(simpleTenant)
	merchant := e.token(cid, secret)

	routes := []struct{ method, path, body string }{
		{"POST", "/admin/v1/tenants", simpleTenant},
		{"GET", "/admin/v1/tenants", ""},
		{"GET", "/admin/v1/tenants/" + id, ""},
		{"PATCH", "/admin/v1/tenants/" + id, `{"status":"suspended"}`},
		{"POST", "/admin/v1/tenants/" + id + "/credentials", ""},
	}
	headers := []struct{ name, value string }{
		{"MissingHeader", ""},
		{"WrongKey", "Bearer " + testAdminKey + "x"},
		{"KeyPrefix", "Bearer " + testAdminKey[:8]},
		{"NotBearer", "Basic " + testAdminKey},
		{"MerchantToken", "Bearer " + merchant},
	}
	for _, rt := range routes {
		for _, h := range headers {
			t.Run(h.name+"/"+rt.method+rt.path, func(t *testing.T) {
				t.Parallel()
				hs := []string{}
				if h.value != "" {
					hs = []string{"Authorization", h.value}
				}
				r := e.do(rt.method, rt.path, rt.body, hs...)
				require.Equal(t, 401, r.status, string(r.body))
				require.Equal(t, "unauthorized", r.code(t))
				require.Equal(t, "Bearer", r.header.Get("WWW-Authenticate"))
			})
		}
	}
	t.Run("NothingChanged", func(t *testing.T) {
		// Runs after the parallel subtests above have been registered but
		// may interleave; the status check is meaningful because no case
		// above is authorised.
		t.Parallel()
		require.Equal(t, 200, e.me(merchant).status)
	})
	t.Run("SchemeIsCaseInsensitive", func(t *testing.T) {
		t.Parallel()
		r := e.do("GET", "/admin/v1/tenants/"+id, "", "Authorization", "bearer "+testAdminKey)
		require.Equal(t, 200, r.status)
	})
	t.Run("UnknownTenantIs404", func(t *testing.T) {
		t.Parallel()
		for _, rt := range []struct{ method, path, body string }{
			{"GET", "/admin/v1/tenants/ten_missing", ""},
			{"PATCH", "/admin/v1/tenants/ten_missing", `{"status":"suspended"}`},
			{"POST", "/admin/v1/tenants/ten_missing/credentials", ""},
		} {
			r := e.admin(rt.method, rt.path, rt.body)
			require.Equal(t, 404, r.status, rt.method+rt.path)
			require.Equal(t, "tenant_not_found", r.code(t))
		}
	})
}

func TestSuspension(t *testing.T) {
	t.Parallel()

	t.Run("SameInstanceIsImmediate", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, func(c *Config) { c.StatusCacheTTL = 2 * time.Second })
		id, cid, secret := e.onboard(simpleTenant)
		tok := e.token(cid, secret)
		require.Equal(t, 200, e.me(tok).status) // now cached
		require.Equal(t, 200, e.admin("PATCH", "/admin/v1/tenants/"+id, `{"status":"suspended"}`).status)
		r := e.me(tok)
		require.Equal(t, 403, r.status)
		require.Equal(t, "tenant_suspended", r.code(t))
		tr := e.tokenReq(cid, secret)
		require.Equal(t, 403, tr.status)
		require.Equal(t, "tenant_suspended", tr.code(t))

		require.Equal(t, 200, e.admin("PATCH", "/admin/v1/tenants/"+id, `{"status":"active"}`).status)
		require.Equal(t, 200, e.me(tok).status)
	})

	t.Run("OtherInstanceWithinCacheTTL", func(t *testing.T) {
		t.Parallel()
		db := dbtest.Postgres(t)
		c := newClock()
		// The cache times its TTL with the process's own clock (not c):
		// a short one, waited for.
		ttl := func(cfg *Config) { cfg.StatusCacheTTL = 300 * time.Millisecond }
		a := newEnvOn(t, db, c, ttl)
		b := newEnvOn(t, db, c, ttl)
		id, cid, secret := a.onboard(simpleTenant)
		tok := a.token(cid, secret)
		require.Equal(t, 200, b.me(tok).status) // b caches "active"
		require.Equal(t, 200, a.admin("PATCH", "/admin/v1/tenants/"+id, `{"status":"suspended"}`).status)
		require.Equal(t, 403, a.me(tok).status)
		var r resp
		require.Eventually(t, func() bool { r = b.me(tok); return r.status == 403 }, 5*time.Second, 50*time.Millisecond,
			"b must see the suspension once its cache entry is TTL old")
		require.Equal(t, "tenant_suspended", r.code(t))
	})

	t.Run("NoCacheIsImmediateEverywhere", func(t *testing.T) {
		t.Parallel()
		db := dbtest.Postgres(t)
		c := newClock()
		a := newEnvOn(t, db, c)
		b := newEnvOn(t, db, c)
		id, cid, secret := a.onboard(simpleTenant)
		tok := a.token(cid, secret)
		require.Equal(t, 200, b.me(tok).status)
		require.Equal(t, 200, a.admin("PATCH", "/admin/v1/tenants/"+id, `{"status":"suspended"}`).status)
		require.Equal(t, 403, b.me(tok).status)
	})
}

func TestPreviousJWTSecretVerifies(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	c := newClock()
	old := newEnvOn(t, db, c)
	_, cid, secret := old.onboard(simpleTenant)
	oldTok := old.token(cid, secret)

	newSecret := []byte("rotated-jwt-secret-rotated-jwt-secret")
	rotated := newEnvOn(t, db, c, func(cfg *Config) { cfg.JWTSecret = newSecret; cfg.JWTPrevious = testJWTSecret })
	require.Equal(t, 200, rotated.me(oldTok).status, "a token under the previous key still verifies")
	newTok := rotated.token(cid, secret)
	require.Equal(t, 200, rotated.me(newTok).status)
	hdr, _, err := jwt.NewParser().ParseUnverified(newTok, &accessClaims{})
	require.NoError(t, err)
	require.Equal(t, keyID(newSecret), hdr.Header["kid"])
	require.NotContains(t, newTok, hex.EncodeToString(newSecret[:8]))

	dropped := newEnvOn(t, db, c, func(cfg *Config) { cfg.JWTSecret = newSecret })
	require.Equal(t, 401, dropped.me(oldTok).status, "once the previous key is dropped its tokens die")
	require.Equal(t, 200, dropped.me(newTok).status)
	require.Equal(t, 401, old.me(newTok).status, "the old key does not verify the new key's tokens")
}

// ADMIN_API_KEY's rotation: the previous key is accepted beside the new
// one, each use of it is logged (so the operator finds the scripts still
// on it), and once it is dropped it is refused.
func TestPreviousAdminKeyAccepted(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	c := newClock()
	newKey := "rotated-admin-key-0123456789"
	rotated := newEnvOn(t, db, c, func(cfg *Config) { cfg.AdminAPIKey = newKey; cfg.AdminPrevious = testAdminKey })
	get := func(e *env, key string) resp {
		return e.do("GET", "/admin/v1/tenants", "", "Authorization", "Bearer "+key)
	}
	require.Equal(t, 200, get(rotated, newKey).status)
	require.NotContains(t, rotated.logs.String(), "ADMIN_API_KEY_PREVIOUS")
	require.Equal(t, 200, get(rotated, testAdminKey).status, "the previous key still works")
	require.Contains(t, rotated.logs.String(), "admin request with ADMIN_API_KEY_PREVIOUS")
	require.Contains(t, rotated.logs.String(), `"remote":`, "the caller can be found")

	// The audit log tells which key made each change while both work.
	for key, actor := range map[string]string{newKey: "admin", testAdminKey: "admin:previous_key"} {
		id, _, _ := rotated.onboard(`{"name":"Ada Stores","default_provider":"simulator"}`)
		r := rotated.do("PATCH", "/admin/v1/tenants/"+id, `{"name":"Ada's"}`, "Authorization", "Bearer "+key, "Content-Type", "application/json")
		require.Equal(t, 200, r.status, string(r.body))
		var actors []string
		require.NoError(t, db.Raw(`SELECT actor FROM audit_events WHERE target_id = ? AND action = 'tenant.updated'`, id).Scan(&actors).Error)
		require.Equal(t, []string{actor}, actors)
	}
	require.NotContains(t, rotated.logs.String(), testAdminKey)
	require.Equal(t, 401, get(rotated, testAdminKey+"x").status)
	require.Equal(t, 401, get(rotated, "").status)

	dropped := newEnvOn(t, db, c, func(cfg *Config) { cfg.AdminAPIKey = newKey })
	require.Equal(t, 401, get(dropped, testAdminKey).status, "once dropped, the previous key is refused")
	require.Equal(t, 200, get(dropped, newKey).status)
}

func TestRotateCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, cid, secret := e.onboard(simpleTenant)
	oldTok := e.token(cid, secret)

	r := e.admin("POST", "/admin/v1/tenants/"+id+"/credentials", "")
	require.Equal(t, 201, r.status, string(r.body))
	require.Equal(t, "no-store", r.header.Get("Cache-Control"))
	m := r.json(t)
	require.Equal(t, id, m["tenant_id"])
	newCID, newSecret := m["client_id"].(string), m["client_secret"].(string)
	require.NotEqual(t, cid, newCID)
	require.NotEqual(t, secret, newSecret)

	t.Run("OldSecretIsDead", func(t *testing.T) {
		r := e.tokenReq(cid, secret)
		require.Equal(t, 401, r.status)
		require.Equal(t, "invalid_client", r.code(t))
	})
	t.Run("OldTokensAreDead", func(t *testing.T) {
		require.Equal(t, 401, e.me(oldTok).status)
	})
	t.Run("NewSecretWorks", func(t *testing.T) {
		require.Equal(t, 200, e.me(e.token(newCID, newSecret)).status)
	})
	t.Run("NewSecretWithOldClientIDFails", func(t *testing.T) {
		require.Equal(t, 401, e.tokenReq(cid, newSecret).status)
	})
}

func TestTokenEndpointErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, cid, secret := e.onboard(simpleTenant)
	_, cid2, secret2 := e.onboard(`{"name":"Suspended Co","default_provider":"simulator","status":"suspended"}`)
	form := "application/x-www-form-urlencoded"

	cases := []struct {
		name, ctype, body, auth string
		status                  int
		code                    string
		detail                  string // "": not checked, else a substring
	}{
		{"JSONBody", "application/json", `{"grant_type":"client_credentials"}`, basic(cid, secret), 400, "invalid_request", "must be application/x-www-form-urlencoded (grant_type=client_credentials)"},
		// curl -u id:secret without -d: no body, no type.
		{"NoBody", "", "", basic(cid, secret), 400, "invalid_request", "send grant_type=client_credentials as an application/x-www-form-urlencoded body"},
		{"MissingGrantType", form, "scope=x", basic(cid, secret), 400, "invalid_request", ""},
		{"DuplicateGrantType", form, "grant_type=client_credentials&grant_type=client_credentials", basic(cid, secret), 400, "invalid_request", ""},
		{"PasswordGrant", form, "grant_type=password", basic(cid, secret), 400, "unsupported_grant_type", ""},
		{"BodyAndBasic", form, "grant_type=client_credentials&client_id=" + cid + "&client_secret=" + secret, basic(cid, secret), 400, "invalid_request", ""},
		{"BodySecretAndBasic", form, "grant_type=client_credentials&client_secret=" + secret, basic(cid, secret), 400, "invalid_request", ""},
		{"DuplicateClientID", form, "grant_type=client_credentials&client_id=" + cid + "&client_id=" + cid + "&client_secret=" + secret, "", 400, "invalid_request", ""},
		{"OverlongBodySecret", form, "grant_type=client_credentials&client_id=" + cid + "&client_secret=" + strings.Repeat("x", 2000), "", 400, "invalid_request", ""},
		{"BodyWithoutSecret", form, "grant_type=client_credentials&client_id=" + cid, "", 401, "invalid_client", ""},
		{"BodyWithEmptySecret", form, "grant_type=client_credentials&client_id=" + cid + "&client_secret=", "", 401, "invalid_client", ""},
		{"BodyWrongSecret", form, "grant_type=client_credentials&client_id=" + cid + "&client_secret=" + secret + "x", "", 401, "invalid_client", ""},
		{"BodySuspendedTenant", form, "grant_type=client_credentials&client_id=" + cid2 + "&client_secret=" + secret2, "", 403, "tenant_suspended", ""},
		{"MissingBasic", form, "grant_type=client_credentials", "", 401, "invalid_client", ""},
		{"GarbledBasic", form, "grant_type=client_credentials", "Basic %%%", 401, "invalid_client", ""},
		{"BasicWithoutColon", form, "grant_type=client_credentials", "Basic Y2xpX3g=", 401, "invalid_client", ""},
		{"BearerInsteadOfBasic", form, "grant_type=client_credentials", "Bearer " + secret, 401, "invalid_client", ""},
		{"WrongSecret", form, "grant_type=client_credentials", basic(cid, secret+"x"), 401, "invalid_client", ""},
		{"OtherTenantsSecret", form, "grant_type=client_credentials", basic(cid, secret2), 401, "invalid_client", ""},
		{"UnknownClient", form, "grant_type=client_credentials", basic("cli_nope", secret), 401, "invalid_client", ""},
		{"SuspendedTenant", form, "grant_type=client_credentials", basic(cid2, secret2), 403, "tenant_suspended", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var hs []string
			if tc.ctype != "" {
				hs = append(hs, "Content-Type", tc.ctype)
			}
			if tc.auth != "" {
				hs = append(hs, "Authorization", tc.auth)
			}
			r := e.do("POST", "/v1/auth/token", tc.body, hs...)
			require.Equal(t, tc.status, r.status, string(r.body))
			require.Equal(t, tc.code, r.code(t))
			// RFC 6749 §5.2's member, for OAuth client libraries.
			var body map[string]any
			require.NoError(t, json.Unmarshal(r.body, &body))
			want := tc.code
			if tc.code == "tenant_suspended" {
				want = "unauthorized_client"
			}
			require.Equal(t, want, body["error"])
			if tc.detail != "" {
				require.Contains(t, body["detail"], tc.detail)
			}
			if tc.status == 401 {
				require.Contains(t, r.header.Get("WWW-Authenticate"), "Basic")
			}
		})
	}
	_ = id
}

// TestTokenClientSecretPost: the credentials may come in the form body
// instead of HTTP Basic (RFC 6749 §2.3.1), and empty form fields beside
// HTTP Basic are no second method (Swagger UI sends them).
func TestTokenClientSecretPost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, cid, secret := e.onboard(simpleTenant)
	form := []string{"Content-Type", "application/x-www-form-urlencoded"}
	for _, tc := range []struct {
		name, body string
		headers    []string
	}{
		{"InBody", "grant_type=client_credentials&client_id=" + url.QueryEscape(cid) + "&client_secret=" + url.QueryEscape(secret), form},
		{"BasicWithEmptyFormFields", "grant_type=client_credentials&client_id=&client_secret=", append(form, "Authorization", basic(cid, secret))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := e.do("POST", "/v1/auth/token", tc.body, tc.headers...)
			require.Equal(t, 200, r.status, string(r.body))
			tok := r.json(t)["access_token"].(string)
			require.Equal(t, 200, e.me(tok).status)
			require.Equal(t, "no-store", r.header.Get("Cache-Control"))
		})
	}
}

func TestPatchTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, _, _ := e.onboard(`{"name":"Ada Stores","default_provider":"simulator","providers":{"paystack":{"secret_key":"sk_test_x"}}}`)
	path := "/admin/v1/tenants/" + id

	invalid := []struct {
		name, body, field string
	}{
		{"MalformedJSON", `{"status":`, "body"},
		{"NotAnObject", `["status"]`, "body"},
		{"TrailingData", `{"status":"active"} {}`, "body"},
		{"UnknownField", `{"colour":"red"}`, "colour"},
		{"WrongType", `{"status":1}`, "status"},
		{"SecretNotString", `{"providers":{"paystack":{"secret_key":1}}}`, "providers.paystack.secret_key"},
		{"AccountNotAnObject", `{"providers":{"paystack":"sk_test_x"}}`, "providers.paystack"},
		{"BadStatus", `{"status":"deleted"}`, "status"},
		{"EmptyName", `{"name":"  "}`, "name"},
		{"UnknownProvider", `{"providers":{"mpesa":{"key":"x"}}}`, "providers.mpesa"},
		{"MissingSecret", `{"providers":{"stripe":{"secret_key":"x"}}}`, "providers.stripe"},
		{"BlankSecret", `{"providers":{"paystack":{"secret_key":"  "}}}`, "providers.paystack"},
		{"SecretWithNewline", `{"providers":{"paystack":{"secret_key":"sk_test_abc\n"}}}`, "providers.paystack"},
		{"SecretWithTab", `{"providers":{"paystack":{"secret_key":"sk_test\tabc"}}}`, "providers.paystack"},
		{"UnknownSecretName", `{"providers":{"paystack":{"secret_key":"sk_test_x","secretkey":"sk_test_y"}}}`, "providers.paystack"},
		{"UnknownDefault", `{"default_provider":"mpesa"}`, "default_provider"},
		{"DefaultNotConfigured", `{"default_provider":"stripe"}`, "default_provider"},
		{"EmptyDefault", `{"default_provider":""}`, "default_provider"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			r := e.admin("PATCH", path, tc.body)
			require.Equal(t, 400, r.status, string(r.body))
			require.Equal(t, "invalid_request", r.code(t))
			errs, _ := r.json(t)["errors"].([]any)
			require.NotEmpty(t, errs, string(r.body))
			require.Equal(t, tc.field, errs[0].(map[string]any)["field"], string(r.body))
		})
	}

	t.Run("SetDefaultToConfiguredProvider", func(t *testing.T) {
		r := e.admin("PATCH", path, `{"default_provider":"paystack"}`)
		require.Equal(t, 200, r.status, string(r.body))
		require.Equal(t, "paystack", r.json(t)["default_provider"])
	})
	t.Run("RemovingDefaultsAccountIs400", func(t *testing.T) {
		r := e.admin("PATCH", path, `{"providers":{"paystack":null}}`)
		require.Equal(t, 400, r.status, string(r.body))
		require.Contains(t, string(r.body), "default_provider")
	})
	t.Run("AddAccountAndMakeItDefaultTogether", func(t *testing.T) {
		r := e.admin("PATCH", path, `{"default_provider":"stripe","providers":{"stripe":{"secret_key":"sk_s","webhook_secret":"wh_s"}}}`)
		require.Equal(t, 200, r.status, string(r.body))
		m := r.json(t)
		require.Equal(t, "stripe", m["default_provider"])
		require.Equal(t, []any{"paystack", "simulator", "stripe"}, m["providers"])
	})
	t.Run("RemoveAccount", func(t *testing.T) {
		r := e.admin("PATCH", path, `{"providers":{"paystack":null}}`)
		require.Equal(t, 200, r.status, string(r.body))
		require.Equal(t, []any{"simulator", "stripe"}, r.json(t)["providers"])
	})
	t.Run("RenameAndEmptyPatch", func(t *testing.T) {
		r := e.admin("PATCH", path, `{"name":"Ada Stores Ltd"}`)
		require.Equal(t, 200, r.status)
		require.Equal(t, "Ada Stores Ltd", r.json(t)["name"])
		r = e.admin("PATCH", path, `{}`)
		require.Equal(t, 200, r.status)
		require.Equal(t, "Ada Stores Ltd", r.json(t)["name"])
	})
	t.Run("InvalidPatchChangesNothing", func(t *testing.T) {
		r := e.admin("PATCH", path, `{"status":"suspended","default_provider":"mpesa"}`)
		require.Equal(t, 400, r.status)
		require.Equal(t, "active", e.admin("GET", path, "").json(t)["status"])
	})
}

func TestCreateTenantValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct{ name, body, field string }{
		{"MissingName", `{"default_provider":"simulator"}`, "name"},
		{"MissingDefault", `{"name":"x"}`, "default_provider"},
		{"DefaultNeedsSecrets", `{"name":"x","default_provider":"paystack"}`, "default_provider"},
		{"UnknownField", `{"name":"x","default_provider":"simulator","client_secret":"mine"}`, "client_secret"},
		{"BadStatus", `{"name":"x","default_provider":"simulator","status":"new"}`, "status"},
		{"ControlCharsInName", `{"name":"a\u0000b","default_provider":"simulator"}`, "name"},
		{"NullProvider", `{"name":"x","default_provider":"simulator","providers":{"paystack":null}}`, "providers.paystack"},
		{"SecretWithNewline", `{"name":"x","default_provider":"paystack","providers":{"paystack":{"secret_key":"sk_test_abc\n"}}}`, "providers.paystack"},
		{"SecretWithNUL", `{"name":"x","default_provider":"simulator","providers":{"paystack":{"secret_key":"sk\u0000"}}}`, "providers.paystack"},
		{"EmptyBody", ``, "body"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := e.admin("POST", "/admin/v1/tenants", tc.body)
			require.Equal(t, 400, r.status, string(r.body))
			require.Equal(t, "invalid_request", r.code(t))
			require.Contains(t, string(r.body), `"field":"`+tc.field+`"`)
		})
	}
	t.Run("DefaultWithItsSecrets", func(t *testing.T) {
		t.Parallel()
		r := e.admin("POST", "/admin/v1/tenants", `{"name":"x","default_provider":"paystack","providers":{"paystack":{"secret_key":"k"}}}`)
		require.Equal(t, 201, r.status, string(r.body))
	})
}

func TestListTenantsPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []string
	for i := range 5 {
		id, _, _ := e.onboard(fmt.Sprintf(`{"name":"T%d","default_provider":"simulator"}`, i))
		ids = append(ids, id)
		if i != 2 { // two tenants share a timestamp: the id breaks the tie
			e.clock.Advance(time.Millisecond)
		}
	}
	var got []string
	cursor := ""
	pages := 0
	for {
		path := "/admin/v1/tenants?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := e.admin("GET", path, "")
		require.Equal(t, 200, r.status, string(r.body))
		m := r.json(t)
		data := m["data"].([]any)
		require.LessOrEqual(t, len(data), 2)
		for _, d := range data {
			got = append(got, d.(map[string]any)["id"].(string))
			require.NotContains(t, d, "client_secret")
		}
		pages++
		next, _ := m["next_cursor"].(string)
		require.Equal(t, next != "", m["has_more"], "has_more says whether a next page follows")
		if next == "" {
			break
		}
		cursor = next
		require.Less(t, pages, 10)
	}
	require.Equal(t, 3, pages)
	require.ElementsMatch(t, ids, got)
	require.Len(t, got, 5)
	// oldest first (ids 2 and 3 may swap: same created_at, ordered by id)
	require.Equal(t, ids[:2], got[:2])
	require.Equal(t, ids[4], got[4])

	r := e.admin("GET", "/admin/v1/tenants", "")
	require.Len(t, r.json(t)["data"], 5)
	require.NotContains(t, r.json(t), "next_cursor")
	require.Equal(t, false, r.json(t)["has_more"])

	for _, q := range []string{"limit=0", "limit=101", "limit=-1", "limit=abc", "cursor=garbage", "cursor=" + "dGVuXw"} {
		t.Run("Bad/"+q, func(t *testing.T) {
			r := e.admin("GET", "/admin/v1/tenants?"+q, "")
			require.Equal(t, 400, r.status, string(r.body))
			require.Equal(t, "invalid_request", r.code(t))
		})
	}
}

func randomCanary() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "sk_test_CANARY_" + hex.EncodeToString(b)
}

func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	canary := randomCanary()
	canary2 := randomCanary()
	id, cid, secret := e.onboard(`{"name":"Ada Stores","default_provider":"paystack","providers":{"paystack":{"secret_key":"` + canary + `"}}}`)
	tok := e.token(cid, secret)
	require.Equal(t, 200, e.me(tok).status)
	require.Equal(t, 200, e.admin("GET", "/admin/v1/tenants/"+id, "").status)
	require.Equal(t, 200, e.admin("GET", "/admin/v1/tenants", "").status)
	require.Equal(t, 200, e.admin("PATCH", "/admin/v1/tenants/"+id, `{"providers":{"stripe":{"secret_key":"`+canary2+`","webhook_secret":"`+canary2+`"}}}`).status)
	// A failing request that carries a secret must not echo it either.
	require.Equal(t, 400, e.admin("PATCH", "/admin/v1/tenants/"+id, `{"providers":{"mpesa":{"key":"`+canary2+`"}},"x":1}`).status)
	require.Equal(t, 400, e.admin("PATCH", "/admin/v1/tenants/"+id, `{"providers":{"paystack":{"secret_key":"`+canary2+`"`).status)
	rot := e.admin("POST", "/admin/v1/tenants/"+id+"/credentials", "")
	require.Equal(t, 201, rot.status)
	newSecret := rot.json(t)["client_secret"].(string)

	t.Run("StoredEncrypted", func(t *testing.T) {
		var rows []struct {
			Provider string
			Secrets  []byte
		}
		require.NoError(t, e.db.Raw("SELECT provider, secrets FROM provider_accounts WHERE tenant_id = ?", id).Scan(&rows).Error)
		require.Len(t, rows, 2)
		for _, r := range rows {
			require.NotContains(t, string(r.Secrets), canary)
			require.NotContains(t, string(r.Secrets), canary2)
			require.NotContains(t, string(r.Secrets), "secret_key")
		}
		var hashes [][]byte
		require.NoError(t, e.db.Raw("SELECT secret_hash FROM tenant_credentials WHERE tenant_id = ?", id).Scan(&hashes).Error)
		require.Len(t, hashes, 2)
		for _, h := range hashes {
			require.NotContains(t, string(h), secret)
			require.NotContains(t, string(h), newSecret)
		}
	})
	t.Run("DecryptedForTheProvider", func(t *testing.T) {
		p, err := e.svc.Provider(t.Context(), id, "paystack")
		require.NoError(t, err)
		require.Equal(t, canary, p.(fakeProvider).secrets["secret_key"])
	})
	t.Run("NotInResponsesOrLogs", func(t *testing.T) {
		out := e.everything()
		require.NotContains(t, out, canary)
		require.NotContains(t, out, canary2)
		require.NotContains(t, e.logs.String(), secret)
		require.NotContains(t, e.logs.String(), newSecret)
		require.NotContains(t, e.logs.String(), tok)
		require.NotContains(t, e.logs.String(), testAdminKey)
		require.Contains(t, e.logs.String(), `"tenant created"`) // the logger was really wired
	})
}

func TestProviderLookup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, _, _ := e.onboard(simpleTenant)
	ctx := t.Context()

	t.Run("SimulatorWithoutAccount", func(t *testing.T) {
		p, err := e.svc.Provider(ctx, id, "simulator")
		require.NoError(t, err)
		require.Equal(t, "simulator", p.(fakeProvider).name)
	})
	t.Run("UnconfiguredProvider", func(t *testing.T) {
		_, err := e.svc.Provider(ctx, id, "paystack")
		require.ErrorIs(t, err, ErrProviderNotConfigured)
	})
	t.Run("UnknownTenant", func(t *testing.T) {
		_, err := e.svc.Provider(ctx, "ten_missing", "simulator")
		require.ErrorIs(t, err, ErrNotFound)
	})
	t.Run("UnregisteredProvider", func(t *testing.T) {
		_, err := e.svc.Provider(ctx, id, "mpesa")
		require.Error(t, err)
	})
}

// An admin request refused for its key is a WARN naming where it came from
// — someone trying keys, or a caller with an old one — once a minute at
// most, never the key it sent.
func TestRefusedAdminKeysAreLoggedThrottled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for range 5 {
		r := e.do("GET", "/admin/v1/tenants", "", "Authorization", "Bearer not-the-admin-key-0123456789abcdef")
		require.Equal(t, 401, r.status)
	}
	logs := e.logs.String()
	require.Equal(t, 1, strings.Count(logs, "admin request refused"), logs)
	require.Contains(t, logs, `"level":"WARN"`)
	require.Contains(t, logs, `"path":"/admin/v1/tenants"`)
	require.NotContains(t, logs, "not-the-admin-key", "never the key")
}

// An operator finds tenants by status and by a piece of their name, case
// folded, on both stores; LIKE's wildcards in the text are the characters
// themselves, and a filtered listing pages like any other.
func TestListTenantsFilters(t *testing.T) {
	t.Parallel()
	for name, db := range map[string]func(testing.TB) *gorm.DB{"postgres": dbtest.Postgres, "sqlite": dbtest.SQLite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, db(t), newClock())
			ids := map[string]string{}
			for _, n := range []string{"Ada Stores", "ada_kitchen", "Bob 100%", "Zed", "Adaline"} {
				id, _, _ := e.onboard(fmt.Sprintf(`{"name":%q,"default_provider":"simulator"}`, n))
				ids[n] = id
				e.clock.Advance(time.Millisecond)
			}
			require.Equal(t, 200, e.admin("PATCH", "/admin/v1/tenants/"+ids["Zed"], `{"status":"suspended"}`).status)
			names := func(query string) []string {
				t.Helper()
				var out []string
				cursor := ""
				for range 10 {
					path := "/admin/v1/tenants?limit=1&" + query
					if cursor != "" {
						path += "&cursor=" + cursor
					}
					r := e.admin("GET", path, "")
					require.Equal(t, 200, r.status, string(r.body))
					for _, d := range r.json(t)["data"].([]any) {
						out = append(out, d.(map[string]any)["name"].(string))
					}
					if cursor, _ = r.json(t)["next_cursor"].(string); cursor == "" {
						return out
					}
				}
				t.Fatal("too many pages")
				return nil
			}
			require.Equal(t, []string{"Ada Stores", "ada_kitchen", "Adaline"}, names("name=ADA"))
			require.Equal(t, []string{"ada_kitchen"}, names("name=_"), "_ is an underscore, not any character")
			require.Equal(t, []string{"Bob 100%"}, names("name=%25"), "% is a percent sign, not anything")
			require.Equal(t, []string{"Zed"}, names("status=suspended"))
			require.Empty(t, names("status=suspended&name=ada"))
			require.Len(t, names("status=active"), 4)
			for _, bad := range []string{"status=deleted", "name=%00", "name=" + strings.Repeat("a", 201)} {
				r := e.admin("GET", "/admin/v1/tenants?"+bad, "")
				require.Equal(t, 400, r.status, bad)
				require.Equal(t, "invalid_request", r.code(t))
			}
		})
	}
}

// An operator's retry after a lost answer must not onboard the merchant
// twice. Under an Idempotency-Key the retry creates nothing and says which
// tenant the key made — never its client secret, which exists in clear
// only in the first answer (the store keeps its hash) — so the operator
// rotates credentials rather than holding a second tenant nobody uses.
func TestCreateTenantUnderAnIdempotencyKeyCreatesOnce(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		e := newEnvOn(t, db, newClock())
		body := `{"name":"Once Stores","default_provider":"simulator"}`
		key := func(k string) []string {
			return []string{"Authorization", "Bearer " + testAdminKey, "Idempotency-Key", k}
		}
		tenantsNamed := func(name string) int64 {
			var n int64
			require.NoError(t, db.Table("tenants").Where("name = ?", name).Count(&n).Error)
			return n
		}

		first := e.do("POST", "/admin/v1/tenants", body, key("onboard-once-1")...)
		require.Equal(t, 201, first.status, string(first.body))
		created := first.json(t)
		id, secret := created["id"].(string), created["client_secret"].(string)

		again := e.do("POST", "/admin/v1/tenants", body, key("onboard-once-1")...)
		require.Equal(t, 409, again.status, string(again.body))
		require.Equal(t, "application/problem+json", again.header.Get("Content-Type"))
		require.Equal(t, "tenant_already_created", again.code(t))
		require.Equal(t, id, again.json(t)["tenant_id"])
		require.Equal(t, "/admin/v1/tenants/"+id, again.header.Get("Location"))
		require.NotContains(t, string(again.body), secret)
		require.NotContains(t, string(again.body), "client_secret")
		require.EqualValues(t, 1, tenantsNamed("Once Stores"))
		var events int64
		require.NoError(t, db.Table("audit_events").Where("target_id = ? AND action = ?", id, "tenant.created").Count(&events).Error)
		require.EqualValues(t, 1, events, "a replay records no creation")
		// The first answer's credentials are the tenant's, untouched.
		require.Equal(t, 200, e.tokenReq(created["client_id"].(string), secret).status)

		// The key names the creation, not the body: another body under it
		// is told the tenant the key made, and creates nothing either.
		other := e.do("POST", "/admin/v1/tenants", `{"name":"Other Stores","default_provider":"simulator"}`, key("onboard-once-1")...)
		require.Equal(t, 409, other.status, string(other.body))
		require.Equal(t, id, other.json(t)["tenant_id"])
		require.EqualValues(t, 0, tenantsNamed("Other Stores"))

		// Without a key each call is another tenant, as before.
		e.onboard(`{"name":"Twice Stores","default_provider":"simulator"}`)
		e.onboard(`{"name":"Twice Stores","default_provider":"simulator"}`)
		require.EqualValues(t, 2, tenantsNamed("Twice Stores"))

		// A refused first attempt stores no key: its corrected retry creates.
		bad := e.do("POST", "/admin/v1/tenants", `{"name":"Late Stores"}`, key("onboard-once-2")...)
		require.Equal(t, 400, bad.status, string(bad.body))
		fixed := e.do("POST", "/admin/v1/tenants", `{"name":"Late Stores","default_provider":"simulator"}`, key("onboard-once-2")...)
		require.Equal(t, 201, fixed.status, string(fixed.body))

		// Retries racing each other: one tenant, one 201, the rest told it.
		const racers = 6
		statuses := make(chan resp, racers)
		var wg sync.WaitGroup
		for range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses <- e.do("POST", "/admin/v1/tenants", `{"name":"Race Stores","default_provider":"simulator"}`, key("onboard-race")...)
			}()
		}
		wg.Wait()
		close(statuses)
		var won int
		ids := map[string]bool{}
		for r := range statuses {
			switch r.status {
			case 201:
				won++
				ids[r.json(t)["id"].(string)] = true
			case 409:
				ids[r.json(t)["tenant_id"].(string)] = true
			default:
				t.Fatalf("racing retry answered %d: %s", r.status, r.body)
			}
		}
		require.Equal(t, 1, won)
		require.Len(t, ids, 1)
		require.EqualValues(t, 1, tenantsNamed("Race Stores"))
	})
}

func TestCreateTenantRefusesAMalformedIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, k := range map[string]string{
		"Quoted": `"k"`, "ControlByte": "a\tb", "NotASCII": "caf\xc3\xa9", "Long": strings.Repeat("k", 256),
	} {
		req := httptest.NewRequest("POST", "/admin/v1/tenants", strings.NewReader(`{"name":"Refused Stores","default_provider":"simulator"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		req.Header["Idempotency-Key"] = []string{k}
		res, err := e.app.Test(req, -1)
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, 400, res.StatusCode, "%s: %s", name, b)
		require.Contains(t, string(b), `"code":"idempotency_key_invalid"`, name)
	}
	twice := httptest.NewRequest("POST", "/admin/v1/tenants", strings.NewReader(`{"name":"Refused Stores","default_provider":"simulator"}`))
	twice.Header.Set("Content-Type", "application/json")
	twice.Header.Set("Authorization", "Bearer "+testAdminKey)
	twice.Header.Add("Idempotency-Key", "one")
	twice.Header.Add("Idempotency-Key", "two")
	res, err := e.app.Test(twice, -1)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 400, res.StatusCode)
	var n int64
	require.NoError(t, e.db.Table("tenants").Where("name = ?", "Refused Stores").Count(&n).Error)
	require.Zero(t, n)
}
