package payments_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
)

// engines are the databases the review's store is tested on.
var engines = map[string][]apptest.Option{"postgres": nil, "sqlite": {apptest.SQLite()}}

// toReview ages a payment past REVIEW_AFTER and its key past
// SWEEP_STALE_AFTER, and sweeps: it goes to review.
func toReview(t *testing.T, g *apptest.Gateway) {
	t.Helper()
	ageKeys(t, g, time.Hour)
	dbtest.Age(t, g.App.DB(), 25*time.Hour, "payments", "created_at")
	require.Equal(t, 1, sweep(t, g).Review)
}

// dropAccount removes the merchant's Paystack account (the simulator its
// default now): nobody can ask Paystack about its payments.
func dropAccount(t *testing.T, g *apptest.Gateway, m apptest.Merchant) {
	t.Helper()
	path := "/admin/v1/tenants/" + m.ID
	require.Equal(t, http.StatusOK, g.Admin("PATCH", path, map[string]any{"default_provider": "simulator"}).StatusCode)
	require.Equal(t, http.StatusOK, g.Admin("PATCH", path, map[string]any{"providers": map[string]any{"paystack": nil}}).StatusCode)
}

// The operator desk shows why a payment is in review — the reason the
// gateway decided it on, and the provider's answer — kept when it was
// flagged; the merchant never sees it. One row per reason.
func TestTheOperatorSeesWhyAPaymentIsInReview(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		reason string
		// flag puts a payment in review (of m, or of a simulator
		// merchant of its own); it returns its merchant and id.
		flag func(t *testing.T, ps *paystacktest.Server, g *apptest.Gateway, m apptest.Merchant) (apptest.Merchant, string)
		// answer checks the provider's answer the review shows (nil: none).
		answer func(t *testing.T, a map[string]any)
	}{
		{"StillPending", "provider_pending", func(t *testing.T, _ *paystacktest.Server, g *apptest.Gateway, _ apptest.Merchant) (apptest.Merchant, string) {
			sim := g.Onboard(nil)
			r := g.Pay(sim, "pending", body("sim_pending"))
			require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			toReview(t, g)
			return sim, r.JSON(t)["id"].(string)
		}, func(t *testing.T, a map[string]any) {
			require.Equal(t, "pending", a["outcome"])
			require.NotEmpty(t, a["id"], "the provider's id of the charge")
		}},
		{"ReversedAtTheProvider", "provider_reversed", func(t *testing.T, ps *paystacktest.Server, g *apptest.Gateway, m apptest.Merchant) (apptest.Merchant, string) {
			ps.DropNextResponse()
			r := g.Pay(m, "reversed", body(paystacktest.TokenSuccess))
			require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			require.NoError(t, ps.Reverse(ledgerByKey(t, g, m.ID, "reversed").ProviderReference))
			toReview(t, g)
			return m, r.JSON(t)["id"].(string)
		}, func(t *testing.T, a map[string]any) {
			require.Equal(t, "reversed", a["outcome"])
			require.NotEmpty(t, a["id"])
		}},
		{"AnotherAmountUnderTheReference", "amount_mismatch", func(t *testing.T, ps *paystacktest.Server, g *apptest.Gateway, m apptest.Merchant) (apptest.Merchant, string) {
			adapter, err := paystack.New(paystack.Config{BaseURL: ps.URL})(providers.Secrets{"secret_key": paystacktest.SecretKey})
			require.NoError(t, err)
			_, err = adapter.Charge(context.Background(), providers.ChargeRequest{Reference: providers.Reference(m.ID, "taken"),
				Amount: 100, Currency: "NGN", Email: "ada@example.com", PaymentMethod: paystacktest.TokenSuccess})
			require.NoError(t, err)
			r := g.Pay(m, "taken", body(paystacktest.TokenSuccess)) // 5000 NGN
			require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			toReview(t, g)
			return m, r.JSON(t)["id"].(string)
		}, func(t *testing.T, a map[string]any) {
			require.Equal(t, "succeeded", a["outcome"], "the other charge's")
			require.EqualValues(t, 100, a["amount"])
			require.Equal(t, "NGN", a["currency"])
		}},
		{"LookupsKeptFailing", "lookup_failed", func(t *testing.T, ps *paystacktest.Server, g *apptest.Gateway, m apptest.Merchant) (apptest.Merchant, string) {
			ps.DropNextResponse()
			r := g.Pay(m, "unreachable", body(paystacktest.TokenSuccess))
			require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			ps.FailNext(http.StatusBadGateway) // the sweep's lookup
			toReview(t, g)
			return m, r.JSON(t)["id"].(string)
		}, func(t *testing.T, a map[string]any) {
			require.Equal(t, "unknown", a["error"])
			require.NotContains(t, a, "outcome")
		}},
		{"AccountRemoved", "provider_account_missing", func(t *testing.T, ps *paystacktest.Server, g *apptest.Gateway, m apptest.Merchant) (apptest.Merchant, string) {
			ps.DropNextResponse()
			r := g.Pay(m, "orphan", body(paystacktest.TokenSuccess))
			require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			dropAccount(t, g, m)
			toReview(t, g)
			return m, r.JSON(t)["id"].(string)
		}, nil},
		{"NotFoundYetByAPoll", "not_found_yet", func(t *testing.T, _ *paystacktest.Server, g *apptest.Gateway, _ apptest.Merchant) (apptest.Merchant, string) {
			// Charged, the answer lost, and not yet found by lookups: a
			// poll past REVIEW_AFTER whose last attempt is recent (its
			// lease lapsed) cannot release it, and flags it.
			sim := g.Onboard(nil)
			r := g.Pay(sim, "late", body("sim_late"))
			require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			id := r.JSON(t)["id"].(string)
			// Only the lease lapses: the attempt stays recent, within
			// SWEEP_STALE_AFTER (10 minutes here, so that no wall time a
			// loaded machine takes can make it stale), and the poll cannot
			// release it.
			dbtest.Age(t, g.App.DB(), time.Hour, "idempotency_keys", "locked_until")
			dbtest.Age(t, g.App.DB(), 25*time.Hour, "payments", "created_at")
			require.Equal(t, "requires_review", g.Get(sim, "/v1/payments/"+id).JSON(t)["status"])
			return sim, id
		}, func(t *testing.T, a map[string]any) {
			require.Equal(t, "not_found", a["outcome"])
		}},
	} {
		for engine, opts := range engines {
			t.Run(tc.name+"/"+engine, func(t *testing.T) {
				t.Parallel()
				ps, g, m := paystackMerchant(t, append(slices.Clone(opts), apptest.Env("SWEEP_STALE_AFTER", "10m"))...)
				before := time.Now().Add(-time.Minute)
				owner, id := tc.flag(t, ps, g, m)

				d := adminDo(g, "GET", "/admin/v1/payments/"+id, nil)
				require.Equal(t, http.StatusOK, d.StatusCode, string(d.Body))
				v := d.JSON(t)
				require.Equal(t, "requires_review", v["status"])
				rv, ok := v["review"].(map[string]any)
				require.True(t, ok, "the detail says why: %s", d.Body)
				require.Equal(t, tc.reason, rv["reason"])
				require.NotEmpty(t, rv["detail"])
				flagged, err := time.Parse(time.RFC3339Nano, rv["flagged_at"].(string))
				require.NoError(t, err)
				require.True(t, flagged.After(before), "%s", flagged)
				if tc.answer == nil {
					require.NotContains(t, rv, "provider_answer", "it could not be asked")
				} else {
					a, ok := rv["provider_answer"].(map[string]any)
					require.True(t, ok, "the provider's answer: %s", d.Body)
					_, err := time.Parse(time.RFC3339Nano, a["asked_at"].(string))
					require.NoError(t, err)
					tc.answer(t, a)
				}

				// The merchant sees the status, never the reason: not in
				// its view of the payment, nor in the event it is sent.
				mine := g.Get(owner, "/v1/payments/"+id)
				require.Equal(t, http.StatusOK, mine.StatusCode)
				require.NotContains(t, mine.JSON(t), "review")
				require.NotContains(t, string(mine.Body), tc.reason)
				evs := g.Get(owner, "/v1/events?type=payment.requires_review")
				require.Contains(t, string(evs.Body), id)
				require.NotContains(t, string(evs.Body), tc.reason)
			})
		}
	}
}

// While a payment is in review the sweeper still asks, and the desk shows
// the provider's latest answer; the reason stays the one it was flagged
// for.
func TestTheReviewKeepsTheProvidersLatestAnswer(t *testing.T) {
	t.Parallel()
	for engine, opts := range engines {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			ps, g, m := paystackMerchant(t, opts...)
			adapter, err := paystack.New(paystack.Config{BaseURL: ps.URL})(providers.Secrets{"secret_key": paystacktest.SecretKey})
			require.NoError(t, err)
			_, err = adapter.Charge(context.Background(), providers.ChargeRequest{Reference: providers.Reference(m.ID, "taken"),
				Amount: 100, Currency: "NGN", Email: "ada@example.com", PaymentMethod: paystacktest.TokenSuccess})
			require.NoError(t, err)
			r := g.Pay(m, "taken", body(paystacktest.TokenSuccess))
			require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			id := r.JSON(t)["id"].(string)
			toReview(t, g)
			first := adminDo(g, "GET", "/admin/v1/payments/"+id, nil).JSON(t)["review"].(map[string]any)
			require.Equal(t, "succeeded", first["provider_answer"].(map[string]any)["outcome"])

			ps.FailNext(http.StatusBadGateway)
			ageKeys(t, g, time.Hour)
			require.Equal(t, 1, sweep(t, g).Review)
			later := adminDo(g, "GET", "/admin/v1/payments/"+id, nil).JSON(t)["review"].(map[string]any)
			require.Equal(t, "amount_mismatch", later["reason"], "the reason it was flagged for")
			require.Equal(t, first["flagged_at"], later["flagged_at"])
			a := later["provider_answer"].(map[string]any)
			require.Equal(t, "unknown", a["error"], "the latest look failed")
			require.NotContains(t, a, "outcome")
			require.NotEqual(t, first["provider_answer"].(map[string]any)["asked_at"], a["asked_at"])
		})
	}
}

// A payment that never went to review has no review in its detail.
func TestAPaymentNeverInReviewHasNoReview(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	id := paid(t, g, m, "ok", 5000)
	d := adminDo(g, "GET", "/admin/v1/payments/"+id, nil)
	require.Equal(t, http.StatusOK, d.StatusCode)
	require.NotContains(t, d.JSON(t), "review")
}

// A refund in review: GET /admin/v1/refunds/{id} says why, as a payment's
// detail does; the merchant's view of the refund does not.
func TestTheOperatorSeesWhyARefundIsInReview(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		reason string
		// flag puts a refund in review; it returns the merchant and the
		// refund's id.
		flag   func(t *testing.T, opts []apptest.Option) (*apptest.Gateway, apptest.Merchant, string)
		answer func(t *testing.T, a map[string]any)
	}{
		{"StillPending", "provider_pending", func(t *testing.T, opts []apptest.Option) (*apptest.Gateway, apptest.Merchant, string) {
			ps, g, m, id := paidAtPaystack(t, opts...)
			ps.PendNextRefund()
			r := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
			require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			refundToReview(t, g, 48*time.Hour)
			return g, m, r.JSON(t)["id"].(string)
		}, func(t *testing.T, a map[string]any) {
			require.Equal(t, "pending", a["outcome"])
			require.NotEmpty(t, a["id"], "the provider's id of the refund")
		}},
		{"LookupsKeptFailing", "lookup_failed", func(t *testing.T, opts []apptest.Option) (*apptest.Gateway, apptest.Merchant, string) {
			ps, g, m, id := paidAtPaystack(t, opts...)
			ps.PendNextRefund()
			r := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
			require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			ps.FailNext(http.StatusBadGateway)
			refundToReview(t, g, 48*time.Hour)
			return g, m, r.JSON(t)["id"].(string)
		}, func(t *testing.T, a map[string]any) {
			require.Equal(t, "unknown", a["error"])
			require.NotContains(t, a, "outcome")
		}},
		{"AccountRemoved", "provider_account_missing", func(t *testing.T, opts []apptest.Option) (*apptest.Gateway, apptest.Merchant, string) {
			ps, g, m, id := paidAtPaystack(t, opts...)
			ps.PendNextRefund()
			r := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
			require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			dropAccount(t, g, m)
			refundToReview(t, g, 48*time.Hour)
			return g, m, r.JSON(t)["id"].(string)
		}, nil},
		{"NotListedYet", "not_found_yet", func(t *testing.T, opts []apptest.Option) (*apptest.Gateway, apptest.Merchant, string) {
			// Sent, the answer lost, and not yet listed by Paystack, which
			// does not dedupe refunds: not released before RECHECK_AFTER.
			l := lostRefund(t, map[string]any{"amount": 1500}, false, opts...)
			refundToReview(t, l.g, 10*time.Minute)
			return l.g, l.m, l.refundID
		}, func(t *testing.T, a map[string]any) {
			require.Equal(t, "not_found", a["outcome"])
		}},
	} {
		for engine, opts := range engines {
			t.Run(tc.name+"/"+engine, func(t *testing.T) {
				t.Parallel()
				g, m, id := tc.flag(t, opts)
				d := adminDo(g, "GET", "/admin/v1/refunds/"+id, nil)
				require.Equal(t, http.StatusOK, d.StatusCode, string(d.Body))
				v := d.JSON(t)
				require.Equal(t, "requires_review", v["status"])
				require.Equal(t, m.ID, v["tenant_id"])
				rv, ok := v["review"].(map[string]any)
				require.True(t, ok, "the refund says why: %s", d.Body)
				require.Equal(t, tc.reason, rv["reason"])
				require.NotEmpty(t, rv["detail"])
				if tc.answer == nil {
					require.NotContains(t, rv, "provider_answer")
				} else {
					a, ok := rv["provider_answer"].(map[string]any)
					require.True(t, ok, "the provider's answer: %s", d.Body)
					tc.answer(t, a)
				}
				mine := g.Get(m, "/v1/refunds/"+id)
				require.Equal(t, http.StatusOK, mine.StatusCode)
				require.NotContains(t, mine.JSON(t), "review")
				require.False(t, strings.Contains(string(mine.Body), tc.reason))
				// The queue's rows stay the refunds themselves.
				q := adminDo(g, "GET", "/admin/v1/refunds?status=requires_review&tenant_id="+m.ID, nil).JSON(t)["data"].([]any)
				require.Len(t, q, 1)
				require.NotContains(t, q[0], "review")
			})
		}
	}
}

// refundToReview ages refunds past REVIEW_AFTER and keys by keyAge, and
// sweeps: one goes to review.
func refundToReview(t *testing.T, g *apptest.Gateway, keyAge time.Duration) {
	t.Helper()
	ageKeys(t, g, keyAge)
	dbtest.Age(t, g.App.DB(), 25*time.Hour, "refunds", "created_at")
	c := sweep(t, g)
	require.Equal(t, 1, c.Review, "%+v", c)
}
