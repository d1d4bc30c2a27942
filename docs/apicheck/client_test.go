// Package apicheck_test runs the published description's consumers against
// the real gateway: a Go client oapi-codegen generated from
// docs/openapi.json, Swagger UI in headless Chromium, and the READMEs'
// walkthroughs. Whatever they cannot do is a defect in the description
// (or the README), not in the test. `make api-check` runs it.
package apicheck_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/docs/apicheck/oncepay"
)

func bearer(token string) oncepay.ClientOption {
	return oncepay.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	})
}

func header(name, value string) oncepay.RequestEditorFn {
	return func(_ context.Context, r *http.Request) error {
		r.Header.Set(name, value)
		return nil
	}
}

func newClient(t *testing.T, url string, opts ...oncepay.ClientOption) *oncepay.ClientWithResponses {
	t.Helper()
	c, err := oncepay.NewClientWithResponses(url, append(opts, oncepay.WithHTTPClient(apptest.NewClient()))...)
	require.NoError(t, err)
	return c
}

func ptr[T any](v T) *T { return &v }

// TestGeneratedClientMerchantFlow: the merchant's first hour through the
// generated client only: onboard, token (both client authentications), a
// payment and its replay, a mismatch, a decline, an outage, reads, and
// errors decoded as problems with their codes.
func TestGeneratedClientMerchantFlow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := apptest.Start(t)

	admin := newClient(t, g.URL, bearer(apptest.AdminKey))
	onboard := oncepay.CreateTenantJSONRequestBody{Name: "Generated Stores", DefaultProvider: "simulator"}
	once := &oncepay.CreateTenantParams{IdempotencyKey: ptr("generated-onboard-1")}
	onboarded, err := admin.CreateTenantWithResponse(ctx, once, onboard)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, onboarded.StatusCode(), "%s", onboarded.Body)
	tenant := onboarded.JSON201
	require.NotEmpty(t, tenant.ClientSecret)
	require.Equal(t, oncepay.CreatedTenantStatusActive, tenant.Status)
	// A retry under the key creates nothing, and says which tenant it made.
	again, err := admin.CreateTenantWithResponse(ctx, once, onboard)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, again.StatusCode(), "%s", again.Body)
	require.Equal(t, "tenant_already_created", again.ApplicationproblemJSON409.Code)
	require.Equal(t, tenant.Id, again.ApplicationproblemJSON409.TenantId)
	require.Equal(t, "/admin/v1/tenants/"+tenant.Id, again.HTTPResponse.Header.Get("Location"))
	require.NotContains(t, string(again.Body), tenant.ClientSecret)

	// The token: client_secret_basic, then client_secret_post.
	anon := newClient(t, g.URL)
	basic := header("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(tenant.ClientId+":"+tenant.ClientSecret)))
	tok, err := anon.IssueTokenWithFormdataBodyWithResponse(ctx, oncepay.IssueTokenFormdataRequestBody{GrantType: oncepay.ClientCredentials}, basic)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, tok.StatusCode(), "%s", tok.Body)
	require.Equal(t, "Bearer", tok.JSON200.TokenType)
	tok, err = anon.IssueTokenWithFormdataBodyWithResponse(ctx, oncepay.IssueTokenFormdataRequestBody{
		GrantType: oncepay.ClientCredentials, ClientId: &tenant.ClientId, ClientSecret: &tenant.ClientSecret})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, tok.StatusCode(), "%s", tok.Body)
	bad, err := anon.IssueTokenWithFormdataBodyWithResponse(ctx, oncepay.IssueTokenFormdataRequestBody{
		GrantType: oncepay.ClientCredentials, ClientId: &tenant.ClientId, ClientSecret: ptr("sk_wrong")})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, bad.StatusCode())
	require.Equal(t, "invalid_client", bad.ApplicationproblemJSON401.Code)

	m := newClient(t, g.URL, bearer(tok.JSON200.AccessToken))
	me, err := m.GetMeWithResponse(ctx)
	require.NoError(t, err)
	require.Equal(t, tenant.Id, me.JSON200.Id)

	// Create, then the replay of the same key and body.
	key := uuid.NewString()
	body := oncepay.CreatePaymentJSONRequestBody{Amount: 5000, Currency: "NGN", Email: "ada@example.com",
		PaymentMethod: "sim_success", Description: ptr("Order #1001"), Metadata: &map[string]string{"order": "1001"}}
	created, err := m.CreatePaymentWithResponse(ctx, &oncepay.CreatePaymentParams{IdempotencyKey: key}, body, header("X-Request-Id", "order-1001-try-1"))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), "%s", created.Body)
	p := created.JSON201
	require.Equal(t, oncepay.StatusSucceeded, p.Status)
	require.Equal(t, "/v1/payments/"+p.Id, *created.Headers201.Location)
	require.Equal(t, "order-1001-try-1", created.Headers201.XRequestId)
	require.Nil(t, created.Headers201.IdempotentReplayed)

	replay, err := m.CreatePaymentWithResponse(ctx, &oncepay.CreatePaymentParams{IdempotencyKey: key}, body)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, replay.StatusCode(), "%s", replay.Body)
	require.Equal(t, "true", *replay.Headers201.IdempotentReplayed)
	require.Equal(t, p.Id, replay.JSON201.Id)

	// 422: the same key with another body.
	other := body
	other.Amount = 6000
	mismatch, err := m.CreatePaymentWithResponse(ctx, &oncepay.CreatePaymentParams{IdempotencyKey: key}, other)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, mismatch.StatusCode())
	require.Equal(t, "idempotency_key_mismatch", mismatch.ApplicationproblemJSON422.Code)
	require.NotEmpty(t, mismatch.ApplicationproblemJSON422.RequestId)
	require.Equal(t, *mismatch.ApplicationproblemJSON422.RequestId, mismatch.Headers422.XRequestId)

	// 402: declined, and the problem carries the failed payment.
	declined := body
	declined.PaymentMethod = "sim_insufficient"
	dec, err := m.CreatePaymentWithResponse(ctx, &oncepay.CreatePaymentParams{IdempotencyKey: uuid.NewString()}, declined)
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, dec.StatusCode(), "%s", dec.Body)
	require.Equal(t, "card_declined", dec.ApplicationproblemJSON402.Code)
	require.Equal(t, "insufficient_funds", dec.ApplicationproblemJSON402.DeclineCode)
	require.Equal(t, oncepay.StatusFailed, dec.ApplicationproblemJSON402.Payment.Status)
	require.NotEmpty(t, dec.ApplicationproblemJSON402.Payment.Id)

	// 503: the provider is down; nothing charged, the key released, and
	// the payment it keeps named.
	down := body
	down.PaymentMethod = "sim_unavailable"
	unavail, err := m.CreatePaymentWithResponse(ctx, &oncepay.CreatePaymentParams{IdempotencyKey: uuid.NewString()}, down)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, unavail.StatusCode(), "%s", unavail.Body)
	require.Equal(t, "provider_unavailable", unavail.ApplicationproblemJSON503.Code)
	require.True(t, strings.HasPrefix(unavail.ApplicationproblemJSON503.PaymentId, "pay_"))
	require.NotNil(t, unavail.Headers503.RetryAfter)
	require.Positive(t, *unavail.Headers503.RetryAfter)

	// 400: a body that fails validation, with the field named.
	invalid := body
	invalid.Amount = 0
	inv, err := m.CreatePaymentWithResponse(ctx, &oncepay.CreatePaymentParams{IdempotencyKey: uuid.NewString()}, invalid)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, inv.StatusCode())
	require.Equal(t, "invalid_request", inv.ApplicationproblemJSON400.Code)
	require.Equal(t, "amount", (*inv.ApplicationproblemJSON400.Errors)[0].Field)

	// Reads.
	got, err := m.GetPaymentWithResponse(ctx, p.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, got.StatusCode())
	require.Equal(t, p.Id, got.JSON200.Id)
	require.Equal(t, map[string]string{"order": "1001"}, got.JSON200.Metadata)

	page, err := m.ListPaymentsWithResponse(ctx, &oncepay.ListPaymentsParams{Limit: ptr(1)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, page.StatusCode(), "%s", page.Body)
	require.Len(t, page.JSON200.Data, 1)
	require.True(t, page.JSON200.HasMore)
	next, err := m.ListPaymentsWithResponse(ctx, &oncepay.ListPaymentsParams{Limit: ptr(1), Cursor: page.JSON200.NextCursor})
	require.NoError(t, err)
	require.NotEqual(t, page.JSON200.Data[0].Id, next.JSON200.Data[0].Id)
	succeeded, err := m.ListPaymentsWithResponse(ctx, &oncepay.ListPaymentsParams{Status: ptr(oncepay.ListPaymentsParamsStatusSucceeded)})
	require.NoError(t, err)
	require.Len(t, succeeded.JSON200.Data, 1)
	require.Equal(t, p.Id, succeeded.JSON200.Data[0].Id)

	// A webhook endpoint (its secret shown once), and the events of the
	// payments above, newest first.
	hook, err := m.CreateWebhookEndpointWithResponse(ctx, &oncepay.CreateWebhookEndpointParams{IdempotencyKey: uuid.NewString()},
		oncepay.CreateWebhookEndpointJSONRequestBody{Url: "http://127.0.0.1:9/hooks", Events: &[]string{"payment.succeeded"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, hook.StatusCode(), string(hook.Body))
	require.True(t, strings.HasPrefix(*hook.JSON201.Secret, "whsec_"))
	evs, err := m.ListEventsWithResponse(ctx, &oncepay.ListEventsParams{Type: ptr(oncepay.ListEventsParamsTypePaymentSucceeded)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, evs.StatusCode(), string(evs.Body))
	require.Len(t, evs.JSON200.Data, 1)
	require.Equal(t, oncepay.EventTypePaymentSucceeded, evs.JSON200.Data[0].Type)
	badHook, err := m.CreateWebhookEndpointWithResponse(ctx, &oncepay.CreateWebhookEndpointParams{IdempotencyKey: uuid.NewString()},
		oncepay.CreateWebhookEndpointJSONRequestBody{Url: "ftp://nope"})
	require.NoError(t, err)
	require.Equal(t, "invalid_request", badHook.ApplicationproblemJSON400.Code)

	// Errors are problems with a code, in the field of their status.
	missing, err := m.GetPaymentWithResponse(ctx, "pay_doesnotexist")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, missing.StatusCode())
	require.Equal(t, "payment_not_found", missing.ApplicationproblemJSON404.Code)
	unauth, err := newClient(t, g.URL, bearer("not-a-token")).GetPaymentWithResponse(ctx, p.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, unauth.StatusCode())
	require.Equal(t, "invalid_token", unauth.ApplicationproblemJSON401.Code)
}

// TestGeneratedClientAdminDay: list, suspend and reactivate a tenant, and
// rotate its credentials, which stops tokens minted under the old ones.
func TestGeneratedClientAdminDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := apptest.Start(t)
	admin := newClient(t, g.URL, bearer(apptest.AdminKey))
	var ids []string
	for _, name := range []string{"Ada Stores", "Bola Foods"} {
		r, err := admin.CreateTenantWithResponse(ctx, nil, oncepay.CreateTenantJSONRequestBody{Name: name, DefaultProvider: "simulator"})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, r.StatusCode(), "%s", r.Body)
		ids = append(ids, r.JSON201.Id)
	}
	first, err := admin.ListTenantsWithResponse(ctx, &oncepay.ListTenantsParams{Limit: ptr(1)})
	require.NoError(t, err)
	require.Equal(t, []string{ids[0]}, []string{first.JSON200.Data[0].Id})
	rest, err := admin.ListTenantsWithResponse(ctx, &oncepay.ListTenantsParams{Cursor: first.JSON200.NextCursor})
	require.NoError(t, err)
	require.Equal(t, ids[1], rest.JSON200.Data[0].Id)
	require.Nil(t, rest.JSON200.NextCursor)

	creds, err := admin.RotateCredentialsWithResponse(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, creds.StatusCode(), "%s", creds.Body)
	m := g.Token(creds.JSON201.ClientId, creds.JSON201.ClientSecret)
	merchant := newClient(t, g.URL, bearer(m))

	suspended, err := admin.UpdateTenantWithResponse(ctx, ids[0], oncepay.UpdateTenantJSONRequestBody{Status: ptr(oncepay.UpdateTenantRequestStatusSuspended)})
	require.NoError(t, err)
	require.Equal(t, oncepay.TenantStatusSuspended, suspended.JSON200.Status)
	require.Eventually(t, func() bool {
		r, err := merchant.GetMeWithResponse(ctx)
		return err == nil && r.StatusCode() == http.StatusForbidden && r.ApplicationproblemJSON403.Code == "tenant_suspended"
	}, 10*time.Second, 50*time.Millisecond, "a suspended tenant's token stops")

	_, err = admin.UpdateTenantWithResponse(ctx, ids[0], oncepay.UpdateTenantJSONRequestBody{Status: ptr(oncepay.UpdateTenantRequestStatusActive)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := merchant.GetMeWithResponse(ctx)
		return err == nil && r.StatusCode() == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "reactivated, the same token works again")

	_, err = admin.RotateCredentialsWithResponse(ctx, ids[0])
	require.NoError(t, err)
	r, err := merchant.GetMeWithResponse(ctx)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, r.StatusCode(), "a token of the rotated-out credential stops")
	require.Equal(t, "invalid_token", r.ApplicationproblemJSON401.Code)
}
