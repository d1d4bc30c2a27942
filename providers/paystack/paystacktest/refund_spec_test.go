package paystacktest_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
)

// TestRefundAnswersMatchTheSpec checks the fake's own answers to the
// refund endpoints against the responses Paystack's spec declares, so the
// adapter is tested against Paystack's wire shape and not just the fake's.
func TestRefundAnswersMatchTheSpec(t *testing.T) {
	t.Parallel()
	spec, err := openapi3.NewLoader().LoadFromData(paystacktest.Spec)
	require.NoError(t, err)
	fake := paystacktest.New(t)
	p, err := paystack.New(paystack.Config{BaseURL: fake.URL})(providers.Secrets{"secret_key": paystacktest.SecretKey})
	require.NoError(t, err)
	ctx := context.Background()
	ref := providers.Reference("m1", "spec")
	charge, err := p.Charge(ctx, providers.ChargeRequest{Reference: ref, Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: paystacktest.TokenSuccess})
	require.NoError(t, err)

	call := func(method, path, specPath string, params map[string]string, body string) []byte {
		t.Helper()
		req, err := http.NewRequest(method, fake.URL+path, bytes.NewBufferString(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+paystacktest.SecretKey)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(got))
		item := spec.Paths.Find(specPath)
		require.NotNil(t, item, specPath)
		op := item.GetOperation(method)
		require.NotNil(t, op)
		err = openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{
				Request: req, PathParams: params,
				Route: &routers.Route{Spec: spec, Path: specPath, PathItem: item, Method: method, Operation: op},
			},
			Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(got)),
		})
		require.NoError(t, err, "%s %s: %s", method, path, got)
		return got
	}
	created := call(http.MethodPost, "/refund", "/refund", nil,
		`{"transaction":"`+ref+`","amount":1000,"currency":"NGN","merchant_note":"or-spec"}`)
	require.Contains(t, string(created), `"status":"pending"`)
	call(http.MethodGet, "/refund?transaction="+charge.TransactionID+"&perPage=10&page=1", "/refund", nil, "")
	id := strconv.Itoa(15581001)
	call(http.MethodGet, "/refund/"+id, "/refund/{id}", map[string]string{"id": id}, "")
}
