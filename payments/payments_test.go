package payments_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/providers"
)

func body(method string) map[string]any {
	return map[string]any{
		"amount": 5000, "currency": "NGN", "email": "ada@example.com",
		"payment_method": method, "description": "Order #1001",
		"metadata": map[string]string{"order": "1001"},
	}
}

func raw(v any) []byte { b, _ := json.Marshal(v); return b }

func charges(t *testing.T, g *apptest.Gateway, merchantID, key string) int {
	t.Helper()
	n, err := g.App.Sim.Charges(context.Background(), providers.Reference(merchantID, key))
	require.NoError(t, err)
	return n
}

func rows(t *testing.T, g *apptest.Gateway, merchantID string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, g.App.DB().Table("payments").Where("merchant_id = ?", merchantID).Count(&n).Error)
	return n
}

// requireReplay checks that a replay is the first answer byte for byte.
func requireReplay(t *testing.T, first, again apptest.Response) {
	t.Helper()
	require.Equal(t, first.StatusCode, again.StatusCode)
	require.Equal(t, string(first.Body), string(again.Body), "replay body must be byte-identical")
	require.Equal(t, first.Header.Get("Content-Type"), again.Header.Get("Content-Type"))
	require.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))
}

// TestContract walks the idempotency contract table on both stores: what
// the API promises holds on the embedded SQLite of `make run` too.
func TestContract(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) { t.Parallel(); contract(t, apptest.Start(t)) })
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); contract(t, apptest.Start(t, apptest.SQLite())) })
}

func contract(t *testing.T, g *apptest.Gateway) {
	m := g.Onboard(nil)

	t.Run("SuccessIs201AndReplaysByteForByte", func(t *testing.T) {
		t.Parallel()
		first := g.Pay(m, "k-success", body("sim_success"))
		require.Equal(t, http.StatusCreated, first.StatusCode, string(first.Body))
		p := first.JSON(t)
		require.Equal(t, "succeeded", p["status"])
		require.Equal(t, "/v1/payments/"+p["id"].(string), first.Header.Get("Location"))
		require.Equal(t, float64(5000), p["amount"])
		require.NotContains(t, string(first.Body), "sim_success", "the payment method token is not echoed")

		again := g.Pay(m, "k-success", body("sim_success"))
		requireReplay(t, first, again)
		require.Equal(t, 1, charges(t, g, m.ID, "k-success"))
	})

	t.Run("DeclineIsACompleted402", func(t *testing.T) {
		t.Parallel()
		first := g.Pay(m, "k-decline", body("sim_decline"))
		require.Equal(t, http.StatusPaymentRequired, first.StatusCode)
		require.Equal(t, "card_declined", first.Code(t))
		require.Equal(t, "application/problem+json", first.Header.Get("Content-Type"))
		payment := first.JSON(t)["payment"].(map[string]any)
		require.Equal(t, "failed", payment["status"])
		requireReplay(t, first, g.Pay(m, "k-decline", body("sim_decline")))
	})

	t.Run("MissingKeyIs400", func(t *testing.T) {
		t.Parallel()
		r := g.Do("POST", "/v1/payments", raw(body("sim_success")), "Authorization", "Bearer "+m.Token)
		require.Equal(t, http.StatusBadRequest, r.StatusCode)
		require.Equal(t, "idempotency_key_missing", r.Code(t))
		require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	})

	t.Run("InvalidKeysAre400", func(t *testing.T) {
		t.Parallel()
		for _, key := range []string{strings.Repeat("x", 256), "caf\u00e9", "tab\there", `""`} {
			r := g.Pay(m, key, body("sim_success"))
			require.Equal(t, http.StatusBadRequest, r.StatusCode, key)
			require.Equal(t, "idempotency_key_invalid", r.Code(t), key)
		}
	})

	t.Run("QuotedKeyIsTheBareKey", func(t *testing.T) {
		t.Parallel()
		first := g.Pay(m, "8e03978e-quoted", body("sim_success"))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		requireReplay(t, first, g.Pay(m, `"8e03978e-quoted"`, body("sim_success")))
	})

	t.Run("BodyOver1MiBIs413AndStoresNothing", func(t *testing.T) {
		t.Parallel()
		r := g.Oversized("POST", "/v1/payments", 1<<20+1, "Authorization", "Bearer "+m.Token, "Idempotency-Key", "k-big")
		require.Equal(t, http.StatusRequestEntityTooLarge, r.StatusCode)
		require.Equal(t, "body_too_large", r.Code(t))
		_, err := g.App.Keys.Get(context.Background(), m.ID, "k-big")
		require.ErrorIs(t, err, idempotency.ErrNotFound)
	})

	t.Run("ValidationFailureReleasesTheKey", func(t *testing.T) {
		t.Parallel()
		cases := map[string]map[string]any{
			"ZeroAmount":     {"amount": 0},
			"NegativeAmount": {"amount": -5},
			"FloatAmount":    {"amount": 50.5},
			"StringAmount":   {"amount": "5000"},
			"BadCurrency":    {"currency": "XYZ"},
			"BadEmail":       {"email": "not-an-email"},
			"NoMethod":       {"payment_method": ""},
			"UnknownField":   {"surprise": true},
			"NoSuchProvider": {"provider": "paystack"},
		}
		for name, change := range cases {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				key := "k-invalid-" + name
				b := body("sim_success")
				for k, v := range change {
					b[k] = v
				}
				r := g.Pay(m, key, b)
				require.Equal(t, http.StatusBadRequest, r.StatusCode, string(r.Body))
				require.Equal(t, "invalid_request", r.Code(t))
				require.NotEmpty(t, r.JSON(t)["errors"])
				_, err := g.App.Keys.Get(context.Background(), m.ID, key)
				require.ErrorIs(t, err, idempotency.ErrNotFound, "the key is released")

				fixed := g.Pay(m, key, body("sim_success"))
				require.Equal(t, http.StatusCreated, fixed.StatusCode, string(fixed.Body))
			})
		}
	})

	t.Run("MalformedJSONIs400", func(t *testing.T) {
		t.Parallel()
		r := g.Pay(m, "k-garbage", []byte(`{"amount":`))
		require.Equal(t, http.StatusBadRequest, r.StatusCode)
		require.Equal(t, "invalid_request", r.Code(t))
	})

	t.Run("SameKeyOtherBodyIs422", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, http.StatusCreated, g.Pay(m, "k-mismatch", body("sim_success")).StatusCode)
		other := body("sim_success")
		other["amount"] = 9999
		r := g.Pay(m, "k-mismatch", other)
		require.Equal(t, http.StatusUnprocessableEntity, r.StatusCode)
		require.Equal(t, "idempotency_key_mismatch", r.Code(t))
	})

	t.Run("SameKeyWhileOwnerHoldsLeaseIs409", func(t *testing.T) {
		t.Parallel()
		b := raw(body("sim_success"))
		_, _, err := g.App.Keys.Claim(context.Background(), idempotency.ClaimParams{
			MerchantID: m.ID, Key: "k-busy", Lease: time.Hour,
			RequestHash: idempotency.Fingerprint("POST", "/v1/payments", b),
		})
		require.NoError(t, err)
		r := g.Pay(m, "k-busy", b)
		require.Equal(t, http.StatusConflict, r.StatusCode)
		require.Equal(t, "idempotency_key_in_use", r.Code(t))
		require.Equal(t, "1", r.Header.Get("Retry-After"))
	})

	t.Run("LapsedLeaseIsTakenOver", func(t *testing.T) {
		t.Parallel()
		b := raw(body("sim_success"))
		_, _, err := g.App.Keys.Claim(context.Background(), idempotency.ClaimParams{
			MerchantID: m.ID, Key: "k-lapsed", Lease: -time.Second,
			RequestHash: idempotency.Fingerprint("POST", "/v1/payments", b),
		})
		require.NoError(t, err)
		r := g.Pay(m, "k-lapsed", b)
		require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
		require.Equal(t, 1, charges(t, g, m.ID, "k-lapsed"))
	})

	t.Run("UnknownOutcomeIs202ThenRetrySettlesWithOneCharge", func(t *testing.T) {
		t.Parallel()
		first := g.Pay(m, "k-timeout", body("sim_timeout"))
		require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
		require.Equal(t, "processing", first.JSON(t)["status"])
		require.NotEmpty(t, first.Header.Get("Location"))
		rec, err := g.App.Keys.Get(context.Background(), m.ID, "k-timeout")
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusInProgress, rec.Status)

		second := g.Pay(m, "k-timeout", body("sim_timeout"))
		require.Equal(t, http.StatusCreated, second.StatusCode, string(second.Body))
		require.Equal(t, first.JSON(t)["id"], second.JSON(t)["id"], "the same payment")
		require.Equal(t, float64(2), second.JSON(t)["attempts"])
		require.Equal(t, 1, charges(t, g, m.ID, "k-timeout"))
		requireReplay(t, second, g.Pay(m, "k-timeout", body("sim_timeout")))
	})

	t.Run("ProviderDownIs503AndReleasesTheKey", func(t *testing.T) {
		t.Parallel()
		r := g.Pay(m, "k-down", body("sim_unavailable"))
		require.Equal(t, http.StatusServiceUnavailable, r.StatusCode)
		require.Equal(t, "provider_unavailable", r.Code(t))
		require.NotEmpty(t, r.Header.Get("Retry-After"))
		_, err := g.App.Keys.Get(context.Background(), m.ID, "k-down")
		require.ErrorIs(t, err, idempotency.ErrNotFound)
		require.Equal(t, 0, charges(t, g, m.ID, "k-down"))

		// The provider is back: the retry charges once, on the same payment row.
		ok := g.Pay(m, "k-down", body("sim_success"))
		require.Equal(t, http.StatusCreated, ok.StatusCode, string(ok.Body))
		require.Equal(t, r.JSON(t)["payment_id"], ok.JSON(t)["id"])
		require.Equal(t, 1, charges(t, g, m.ID, "k-down"))
	})

	t.Run("PendingIs202", func(t *testing.T) {
		t.Parallel()
		r := g.Pay(m, "k-pending", body("sim_pending"))
		require.Equal(t, http.StatusAccepted, r.StatusCode)
		require.Equal(t, "processing", r.JSON(t)["status"])
	})
}

func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	a, b := g.Onboard(nil), g.Onboard(nil)

	t.Run("OtherTenantSameKeyIsIndependent", func(t *testing.T) {
		ra := g.Pay(a, "shared-key", body("sim_success"))
		rb := g.Pay(b, "shared-key", body("sim_success"))
		require.Equal(t, http.StatusCreated, ra.StatusCode)
		require.Equal(t, http.StatusCreated, rb.StatusCode)
		require.Empty(t, rb.Header.Get("Idempotent-Replayed"))
		pa, pb := ra.JSON(t), rb.JSON(t)
		require.NotEqual(t, pa["id"], pb["id"])
		require.NotEqual(t, pa["provider_reference"], pb["provider_reference"])
		require.Equal(t, 1, charges(t, g, a.ID, "shared-key"))
		require.Equal(t, 1, charges(t, g, b.ID, "shared-key"))
	})

	t.Run("CrossTenantReadIs404", func(t *testing.T) {
		r := g.Pay(a, "private", body("sim_success"))
		id := r.JSON(t)["id"].(string)
		require.Equal(t, http.StatusOK, g.Get(a, "/v1/payments/"+id).StatusCode)
		other := g.Get(b, "/v1/payments/"+id)
		require.Equal(t, http.StatusNotFound, other.StatusCode)
		require.Equal(t, "payment_not_found", other.Code(t))
		list := g.Get(b, "/v1/payments").JSON(t)
		for _, p := range list["data"].([]any) {
			require.NotEqual(t, id, p.(map[string]any)["id"])
		}
	})
}

func TestGetMatchesCreate(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	created := g.Pay(m, "k1", body("sim_success"))
	got := g.Get(m, created.Header.Get("Location"))
	require.Equal(t, http.StatusOK, got.StatusCode)
	require.JSONEq(t, string(created.Body), string(got.Body))
}

func TestListPagesNewestFirstAndFilters(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	var ids []string
	for i := range 5 {
		method := "sim_success"
		if i%2 == 1 {
			method = "sim_decline"
		}
		r := g.Pay(m, fmt.Sprintf("list-%d", i), body(method))
		var id string
		if r.StatusCode == http.StatusCreated {
			id = r.JSON(t)["id"].(string)
		} else {
			id = r.JSON(t)["payment"].(map[string]any)["id"].(string)
		}
		ids = append([]string{id}, ids...) // newest first
	}
	var seen []string
	cursor := ""
	for page := 0; page < 5; page++ {
		path := "/v1/payments?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := g.Get(m, path)
		require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
		var pg struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
			HasMore    bool   `json:"has_more"`
			NextCursor string `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &pg))
		for _, p := range pg.Data {
			seen = append(seen, p.ID)
		}
		if !pg.HasMore {
			break
		}
		cursor = pg.NextCursor
	}
	require.Equal(t, ids, seen)

	failed := g.Get(m, "/v1/payments?status=failed").JSON(t)["data"].([]any)
	require.Len(t, failed, 2)

	for _, q := range []string{"status=nope", "limit=0", "limit=101", "cursor=%%%", "statuss=failed", "tenant_id=x"} {
		r := g.Get(m, "/v1/payments?"+q)
		require.Equal(t, http.StatusBadRequest, r.StatusCode, q)
		require.Equal(t, "invalid_request", r.Code(t))
	}
}

// TestConcurrentRetriesChargeOnce is the double tap at scale: 100 identical
// requests on one key at once.
func TestConcurrentRetriesChargeOnce(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("SIMULATOR_LATENCY", "50ms"))
	m := g.Onboard(nil)
	b := raw(body("sim_success"))

	const n = 100
	results := make([]apptest.Response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = g.Pay(m, "storm", b)
		}()
	}
	close(start)
	wg.Wait()

	var created []apptest.Response
	for _, r := range results {
		switch r.StatusCode {
		case http.StatusCreated:
			created = append(created, r)
		case http.StatusConflict:
			require.Equal(t, "idempotency_key_in_use", r.Code(t))
			require.Equal(t, "1", r.Header.Get("Retry-After"))
		default:
			t.Fatalf("unexpected answer %d: %s", r.StatusCode, r.Body)
		}
	}
	require.NotEmpty(t, created)
	owner := 0
	for _, r := range created {
		if r.Header.Get("Idempotent-Replayed") == "" {
			owner++
		}
		require.Equal(t, string(created[0].Body), string(r.Body))
	}
	require.Equal(t, 1, owner, "exactly one request did the work")
	require.Equal(t, 1, charges(t, g, m.ID, "storm"))
	require.Equal(t, int64(1), rows(t, g, m.ID))
}
