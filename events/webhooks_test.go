package events_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
)

// verify is a Standard Webhooks verifier written from the specification
// (standardwebhooks.com), independent of the gateway's signer: the
// secret is whsec_ + base64(key); the signed content is
// "{webhook-id}.{webhook-timestamp}.{body}"; webhook-signature holds
// space-separated "v1,<base64 HMAC-SHA256>" entries, any of which may
// match; timestamps more than five minutes away are refused.
func verify(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || id == "" {
		return errors.New("missing webhook-id or webhook-timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("timestamp out of tolerance")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		v, b64, ok := strings.Cut(sig, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no matching signature")
}

// TestVerifierMatchesTheSpecVector checks the verifier itself against the
// specification's published example, so a delivery it accepts is one any
// Standard Webhooks library accepts.
func TestVerifierMatchesTheSpecVector(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	at := time.Unix(1614265330, 0)
	require.NoError(t, verify(secret, h, []byte(`{"test": 2432232314}`), at))
	require.Error(t, verify(secret, h, []byte(`{"test": 2432232315}`), at), "another body")
	require.Error(t, verify(secret, h, []byte(`{"test": 2432232314}`), at.Add(10*time.Minute)), "too old")
	h.Set("webhook-signature", "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	require.NoError(t, verify(secret, h, []byte(`{"test": 2432232314}`), at), "any of several signatures")
}

// hit is one request a receiver got.
type hit struct {
	Header http.Header
	Body   []byte
}

func (h hit) event(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(h.Body, &m))
	return m
}

// receiver is a merchant's webhook endpoint: it records every request and
// answers with status(n) for the n-th (1-based), 200 by default.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	hits   []hit
	status func(n int) int
}

func newReceiver(t testing.TB, status func(n int) int) *receiver {
	r := &receiver{status: status}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.hits = append(r.hits, hit{Header: req.Header.Clone(), Body: b})
		n := len(r.hits)
		r.mu.Unlock()
		code := http.StatusOK
		if r.status != nil {
			code = r.status(n)
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte("thanks"))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

// of returns the hits whose event has type typ.
func (r *receiver) of(t testing.TB, typ string) []hit {
	var out []hit
	for _, h := range r.got() {
		if h.event(t)["type"] == typ {
			out = append(out, h)
		}
	}
	return out
}

// waitFor polls cond until it holds (the deadline is generous: the machine
// is shared; nothing here measures speed).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func jsonBody(v any) []byte { b, _ := json.Marshal(v); return b }

func auth(m apptest.Merchant, more ...string) []string {
	return append([]string{"Authorization", "Bearer " + m.Token}, more...)
}

// endpoint creates an endpoint for m and returns its id and secret.
func endpoint(t testing.TB, g *apptest.Gateway, m apptest.Merchant, url string, types ...string) (string, string) {
	t.Helper()
	body := map[string]any{"url": url, "description": "test receiver"}
	if len(types) > 0 {
		body["events"] = types
	}
	r := g.Do("POST", "/v1/webhook_endpoints", jsonBody(body), auth(m, "Idempotency-Key", "we-"+url+strings.Join(types, ","))...)
	require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
	v := r.JSON(t)
	return v["id"].(string), v["secret"].(string)
}

func pay(method string, amount int) map[string]any {
	return map[string]any{"amount": amount, "currency": "NGN", "email": "ada@example.com", "payment_method": method}
}

// fastRetries makes a delivery's retries quick for the test.
var fastRetries = apptest.Env("WEBHOOK_RETRY_SCHEDULE", "50ms,50ms,50ms")

// both runs f on PostgreSQL and on the embedded SQLite of `make run`.
func both(t *testing.T, f func(t *testing.T, g *apptest.Gateway), opts ...apptest.Option) {
	t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, apptest.Start(t, opts...)) })
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		f(t, apptest.Start(t, append([]apptest.Option{apptest.SQLite()}, opts...)...))
	})
}

func TestAPaymentsOutcomeReachesTheReceiverSigned(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, g *apptest.Gateway) {
		m := g.Onboard(nil)
		rcv := newReceiver(t, nil)
		_, secret := endpoint(t, g, m, rcv.URL)
		onlyFailed := newReceiver(t, nil)
		endpoint(t, g, m, onlyFailed.URL, "payment.failed")

		paid := g.Pay(m, "pay-1", pay("sim_success", 5000))
		require.Equal(t, http.StatusCreated, paid.StatusCode, string(paid.Body))
		declined := g.Pay(m, "pay-2", pay("sim_decline", 5000))
		require.Equal(t, http.StatusPaymentRequired, declined.StatusCode)
		requireSame := g.Pay(m, "pay-1", pay("sim_success", 5000)) // a replay is no transition
		require.Equal(t, "true", requireSame.Header.Get("Idempotent-Replayed"))

		waitFor(t, "both events at the receiver", func() bool { return len(rcv.got()) >= 2 })
		waitFor(t, "the failure at the failures' receiver", func() bool { return len(onlyFailed.got()) >= 1 })

		succeeded := rcv.of(t, "payment.succeeded")
		require.Len(t, succeeded, 1)
		h := succeeded[0]
		require.NoError(t, verify(secret, h.Header, h.Body, time.Now()), "an independent verifier accepts it")
		ev := h.event(t)
		require.Equal(t, h.Header.Get("webhook-id"), ev["id"], "webhook-id is the event's id")
		require.True(t, strings.HasPrefix(ev["id"].(string), "evt_"))
		require.Equal(t, "application/json", h.Header.Get("Content-Type"))

		// data.object is the payment as GET returns it.
		id := paid.JSON(t)["id"].(string)
		var view map[string]any
		require.NoError(t, json.Unmarshal(g.Get(m, "/v1/payments/"+id).Body, &view))
		require.Equal(t, view, ev["data"].(map[string]any)["object"])

		require.Len(t, rcv.of(t, "payment.failed"), 1)
		require.Len(t, onlyFailed.got(), 1, "an endpoint gets only the types it asked for")
		require.Equal(t, "payment.failed", onlyFailed.got()[0].event(t)["type"])

		// The events API lists exactly the bodies delivered, newest first.
		list := g.Get(m, "/v1/events")
		require.Equal(t, http.StatusOK, list.StatusCode, string(list.Body))
		var page struct {
			Data []json.RawMessage `json:"data"`
		}
		require.NoError(t, json.Unmarshal(list.Body, &page))
		require.Len(t, page.Data, 2, "two transitions, two events; the replay made none")
		one := g.Get(m, "/v1/events/"+ev["id"].(string))
		require.Equal(t, http.StatusOK, one.StatusCode)
		require.Equal(t, string(h.Body), string(one.Body), "GET /v1/events/{id} is the delivered body, byte for byte")
		filtered := g.Get(m, "/v1/events?type=payment.failed")
		require.NoError(t, json.Unmarshal(filtered.Body, &page))
		require.Len(t, page.Data, 1)
	})
}

func TestAReceiverThatFailsTwiceGetsTheEventOnTheThirdAttempt(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, g *apptest.Gateway) {
		m := g.Onboard(nil)
		rcv := newReceiver(t, func(n int) int {
			if n <= 2 {
				return http.StatusServiceUnavailable
			}
			return http.StatusNoContent
		})
		id, secret := endpoint(t, g, m, rcv.URL)
		require.Equal(t, http.StatusCreated, g.Pay(m, "pay-1", pay("sim_success", 5000)).StatusCode)

		waitFor(t, "three attempts", func() bool { return len(rcv.got()) >= 3 })
		time.Sleep(300 * time.Millisecond) // a fourth would be a bug: give it the time to show
		hits := rcv.got()
		require.Len(t, hits, 3)
		for _, h := range hits {
			require.Equal(t, hits[0].Header.Get("webhook-id"), h.Header.Get("webhook-id"), "one webhook-id on every attempt")
			require.Equal(t, string(hits[0].Body), string(h.Body))
			require.NoError(t, verify(secret, h.Header, h.Body, time.Now()))
		}

		var log struct {
			Data []struct {
				Attempt    int    `json:"attempt"`
				StatusCode int    `json:"status_code"`
				Outcome    string `json:"outcome"`
				Error      string `json:"error"`
				EventID    string `json:"event_id"`
			} `json:"data"`
		}
		waitFor(t, "the third attempt logged", func() bool {
			require.NoError(t, json.Unmarshal(g.Get(m, "/v1/webhook_endpoints/"+id+"/deliveries").Body, &log))
			return len(log.Data) == 3
		})
		require.Equal(t, "delivered", log.Data[0].Outcome, "newest first")
		require.Equal(t, 3, log.Data[0].Attempt)
		require.Equal(t, http.StatusNoContent, log.Data[0].StatusCode)
		for _, d := range log.Data[1:] {
			require.Equal(t, "retrying", d.Outcome)
			require.Equal(t, http.StatusServiceUnavailable, d.StatusCode)
			require.Equal(t, "answered 503", d.Error)
		}
		require.NotContains(t, g.Logs.String(), "thanks", "receivers' answers are never logged")
	}, fastRetries)
}

func TestADeliveryFailingEveryAttemptEndsFailed(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("WEBHOOK_RETRY_SCHEDULE", "20ms,20ms"))
	m := g.Onboard(nil)
	rcv := newReceiver(t, func(int) int { return http.StatusInternalServerError })
	id, _ := endpoint(t, g, m, rcv.URL)
	require.Equal(t, http.StatusCreated, g.Pay(m, "pay-1", pay("sim_success", 5000)).StatusCode)
	var log struct {
		Data []struct{ Outcome string } `json:"data"`
	}
	waitFor(t, "the last attempt logged", func() bool {
		require.NoError(t, json.Unmarshal(g.Get(m, "/v1/webhook_endpoints/"+id+"/deliveries").Body, &log))
		return len(log.Data) == 3
	})
	require.Equal(t, "failed", log.Data[0].Outcome, "the schedule's two retries, then failed")
	time.Sleep(300 * time.Millisecond)
	require.Len(t, rcv.got(), 3, "no attempt after the last")

	ep := g.Get(m, "/v1/webhook_endpoints/"+id).JSON(t)
	require.NotEmpty(t, ep["failing_since"], "the endpoint's failing streak is shown")
	require.Equal(t, false, ep["disabled"], "one failed event does not disable an endpoint")
}

// An operator sees a tenant's endpoints and their deliveries as the
// merchant does, and only that tenant's; a mistyped tenant or endpoint is
// a 404, and a merchant's token opens none of it.
func TestOperatorSeesATenantsWebhookDeliveries(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("WEBHOOK_RETRY_SCHEDULE", "20ms"))
	m, other := g.Onboard(nil), g.Onboard(nil)
	rcv := newReceiver(t, func(int) int { return http.StatusInternalServerError })
	id, _ := endpoint(t, g, m, rcv.URL)
	endpoint(t, g, other, rcv.URL)
	require.Equal(t, http.StatusCreated, g.Pay(m, "pay-1", pay("sim_success", 5000)).StatusCode)
	waitFor(t, "both attempts logged", func() bool {
		data, _ := g.Get(m, "/v1/webhook_endpoints/"+id+"/deliveries").JSON(t)["data"].([]any)
		return len(data) == 2
	})

	eps := g.Admin("GET", "/admin/v1/tenants/"+m.ID+"/webhook_endpoints", nil)
	require.Equal(t, http.StatusOK, eps.StatusCode, string(eps.Body))
	data := eps.JSON(t)["data"].([]any)
	require.Len(t, data, 1, "the tenant's endpoint, not the other tenant's")
	require.Equal(t, id, data[0].(map[string]any)["id"])
	require.NotContains(t, string(eps.Body), "whsec_", "never a secret")

	path := "/admin/v1/tenants/" + m.ID + "/webhook_endpoints/" + id + "/deliveries"
	got := g.Admin("GET", path, nil)
	require.Equal(t, http.StatusOK, got.StatusCode, string(got.Body))
	require.JSONEq(t, string(g.Get(m, "/v1/webhook_endpoints/"+id+"/deliveries").Body), string(got.Body), "what the merchant sees")
	page := g.Admin("GET", path+"?limit=1", nil).JSON(t)
	require.Equal(t, true, page["has_more"])
	require.Len(t, page["data"], 1)

	for name, tc := range map[string]struct {
		path, code string
		status     int
	}{
		"UnknownTenant":            {"/admin/v1/tenants/ten_000000000000000000000000/webhook_endpoints", "tenant_not_found", 404},
		"UnknownTenantsDeliveries": {"/admin/v1/tenants/ten_000000000000000000000000/webhook_endpoints/" + id + "/deliveries", "tenant_not_found", 404},
		"AnotherTenantsEndpoint":   {"/admin/v1/tenants/" + other.ID + "/webhook_endpoints/" + id + "/deliveries", "webhook_endpoint_not_found", 404},
		"MalformedEndpoint":        {"/admin/v1/tenants/" + m.ID + "/webhook_endpoints/we_%00/deliveries", "webhook_endpoint_not_found", 404},
		"UnknownQueryParameter":    {"/admin/v1/tenants/" + m.ID + "/webhook_endpoints?status=failing", "invalid_request", 400},
		"BadCursor":                {path + "?cursor=%00", "invalid_request", 400},
	} {
		t.Run(name, func(t *testing.T) {
			r := g.Admin("GET", tc.path, nil)
			require.Equal(t, tc.status, r.StatusCode, string(r.Body))
			require.Equal(t, tc.code, r.JSON(t)["code"])
		})
	}
	t.Run("MerchantTokenRefused", func(t *testing.T) {
		r := g.Do("GET", "/admin/v1/tenants/"+m.ID+"/webhook_endpoints", nil, "Authorization", "Bearer "+m.Token)
		require.Equal(t, http.StatusUnauthorized, r.StatusCode, string(r.Body))
	})
}

func TestASweeperSettledPaymentReachesTheReceiverWithoutAPoll(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, g *apptest.Gateway) {
		m := g.Onboard(nil)
		rcv := newReceiver(t, nil)
		endpoint(t, g, m, rcv.URL)
		r := g.Pay(m, "pay-lost", pay("sim_timeout", 5000))
		require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
		waitFor(t, "payment.processing", func() bool { return len(rcv.of(t, "payment.processing")) == 1 })
		require.Empty(t, rcv.of(t, "payment.succeeded"))

		ageAndSweep(t, g)
		waitFor(t, "payment.succeeded", func() bool { return len(rcv.of(t, "payment.succeeded")) == 1 })
		obj := rcv.of(t, "payment.succeeded")[0].event(t)["data"].(map[string]any)["object"].(map[string]any)
		require.Equal(t, "succeeded", obj["status"])
		require.Equal(t, r.JSON(t)["id"], obj["id"])

		ageAndSweep(t, g) // a second sweep changes nothing, and says nothing
		time.Sleep(300 * time.Millisecond)
		require.Len(t, rcv.got(), 2, "processing, then succeeded: one event per transition")
	})
}

func ageAndSweep(t *testing.T, g *apptest.Gateway) {
	t.Helper()
	dbtest.Age(t, g.App.DB(), time.Hour, "idempotency_keys", "locked_until", "created_at", "attempted_at", "looked_up_at", "completed_at")
	_, err := g.App.Scheduler.Sweeper().RunOnce(context.Background())
	require.NoError(t, err)
}

// TestASlowEndpointDoesNotStarveTheOthers: one merchant's receiver hangs;
// at most 4 of its deliveries are in flight on an instance, and another
// merchant's events are delivered meanwhile.
func TestASlowEndpointDoesNotStarveTheOthers(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	slow, fast := g.Onboard(nil), g.Onboard(nil)
	release := make(chan struct{})
	var mu sync.Mutex
	inFlight, most := 0, 0
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		select {
		case <-release:
		case <-time.After(8 * time.Second): // under the 10 s attempt timeout
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
	}))
	defer hang.Close()
	defer close(release)
	endpoint(t, g, slow, hang.URL)
	rcv := newReceiver(t, nil)
	endpoint(t, g, fast, rcv.URL)

	for i := range 10 {
		require.Equal(t, http.StatusCreated, g.Pay(slow, fmt.Sprintf("slow-%d", i), pay("sim_success", 5000)).StatusCode)
	}
	waitFor(t, "the slow receiver's share in flight", func() bool { mu.Lock(); defer mu.Unlock(); return inFlight == 4 })
	require.Equal(t, http.StatusCreated, g.Pay(fast, "fast-1", pay("sim_success", 5000)).StatusCode)
	waitFor(t, "the other merchant's event", func() bool { return len(rcv.got()) == 1 })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 4, inFlight, "still hanging: the other merchant did not wait for them")
	require.LessOrEqual(t, most, 4, "at most 4 deliveries to one endpoint at once on an instance")
}

// TestTheEventsAPIPagesAndFilters: GET /v1/events pages newest first
// through every event of the last 30 days (cursor), filters by type and
// created_from, hides older events and other merchants'; a payment the
// sweeper flags for review is a payment.requires_review event.
func TestTheEventsAPIPagesAndFilters(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, g *apptest.Gateway) {
		m := g.Onboard(nil)
		other := g.Onboard(nil)
		require.Equal(t, http.StatusCreated, g.Pay(m, "e-1", pay("sim_success", 5000)).StatusCode)
		require.Equal(t, http.StatusPaymentRequired, g.Pay(m, "e-2", pay("sim_decline", 5000)).StatusCode)
		require.Equal(t, http.StatusCreated, g.Pay(m, "e-3", pay("sim_success", 6000)).StatusCode)
		stuck := g.Pay(m, "e-4", pay("sim_pending", 7000))
		require.Equal(t, http.StatusAccepted, stuck.StatusCode)
		require.Equal(t, http.StatusCreated, g.Pay(other, "e-1", pay("sim_success", 5000)).StatusCode)
		// Past REVIEW_AFTER, the sweeper flags the pending one.
		dbtest.Age(t, g.App.DB(), 48*time.Hour, "payments", "created_at")
		ageAndSweep(t, g)
		require.Equal(t, "requires_review", g.Get(m, "/v1/payments/"+stuck.JSON(t)["id"].(string)).JSON(t)["status"])

		type event struct {
			ID        string    `json:"id"`
			Type      string    `json:"type"`
			CreatedAt time.Time `json:"created_at"`
		}
		type page struct {
			Data       []event `json:"data"`
			HasMore    bool    `json:"has_more"`
			NextCursor string  `json:"next_cursor"`
		}
		get := func(q string) page {
			r := g.Get(m, "/v1/events"+q)
			require.Equal(t, http.StatusOK, r.StatusCode, "%s: %s", q, r.Body)
			var p page
			require.NoError(t, json.Unmarshal(r.Body, &p))
			return p
		}
		all := get("?limit=100")
		require.False(t, all.HasMore)
		types := map[string]int{}
		for i, e := range all.Data {
			types[e.Type]++
			if i > 0 {
				prev := all.Data[i-1]
				require.True(t, !e.CreatedAt.After(prev.CreatedAt), "newest first")
			}
		}
		require.Equal(t, map[string]int{"payment.succeeded": 2, "payment.failed": 1, "payment.processing": 1,
			"payment.requires_review": 1}, types, "one event per transition, the merchant's own")

		// Page by page, one at a time: the same events in the same order.
		var paged []event
		for q := "?limit=1"; ; {
			p := get(q)
			require.LessOrEqual(t, len(p.Data), 1)
			paged = append(paged, p.Data...)
			if !p.HasMore {
				break
			}
			require.NotEmpty(t, p.NextCursor)
			q = "?limit=1&cursor=" + url.QueryEscape(p.NextCursor)
		}
		require.Equal(t, all.Data, paged)

		require.Len(t, get("?type=payment.succeeded").Data, 2)
		require.Len(t, get("?type=payment.requires_review").Data, 1)
		require.Empty(t, get("?created_from="+url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))).Data)
		require.Len(t, get("?created_from="+url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))).Data, len(all.Data))
		for _, bad := range []string{"?type=payment.bogus", "?created_from=yesterday", "?limit=0", "?cursor=%00"} {
			r := g.Get(m, "/v1/events"+bad)
			require.Equal(t, http.StatusBadRequest, r.StatusCode, bad)
		}

		// Older than 30 days: no longer listed.
		require.NoError(t, g.App.DB().Exec("UPDATE events SET created_at = ? WHERE merchant_id = ? AND id = ?",
			time.Now().Add(-31*24*time.Hour).UTC(), m.ID, all.Data[0].ID).Error)
		after := get("?limit=100")
		require.Len(t, after.Data, len(all.Data)-1)
		for _, e := range after.Data {
			require.NotEqual(t, all.Data[0].ID, e.ID)
		}
		require.Equal(t, http.StatusNotFound, g.Get(other, "/v1/events/"+all.Data[1].ID).StatusCode)
	})
}

// TestAReceiversAnswerIsReadOnlyUpTo64KiB: a receiver that answers 2xx
// with an endless body gets its delivery counted, and the gateway stops
// reading after 64 KiB (the receiver manages to write at most its socket
// buffers' worth more), instead of reading until the attempt's timeout.
func TestAReceiversAnswerIsReadOnlyUpTo64KiB(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	var written atomic.Int64
	done := make(chan struct{}, 1)
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, 32<<10)
		for written.Load() < 1<<30 { // 1 GiB, well past any timeout's worth
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(endless.Close)
	id, _ := endpoint(t, g, m, endless.URL, "payment.succeeded")
	require.Equal(t, http.StatusCreated, g.Pay(m, "big-answer", pay("sim_success", 5000)).StatusCode)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the receiver was never called, or never stopped writing")
	}
	require.Less(t, written.Load(), int64(32<<20), "the gateway read the answer unbounded")
	waitFor(t, "the delivery logged", func() bool {
		data, _ := g.Get(m, "/v1/webhook_endpoints/"+id+"/deliveries").JSON(t)["data"].([]any)
		return len(data) == 1 && data[0].(map[string]any)["outcome"] == "delivered"
	})
}
