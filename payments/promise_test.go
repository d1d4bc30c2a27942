package payments_test

// Regression tests of issue 14, "the promise at its edges": each test here
// failed on the main branch before its fix.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
	"github.com/oncepay/gateway/scheduler"
)

// paystackMerchant is a gateway, a fake Paystack it talks to, and a
// merchant who charges through it by default.
func paystackMerchant(t *testing.T, opts ...apptest.Option) (*paystacktest.Server, *apptest.Gateway, apptest.Merchant) {
	t.Helper()
	ps := paystacktest.New(t)
	g := apptest.Start(t, append([]apptest.Option{apptest.Env("PAYSTACK_BASE_URL", ps.URL)}, opts...)...)
	m := g.Onboard(map[string]any{"default_provider": "paystack",
		"providers": map[string]any{"paystack": map[string]string{"secret_key": paystacktest.SecretKey}}})
	return ps, g, m
}

// age makes time pass, by the database's clock, for every key of the
// gateway's database.
func ageKeys(t *testing.T, g *apptest.Gateway, d time.Duration) {
	t.Helper()
	dbtest.Age(t, g.App.DB(), d, "idempotency_keys", "locked_until", "created_at", "attempted_at", "looked_up_at", "completed_at")
}

// releasedLate pays under key with sim_late (charged, the answer lost, and
// lookups find nothing for 10 minutes) and has the sweeper release it as
// not_processed once its key is stale: a payment whose recheck is to come.
func releasedLate(t *testing.T, g *apptest.Gateway, m apptest.Merchant, key string) {
	t.Helper()
	require.Equal(t, http.StatusAccepted, g.Pay(m, key, body("sim_late")).StatusCode)
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Released)
}

func sweep(t *testing.T, g *apptest.Gateway) scheduler.Counts {
	t.Helper()
	c, err := g.App.Scheduler.Sweeper().RunOnce(context.Background())
	require.NoError(t, err)
	return c
}

func ledgerByKey(t *testing.T, g *apptest.Gateway, merchantID, key string) payments.Payment {
	t.Helper()
	p, err := g.App.Payments.Store().GetByKey(context.Background(), nil, merchantID, key)
	require.NoError(t, err)
	return p
}

// Bug 1: a charge that lands after the provider said "not found". The
// sweeper releases the key as not_processed — provisionally — and the
// recheck RECHECK_AFTER later finds the charge: the payment ends
// succeeded, and the app's retry replays the success. On both stores.
func TestLateChargeIsReopenedByTheRecheck(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]apptest.Option{"postgres": nil, "sqlite": {apptest.SQLite()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := apptest.Start(t, opts...)
			m := g.Onboard(nil)
			first := g.Pay(m, "late-1", body("sim_late"))
			require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
			id := first.JSON(t)["id"].(string)

			// Nobody retries; once the attempt is stale the sweeper looks,
			// the provider has no record yet, and the key is released.
			ageKeys(t, g, time.Hour)
			require.Equal(t, 1, sweep(t, g).Released)
			p := ledgerByKey(t, g, m.ID, "late-1")
			require.Equal(t, payments.StatusFailed, p.Status)
			require.Equal(t, payments.FailureNotProcessed, p.FailureCode)
			require.NotNil(t, p.RecheckAt, "a not_processed release is looked at again")
			// What the merchant sees meanwhile: failed, not_processed.
			got := g.Get(m, "/v1/payments/"+id).JSON(t)
			require.Equal(t, "failed", got["status"])
			require.Equal(t, "not_processed", got["failure_code"])

			// The charge lands at the provider. Before RECHECK_AFTER the
			// sweeper leaves the payment alone.
			dbtest.Age(t, g.App.DB(), time.Hour, "simulator_charges", "settle_at")
			require.Zero(t, sweep(t, g).Reopened)

			// RECHECK_AFTER later: found, re-opened, and the key replays it.
			dbtest.Age(t, g.App.DB(), 2*time.Hour, "payments", "recheck_at")
			c := sweep(t, g)
			require.Equal(t, 1, c.Reopened, "%+v", c)
			p = ledgerByKey(t, g, m.ID, "late-1")
			require.Equal(t, payments.StatusSucceeded, p.Status)
			require.Empty(t, p.FailureCode)
			require.Nil(t, p.RecheckAt)
			require.NotEmpty(t, p.ProviderTransactionID)
			require.Equal(t, "succeeded", g.Get(m, "/v1/payments/"+id).JSON(t)["status"])
			retry := g.Pay(m, "late-1", body("sim_late"))
			require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
			require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
			require.Equal(t, id, retry.JSON(t)["id"])
			require.Equal(t, 1, charges(t, g, m.ID, "late-1"))
			require.Equal(t, scheduler.Counts{}, sweep(t, g), "nothing left to do")
			// A refund of it records the transaction id the late charge
			// brought, so a refund event naming only that finds it.
			rf := refundOf(g, m, id, "late-1-refund", map[string]any{"amount": 100})
			require.Equal(t, http.StatusCreated, rf.StatusCode, string(rf.Body))
			found, err := payments.NewStore(g.App.DB()).GetByTransactionID(context.Background(), m.ID, "simulator", p.ProviderTransactionID)
			require.NoError(t, err)
			require.Equal(t, id, found.ID)
		})
	}
}

// Bug 1, the recheck's other end: still nothing at the provider after
// RECHECK_AFTER, and the failure becomes final for good.
func TestRecheckThatFindsNothingIsFinal(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	releasedLate(t, g, m, "never")
	// The simulator's charge never lands (its 10 minutes do not pass).
	dbtest.Age(t, g.App.DB(), 2*time.Hour, "payments", "recheck_at")
	require.Equal(t, 1, sweep(t, g).Confirmed)
	p := ledgerByKey(t, g, m.ID, "never")
	require.Equal(t, payments.FailureNotProcessed, p.FailureCode)
	require.Nil(t, p.RecheckAt, "looked at once more, and that is all")
}

// Bug 1, the webhook's end: the provider's signed event for a charge that
// landed after the release re-opens the payment at once, instead of being
// answered "final".
func TestLateChargeIsReopenedByTheWebhook(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	b := body(paystacktest.TokenSuccess)
	ps.LandLateNext()
	first := g.Pay(m, "late-hook", b)
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Released)
	require.Equal(t, payments.FailureNotProcessed, ledgerByKey(t, g, m.ID, "late-hook").FailureCode)

	ref := providers.Reference(m.ID, "late-hook")
	ps.Land(ref)
	h, raw, err := ps.Webhook(ref)
	require.NoError(t, err)
	r := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
	require.Equal(t, "reopened", r.JSON(t)["status"])
	require.Equal(t, payments.StatusSucceeded, ledgerByKey(t, g, m.ID, "late-hook").Status)

	again := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
	require.Equal(t, "final", again.JSON(t)["status"], "a duplicate event is harmless")
	retry := g.Pay(m, "late-hook", b)
	require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, 1, ps.Charges(ref))
}

// A charge released as not_processed that lands late declined is a
// second failure of the same attempt, with another code: the merchant
// hears both (payment.failed not_processed, then card_declined), and the
// newest event carries the ledger's state.
func TestALateDeclineIsASecondFailedEvent(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	ps.LandLateNext()
	require.Equal(t, http.StatusAccepted, g.Pay(m, "late-decline", body(paystacktest.TokenDecline)).StatusCode)
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Released)
	ref := providers.Reference(m.ID, "late-decline")
	ps.Land(ref)
	h, raw, err := ps.Webhook(ref)
	require.NoError(t, err)
	r := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
	p := ledgerByKey(t, g, m.ID, "late-decline")
	require.Equal(t, payments.StatusFailed, p.Status)
	require.NotEqual(t, payments.FailureNotProcessed, p.FailureCode, "the provider's decline is the payment's outcome now")

	var codes []string
	for _, e := range g.Get(m, "/v1/events?limit=100").JSON(t)["data"].([]any) {
		ev := e.(map[string]any)
		obj := ev["data"].(map[string]any)["object"].(map[string]any)
		codes = append([]string{ev["type"].(string) + "/" + fmt.Sprint(obj["failure_code"])}, codes...) // oldest first
	}
	require.Equal(t, []string{"payment.processing/<nil>", "payment.failed/not_processed", "payment.failed/" + p.FailureCode}, codes)
}

// Bug 1, staleness: a retry of an old key re-sends the charge, so the
// sweeper must wait SWEEP_STALE_AFTER after that attempt, not after the
// key's creation, before it trusts a "not found".
func TestStalenessCountsFromTheLastAttempt(t *testing.T) {
	t.Parallel()
	// Stale only once aged: "seconds old" must not pass 5 s of a loaded
	// machine's wall clock.
	g := apptest.Start(t, apptest.Env("SWEEP_STALE_AFTER", "10m"))
	m := g.Onboard(nil)
	require.Equal(t, http.StatusAccepted, g.Pay(m, "old", body("sim_late")).StatusCode)
	ageKeys(t, g, time.Hour) // the key is an hour old
	retry := g.Pay(m, "old", body("sim_late"))
	require.Equal(t, http.StatusAccepted, retry.StatusCode, "the retry took the key over and charged again: %s", retry.Body)
	require.Equal(t, scheduler.Counts{}, sweep(t, g), "the last attempt is seconds old: not stale")
	require.Equal(t, payments.StatusProcessing, ledgerByKey(t, g, m.ID, "old").Status)
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Released)
	require.Equal(t, 1, charges(t, g, m.ID, "old"))
}

// Bug 3: instances whose clocks disagree by a minute agree on who owns a
// key, because leases are the database's times.
func TestSkewedInstancesAgreeOnLeases(t *testing.T) {
	t.Parallel()
	a := apptest.Start(t, apptest.Env("SIMULATOR_LATENCY", "1500ms"))
	m := a.Onboard(nil)
	// Their clocks are a minute off and stay so (no sync with the
	// database's): whatever either computed from its own clock — stamps,
	// a lease, an age — would be a minute off too.
	unsynced := apptest.Env("CLOCK_SYNC", "false")
	// Its SWEEP_STALE_AFTER is under its skew, so a staleness read off
	// its own clock would show, and long enough for a loaded machine.
	ahead := apptest.Start(t, apptest.Env("DATABASE_URL", a.DBURL), apptest.Env("CLOCK_SKEW", "60s"), unsynced,
		apptest.Env("SWEEP_STALE_AFTER", "30s"))
	behind := apptest.Start(t, apptest.Env("DATABASE_URL", a.DBURL), apptest.Env("CLOCK_SKEW", "-60s"), unsynced)
	dbNow, err := dbclock.Read(a.App.DB())
	require.NoError(t, err)
	require.InDelta(t, 60, ahead.App.Clock.Now().Sub(dbNow).Seconds(), 5, "the instance ahead runs a minute ahead")
	require.InDelta(t, -60, behind.App.Clock.Now().Sub(dbNow).Seconds(), 5, "the instance behind runs a minute behind")
	// A token is checked against the verifier's clock (iat may not be in
	// its future), so the instance behind is sent the tokens it mints.
	mBehind := m
	mBehind.Token = behind.Token(m.ClientID, m.ClientSecret)

	// A slow charge on a: the instance a minute ahead must not take over
	// the key a is still working on.
	var wg sync.WaitGroup
	var first apptest.Response
	wg.Go(func() { first = a.Pay(m, "slow", body("sim_success")) })
	waitForPayment(t, a, m.ID, "slow")
	r := ahead.Pay(m, "slow", body("sim_success"))
	require.Equal(t, http.StatusConflict, r.StatusCode, "a live lease, whatever this instance's clock says: %s", r.Body)
	wg.Wait()
	require.Equal(t, http.StatusCreated, first.StatusCode, string(first.Body))
	require.Equal(t, 1, charges(t, a, m.ID, "slow"))

	// A 202 from the instance a minute behind ends its lease now: a retry
	// elsewhere takes the key over at once instead of a minute of 409s.
	lost := behind.Pay(mBehind, "lost", body("sim_timeout"))
	require.Equal(t, http.StatusAccepted, lost.StatusCode, string(lost.Body))
	retry := ahead.Pay(m, "lost", body("sim_timeout"))
	require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
	require.Equal(t, 1, charges(t, a, m.ID, "lost"))

	// And the other way round.
	lost2 := ahead.Pay(m, "lost-2", body("sim_timeout"))
	require.Equal(t, http.StatusAccepted, lost2.StatusCode, string(lost2.Body))
	retry2 := behind.Pay(mBehind, "lost-2", body("sim_timeout"))
	require.Equal(t, http.StatusCreated, retry2.StatusCode, string(retry2.Body))

	// Staleness too: the sweeper of the instance a minute ahead does not
	// find a just-answered key stale.
	require.Equal(t, http.StatusAccepted, behind.Pay(mBehind, "sweep-me", body("sim_pending")).StatusCode)
	require.Equal(t, scheduler.Counts{}, sweep(t, ahead))
}

// waitForPayment waits until the payment of key is in the ledger (its
// charge is then under way).
func waitForPayment(t *testing.T, g *apptest.Gateway, merchantID, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := g.App.Payments.Store().GetByKey(context.Background(), nil, merchantID, key); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no payment for %s", key)
}

// Bug 4: after KEY_TTL purges the stored answer, the ledger still knows
// the request: the same request is answered from it, marked replayed, and
// another request under the key is 422 — and does not steal the key.
func TestPurgedKeyKeepsItsRequest(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]apptest.Option{"postgres": nil, "sqlite": {apptest.SQLite()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := apptest.Start(t, opts...)
			m := g.Onboard(nil)
			first := g.Pay(m, "ttl", body("sim_success"))
			require.Equal(t, http.StatusCreated, first.StatusCode)
			ageKeys(t, g, 73*time.Hour)
			c, err := g.App.Scheduler.Purger().RunOnce(context.Background())
			require.NoError(t, err)
			require.EqualValues(t, 1, c.Deleted)

			other := body("sim_success")
			other["amount"] = 9999
			for range 2 {
				r := g.Pay(m, "ttl", other)
				require.Equal(t, http.StatusUnprocessableEntity, r.StatusCode, string(r.Body))
				require.Equal(t, "idempotency_key_mismatch", r.Code(t))
			}
			same := g.Pay(m, "ttl", body("sim_success"))
			requireReplay(t, first, same)
			requireReplay(t, first, g.Pay(m, "ttl", body("sim_success")))
			require.Equal(t, 1, charges(t, g, m.ID, "ttl"))
		})
	}
}

// Bug 6: once a charge may exist the answer is 202 processing, whatever
// the database does; before any charge a database outage is 503 with
// Retry-After. Never a 500.
func TestStalledDatabaseAnswers(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("SIMULATOR_LATENCY", "1s"))
	m := g.Onboard(nil)
	db := g.App.DB()

	t.Run("AfterTheCharge", func(t *testing.T) {
		var wg sync.WaitGroup
		var r apptest.Response
		wg.Go(func() { r = g.Pay(m, "stall-after", body("sim_success")) })
		waitForPayment(t, g, m.ID, "stall-after")
		// The charge is on its way; the ledger stalls (locked past the
		// gateway's lock_timeout) until the answer is out.
		tx := db.Begin()
		require.NoError(t, tx.Exec("LOCK TABLE payments IN ACCESS EXCLUSIVE MODE").Error)
		wg.Wait()
		require.NoError(t, tx.Commit().Error)
		require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
		require.Equal(t, "processing", r.JSON(t)["status"])
		require.NotEmpty(t, r.Header.Get("Location"))
		require.Equal(t, 1, charges(t, g, m.ID, "stall-after"))
		// The key stayed in progress: the retry settles it, charging once.
		ageKeys(t, g, time.Minute)
		again := g.Pay(m, "stall-after", body("sim_success"))
		require.Equal(t, http.StatusCreated, again.StatusCode, string(again.Body))
		require.Equal(t, 1, charges(t, g, m.ID, "stall-after"))
	})

	t.Run("BeforeAnyCharge", func(t *testing.T) {
		tx := db.Begin()
		require.NoError(t, tx.Exec("LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE").Error)
		r := g.Pay(m, "stall-before", body("sim_success"))
		require.NoError(t, tx.Commit().Error)
		require.Equal(t, http.StatusServiceUnavailable, r.StatusCode, string(r.Body))
		require.Equal(t, "unavailable", r.Code(t))
		require.NotEmpty(t, r.Header.Get("Retry-After"))
		require.Equal(t, 0, charges(t, g, m.ID, "stall-before"))
		ok := g.Pay(m, "stall-before", body("sim_success"))
		require.Equal(t, http.StatusCreated, ok.StatusCode, string(ok.Body))
	})
	require.NotContains(t, g.Logs.String(), `"msg":"unhandled error"`)
}

// Bugs 7 and 8: names are strict (no duplicate, no case-folded twin of a
// schema name), and the fingerprint is the request's meaning: spacing and
// member order are the same request, any changed value another one.
func TestBodiesAreReadStrictlyAndFingerprintedByMeaning(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]apptest.Option{"postgres": nil, "sqlite": {apptest.SQLite()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := apptest.Start(t, opts...)
			m := g.Onboard(nil)
			for _, b := range []string{
				`{"amount":1,"AMOUNT":70000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success"}`,
				`{"amount":1,"amount":70000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success"}`,
				`{"Amount":70000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success"}`,
				`{"amount":5000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success","metadata":{"a":"1","a":"2"}}`,
			} {
				r := g.Pay(m, "strict", []byte(b))
				require.Equal(t, http.StatusBadRequest, r.StatusCode, "%s: %s", b, r.Body)
				require.Equal(t, "invalid_request", r.Code(t))
			}
			require.Equal(t, 0, charges(t, g, m.ID, "strict"), "nothing charged, the key released")

			compact := `{"amount":5000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success","metadata":{"a":"1","b":"2"}}`
			first := g.Pay(m, "meaning", []byte(compact))
			require.Equal(t, http.StatusCreated, first.StatusCode, string(first.Body))
			for _, same := range []string{
				"{\n  \"payment_method\": \"sim_success\",\n  \"email\": \"ada@example.com\",\n  \"currency\": \"NGN\",\n  \"amount\": 5000,\n  \"metadata\": {\"b\": \"2\", \"a\": \"1\"}\n}",
				`{"metadata":{"a":"\u0031","b":"2"},"amount":5e3,"currency":"\u004eGN","email":"ada@example.com","payment_method":"sim_success"}`,
			} {
				requireReplay(t, first, g.Pay(m, "meaning", []byte(same)))
			}
			for _, other := range []string{
				`{"amount":5001,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success","metadata":{"a":"1","b":"2"}}`,
				`{"amount":5000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success","metadata":{"a":"1","b":"2","c":"3"}}`,
				`{"amount":5000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success"}`,
			} {
				r := g.Pay(m, "meaning", []byte(other))
				require.Equal(t, http.StatusUnprocessableEntity, r.StatusCode, "%s: %s", other, r.Body)
			}
			require.Equal(t, 1, charges(t, g, m.ID, "meaning"))
		})
	}
}

// Bug 9: polling Location settles a processing payment nobody works on,
// by lookup, without waiting for the sweeper — and at most once every few
// seconds per payment.
func TestPollingSettlesByLookup(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	lost := g.Pay(m, "poll-lost", body("sim_timeout"))
	require.Equal(t, http.StatusAccepted, lost.StatusCode)
	got := g.Get(m, lost.Header.Get("Location"))
	require.Equal(t, http.StatusOK, got.StatusCode)
	require.Equal(t, "succeeded", got.JSON(t)["status"], "the GET looked it up")
	require.Equal(t, 1, charges(t, g, m.ID, "poll-lost"))
	retry := g.Pay(m, "poll-lost", body("sim_timeout"))
	require.Equal(t, http.StatusCreated, retry.StatusCode)
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"), "the poll completed the key")

	before := providerCalls(t, g, "lookup")
	pending := g.Pay(m, "poll-pending", body("sim_pending"))
	require.Equal(t, http.StatusAccepted, pending.StatusCode)
	for range 5 {
		require.Equal(t, "processing", g.Get(m, pending.Header.Get("Location")).JSON(t)["status"])
	}
	require.Equal(t, before+1, providerCalls(t, g, "lookup"), "five polls, one lookup")
}

// Review finding: a retry of a not_processed payment whose first charge
// may still land is a re-drive. A refusal of that retry (a certain
// non-charge of this attempt) must neither end the recheck nor free the
// key for another body.
func TestNotProcessedRetryIsARedrive(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	b := body(paystacktest.TokenSuccess)
	ps.LandLateNext()
	require.Equal(t, http.StatusAccepted, g.Pay(m, "k", b).StatusCode)
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Released)
	stale := ledgerByKey(t, g, m.ID, "k") // what a recheck read before the retry

	ps.FailNext(http.StatusBadRequest) // this attempt is certainly refused…
	r := g.Pay(m, "k", b)
	require.Equal(t, http.StatusAccepted, r.StatusCode, "…but the first may land: %s", r.Body)
	p := ledgerByKey(t, g, m.ID, "k")
	require.Equal(t, payments.StatusProcessing, p.Status)
	other := body(paystacktest.TokenSuccess)
	other["amount"] = 9999
	require.Equal(t, http.StatusUnprocessableEntity, g.Pay(m, "k", other).StatusCode, "the key stays bound to its request")

	// A recheck holding the copy read before the retry changes nothing.
	st, err := g.App.Payments.Recheck(context.Background(), stale)
	require.NoError(t, err)
	require.Equal(t, payments.Skipped, st)

	// The charge lands; the sweeper finds it.
	ref := providers.Reference(m.ID, "k")
	ps.Land(ref)
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Resolved)
	p = ledgerByKey(t, g, m.ID, "k")
	require.Equal(t, payments.StatusSucceeded, p.Status)
	require.EqualValues(t, 5000, p.Amount)
	retry := g.Pay(m, "k", b)
	require.Equal(t, http.StatusCreated, retry.StatusCode)
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, 1, ps.Charges(ref))
}

// Review finding: past the providers' dedupe window a retry only looks a
// payment up — a not_processed one too — and a lookup right after a
// charge attempt does not release it.
func TestOldPaymentsAreLookedUpNotRecharged(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)

	releasedLate(t, g, m, "np")
	dbtest.Age(t, g.App.DB(), 48*time.Hour, "payments", "created_at")
	before := providerCalls(t, g, "charge")
	r := g.Pay(m, "np", body("sim_late"))
	require.Equal(t, before, providerCalls(t, g, "charge"), "no Charge past the dedupe window: %d %s", r.StatusCode, r.Body)

	require.Equal(t, http.StatusAccepted, g.Pay(m, "recent", body("sim_late")).StatusCode)
	dbtest.Age(t, g.App.DB(), 23*time.Hour+30*time.Minute, "payments", "created_at")
	r = g.Pay(m, "recent", body("sim_late")) // seconds after the charge was sent
	require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
	require.Equal(t, payments.StatusProcessing, ledgerByKey(t, g, m.ID, "recent").Status,
		"a not-found seconds after a charge attempt is no proof of no charge")
}

// landedAfterRelease makes the payment of key "k" that the sweeper
// released as not_processed and whose charge then landed at the provider:
// what a recheck re-opens, and a retry re-drives.
func landedAfterRelease(t *testing.T) (*apptest.Gateway, apptest.Merchant, map[string]any) {
	t.Helper()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	b := body("sim_late")
	require.Equal(t, http.StatusAccepted, g.Pay(m, "k", b).StatusCode)
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Released)
	dbtest.Age(t, g.App.DB(), time.Hour, "simulator_charges", "settle_at") // landed
	return g, m, b
}

// Review finding: a recheck re-opening a payment while a retry claims its
// key must not deadlock, and both end consistent: one charge, and the
// retry's answer is the ledger's.
func TestRecheckAndARetryAtOnce(t *testing.T) {
	t.Parallel()
	g, m, b := landedAfterRelease(t)
	p := ledgerByKey(t, g, m.ID, "k")

	ctx := context.Background()
	claim, rec, err := g.App.Keys.Claim(ctx, idempotency.ClaimParams{MerchantID: m.ID, Key: "k",
		RequestHash: idempotency.Fingerprint("POST", "/v1/payments", raw(b)), Lease: 30 * time.Second, Hold: true})
	require.NoError(t, err)
	require.Nil(t, rec)
	var wg sync.WaitGroup
	var st payments.Settlement
	var rerr error
	wg.Go(func() { st, rerr = g.App.Payments.Recheck(ctx, p) })
	// The retry's claim is held (not yet sent): whichever of the two
	// writes to the key first owns it, and the other steps aside.
	a, cerr := g.App.Payments.Create(ctx, claim, payments.Merchant{ID: m.ID, DefaultProvider: "simulator", Providers: []string{"simulator"}}, raw(b))
	wg.Wait()
	require.NoError(t, rerr)
	require.Contains(t, []payments.Settlement{payments.Skipped, payments.Reopened}, st)
	retry := g.Pay(m, "k", b)
	require.Equal(t, http.StatusCreated, retry.StatusCode)
	if cerr != nil {
		pr, ok := problem.As(cerr)
		require.True(t, ok, "%v", cerr)
		require.Equal(t, "idempotency_key_in_use", pr.Code, "the recheck wrote to the key first")
	} else {
		require.Equal(t, http.StatusCreated, a.Status, string(a.Body))
		require.Equal(t, string(a.Body), string(retry.Body))
	}
	require.Equal(t, 1, charges(t, g, m.ID, "k"))
}

// providerCalls counts the gateway's calls to the simulator for op.
func providerCalls(t *testing.T, g *apptest.Gateway, op string) int {
	t.Helper()
	re := regexp.MustCompile(`^oncepay_provider_request_duration_seconds_count\{class="[a-z_]+",(?:instance="[^"]*",)?op="` + op + `",provider="simulator"\} (\d+)$`)
	resp, err := g.Client.Get(g.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	n := 0
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			k, _ := strconv.Atoi(m[1])
			n += k
		}
	}
	return n
}

// Review finding (a CI flake of TestRecheckAndARetryAtOnce): a retry whose
// claim is already durable, and whose payment a recheck or webhook
// re-opens between the retry's read and its conditional write, must read
// the payment again and answer it — not answer 409 and leave the key in
// progress, with nobody working on it, for a whole lease. The re-open is
// held uncommitted until the retry waits on its row lock.
func TestARetryRereadsAPaymentReopenedUnderIt(t *testing.T) {
	t.Parallel()
	g, m, b := landedAfterRelease(t)

	sqlDB, err := g.App.DB().DB()
	require.NoError(t, err)
	ctx := context.Background()
	tx, err := sqlDB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // committed below
	// The row lock first (the retry's claim and read pass it; its write
	// waits), the re-open's change once the retry is waiting.
	_, err = tx.ExecContext(ctx, `SELECT 1 FROM payments WHERE merchant_id = $1 AND idempotency_key = 'k' FOR UPDATE`, m.ID)
	require.NoError(t, err)
	var xid string
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid))

	done := make(chan apptest.Response, 1)
	go func() { done <- g.Pay(m, "k", b) }()
	require.Eventually(t, func() bool { // the retry waits on the re-open's row lock
		var n int
		require.NoError(t, sqlDB.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'transactionid' AND NOT granted AND transactionid::text = $1`, xid).Scan(&n))
		return n > 0
	}, 10*time.Second, 10*time.Millisecond)
	_, err = tx.ExecContext(ctx, `UPDATE payments SET status = 'succeeded', failure_code = '', failure_message = '', recheck_at = NULL
		WHERE merchant_id = $1 AND idempotency_key = 'k'`, m.ID)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	retry := <-done
	require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
	require.Equal(t, "succeeded", retry.JSON(t)["status"])
	again := g.Pay(m, "k", b)
	require.Equal(t, http.StatusCreated, again.StatusCode, "the key is done, not left in progress: %s", again.Body)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(retry.Body), string(again.Body))
	require.Equal(t, 1, charges(t, g, m.ID, "k"))
}

// What the sweeper settles is named in the log, one line per payment with
// its id and key: an on-call engineer handed a payment id finds what
// happened to it. A payment left for review is an error (a person must
// act); a settlement or a release is not.
func TestSweeperNamesWhatItSettles(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	lost := g.Pay(m, "log-lost", body("sim_timeout"))
	require.Equal(t, http.StatusAccepted, lost.StatusCode, string(lost.Body))
	late := g.Pay(m, "log-late", body("sim_late"))
	require.Equal(t, http.StatusAccepted, late.StatusCode, string(late.Body))
	ageKeys(t, g, time.Hour)
	c := sweep(t, g)
	require.Equal(t, 1, c.Resolved, "%+v", c)
	require.Equal(t, 1, c.Released, "%+v", c)
	open, _, err := g.App.Keys.Backlog(context.Background())
	require.NoError(t, err)
	require.Zero(t, open, "nothing left open")
	line := func(msg, key string) map[string]any {
		for _, s := range strings.Split(g.Logs.String(), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(s), &l) == nil && strings.HasPrefix(l["msg"].(string), msg) && l["idempotency_key"] == key {
				return l
			}
		}
		t.Fatalf("no %q line for %s in\n%s", msg, key, g.Logs.String())
		return nil
	}
	settled := line("payment settled by lookup", "log-lost")
	require.Equal(t, lost.JSON(t)["id"], settled["payment_id"])
	require.Equal(t, "succeeded", settled["outcome"])
	require.Equal(t, "INFO", settled["level"])
	released := line("payment released", "log-late")
	require.Equal(t, late.JSON(t)["id"], released["payment_id"])
	require.Equal(t, "INFO", released["level"])

	// Unsettled past REVIEW_AFTER: an error, naming the payment.
	pending := g.Pay(m, "log-review", body("sim_pending"))
	require.Equal(t, http.StatusAccepted, pending.StatusCode, string(pending.Body))
	require.NoError(t, g.App.DB().Exec(`UPDATE simulator_charges SET settle_at = ? WHERE reference = ?`,
		time.Now().Add(72*time.Hour), ledgerByKey(t, g, m.ID, "log-review").ProviderReference).Error)
	ageKeys(t, g, time.Hour)
	dbtest.Age(t, g.App.DB(), 25*time.Hour, "payments", "created_at")
	require.Equal(t, 1, sweep(t, g).Review)
	open, oldest, err := g.App.Keys.Backlog(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, open, "the backlog: the key in review")
	require.GreaterOrEqual(t, oldest, time.Hour, "its last attempt, aged by an hour")
	review := line("payment requires review", "log-review")
	require.Equal(t, pending.JSON(t)["id"], review["payment_id"])
	require.Equal(t, "ERROR", review["level"])
}
