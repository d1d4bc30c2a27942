package events_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/events"
)

func TestEndpointsAPI(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, g *apptest.Gateway) {
		m := g.Onboard(nil)
		other := g.Onboard(nil)
		body := jsonBody(map[string]any{"url": "https://shop.example.com/hooks", "events": []string{"payment.succeeded", "payment.failed"},
			"description": "Order service"})

		created := g.Do("POST", "/v1/webhook_endpoints", body, auth(m, "Idempotency-Key", "we-1")...)
		require.Equal(t, http.StatusCreated, created.StatusCode, string(created.Body))
		ep := created.JSON(t)
		id, secret := ep["id"].(string), ep["secret"].(string)
		require.Regexp(t, `^we_[0-9a-f]{32}$`, id)
		require.Regexp(t, `^whsec_[A-Za-z0-9+/]{32}$`, secret, "whsec_ + base64 of 24 random bytes")
		require.Equal(t, []any{"payment.failed", "payment.succeeded"}, ep["events"])

		again := g.Do("POST", "/v1/webhook_endpoints", body, auth(m, "Idempotency-Key", "we-1")...)
		require.Equal(t, string(created.Body), string(again.Body), "a retried create is the first answer, byte for byte")
		require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
		for _, r := range []apptest.Response{created, again} {
			require.Equal(t, "no-store", r.Header.Get("Cache-Control"), "an answer with a secret is never cached")
		}
		other422 := g.Do("POST", "/v1/webhook_endpoints", jsonBody(map[string]any{"url": "https://elsewhere.example.com"}),
			auth(m, "Idempotency-Key", "we-1")...)
		require.Equal(t, http.StatusUnprocessableEntity, other422.StatusCode)

		list := g.Get(m, "/v1/webhook_endpoints")
		require.Equal(t, http.StatusOK, list.StatusCode)
		filtered := g.Get(m, "/v1/webhook_endpoints?url=https://shop.example.com/hooks")
		require.Equal(t, http.StatusBadRequest, filtered.StatusCode, "a filter the route does not have is refused, not ignored")
		require.NotContains(t, string(list.Body), "whsec_", "a listing never shows a secret")
		require.Len(t, list.JSON(t)["data"], 1, "the replay created nothing")
		one := g.Get(m, "/v1/webhook_endpoints/"+id)
		require.Equal(t, http.StatusOK, one.StatusCode)
		require.NotContains(t, string(one.Body), "whsec_")
		for _, at := range []string{"created_at", "updated_at"} {
			require.Equal(t, ep[at], one.JSON(t)[at], "the answer that created it and a GET show the same %s", at)
		}

		var row events.Endpoint
		require.NoError(t, g.App.DB().Where("id = ?", id).Take(&row).Error)
		require.NotEmpty(t, row.Secret)
		require.NotContains(t, string(row.Secret), strings.TrimPrefix(secret, "whsec_"), "secrets are sealed at rest")
		// And so is the answer that showed it, which the key keeps for
		// replays: no copy of a secret is stored in the clear.
		var stored []byte
		require.NoError(t, g.App.DB().Raw("SELECT response FROM idempotency_keys WHERE merchant_id = ? AND key = 'we-1'", m.ID).
			Row().Scan(&stored))
		require.NotEmpty(t, stored)
		require.NotContains(t, string(stored), strings.TrimPrefix(secret, "whsec_"), "the stored answer is sealed")
		require.NotContains(t, string(stored), id)

		// Tenants are isolated: another merchant sees and changes nothing.
		require.Equal(t, http.StatusNotFound, g.Get(other, "/v1/webhook_endpoints/"+id).StatusCode)
		require.Empty(t, g.Get(other, "/v1/webhook_endpoints").JSON(t)["data"])
		theirs := g.Do("DELETE", "/v1/webhook_endpoints/"+id, nil, auth(other, "Idempotency-Key", "del-1")...)
		require.Equal(t, http.StatusNotFound, theirs.StatusCode)
		require.Equal(t, "webhook_endpoint_not_found", theirs.Code(t))

		patched := g.Do("PATCH", "/v1/webhook_endpoints/"+id, jsonBody(map[string]any{"events": []string{}, "disabled": true}),
			auth(m, "Idempotency-Key", "we-patch-1")...)
		require.Equal(t, http.StatusOK, patched.StatusCode, string(patched.Body))
		require.Equal(t, []any{}, patched.JSON(t)["events"], "an empty list is every type")
		require.Equal(t, true, patched.JSON(t)["disabled"])

		rotated := g.Do("POST", "/v1/webhook_endpoints/"+id+"/rotate_secret", nil, auth(m, "Idempotency-Key", "rot-1")...)
		require.Equal(t, http.StatusOK, rotated.StatusCode, string(rotated.Body))
		require.NotEqual(t, secret, rotated.JSON(t)["secret"])
		rotatedAgain := g.Do("POST", "/v1/webhook_endpoints/"+id+"/rotate_secret", nil, auth(m, "Idempotency-Key", "rot-1")...)
		require.Equal(t, string(rotated.Body), string(rotatedAgain.Body), "a retried rotation replays the secret it made")
		withObject := g.Do("POST", "/v1/webhook_endpoints/"+id+"/rotate_secret", []byte(`{}`),
			auth(m, "Idempotency-Key", "rot-1", "Content-Type", "application/json")...)
		require.Equal(t, string(rotated.Body), string(withObject.Body), "no body and {} are the same request: the same replay")
		require.Equal(t, "no-store", rotated.Header.Get("Cache-Control"))
		require.Equal(t, "no-store", rotatedAgain.Header.Get("Cache-Control"))
		require.NoError(t, g.App.DB().Raw("SELECT response FROM idempotency_keys WHERE merchant_id = ? AND key = 'rot-1'", m.ID).
			Row().Scan(&stored))
		require.NotContains(t, string(stored), strings.TrimPrefix(rotated.JSON(t)["secret"].(string), "whsec_"))

		for _, b := range []string{"garbage", `{"id":"we_other"}`, "[]", "null"} {
			refused := g.Do("DELETE", "/v1/webhook_endpoints/"+id, []byte(b), auth(m, "Idempotency-Key", "del-body", "Content-Type", "application/json")...)
			require.Equal(t, http.StatusBadRequest, refused.StatusCode, "%s: %s", b, refused.Body)
			require.Equal(t, "invalid_request", refused.JSON(t)["code"])
			refused = g.Do("POST", "/v1/webhook_endpoints/"+id+"/rotate_secret", []byte(b), auth(m, "Idempotency-Key", "rot-body", "Content-Type", "application/json")...)
			require.Equal(t, http.StatusBadRequest, refused.StatusCode, "%s: %s", b, refused.Body)
		}
		deleted := g.Do("DELETE", "/v1/webhook_endpoints/"+id, []byte(" { } "), auth(m, "Idempotency-Key", "del-1", "Content-Type", "application/json")...)
		require.Equal(t, http.StatusOK, deleted.StatusCode)
		require.Equal(t, http.StatusNotFound, g.Get(m, "/v1/webhook_endpoints/"+id).StatusCode)

		// Bad input is a 400 problem that stores nothing.
		for name, bad := range map[string]string{
			"NoURL":         `{}`,
			"NotAURL":       `{"url":"not a url"}`,
			"FTP":           `{"url":"ftp://shop.example.com/hooks"}`,
			"Credentials":   `{"url":"https://user:pw@shop.example.com/hooks"}`,
			"UnknownType":   `{"url":"https://shop.example.com/hooks","events":["payment.exploded"]}`,
			"NULDesc":       `{"url":"https://shop.example.com/hooks","description":"a\u0000b"}`,
			"EscapeDesc":    `{"url":"https://shop.example.com/hooks","description":"a\u0001\u001b[31mred"}`,
			"UnknownField":  `{"url":"https://shop.example.com/hooks","surprise":1}`,
			"CreateOff":     `{"url":"https://shop.example.com/hooks","disabled":true}`,
			"NotJSON":       `{"url":`,
			"DuplicateKeys": `{"url":"https://a.example.com","URL":"https://b.example.com"}`,
		} {
			r := g.Do("POST", "/v1/webhook_endpoints", []byte(bad), auth(m, "Idempotency-Key", "bad-"+name)...)
			require.Equal(t, http.StatusBadRequest, r.StatusCode, name+": "+string(r.Body))
			require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), name)
			require.Equal(t, "invalid_request", r.Code(t), name)
		}
		noKey := g.Do("POST", "/v1/webhook_endpoints", body, auth(m)...)
		require.Equal(t, http.StatusBadRequest, noKey.StatusCode)
		require.Equal(t, "idempotency_key_missing", noKey.Code(t))
		require.Empty(t, g.Get(m, "/v1/webhook_endpoints").JSON(t)["data"])
		for _, path := range []string{"/v1/webhook_endpoints/we_%00", "/v1/events/evt_zz", "/v1/webhook_endpoints/nope/deliveries"} {
			require.Equal(t, http.StatusNotFound, g.Get(m, path).StatusCode, path)
		}
		for _, q := range []string{"type=payment.exploded", "limit=0", "limit=101", "cursor=%00", "cursor=bm9wZQ", "created_from=yesterday",
			"created_from=9999-12-31T23:59:59-23:59", // the year 10000 in UTC
			"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("253402300800000000.evt_x"))} {
			r := g.Get(m, "/v1/events?"+q)
			require.Equal(t, http.StatusBadRequest, r.StatusCode, q)
			require.Equal(t, "invalid_request", r.Code(t), q)
		}
		require.NotContains(t, g.Logs.String(), `"level":"ERROR"`)
		require.NotContains(t, g.Logs.String(), secret)
	})
}

func TestARotatedSecretSignsBesideTheOldForADay(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	rcv := newReceiver(t, nil)
	id, old := endpoint(t, g, m, rcv.URL)
	rotated := g.Do("POST", "/v1/webhook_endpoints/"+id+"/rotate_secret", nil, auth(m, "Idempotency-Key", "rot-1")...)
	require.Equal(t, http.StatusOK, rotated.StatusCode)
	fresh := rotated.JSON(t)["secret"].(string)

	require.Equal(t, http.StatusCreated, g.Pay(m, "pay-1", pay("sim_success", 5000)).StatusCode)
	waitFor(t, "the event", func() bool { return len(rcv.got()) == 1 })
	h := rcv.got()[0]
	require.Len(t, strings.Fields(h.Header.Get("webhook-signature")), 2, "two v1 signatures during the overlap")
	require.NoError(t, verify(fresh, h.Header, h.Body, time.Now()))
	require.NoError(t, verify(old, h.Header, h.Body, time.Now()), "receivers on the old secret keep verifying")

	// After the 24 hours, only the new secret signs.
	require.NoError(t, g.App.DB().Exec("UPDATE webhook_endpoints SET old_secret_until = ? WHERE id = ?",
		time.Now().Add(-time.Minute).UTC(), id).Error)
	require.Equal(t, http.StatusCreated, g.Pay(m, "pay-2", pay("sim_success", 5000)).StatusCode)
	waitFor(t, "the second event", func() bool { return len(rcv.got()) == 2 })
	h = rcv.got()[1]
	require.Len(t, strings.Fields(h.Header.Get("webhook-signature")), 1)
	require.NoError(t, verify(fresh, h.Header, h.Body, time.Now()))
	require.Error(t, verify(old, h.Header, h.Body, time.Now()))
}

func TestRedeliverSendsTheSameEventAgain(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	other := g.Onboard(nil)
	rcv := newReceiver(t, nil)
	endpoint(t, g, m, rcv.URL)
	require.Equal(t, http.StatusCreated, g.Pay(m, "pay-1", pay("sim_success", 5000)).StatusCode)
	waitFor(t, "the event", func() bool { return len(rcv.got()) == 1 })
	evID := rcv.got()[0].Header.Get("webhook-id")
	// While the delivery waits or runs a redelivery adds nothing
	// (TestARedeliveryOfAWaitingDeliveryAddsNothing); the queue records it
	// done a moment after the receiver has it.
	waitFor(t, "the delivery done", func() bool {
		var open int64
		require.NoError(t, g.App.DB().Table("river_job").Where("state IN ('available', 'running', 'scheduled', 'pending')").Count(&open).Error)
		return open == 0
	})

	require.Equal(t, http.StatusNotFound, g.Do("POST", "/v1/events/"+evID+"/redeliver", nil, auth(other, "Idempotency-Key", "re-1")...).StatusCode,
		"another merchant's event")
	r := g.Do("POST", "/v1/events/"+evID+"/redeliver", nil, auth(m, "Idempotency-Key", "re-1")...)
	require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
	require.Equal(t, float64(1), r.JSON(t)["endpoints"])
	require.Equal(t, float64(0), r.JSON(t)["in_flight"], "the first delivery was done")
	waitFor(t, "the redelivery", func() bool { return len(rcv.got()) == 2 })
	require.Equal(t, evID, rcv.got()[1].Header.Get("webhook-id"), "the same webhook-id, so the receiver dedupes it")
	require.Equal(t, string(rcv.got()[0].Body), string(rcv.got()[1].Body))

	again := g.Do("POST", "/v1/events/"+evID+"/redeliver", nil, auth(m, "Idempotency-Key", "re-1")...)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	time.Sleep(300 * time.Millisecond)
	require.Len(t, rcv.got(), 2, "a retried redeliver redelivers once")
}

func TestRefundsAreEventsToo(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	rcv := newReceiver(t, nil)
	endpoint(t, g, m, rcv.URL, "refund.succeeded", "refund.failed")
	p := g.Pay(m, "pay-1", pay("sim_success", 5000))
	require.Equal(t, http.StatusCreated, p.StatusCode)
	id := p.JSON(t)["id"].(string)
	r := g.Do("POST", "/v1/payments/"+id+"/refunds", jsonBody(map[string]any{"amount": 2000}), auth(m, "Idempotency-Key", "ref-1")...)
	require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
	waitFor(t, "refund.succeeded", func() bool { return len(rcv.of(t, "refund.succeeded")) == 1 })
	obj := rcv.of(t, "refund.succeeded")[0].event(t)["data"].(map[string]any)["object"].(map[string]any)
	require.Equal(t, r.JSON(t)["id"], obj["id"])
	require.Equal(t, "refund", obj["object"])
	require.Equal(t, float64(2000), obj["amount"])
	require.Len(t, rcv.got(), 1, "the payment's own event is not for this endpoint")
}

// TestARolledBackTransitionEmitsNothing: an event is written in its
// transition's transaction; a transaction that rolls back leaves no event
// (and so nothing is ever delivered for it).
func TestARolledBackTransitionEmitsNothing(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		em := events.NewEmitter(nil)
		ctx := context.Background()
		boom := context.Canceled
		err := db.Transaction(func(tx *gorm.DB) error {
			require.NoError(t, em.Emit(ctx, tx, events.Params{MerchantID: "m1", Type: events.PaymentSucceeded, ObjectID: "pay_1",
				Object: map[string]any{"id": "pay_1"}}))
			return boom // the transition failed after its event was written
		})
		require.ErrorIs(t, err, boom)
		var n int64
		require.NoError(t, db.Table("events").Count(&n).Error)
		require.Zero(t, n)

		// Committed, the same transition reported twice is one event.
		for range 2 {
			require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
				return em.Emit(ctx, tx, events.Params{MerchantID: "m1", Type: events.PaymentSucceeded, ObjectID: "pay_1",
					Object: map[string]any{"id": "pay_1"}})
			}))
		}
		require.NoError(t, db.Table("events").Count(&n).Error)
		require.Equal(t, int64(1), n)
	})
}

func TestAnEndpointFailingForFiveDaysIsDisabledAndAudited(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("WEBHOOK_RETRY_SCHEDULE", "1h"))
	m := g.Onboard(nil)
	rcv := newReceiver(t, func(int) int { return http.StatusBadGateway })
	id, _ := endpoint(t, g, m, rcv.URL)
	require.NoError(t, g.App.DB().Exec("UPDATE webhook_endpoints SET failing_since = ? WHERE id = ?",
		time.Now().Add(-5*24*time.Hour-time.Minute).UTC(), id).Error)
	require.Equal(t, http.StatusCreated, g.Pay(m, "pay-1", pay("sim_success", 5000)).StatusCode)

	waitFor(t, "the endpoint disabled", func() bool { return g.Get(m, "/v1/webhook_endpoints/"+id).JSON(t)["disabled"] == true })
	audit := g.Admin("GET", "/admin/v1/audit-events?action=webhook_endpoint.disabled&tenant_id="+m.ID, nil)
	require.Equal(t, http.StatusOK, audit.StatusCode, string(audit.Body))
	var page struct {
		Data []struct {
			Actor    string `json:"actor"`
			TargetID string `json:"target_id"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(audit.Body, &page))
	require.Len(t, page.Data, 1, "an admin sees why deliveries stopped")
	require.Equal(t, id, page.Data[0].TargetID)
	require.Equal(t, "system", page.Data[0].Actor, "the gateway did it, not an operator")

	// A disabled endpoint gets nothing more.
	require.Equal(t, http.StatusCreated, g.Pay(m, "pay-2", pay("sim_success", 5000)).StatusCode)
	time.Sleep(1500 * time.Millisecond) // a relay period and more
	require.Len(t, rcv.got(), 1)
}

func TestTheBacklogIsMeasured(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("WEBHOOK_RETRY_SCHEDULE", "1h"))
	m := g.Onboard(nil)
	rcv := newReceiver(t, func(int) int { return http.StatusInternalServerError })
	endpoint(t, g, m, rcv.URL)
	require.Equal(t, http.StatusCreated, g.Pay(m, "pay-1", pay("sim_success", 5000)).StatusCode)
	waitFor(t, "the first attempt", func() bool { return len(rcv.got()) == 1 })
	waitFor(t, "the retry scheduled", func() bool {
		b, err := g.App.Events.Backlog(context.Background())
		require.NoError(t, err)
		// Waiting for its retry an hour out: in the queue, but no stall.
		return b.Depth == 1 && b.OldestAge == 0
	})
	var metrics apptest.Response
	waitFor(t, "the attempt counted", func() bool {
		metrics = g.Do("GET", "/metrics", nil)
		return regexp.MustCompile(`oncepay_webhooks_deliveries_total\{[^}]*outcome="retrying"[^}]*\} 1`).Match(metrics.Body)
	})
	require.Contains(t, string(metrics.Body), "oncepay_webhooks_queue_depth")
	require.Contains(t, string(metrics.Body), "oncepay_webhooks_oldest_pending_seconds")
	require.Regexp(t, `oncepay_webhooks_deliveries_total\{[^}]*outcome="retrying"[^}]*\} 1`, string(metrics.Body))
	require.Contains(t, string(metrics.Body), "oncepay_webhooks_attempt_duration_seconds_count")
}

// The cap on a merchant's endpoints holds under concurrency: creates with
// distinct keys racing past it leave exactly maxEndpoints, the rest 400.
func TestEndpointCapHoldsUnderRacingCreates(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, g *apptest.Gateway) {
		m := g.Onboard(nil)
		const racers = 24
		statuses := make([]int, racers)
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				body := jsonBody(map[string]any{"url": fmt.Sprintf("https://shop%d.example.com/hooks", i)})
				statuses[i] = g.Do("POST", "/v1/webhook_endpoints", body, auth(m, "Idempotency-Key", fmt.Sprintf("cap-%d", i))...).StatusCode
			})
		}
		wg.Wait()
		count := map[int]int{}
		for _, s := range statuses {
			count[s]++
		}
		require.Equal(t, map[int]int{http.StatusCreated: 16, http.StatusBadRequest: racers - 16}, count)
		require.Len(t, g.Get(m, "/v1/webhook_endpoints").JSON(t)["data"], 16)
	})
}
