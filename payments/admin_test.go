package payments_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
)

func adminDo(g *apptest.Gateway, method, path string, body any) apptest.Response {
	g.T.Helper()
	return g.Admin(method, path, body)
}

// reviewed makes a payment that ends requires_review: pending at the
// provider past REVIEW_AFTER.
func reviewed(t *testing.T, g *apptest.Gateway, m apptest.Merchant, key string) string {
	t.Helper()
	r := g.Pay(m, key, body("sim_pending"))
	require.Equal(t, http.StatusAccepted, r.StatusCode)
	ageKeys(t, g, time.Hour)
	dbtest.Age(t, g.App.DB(), 25*time.Hour, "payments", "created_at")
	sweep(t, g)
	require.Equal(t, "requires_review", string(ledgerByKey(t, g, m.ID, key).Status))
	return r.JSON(t)["id"].(string)
}

func TestOperatorDesk(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	a := g.Onboard(nil)
	b := g.Onboard(nil)

	t.Run("MerchantTokensAreRefusedOnEveryAdminRoute", func(t *testing.T) {
		t.Parallel()
		// Every admin route the router has, so a route added later is
		// covered without being listed here; each parameter is a
		// merchant's own tenant id, the likeliest thing for it to try.
		var routes []string
		for _, r := range g.App.Fiber().GetRoutes(true) {
			if !strings.HasPrefix(r.Path, "/admin/") || r.Method == fiber.MethodHead {
				continue
			}
			segs := strings.Split(r.Path, "/")
			for i, s := range segs {
				if strings.HasPrefix(s, ":") {
					segs[i] = a.ID
				}
			}
			routes = append(routes, r.Method+" "+strings.Join(segs, "/"))
		}
		for _, want := range []string{"GET /admin/v1/payments", "POST /admin/v1/payments/" + a.ID + "/resolve",
			"GET /admin/v1/audit-events", "POST /admin/v1/refunds/" + a.ID + "/resolve", "POST /admin/v1/tenants",
			"PATCH /admin/v1/tenants/" + a.ID, "POST /admin/v1/tenants/" + a.ID + "/credentials"} {
			require.Contains(t, routes, want)
		}
		for _, r := range routes {
			method, path, _ := strings.Cut(r, " ")
			for _, auth := range [][]string{{"Authorization", "Bearer " + a.Token}, {}} {
				got := g.Do(method, path, []byte(`{}`), append(auth, "Content-Type", "application/json")...)
				require.Equal(t, http.StatusUnauthorized, got.StatusCode, "%s %v", r, auth)
				require.Equal(t, "unauthorized", got.Code(t))
			}
		}
	})

	t.Run("SearchAcrossTenants", func(t *testing.T) {
		t.Parallel()
		ida := paid(t, g, a, "s-a", 1111)
		idb := paid(t, g, b, "s-b", 2222)
		all := adminDo(g, "GET", "/admin/v1/payments?limit=100", nil).JSON(t)["data"].([]any)
		ids := map[string]string{}
		for _, p := range all {
			m := p.(map[string]any)
			ids[m["id"].(string)] = m["tenant_id"].(string)
		}
		require.Equal(t, a.ID, ids[ida])
		require.Equal(t, b.ID, ids[idb])
		only := adminDo(g, "GET", "/admin/v1/payments?tenant_id="+b.ID, nil).JSON(t)["data"].([]any)
		for _, p := range only {
			require.Equal(t, b.ID, p.(map[string]any)["tenant_id"])
		}
		ref := adminDo(g, "GET", "/admin/v1/payments?provider_reference="+ledgerByKey(t, g, a.ID, "s-a").ProviderReference, nil).JSON(t)["data"].([]any)
		require.Len(t, ref, 1)
		require.Equal(t, ida, ref[0].(map[string]any)["id"])
		future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		require.Empty(t, adminDo(g, "GET", "/admin/v1/payments?created_from="+future, nil).JSON(t)["data"])
		page := adminDo(g, "GET", "/admin/v1/payments?limit=1", nil).JSON(t)
		require.Len(t, page["data"], 1)
		require.NotEmpty(t, page["next_cursor"])
		next := adminDo(g, "GET", "/admin/v1/payments?limit=1&cursor="+page["next_cursor"].(string), nil)
		require.Equal(t, http.StatusOK, next.StatusCode)
		// email, provider and created_to, each both ways.
		eb := body("sim_success")
		eb["email"] = "grace@example.org"
		byEmail := g.Pay(b, "s-email", eb)
		require.Equal(t, http.StatusCreated, byEmail.StatusCode)
		ide := byEmail.JSON(t)["id"].(string)
		idsOf := func(q string) map[string]bool {
			r := adminDo(g, "GET", "/admin/v1/payments?limit=100&"+q, nil)
			require.Equal(t, http.StatusOK, r.StatusCode, "%s: %s", q, r.Body)
			out := map[string]bool{}
			for _, p := range r.JSON(t)["data"].([]any) {
				out[p.(map[string]any)["id"].(string)] = true
			}
			return out
		}
		require.Equal(t, map[string]bool{ide: true}, idsOf("email=grace%40example.org"))
		require.Empty(t, idsOf("email=nobody%40example.org"))
		sim := idsOf("provider=simulator")
		require.True(t, sim[ida] && sim[idb] && sim[ide])
		require.Empty(t, idsOf("provider=paystack"))
		past := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		before := idsOf("created_to=" + past) // (other subtests age their payments)
		require.False(t, before[ida] || before[idb] || before[ide])
		upTo := idsOf("created_to=" + future)
		require.True(t, upTo[ida] && upTo[idb] && upTo[ide])
		// By the tenant's own key, with the tenant (keys are per tenant).
		require.Equal(t, map[string]bool{ide: true}, idsOf("tenant_id="+b.ID+"&idempotency_key=s-email"))
		require.Equal(t, map[string]bool{ide: true}, idsOf("tenant_id="+b.ID+"&idempotency_key=%22s-email%22"), "as the header would carry it")
		require.Empty(t, idsOf("tenant_id="+a.ID+"&idempotency_key=s-email"))
		// A parameter the search does not take is refused, never ignored:
		// ignored, it would answer with everyone's payments.
		for _, q := range []string{"idempotency_key=s-email", "request_id=abc", "metadata%5Border_id%5D=1001", "Status=failed"} {
			r := adminDo(g, "GET", "/admin/v1/payments?"+q, nil)
			require.Equal(t, http.StatusBadRequest, r.StatusCode, "%s: %s", q, r.Body)
		}
		for _, q := range []string{"status=bogus", "created_from=yesterday", "limit=0", "cursor=%00", "tenant_id=%00", "email=%00",
			"created_from=9999-12-31T23:59:59-23:59", "created_to=0001-01-01T00:00:00%2B00:01"} { // outside 0001-9999 in UTC
			r := adminDo(g, "GET", "/admin/v1/payments?"+q, nil)
			require.Equal(t, http.StatusBadRequest, r.StatusCode, q)
		}
	})

	t.Run("DetailShowsRefundsAndAttempts", func(t *testing.T) {
		t.Parallel()
		id := paid(t, g, a, "d", 5000)
		require.Equal(t, http.StatusCreated, refundOf(g, a, id, "d-r", map[string]any{"amount": 1200}).StatusCode)
		d := adminDo(g, "GET", "/admin/v1/payments/"+id, nil)
		require.Equal(t, http.StatusOK, d.StatusCode)
		v := d.JSON(t)
		require.Equal(t, a.ID, v["tenant_id"])
		require.Equal(t, float64(1200), v["amount_refunded"])
		require.Len(t, v["refunds"], 1)
		require.Equal(t, float64(1), v["attempts"])
		require.Equal(t, "done", v["key"].(map[string]any)["status"])
		require.Equal(t, http.StatusNotFound, adminDo(g, "GET", "/admin/v1/payments/pay_00000000000000000000000000000000", nil).StatusCode)
	})

	// The resolve cases age every key and sweep: they run first, one at a
	// time (the parallel cases wait for them).
	t.Run("ResolveTheReviewQueue", func(t *testing.T) {
		id := reviewed(t, g, a, "rev")
		queue := adminDo(g, "GET", "/admin/v1/payments?status=requires_review&tenant_id="+a.ID, nil).JSON(t)["data"].([]any)
		require.NotEmpty(t, queue)
		noNote := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": "failed"})
		require.Equal(t, http.StatusBadRequest, noNote.StatusCode)
		// The provider still has the charge in flight: it has not
		// succeeded, whatever the operator thinks.
		inFlight := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": "succeeded", "note": "x"})
		require.Equal(t, http.StatusConflict, inFlight.StatusCode, string(inFlight.Body))
		require.Equal(t, "provider_disagrees", inFlight.Code(t))
		require.Equal(t, "pending", inFlight.JSON(t)["provider_outcome"])
		// In review, failing it is the operator's call (abandoned).
		r := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": "failed", "note": "no such charge at the provider"})
		require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
		require.Equal(t, "failed", r.JSON(t)["status"])
		require.Equal(t, "resolved_by_operator", r.JSON(t)["failure_code"])
		// The merchant's retry replays the resolution.
		retry := g.Pay(a, "rev", body("sim_pending"))
		require.Equal(t, http.StatusPaymentRequired, retry.StatusCode, string(retry.Body))
		require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
		again := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": "succeeded", "note": "second thoughts"})
		require.Equal(t, http.StatusConflict, again.StatusCode)
		require.Equal(t, "payment_final", again.Code(t))
		var ev map[string]any
		for _, e := range adminDo(g, "GET", "/admin/v1/audit-events?action=payment.resolved&tenant_id="+a.ID, nil).JSON(t)["data"].([]any) {
			if e.(map[string]any)["target_id"] == id {
				require.Nil(t, ev, "one event per resolution")
				ev = e.(map[string]any)
			}
		}
		require.NotNil(t, ev)
		require.Equal(t, id, ev["target_id"])
		require.Equal(t, "no such charge at the provider", ev["note"])
		// "What happened to this payment?" in one query: the refusal before
		// its resolution, the resolution, the refused one after it, and
		// nothing about anything else.
		about := adminDo(g, "GET", "/admin/v1/audit-events?target_id="+id, nil)
		require.Equal(t, http.StatusOK, about.StatusCode, string(about.Body))
		var actions []string
		for _, e := range about.JSON(t)["data"].([]any) {
			require.Equal(t, id, e.(map[string]any)["target_id"])
			actions = append(actions, e.(map[string]any)["action"].(string))
		}
		require.Equal(t, []string{"payment.resolution_refused", "payment.resolved", "payment.resolution_refused"}, actions, "newest first")
		require.Equal(t, "requires_review", ev["before"].(map[string]any)["status"])
		require.Equal(t, "failed", ev["after"].(map[string]any)["status"])
		require.NotEmpty(t, ev["request_id"])
	})

	t.Run("ResolveRefusedWhenTheProviderDisagreesOrWorkIsUnderWay", func(t *testing.T) {
		lost := g.Pay(a, "charged", body("sim_timeout")) // charged; the answer lost
		require.Equal(t, http.StatusAccepted, lost.StatusCode)
		id := lost.JSON(t)["id"].(string)
		fresh := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": "failed", "note": "looks lost"})
		require.Equal(t, http.StatusConflict, fresh.StatusCode)
		require.Equal(t, "payment_in_progress", fresh.Code(t), "its last attempt is recent")
		require.Equal(t, "5", fresh.Header.Get("Retry-After"), "when to try the resolution again")
		ageKeys(t, g, time.Hour)
		no := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": "failed", "note": "looks lost"})
		require.Equal(t, http.StatusConflict, no.StatusCode, string(no.Body))
		require.Equal(t, "provider_disagrees", no.Code(t))
		require.Equal(t, "succeeded", no.JSON(t)["provider_outcome"])
		require.Equal(t, "processing", string(ledgerByKey(t, g, a.ID, "charged").Status))
		// Refused, and kept: an operator tried it.
		tried := adminDo(g, "GET", "/admin/v1/audit-events?action=payment.resolution_refused&tenant_id="+a.ID, nil)
		require.Equal(t, http.StatusOK, tried.StatusCode, string(tried.Body))
		var refusal, busy map[string]any
		for _, e := range tried.JSON(t)["data"].([]any) {
			if e := e.(map[string]any); e["target_id"] == id {
				if e["after"].(map[string]any)["refused"] == "payment_in_progress" {
					busy = e
				} else {
					refusal = e
				}
			}
		}
		require.NotNil(t, busy, "refused for a recent attempt, and audited all the same: %s", tried.Body)
		require.Equal(t, "failed", busy["after"].(map[string]any)["decision"])
		require.NotNil(t, refusal, string(tried.Body))
		require.Equal(t, "looks lost", refusal["note"])
		require.Equal(t, "processing", refusal["before"].(map[string]any)["status"])
		require.Equal(t, "failed", refusal["after"].(map[string]any)["decision"])
		require.Equal(t, "succeeded", refusal["after"].(map[string]any)["provider_outcome"])
		yes := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": "succeeded", "note": "the provider has it"})
		require.Equal(t, http.StatusOK, yes.StatusCode, string(yes.Body))
		require.NotEmpty(t, yes.JSON(t)["provider_transaction_id"])
	})

	t.Run("AuditLogOfTenantChanges", func(t *testing.T) {
		t.Parallel()
		m := g.Onboard(map[string]any{"providers": map[string]any{"paystack": map[string]string{"secret_key": "sk_test_VERYSECRET"}}})
		require.Equal(t, http.StatusOK, adminDo(g, "PATCH", "/admin/v1/tenants/"+m.ID, map[string]any{"status": "suspended"}).StatusCode)
		require.Equal(t, http.StatusOK, adminDo(g, "PATCH", "/admin/v1/tenants/"+m.ID, map[string]any{"status": "active"}).StatusCode)
		require.Equal(t, http.StatusOK, adminDo(g, "PATCH", "/admin/v1/tenants/"+m.ID,
			map[string]any{"providers": map[string]any{"paystack": map[string]string{"secret_key": "sk_test_NEWSECRET"}}}).StatusCode)
		require.Equal(t, http.StatusOK, adminDo(g, "PATCH", "/admin/v1/tenants/"+m.ID, map[string]any{"name": "Renamed"}).StatusCode)
		require.Equal(t, http.StatusCreated, adminDo(g, "POST", "/admin/v1/tenants/"+m.ID+"/credentials", nil).StatusCode)
		log := adminDo(g, "GET", "/admin/v1/audit-events?tenant_id="+m.ID, nil)
		require.Equal(t, http.StatusOK, log.StatusCode)
		require.NotContains(t, string(log.Body), "VERYSECRET")
		require.NotContains(t, string(log.Body), "NEWSECRET")
		require.NotContains(t, string(log.Body), m.ClientSecret)
		var actions []string
		for _, e := range log.JSON(t)["data"].([]any) {
			actions = append(actions, e.(map[string]any)["action"].(string))
		}
		require.Equal(t, []string{"tenant.credentials_rotated", "tenant.updated", "tenant.provider_secrets_changed",
			"tenant.reactivated", "tenant.suspended", "tenant.created"}, actions, "newest first")
		page := adminDo(g, "GET", "/admin/v1/audit-events?tenant_id="+m.ID+"&limit=2", nil).JSON(t)
		require.Len(t, page["data"], 2)
		rest := adminDo(g, "GET", "/admin/v1/audit-events?tenant_id="+m.ID+"&limit=10&cursor="+page["next_cursor"].(string), nil).JSON(t)
		require.Len(t, rest["data"], 4)
		for _, q := range []string{"action=tenant.deleted", "limit=1000", "cursor=xx", "tenant_id=TEN"} {
			require.Equal(t, http.StatusBadRequest, adminDo(g, "GET", "/admin/v1/audit-events?"+q, nil).StatusCode, q)
		}
		for _, method := range []string{"PUT", "PATCH", "DELETE"} {
			r := adminDo(g, method, "/admin/v1/audit-events", nil)
			require.Contains(t, []int{http.StatusMethodNotAllowed, http.StatusNotFound}, r.StatusCode, "append-only: %s", method)
		}
	})

	t.Run("MerchantListFilters", func(t *testing.T) {
		t.Parallel()
		m := g.Onboard(nil)
		for i, order := range []string{"A-1", "A-2", "A-3"} {
			pb := body("sim_success")
			pb["metadata"] = map[string]string{"order_id": order, "channel": "app"}
			pb["email"] = []string{"x@example.com", "y@example.com", "x@example.com"}[i]
			require.Equal(t, http.StatusCreated, g.Pay(m, "f-"+order, pb).StatusCode)
		}
		ids := func(q string) int {
			r := g.Get(m, "/v1/payments?"+q)
			require.Equal(t, http.StatusOK, r.StatusCode, "%s: %s", q, r.Body)
			return len(r.JSON(t)["data"].([]any))
		}
		require.Equal(t, 1, ids("metadata[order_id]=A-2"))
		require.Equal(t, 3, ids("metadata[channel]=app"))
		require.Equal(t, 1, ids("metadata[channel]=app&metadata[order_id]=A-3"))
		require.Equal(t, 0, ids("metadata[order_id]=nope"))
		require.Equal(t, 2, ids("email=x@example.com"))
		require.Equal(t, 3, ids("created_from="+url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))))
		require.Equal(t, 0, ids("created_to="+url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))))
		for _, q := range []string{"metadata[a%22b]=1", "metadata[x]=%00", "created_from=now",
			"created_from=9999-12-31T23:59:59-23:59", // the year 10000 in UTC
			"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("9999-12-31T23:59:59-23:59|pay_x")),
			strings.Repeat("metadata[k]=v&", 1) + "metadata[a]=1&metadata[b]=1&metadata[c]=1&metadata[d]=1&metadata[e]=1"} {
			require.Equal(t, http.StatusBadRequest, g.Get(m, "/v1/payments?"+q).StatusCode, q)
		}
	})
}

// A refund the provider leaves pending past REVIEW_AFTER is flagged
// requires_review (an event, the merchant's view, the operator's queue;
// its amount still reserved, its key still in progress), and an operator
// resolves it as a payment is resolved: refused while the provider
// contradicts the decision or work is under way, then the refund, its
// key's answer and the audit event together.
func TestRefundReviewAndResolution(t *testing.T) {
	t.Parallel()
	// Stale only once aged: "recent" must not pass 5 s of a loaded
	// machine's wall clock.
	stale := apptest.Env("SWEEP_STALE_AFTER", "10m")
	t.Run("postgres", func(t *testing.T) { t.Parallel(); refundReview(t, apptest.Start(t, stale)) })
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); refundReview(t, apptest.Start(t, apptest.SQLite(), stale)) })
}

func refundReview(t *testing.T, g *apptest.Gateway) {
	m := g.Onboard(nil)
	other := g.Onboard(nil)
	id := paid(t, g, m, "p", 5000)
	flag := map[string]any{"amount": 1000, "reason": "sim_pending"}
	late := map[string]any{"amount": 1500, "reason": "sim_pending"}
	require.Equal(t, http.StatusAccepted, refundOf(g, m, id, "r-flag", flag).StatusCode)
	lateRe := refundOf(g, m, id, "r-late", late)
	require.Equal(t, http.StatusAccepted, lateRe.StatusCode)
	lateID := lateRe.JSON(t)["id"].(string)
	fresh := refundOf(g, m, id, "r-fresh", map[string]any{"amount": 500, "reason": "sim_pending"})
	require.Equal(t, http.StatusAccepted, fresh.StatusCode)
	freshID := fresh.JSON(t)["id"].(string)

	inProgress := adminDo(g, "POST", "/admin/v1/refunds/"+freshID+"/resolve", map[string]any{"status": "failed", "note": "looks lost"})
	require.Equal(t, http.StatusConflict, inProgress.StatusCode, string(inProgress.Body))
	require.Equal(t, "refund_in_progress", inProgress.Code(t), "its last attempt is recent")

	ageKeys(t, g, time.Hour)
	dbtest.Age(t, g.App.DB(), 25*time.Hour, "refunds", "created_at")
	c := sweep(t, g)
	require.Equal(t, 3, c.Review, "%+v", c)
	again := sweep(t, g)
	require.Equal(t, 3, again.Review, "still looked up, still in review: %+v", again)

	v := g.Get(m, "/v1/refunds/"+lateID)
	require.Equal(t, "requires_review", v.JSON(t)["status"])
	require.Equal(t, float64(3000), amountRefunded(t, g, m, id), "flagged refunds keep their amount reserved")
	evs := g.Get(m, "/v1/events?type=refund.requires_review").JSON(t)["data"].([]any)
	require.Len(t, evs, 3, "one event per flagged refund")
	require.Empty(t, g.Get(other, "/v1/events?type=refund.requires_review").JSON(t)["data"])
	retry := refundOf(g, m, id, "r-flag", flag)
	require.Equal(t, http.StatusAccepted, retry.StatusCode, "the key stays in progress: %s", retry.Body)
	require.Equal(t, "requires_review", retry.JSON(t)["status"])

	queue := adminDo(g, "GET", "/admin/v1/refunds?status=requires_review&tenant_id="+m.ID, nil)
	require.Equal(t, http.StatusOK, queue.StatusCode, string(queue.Body))
	require.Len(t, queue.JSON(t)["data"], 3)
	require.Equal(t, m.ID, queue.JSON(t)["data"].([]any)[0].(map[string]any)["tenant_id"])
	require.Empty(t, adminDo(g, "GET", "/admin/v1/refunds?status=requires_review&tenant_id="+other.ID, nil).JSON(t)["data"])
	page := adminDo(g, "GET", "/admin/v1/refunds?limit=1", nil).JSON(t)
	next := adminDo(g, "GET", "/admin/v1/refunds?limit=1&cursor="+page["next_cursor"].(string), nil)
	require.Equal(t, http.StatusOK, next.StatusCode)
	require.NotEqual(t, page["data"].([]any)[0].(map[string]any)["id"], next.JSON(t)["data"].([]any)[0].(map[string]any)["id"])
	byKey := adminDo(g, "GET", "/admin/v1/refunds?tenant_id="+m.ID+"&idempotency_key=r-late", nil)
	require.Equal(t, http.StatusOK, byKey.StatusCode, string(byKey.Body))
	require.Len(t, byKey.JSON(t)["data"], 1)
	require.Equal(t, lateID, byKey.JSON(t)["data"].([]any)[0].(map[string]any)["id"])
	for _, q := range []string{"status=processing", "tenant_id=%00", "limit=0", "cursor=pay_x", "idempotency_key=r-late",
		"status=pending&status=failed", "payment_id=x"} {
		r := adminDo(g, "GET", "/admin/v1/refunds?"+q, nil)
		require.Equal(t, http.StatusBadRequest, r.StatusCode, q)
		require.Equal(t, "invalid_request", r.Code(t), q)
	}

	flagID := retry.JSON(t)["id"].(string)
	for _, bad := range []map[string]any{{"status": "failed"}, {"status": "pending", "note": "x"}, {"status": "failed", "note": "a\x00b"}} {
		r := adminDo(g, "POST", "/admin/v1/refunds/"+flagID+"/resolve", bad)
		require.Equal(t, http.StatusBadRequest, r.StatusCode, "%v", bad)
	}
	require.Equal(t, http.StatusNotFound, adminDo(g, "POST", "/admin/v1/refunds/re_00000000000000000000000000000000/resolve",
		map[string]any{"status": "failed", "note": "x"}).StatusCode)
	require.Equal(t, "refund_not_found", adminDo(g, "POST", "/admin/v1/refunds/pay_x/resolve",
		map[string]any{"status": "failed", "note": "x"}).Code(t))

	ageKeys(t, g, time.Hour) // the sweep's and the retry's leases lapse
	pending := adminDo(g, "POST", "/admin/v1/refunds/"+flagID+"/resolve", map[string]any{"status": "succeeded", "note": "looks done"})
	require.Equal(t, http.StatusConflict, pending.StatusCode, "still in flight at the provider: %s", pending.Body)
	require.Equal(t, "pending", pending.JSON(t)["provider_outcome"])
	require.NoError(t, g.App.DB().Exec(`DELETE FROM simulator_refunds WHERE reference =
  (SELECT provider_reference FROM refunds WHERE merchant_id = ? AND idempotency_key = 'r-flag')`, m.ID).Error)
	nothing := adminDo(g, "POST", "/admin/v1/refunds/"+flagID+"/resolve", map[string]any{"status": "succeeded", "note": "x"})
	require.Equal(t, http.StatusConflict, nothing.StatusCode, "nothing there cannot have succeeded: %s", nothing.Body)
	r := adminDo(g, "POST", "/admin/v1/refunds/"+flagID+"/resolve", map[string]any{"status": "failed", "note": "no such refund at the provider"})
	require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
	require.Equal(t, "failed", r.JSON(t)["status"])
	require.Equal(t, "resolved_by_operator", r.JSON(t)["failure_code"])
	require.Equal(t, m.ID, r.JSON(t)["tenant_id"])
	require.Equal(t, float64(2000), amountRefunded(t, g, m, id), "a failed refund gives its amount back")
	replay := refundOf(g, m, id, "r-flag", flag)
	require.Equal(t, http.StatusCreated, replay.StatusCode, string(replay.Body))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "failed", replay.JSON(t)["status"])
	twice := adminDo(g, "POST", "/admin/v1/refunds/"+flagID+"/resolve", map[string]any{"status": "succeeded", "note": "second thoughts"})
	require.Equal(t, http.StatusConflict, twice.StatusCode)
	require.Equal(t, "refund_final", twice.Code(t))
	var ev map[string]any
	for _, e := range adminDo(g, "GET", "/admin/v1/audit-events?action=refund.resolved&tenant_id="+m.ID, nil).JSON(t)["data"].([]any) {
		if e.(map[string]any)["target_id"] == flagID {
			require.Nil(t, ev, "one audit event per resolution")
			ev = e.(map[string]any)
		}
	}
	require.NotNil(t, ev)
	require.Equal(t, "refund", ev["target_type"])
	require.Equal(t, "no such refund at the provider", ev["note"])
	require.Equal(t, "requires_review", ev["before"].(map[string]any)["status"])
	require.Equal(t, "failed", ev["after"].(map[string]any)["status"])
	require.Len(t, g.Get(m, "/v1/events?type=refund.failed").JSON(t)["data"], 1)

	// In review, but the provider still has it pending: failing it (its
	// amount given back to be refunded again) is refused too, as providers
	// pay pending refunds out days later.
	held := adminDo(g, "POST", "/admin/v1/refunds/"+lateID+"/resolve", map[string]any{"status": "failed", "note": "stuck for a day"})
	require.Equal(t, http.StatusConflict, held.StatusCode, string(held.Body))
	require.Equal(t, "provider_disagrees", held.Code(t))
	require.Equal(t, "pending", held.JSON(t)["provider_outcome"])
	require.NotContains(t, held.JSON(t), "provider_failure_code", "no empty fields")
	var refusal map[string]any
	for _, e := range adminDo(g, "GET", "/admin/v1/audit-events?action=refund.resolution_refused&tenant_id="+m.ID, nil).JSON(t)["data"].([]any) {
		if e.(map[string]any)["target_id"] == lateID {
			require.Nil(t, refusal, "one audit event per refusal")
			refusal = e.(map[string]any)
		}
	}
	require.NotNil(t, refusal, "a refused resolution is audited")
	require.Equal(t, "stuck for a day", refusal["note"])
	require.Equal(t, "failed", refusal["after"].(map[string]any)["decision"])
	require.Equal(t, "pending", refusal["after"].(map[string]any)["provider_outcome"])
	require.Equal(t, "requires_review", refusal["before"].(map[string]any)["status"])
	// And the resolution refused as final is audited too (twice, above).
	finalRefused := 0
	for _, e := range adminDo(g, "GET", "/admin/v1/audit-events?action=refund.resolution_refused&tenant_id="+m.ID, nil).JSON(t)["data"].([]any) {
		if e := e.(map[string]any); e["target_id"] == flagID && e["after"].(map[string]any)["refused"] == "refund_final" {
			finalRefused++
		}
	}
	require.Equal(t, 1, finalRefused, "a resolution refused for the refund's state is audited")

	// The provider has refunded the late one by now: failing it is refused.
	dbtest.Age(t, g.App.DB(), time.Hour, "simulator_refunds", "settle_at")
	no := adminDo(g, "POST", "/admin/v1/refunds/"+lateID+"/resolve", map[string]any{"status": "failed", "note": "looks lost"})
	require.Equal(t, http.StatusConflict, no.StatusCode, string(no.Body))
	require.Equal(t, "provider_disagrees", no.Code(t))
	require.Equal(t, "succeeded", no.JSON(t)["provider_outcome"])
	still, err := g.App.Payments.Store().RefundByKey(context.Background(), nil, m.ID, "r-late")
	require.NoError(t, err)
	require.Equal(t, "requires_review", string(still.Status), "nothing changed")
	yes := adminDo(g, "POST", "/admin/v1/refunds/"+lateID+"/resolve", map[string]any{"status": "succeeded", "note": "the provider has it"})
	require.Equal(t, http.StatusOK, yes.StatusCode, string(yes.Body))
	require.Equal(t, "succeeded", yes.JSON(t)["status"])
	require.NotEmpty(t, yes.JSON(t)["provider_refund_id"])
	require.Equal(t, 1, simRefunds(t, g, m.ID, "r-late"))
	require.Equal(t, float64(2000), amountRefunded(t, g, m, id))
}

// Resolve decides on the payment as it is once the key is the operator's:
// a merchant's retry can take the key over between Resolve's first read and
// its takeover (here it looks the charge up, and counts an attempt), and
// the answer Resolve stores — which the merchant's retries replay — must
// be rendered from the ledger's payment, not from the read before.
func TestResolveDecidesOnThePaymentAsItIsOnceItsKeyIsTaken(t *testing.T) {
	t.Parallel()
	ps := paystacktest.New(t)
	a, logs, _ := apptest.Build(t, apptest.Env("PAYSTACK_BASE_URL", ps.URL))
	var (
		g     *apptest.Gateway
		m     apptest.Merchant
		armed atomic.Bool
	)
	require.NoError(t, a.DB().Callback().Row().Before("gorm:row").Register("retry_before_the_takeover", func(tx *gorm.DB) {
		if strings.Contains(tx.Statement.SQL.String(), "UPDATE idempotency_keys SET lock_token") && armed.CompareAndSwap(true, false) {
			retry := g.Pay(m, "raced", body(paystacktest.TokenPending))
			require.Equal(t, http.StatusAccepted, retry.StatusCode, string(retry.Body))
		}
	}))
	g, _ = apptest.Serve(t, a, logs)
	m = g.Onboard(map[string]any{"default_provider": "paystack",
		"providers": map[string]any{"paystack": map[string]string{"secret_key": paystacktest.SecretKey}}})
	id := pendingInReview(t, g, m, "raced")

	// Paystack cannot be asked (the operator's call to make), by the
	// retry nor by Resolve.
	ps.FailNext(http.StatusInternalServerError)
	ps.FailNext(http.StatusInternalServerError)
	armed.Store(true)
	r := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": "failed", "note": "provider down"})
	require.False(t, armed.Load(), "the retry ran before the takeover")
	require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
	ledger := ledgerByKey(t, g, m.ID, "raced")
	require.Equal(t, 2, ledger.Attempts, "the retry's attempt")
	replay := g.Pay(m, "raced", body(paystacktest.TokenPending))
	require.Equal(t, http.StatusPaymentRequired, replay.StatusCode, string(replay.Body))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, ledger.Attempts, replay.JSON(t)["payment"].(map[string]any)["attempts"],
		"the stored answer is the ledger's payment")
}

// A payment in review that the provider still has pending (abandoned at a
// checkout, say) can be failed by an operator; should the provider charge
// it after all, its webhook raises an ERROR naming the payment, for a
// person to refund the charge — the ledger and the merchant's stored answer
// stay what the operator decided.
func TestAChargeThatLandsAfterAnOperatorFailedItIsAnError(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	id := pendingInReview(t, g, m, "abandoned")
	r := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": "failed", "note": "customer abandoned checkout"})
	require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
	require.NotContains(t, g.Logs.String(), "refund it at the provider")

	ref := ledgerByKey(t, g, m.ID, "abandoned").ProviderReference
	require.NoError(t, ps.Settle(ref, providers.OutcomeSucceeded))
	h, raw, err := ps.Webhook(ref)
	require.NoError(t, err)
	// Paystack cannot be asked when its event comes: the event may be the
	// only word of the charge, so it must come again.
	ps.FailNext(http.StatusInternalServerError)
	unsure := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
	require.Equal(t, http.StatusServiceUnavailable, unsure.StatusCode, string(unsure.Body))
	require.Equal(t, "provider_unavailable", unsure.Code(t))
	require.NotContains(t, g.Logs.String(), "refund it at the provider")
	hook := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, hook.StatusCode, string(hook.Body))
	require.Equal(t, "final", hook.JSON(t)["status"])
	require.Equal(t, payments.StatusFailed, ledgerByKey(t, g, m.ID, "abandoned").Status)
	requireChargedAfterResolution(t, g, id)

	// Anyone may post copies of that event (Paystack signs no time): the
	// person is told once, not at each copy.
	for range 10 {
		r := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
		require.Contains(t, []int{http.StatusOK, http.StatusServiceUnavailable}, r.StatusCode, string(r.Body))
	}
	told := 0
	for _, l := range strings.Split(g.Logs.String(), "\n") {
		if strings.Contains(l, "refund it at the provider") && strings.Contains(l, `"level":"ERROR"`) {
			told++
		}
	}
	require.Equal(t, 1, told, g.Logs.String())
}

// A charge that lands while an operator's resolution holds the key has
// its webhook put off (deferred) — and then the resolution commits
// "failed". Resolve looks once more after committing, and raises the
// ERROR the webhook would have.
func TestAChargeThatLandsDuringAnOperatorsResolutionIsAnError(t *testing.T) {
	t.Parallel()
	ps := paystacktest.New(t)
	a, logs, _ := apptest.Build(t, apptest.Env("PAYSTACK_BASE_URL", ps.URL))
	var (
		g     *apptest.Gateway
		m     apptest.Merchant
		ref   string
		armed atomic.Bool
		hook  apptest.Response
	)
	require.NoError(t, a.DB().Callback().Update().Before("gorm:update").Register("charge_lands_during_resolve", func(tx *gorm.DB) {
		if tx.Statement.Table == "payments" && armed.CompareAndSwap(true, false) {
			if err := ps.Settle(ref, providers.OutcomeSucceeded); err != nil {
				tx.AddError(err)
				return
			}
			h, raw, err := ps.Webhook(ref)
			if err != nil {
				tx.AddError(err)
				return
			}
			hook = g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
		}
	}))
	g, _ = apptest.Serve(t, a, logs)
	m = g.Onboard(map[string]any{"default_provider": "paystack",
		"providers": map[string]any{"paystack": map[string]string{"secret_key": paystacktest.SecretKey}}})
	id := pendingInReview(t, g, m, "late")
	ref = ledgerByKey(t, g, m.ID, "late").ProviderReference

	armed.Store(true)
	r := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": "failed", "note": "customer abandoned checkout"})
	require.False(t, armed.Load(), "the charge landed during the resolution")
	require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
	require.Equal(t, http.StatusOK, hook.StatusCode, string(hook.Body))
	require.Equal(t, "deferred", hook.JSON(t)["status"], "the key was the operator's")
	require.Equal(t, payments.StatusFailed, ledgerByKey(t, g, m.ID, "late").Status)
	requireChargedAfterResolution(t, g, id)
}

// resolved resolves payment id as an operator, and requires it done.
func resolved(t *testing.T, g *apptest.Gateway, id, status, note string) {
	t.Helper()
	r := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": status, "note": note})
	require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
}

// requireChargedAfterResolution requires the ERROR naming payment id that
// the provider charged after an operator failed it.
func requireChargedAfterResolution(t *testing.T, g *apptest.Gateway, id string) {
	t.Helper()
	var line map[string]any
	for _, l := range strings.Split(g.Logs.String(), "\n") {
		if strings.Contains(l, "refund it at the provider") {
			require.NoError(t, json.Unmarshal([]byte(l), &line))
		}
	}
	require.NotNil(t, line, g.Logs.String())
	require.Equal(t, "ERROR", line["level"])
	require.Equal(t, id, line["payment_id"])
}

// pendingInReview makes a Paystack payment that the provider still holds
// pending past REVIEW_AFTER: in review, its key's leases lapsed.
func pendingInReview(t *testing.T, g *apptest.Gateway, m apptest.Merchant, key string) string {
	t.Helper()
	first := g.Pay(m, key, body(paystacktest.TokenPending))
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
	ageKeys(t, g, time.Hour)
	dbtest.Age(t, g.App.DB(), 25*time.Hour, "payments", "created_at")
	require.Equal(t, 1, sweep(t, g).Review)
	ageKeys(t, g, time.Hour)
	return first.JSON(t)["id"].(string)
}

// An operator's resolution the provider did not confirm with a final
// answer is watched: looked up every RECHECK_AFTER, without waiting for a
// webhook (a merchant need not have set them up), and an answer that now
// contradicts it is an ERROR naming the payment — once.
func TestAnUnconfirmedResolutionIsWatched(t *testing.T) {
	t.Parallel()
	errorsAbout := func(g *apptest.Gateway, id, msg string) int {
		n := 0
		for _, l := range strings.Split(g.Logs.String(), "\n") {
			if strings.Contains(l, msg) && strings.Contains(l, id) && strings.Contains(l, `"level":"ERROR"`) {
				n++
			}
		}
		return n
	}
	watched := func(t *testing.T, g *apptest.Gateway, m apptest.Merchant, key string) bool {
		return ledgerByKey(t, g, m.ID, key).RecheckAt != nil
	}
	due := func(t *testing.T, g *apptest.Gateway) {
		dbtest.Age(t, g.App.DB(), 2*time.Hour, "payments", "recheck_at")
		sweep(t, g)
	}

	// reportedOnce: the late charge's ERROR was logged, the watch ended,
	// and the next look is quiet.
	reportedOnce := func(t *testing.T, g *apptest.Gateway, m apptest.Merchant, key, id string) {
		t.Helper()
		require.Equal(t, 1, errorsAbout(g, id, "refund it at the provider"), g.Logs.String())
		require.False(t, watched(t, g, m, key), "found: the watch ends")
		due(t, g)
		require.Equal(t, 1, errorsAbout(g, id, "refund it at the provider"), "said once")
	}

	t.Run("FailedThenCharged", func(t *testing.T) {
		t.Parallel()
		ps, g, m := paystackMerchant(t)
		id := pendingInReview(t, g, m, "abandoned")
		resolved(t, g, id, "failed", "abandoned")
		require.True(t, watched(t, g, m, "abandoned"), "the provider still held it")
		sweep(t, g)
		require.True(t, watched(t, g, m, "abandoned"), "not due yet")

		require.NoError(t, ps.Settle(ledgerByKey(t, g, m.ID, "abandoned").ProviderReference, providers.OutcomeSucceeded))
		due(t, g) // no webhook: the watch finds it
		require.Equal(t, 1, errorsAbout(g, id, "refund it at the provider"), g.Logs.String())
		require.False(t, watched(t, g, m, "abandoned"), "a final answer ends the watch")
		due(t, g)
		require.Equal(t, 1, errorsAbout(g, id, "refund it at the provider"), "said once")
		require.Equal(t, payments.StatusFailed, ledgerByKey(t, g, m.ID, "abandoned").Status, "the ledger stays the operator's")
	})

	t.Run("SucceededThenDeclined", func(t *testing.T) {
		t.Parallel()
		ps, g, m := paystackMerchant(t)
		id := pendingInReview(t, g, m, "unsure")
		ps.FailNext(http.StatusInternalServerError) // the provider cannot be asked: the operator's call
		resolved(t, g, id, "succeeded", "the bank says paid")
		require.True(t, watched(t, g, m, "unsure"))
		require.NoError(t, ps.Settle(ledgerByKey(t, g, m.ID, "unsure").ProviderReference, providers.OutcomeFailed))
		due(t, g)
		require.Equal(t, 1, errorsAbout(g, id, "resolved as succeeded"), g.Logs.String())
		require.False(t, watched(t, g, m, "unsure"))
		require.Equal(t, payments.StatusSucceeded, ledgerByKey(t, g, m.ID, "unsure").Status)
	})

	t.Run("PendingForAWeek", func(t *testing.T) {
		t.Parallel()
		_, g, m := paystackMerchant(t)
		id := pendingInReview(t, g, m, "forever")
		resolved(t, g, id, "failed", "abandoned")
		due(t, g)
		require.True(t, watched(t, g, m, "forever"), "still pending: looked at again later")
		dbtest.Age(t, g.App.DB(), 8*24*time.Hour, "payments", "updated_at")
		due(t, g)
		require.False(t, watched(t, g, m, "forever"), "watched for a week at most")
		require.Contains(t, g.Logs.String(), "stopped watching")
		require.Zero(t, errorsAbout(g, id, "operator resolved"))
	})

	t.Run("ChargedFoundByResolvesOwnSecondLook", func(t *testing.T) {
		t.Parallel()
		ps, g, m := paystackMerchant(t)
		id := pendingInReview(t, g, m, "landed")
		require.NoError(t, ps.Settle(ledgerByKey(t, g, m.ID, "landed").ProviderReference, providers.OutcomeSucceeded))
		ps.FailNext(http.StatusInternalServerError) // the first look cannot tell
		resolved(t, g, id, "failed", "provider down")
		reportedOnce(t, g, m, "landed", id)
	})

	t.Run("ChargedFoundByAWebhook", func(t *testing.T) {
		t.Parallel()
		ps, g, m := paystackMerchant(t)
		id := pendingInReview(t, g, m, "hooked")
		resolved(t, g, id, "failed", "abandoned")
		ref := ledgerByKey(t, g, m.ID, "hooked").ProviderReference
		require.NoError(t, ps.Settle(ref, providers.OutcomeSucceeded))
		h, raw, err := ps.Webhook(ref)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...).StatusCode)
		reportedOnce(t, g, m, "hooked", id)
	})

	t.Run("AnotherChargeFoundByTheWatch", func(t *testing.T) {
		t.Parallel()
		ps, g, m := paystackMerchant(t)
		id := pendingInReview(t, g, m, "other")
		ps.FailNext(http.StatusInternalServerError)
		ps.FailNext(http.StatusInternalServerError)
		resolved(t, g, id, "failed", "provider down")
		require.True(t, watched(t, g, m, "other"))
		require.NoError(t, g.App.DB().Exec(`UPDATE payments SET amount = amount + 1 WHERE id = ?`, id).Error)
		require.NoError(t, ps.Settle(ledgerByKey(t, g, m.ID, "other").ProviderReference, providers.OutcomeSucceeded))
		for range 3 {
			due(t, g)
		}
		require.False(t, watched(t, g, m, "other"), "the provider can never tell: the watch ends")
		require.Equal(t, 1, strings.Count(g.Logs.String(), "for another amount or currency"), "said once")
	})

	t.Run("SucceededThenRefundedIsNoAlarm", func(t *testing.T) {
		t.Parallel()
		ps, g, m := paystackMerchant(t)
		id := pendingInReview(t, g, m, "refunded")
		ps.FailNext(http.StatusInternalServerError)
		resolved(t, g, id, "succeeded", "the bank says paid")
		// Refunded in full since, which Paystack reports as "reversed":
		// a failure, at the lookup.
		require.NoError(t, g.App.DB().Exec(`UPDATE payments SET amount_refunded = amount WHERE id = ?`, id).Error)
		require.NoError(t, ps.Settle(ledgerByKey(t, g, m.ID, "refunded").ProviderReference, providers.OutcomeFailed))
		due(t, g)
		require.Zero(t, errorsAbout(g, id, "resolved as succeeded"), g.Logs.String())
		require.Contains(t, g.Logs.String(), "since refunded")
		require.False(t, watched(t, g, m, "refunded"))
	})

	t.Run("RefundedWhileLookedUpIsNoAlarm", func(t *testing.T) {
		t.Parallel()
		ps, g, m := paystackMerchant(t)
		id := pendingInReview(t, g, m, "refunded-meanwhile")
		ps.FailNext(http.StatusInternalServerError)
		resolved(t, g, id, "succeeded", "the bank says paid")
		dbtest.Age(t, g.App.DB(), 2*time.Hour, "payments", "recheck_at")
		taken, err := g.App.Payments.DueRechecks(context.Background(), 10)
		require.NoError(t, err)
		require.Len(t, taken, 1)
		// Refunded in full through the gateway after the take read the
		// payment, before the provider answers "reversed".
		require.NoError(t, g.App.DB().Exec(`UPDATE payments SET amount_refunded = amount WHERE id = ?`, id).Error)
		require.NoError(t, ps.Settle(ledgerByKey(t, g, m.ID, "refunded-meanwhile").ProviderReference, providers.OutcomeFailed))
		_, err = g.App.Payments.Recheck(context.Background(), taken[0])
		require.NoError(t, err)
		require.Zero(t, errorsAbout(g, id, "resolved as succeeded"), g.Logs.String())
		require.Contains(t, g.Logs.String(), "since refunded")
		require.False(t, watched(t, g, m, "refunded-meanwhile"))
	})

	t.Run("ReversedIsWeighedThroughABlip", func(t *testing.T) {
		t.Parallel()
		// The re-read of what is refunded, after the lookup, fails.
		var reread armedOnce
		ps, g, m := paystackMerchant(t, apptest.OnDB(func(db *gorm.DB) error {
			return db.Callback().Query().After("gorm:query").Register("reread_blip", func(tx *gorm.DB) {
				if reread.take(strings.HasPrefix(tx.Statement.SQL.String(), `SELECT * FROM "payments" WHERE merchant_id = `)) {
					_ = tx.AddError(errors.New("blip"))
				}
			})
		}))
		id := pendingInReview(t, g, m, "reversed-blip")
		ps.FailNext(http.StatusInternalServerError)
		resolved(t, g, id, "succeeded", "the bank says paid")
		ref := ledgerByKey(t, g, m.ID, "reversed-blip").ProviderReference
		require.NoError(t, ps.Settle(ref, providers.OutcomeSucceeded))
		require.NoError(t, ps.Reverse(ref))
		reread.arm()
		due(t, g)
		require.True(t, reread.fired.Load())
		require.Equal(t, 1, errorsAbout(g, id, "has been reversed at the provider"), "the provider's answer is still weighed: %s", g.Logs.String())
		require.False(t, watched(t, g, m, "reversed-blip"), "final at the provider: the watch ends")
	})

	t.Run("SucceededThenReversed", func(t *testing.T) {
		t.Parallel()
		ps, g, m := paystackMerchant(t)
		id := pendingInReview(t, g, m, "reversed")
		ps.FailNext(http.StatusInternalServerError)
		resolved(t, g, id, "succeeded", "the bank says paid")
		// Charged, then refunded at Paystack's dashboard (not through the
		// gateway) or charged back: the merchant no longer has the money.
		require.NoError(t, ps.Settle(ledgerByKey(t, g, m.ID, "reversed").ProviderReference, providers.OutcomeSucceeded))
		require.NoError(t, ps.Reverse(ledgerByKey(t, g, m.ID, "reversed").ProviderReference))
		due(t, g)
		// A person must settle it with the merchant: an ERROR, but not the
		// no-charge one.
		require.Equal(t, 1, errorsAbout(g, id, "has been reversed at the provider"), g.Logs.String())
		require.Zero(t, errorsAbout(g, id, "has no charge"), "it was charged: not the no-charge ERROR")
		require.False(t, watched(t, g, m, "reversed"), "final at the provider: the watch ends")
	})

	t.Run("FailedThenChargedAndReversed", func(t *testing.T) {
		t.Parallel()
		ps, g, m := paystackMerchant(t)
		id := pendingInReview(t, g, m, "given-back")
		resolved(t, g, id, "failed", "abandoned")
		require.NoError(t, ps.Settle(ledgerByKey(t, g, m.ID, "given-back").ProviderReference, providers.OutcomeSucceeded))
		require.NoError(t, ps.Reverse(ledgerByKey(t, g, m.ID, "given-back").ProviderReference))
		due(t, g)
		require.Zero(t, errorsAbout(g, id, "refund it at the provider"), "the money went back: nothing to refund")
		require.False(t, watched(t, g, m, "given-back"))
	})

	t.Run("ConfirmedIsNotWatched", func(t *testing.T) {
		t.Parallel()
		ps, g, m := paystackMerchant(t)
		id := pendingInReview(t, g, m, "sure")
		require.NoError(t, ps.Settle(ledgerByKey(t, g, m.ID, "sure").ProviderReference, providers.OutcomeFailed))
		resolved(t, g, id, "failed", "declined")
		require.False(t, watched(t, g, m, "sure"), "the provider's final answer is the decision")
	})
}

// Where the reference holds another charge (another amount), the provider
// can never tell about this payment: an operator's decision stands, is not
// watched, and a webhook about it is acknowledged (200), not asked for
// again — a retry changes nothing, and each lookup logs the conflict.
func TestAResolutionUnderAnotherChargeIsNotWatched(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	id := pendingInReview(t, g, m, "other")
	require.NoError(t, g.App.DB().Exec(`UPDATE payments SET amount = amount + 1 WHERE id = ?`, id).Error)
	ref := ledgerByKey(t, g, m.ID, "other").ProviderReference
	require.NoError(t, ps.Settle(ref, providers.OutcomeSucceeded))
	conflicts := func() int { return strings.Count(g.Logs.String(), "for another amount or currency") }

	resolved(t, g, id, "failed", "not this charge")
	require.Nil(t, ledgerByKey(t, g, m.ID, "other").RecheckAt, "nothing to watch")
	require.Equal(t, 1, conflicts(), "looked up once")

	h, raw, err := ps.Webhook(ref)
	require.NoError(t, err)
	for range 2 {
		hook := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
		require.Equal(t, http.StatusOK, hook.StatusCode, string(hook.Body))
		require.Equal(t, "final", hook.JSON(t)["status"])
	}
	require.NotContains(t, g.Logs.String(), "refund it at the provider")
}

// An operator finds a refund by the id a merchant quotes, whoever's it is;
// a merchant's token does not open the route.
func TestOperatorGetsARefundByID(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	pay := g.Pay(m, "p", body("sim_success"))
	require.Equal(t, http.StatusCreated, pay.StatusCode, "%s", pay.Body)
	paymentID := pay.JSON(t)["id"].(string)
	rf := refundOf(g, m, paymentID, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusCreated, rf.StatusCode, "%s", rf.Body)
	id := rf.JSON(t)["id"].(string)

	got := adminDo(g, "GET", "/admin/v1/refunds/"+id, nil)
	require.Equal(t, http.StatusOK, got.StatusCode, "%s", got.Body)
	view := got.JSON(t)
	require.Equal(t, id, view["id"])
	require.Equal(t, m.ID, view["tenant_id"])
	require.Equal(t, paymentID, view["payment_id"])
	require.EqualValues(t, 1500, view["amount"])
	require.Equal(t, "succeeded", view["status"])

	for _, other := range []string{"re_00000000000000000000000000000000", "re_nope", strings.ToUpper(id)} {
		r := adminDo(g, "GET", "/admin/v1/refunds/"+other, nil)
		require.Equal(t, http.StatusNotFound, r.StatusCode, other)
		require.Equal(t, "refund_not_found", r.Code(t), other)
	}
	r := g.Do("GET", "/admin/v1/refunds/"+id, nil, "Authorization", "Bearer "+m.Token)
	require.Equal(t, http.StatusUnauthorized, r.StatusCode)
}

// A charge the provider reversed (refunded at its dashboard, charged back)
// is final there and never settles: an operator resolves it as failed — the
// merchant has no money for it — and "succeeded" is refused with a detail
// that says why; the failure is not watched.
func TestAnOperatorResolvesAReversedChargeAsFailed(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	id := pendingInReview(t, g, m, "reversed")
	ref := ledgerByKey(t, g, m.ID, "reversed").ProviderReference
	require.NoError(t, ps.Settle(ref, providers.OutcomeSucceeded))
	require.NoError(t, ps.Reverse(ref))

	no := adminDo(g, "POST", "/admin/v1/payments/"+id+"/resolve", map[string]any{"status": "succeeded", "note": "the bank says paid"})
	require.Equal(t, http.StatusConflict, no.StatusCode, string(no.Body))
	require.Equal(t, "provider_disagrees", no.Code(t))
	require.Contains(t, no.JSON(t)["detail"], "reversed")
	require.Equal(t, "reversed", no.JSON(t)["provider_outcome"])

	resolved(t, g, id, "failed", "reversed at Paystack")
	p := ledgerByKey(t, g, m.ID, "reversed")
	require.Equal(t, payments.StatusFailed, p.Status)
	require.Nil(t, p.RecheckAt, "final at the provider: not watched")
}
