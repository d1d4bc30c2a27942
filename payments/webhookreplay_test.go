package payments_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
)

// lookupCounter sits between the gateway and a provider's fake and counts
// the lookups by reference (Paystack's /transaction/verify/:reference,
// Flutterwave's /v3/transactions/verify_by_reference): what a replayed
// webhook spends of the merchant's quota at the provider.
func lookupCounter(t *testing.T, target string) (string, func() int) {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(u)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/verify") {
			n.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() int { return int(n.Load()) }
}

// replayRig is a gateway behind a provider fake that signs no time
// (Paystack, Flutterwave), the provider's lookups counted, the webhook
// limit's clock in the test's hands, and a merchant.
type replayRig struct {
	f       fake
	g       *apptest.Gateway
	m       apptest.Merchant
	lookups func() int
	settle  func(string, providers.Outcome) error
	webhook func(string) (http.Header, []byte, error)
	later   func(time.Duration)
}

func untimedProviders(t *testing.T, run func(t *testing.T, r replayRig)) {
	for _, f := range fakes() {
		if f.name == "stripe" {
			continue // its signature covers a time: a copy is refused after five minutes (TestStripeStaleWebhookIs401)
		}
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			upstream, _, settle, webhook := f.start(t)
			counted, lookups := lookupCounter(t, upstream)
			g := apptest.Start(t, apptest.Env(f.env, counted))
			m := g.Onboard(map[string]any{"default_provider": f.name, "providers": map[string]any{f.name: f.secrets}})
			var mu sync.Mutex
			now := time.Now()
			g.App.Payments.SetWebhookClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
			later := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
			run(t, replayRig{f: f, g: g, m: m, lookups: lookups, settle: settle, webhook: webhook, later: later})
		})
	}
}

// pending pays under key with the provider's pending token (202), and
// captures a signed delivery about it.
func (r replayRig) pending(t *testing.T, key string) (ref string, h http.Header, b []byte) {
	t.Helper()
	res := r.g.Pay(r.m, key, providerBody(r.f, r.f.pending))
	require.Equal(t, http.StatusAccepted, res.StatusCode, string(res.Body))
	ref = providers.Reference(r.m.ID, key)
	h, b, err := r.webhook(ref)
	require.NoError(t, err)
	return ref, h, b
}

// flood posts one delivery n times, as fast as the gateway answers, and
// says how many lookups it cost. Every answer is 200, or 503 rate_limited
// with Retry-After: never a 500.
func (r replayRig) flood(t *testing.T, h http.Header, b []byte, n int) int {
	t.Helper()
	before := r.lookups()
	for range n {
		res := r.g.Do("POST", "/v1/webhooks/"+r.f.name+"/"+r.m.ID, b, headerPairs(h)...)
		switch res.StatusCode {
		case http.StatusOK:
		case http.StatusServiceUnavailable:
			require.Equal(t, "rate_limited", res.Code(t), string(res.Body))
			require.NotEmpty(t, res.Header.Get("Retry-After"))
		default:
			t.Fatalf("a copy answered %d: %s", res.StatusCode, res.Body)
		}
	}
	return r.lookups() - before
}

// Paystack and Flutterwave sign no timestamp, so anyone who has seen one
// signed delivery can post it again at will. Every copy verifies, and each
// would have the gateway look the payment up at the provider (the
// merchant's API quota) while it is still open there. A flood of one
// delivery costs a few lookups, the rest answered 503 with Retry-After —
// never 500, never an ERROR, one WARN a minute — and once the payment is
// final, copies cost none.
func TestAReplayedWebhookCostsAFewLookups(t *testing.T) {
	t.Parallel()
	untimedProviders(t, func(t *testing.T, r replayRig) {
		_, h, b := r.pending(t, "replayed")
		require.LessOrEqual(t, r.flood(t, h, b, 60), 5, "sixty copies of one delivery")
		_, oh, ob := r.pending(t, "other")
		require.LessOrEqual(t, r.flood(t, oh, ob, 20), 5, "a payment's bound is its own")
		require.Zero(t, r.flood(t, h, b, 20), "the first is still spent")
		r.later(time.Minute)
		require.LessOrEqual(t, r.flood(t, h, b, 20), 2, "a minute on: a lookup every 30s")

		logs := r.g.Logs.String()
		require.NotContains(t, logs, `"level":"ERROR"`)
		require.Equal(t, 1, strings.Count(logs, "webhook for a payment looked up moments ago"), logs)
	})
}

// The bound loses no legitimate event. Once the provider has the charge
// final, its own delivery is refused while copies have just spent the
// bound — answered 503, so it comes again (Paystack three minutes later)
// and then settles the payment, from the very same bytes; and the
// sweeper settles it regardless, never waiting on webhooks.
func TestAnEventAfterAReplayFloodStillSettles(t *testing.T) {
	t.Parallel()
	untimedProviders(t, func(t *testing.T, r replayRig) {
		ref, h, b := r.pending(t, "replayed")
		swept, sh, sb := r.pending(t, "swept")
		r.flood(t, h, b, 20)
		r.flood(t, sh, sb, 20)

		require.NoError(t, r.settle(ref, providers.OutcomeSucceeded))
		require.NoError(t, r.settle(swept, providers.OutcomeSucceeded))
		hook := "/v1/webhooks/" + r.f.name + "/" + r.m.ID
		res := r.g.Do("POST", hook, b, headerPairs(h)...)
		require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "within the flood's bound: %s", res.Body)
		require.Equal(t, payments.StatusProcessing, ledgerByKey(t, r.g, r.m.ID, "replayed").Status)

		r.later(3 * time.Minute)
		res = r.g.Do("POST", hook, b, headerPairs(h)...)
		require.Equal(t, http.StatusOK, res.StatusCode, string(res.Body))
		require.Equal(t, "resolved", res.JSON(t)["status"])
		require.Equal(t, payments.StatusSucceeded, ledgerByKey(t, r.g, r.m.ID, "replayed").Status)
		require.Zero(t, r.flood(t, h, b, 20), "final: copies are answered from the ledger")

		ageKeys(t, r.g, time.Hour)
		require.Equal(t, 1, sweep(t, r.g).Resolved)
		require.Equal(t, payments.StatusSucceeded, ledgerByKey(t, r.g, r.m.ID, "swept").Status)
		require.NotContains(t, r.g.Logs.String(), `"level":"ERROR"`)
	})
}

// confirmedThenCopied is a Paystack payment under key released as never
// charged (its charge to land late), its recheck ended finding nothing —
// only an event can tell now — and five copies of the provider's event
// about it posted while the charge is still not there: the bound is
// spent. aged (table, columns…) is made two days older first.
func confirmedThenCopied(t *testing.T, key string, aged ...string) (*paystacktest.Server, *apptest.Gateway, apptest.Merchant, string, http.Header, []byte) {
	t.Helper()
	ps, g, m := paystackMerchant(t)
	// The bound's refill must not come from wall time passing under load.
	frozen := time.Now()
	g.App.Payments.SetWebhookClock(func() time.Time { return frozen })
	ps.LandLateNext()
	require.Equal(t, http.StatusAccepted, g.Pay(m, key, body(paystacktest.TokenSuccess)).StatusCode)
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Released)
	dbtest.Age(t, g.App.DB(), 2*time.Hour, "payments", "recheck_at")
	require.Equal(t, 1, sweep(t, g).Confirmed)
	require.Nil(t, ledgerByKey(t, g, m.ID, key).RecheckAt)
	if len(aged) > 0 {
		dbtest.Age(t, g.App.DB(), 48*time.Hour, aged[0], aged[1:]...)
	}
	ref := providers.Reference(m.ID, key)
	h, raw, err := ps.Webhook(ref)
	require.NoError(t, err)
	for range 5 {
		require.Equal(t, http.StatusOK, g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...).StatusCode)
	}
	return ps, g, m, ref, h, raw
}

// The bound never loses a late charge. A payment released as never
// charged whose recheck has ended hears of its charge only from the
// provider's event; if copies have just spent the bound, that event is
// refused, and a provider that does not send it again (Flutterwave's
// resends are not documented) would leave the charge unseen for good. So
// a refusal has the sweeper look the payment up once the bound refills.
func TestARefusedEventStillReopensALateCharge(t *testing.T) {
	t.Parallel()
	ps, g, m, ref, h, raw := confirmedThenCopied(t, "late-bound")
	hook := "/v1/webhooks/paystack/" + m.ID
	ps.Land(ref)
	res := g.Do("POST", hook, raw, headerPairs(h)...)
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "the provider's own event, past the bound: %s", res.Body)
	require.Equal(t, payments.FailureNotProcessed, ledgerByKey(t, g, m.ID, "late-bound").FailureCode)
	require.NotNil(t, ledgerByKey(t, g, m.ID, "late-bound").RecheckAt, "the sweeper is to look")

	// It is never sent again; the sweeper finds the charge.
	dbtest.Age(t, g.App.DB(), time.Minute, "payments", "recheck_at")
	require.Equal(t, 1, sweep(t, g).Reopened)
	require.Equal(t, payments.StatusSucceeded, ledgerByKey(t, g, m.ID, "late-bound").Status)
	require.Equal(t, 1, ps.Charges(ref))
}

// ...but not for a payment older than REVIEW_AFTER: its scheduled recheck,
// if the provider could not be asked, would reinstate it for review — a
// payment settled days ago sent back to processing by copies of a webhook.
func TestARefusedEventLeavesAnOldFailedPaymentAlone(t *testing.T) {
	t.Parallel()
	_, g, m, _, h, raw := confirmedThenCopied(t, "old-bound", "payments", "created_at", "updated_at")
	hook := "/v1/webhooks/paystack/" + m.ID
	res := g.Do("POST", hook, raw, headerPairs(h)...)
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, string(res.Body))
	p := ledgerByKey(t, g, m.ID, "old-bound")
	require.Nil(t, p.RecheckAt, "no scheduled recheck for a payment past REVIEW_AFTER")
	require.Equal(t, payments.FailureNotProcessed, p.FailureCode)
}

// landing is a Paystack payment under key "landing" charged with its
// answer lost (202), whose charge the provider shows only once arm is
// called and a lookup then finds nothing: it lands while that "not found"
// is on its way back, and the provider's event about it is posted to the
// gateway at that moment (its answer in hooks).
type landing struct {
	ps    *paystacktest.Server
	g     *apptest.Gateway
	m     apptest.Merchant
	ref   string
	armed atomic.Bool
	hooks chan apptest.Response
}

func landingDuringALookup(t *testing.T) *landing {
	t.Helper()
	l := &landing{ps: paystacktest.New(t), hooks: make(chan apptest.Response, 1)}
	u, err := url.Parse(l.ps.URL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(r *http.Response) error {
		if strings.Contains(r.Request.URL.Path, "/transaction/verify/") && r.StatusCode == http.StatusBadRequest &&
			l.armed.CompareAndSwap(true, false) {
			l.ps.Land(l.ref)
			h, raw, err := l.ps.Webhook(l.ref)
			if err != nil {
				return err
			}
			l.hooks <- l.g.Do("POST", "/v1/webhooks/paystack/"+l.m.ID, raw, headerPairs(h)...)
		}
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	l.g = apptest.Start(t, apptest.Env("PAYSTACK_BASE_URL", srv.URL))
	l.m = l.g.Onboard(map[string]any{"default_provider": "paystack",
		"providers": map[string]any{"paystack": map[string]string{"secret_key": paystacktest.SecretKey}}})
	l.ref = providers.Reference(l.m.ID, "landing")
	l.ps.LandLateNext()
	require.Equal(t, http.StatusAccepted, l.g.Pay(l.m, "landing", body(paystacktest.TokenSuccess)).StatusCode)
	return l
}

// landed requires that the charge landed during a lookup, and the event
// then posted was put off: its key was held by whoever looked.
func (l *landing) landed(t *testing.T) {
	t.Helper()
	require.False(t, l.armed.Load(), "the charge landed during the lookup")
	hook := <-l.hooks
	require.Equal(t, http.StatusOK, hook.StatusCode, string(hook.Body))
	require.Equal(t, "deferred", hook.JSON(t)["status"], "the key was held")
}

// A charge that lands while the sweeper's lookup is out: the lookup says
// "not found", and the provider's event, arriving meanwhile, is put off
// (the sweeper holds the key) with a 200 the provider takes as delivered,
// so it never comes again. The sweeper looks once more after releasing
// the key and re-opens the payment, instead of leaving it failed — and a
// merchant charging the customer anew — until its recheck an hour later.
func TestAChargeLandingDuringTheReleasingLookupIsNotLost(t *testing.T) {
	t.Parallel()
	l := landingDuringALookup(t)
	ageKeys(t, l.g, time.Hour)
	l.armed.Store(true)
	c := sweep(t, l.g)
	l.landed(t)

	require.Equal(t, 1, c.Reopened, "%+v", c)
	p := ledgerByKey(t, l.g, l.m.ID, "landing")
	require.Equal(t, payments.StatusSucceeded, p.Status)
	require.Nil(t, p.RecheckAt)
	retry := l.g.Pay(l.m, "landing", body(paystacktest.TokenSuccess))
	require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, 1, l.ps.Charges(l.ref))
}

// The same when it is the merchant's retry that looks (a payment past the
// redrive window is looked up, never charged again): the retry is answered
// the success its second look found, not "processing".
func TestARetryThatFindsTheChargeLandingAnswersIt(t *testing.T) {
	t.Parallel()
	l := landingDuringALookup(t)
	ageKeys(t, l.g, 24*time.Hour)
	dbtest.Age(t, l.g.App.DB(), 24*time.Hour, "payments", "created_at")
	l.armed.Store(true)
	retry := l.g.Pay(l.m, "landing", body(paystacktest.TokenSuccess))
	l.landed(t)
	require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
	require.Equal(t, "succeeded", retry.JSON(t)["status"])
	require.Equal(t, payments.StatusSucceeded, ledgerByKey(t, l.g, l.m.ID, "landing").Status)
	again := l.g.Pay(l.m, "landing", body(paystacktest.TokenSuccess))
	require.Equal(t, string(retry.Body), string(again.Body), "its key replays it")
	require.Equal(t, 1, l.ps.Charges(l.ref))
}

// redisURL is the Redis the tests use for real (TEST_REDIS_URL; .ci/run
// starts one on this default when it is down).
func redisURL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// Behind N instances a flood is still one bound: with REDIS_URL, copies of
// one signed delivery posted to two gateways in turn (one database, one
// Redis, one key prefix) have the payment looked up HookLookupBurst times
// in all, not that many on each, and every other copy is answered 503
// rate_limited. The merchant rate limit is off (the test environment's
// RATE_LIMIT_PER_SECOND=0): the webhook bound is shared regardless.
func TestReplayedWebhookCopiesShareOneBoundAcrossInstances(t *testing.T) {
	t.Parallel()
	ps := paystacktest.New(t)
	counted, lookups := lookupCounter(t, ps.URL)
	opts := []apptest.Option{apptest.Env("PAYSTACK_BASE_URL", counted), apptest.Env("REDIS_URL", redisURL()),
		apptest.Env("REDIS_KEY_PREFIX", fmt.Sprintf("test-hooks-%d:", time.Now().UnixNano()))}
	a := apptest.Start(t, opts...)
	b := apptest.Start(t, append(opts, apptest.Env("DATABASE_URL", a.DBURL))...)
	require.Nil(t, a.App.SharedLimiter, "the merchant limit is off")
	require.NotNil(t, a.App.HookLookups)
	require.NoError(t, a.App.HookLookups.Ping(context.Background()), "Redis must answer (bash .ci/run starts it)")
	m := a.Onboard(map[string]any{"default_provider": "paystack",
		"providers": map[string]any{"paystack": map[string]string{"secret_key": paystacktest.SecretKey}}})
	require.Equal(t, http.StatusAccepted, a.Pay(m, "copied", body(paystacktest.TokenPending)).StatusCode)
	h, raw, err := ps.Webhook(providers.Reference(m.ID, "copied"))
	require.NoError(t, err)

	before, start := lookups(), time.Now()
	admitted := map[*apptest.Gateway]int{}
	for i := range 4 * payments.HookLookupBurst {
		g := a
		if i%2 == 1 {
			g = b
		}
		res := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
		switch res.StatusCode {
		case http.StatusOK:
			admitted[g]++
		case http.StatusServiceUnavailable:
			require.Equal(t, "rate_limited", res.Code(t), string(res.Body))
		default:
			t.Fatalf("a copy answered %d: %s", res.StatusCode, res.Body)
		}
	}
	refilled := int(time.Since(start) / payments.HookLookupEvery) // none, unless the machine crawls
	total := admitted[a] + admitted[b]
	require.GreaterOrEqual(t, total, payments.HookLookupBurst)
	require.LessOrEqual(t, total, payments.HookLookupBurst+refilled, "one bound for both instances: %v", admitted)
	require.Positive(t, admitted[b], "the second instance spent the same bound, taking turns")
	require.LessOrEqual(t, lookups()-before, payments.HookLookupBurst+refilled)
	require.Positive(t, lookups()-before)
}

// A payment an operator failed while the provider still had it pending is
// older than REVIEW_AFTER by then (it went through review), and its
// charge may still land: a refused copy of the provider's event about it
// still has it looked at soon — a watch, which raises the ERROR for a
// charge and never reinstates it.
func TestARefusedEventHasAnOperatorsFailedPaymentWatched(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	frozen := time.Now()
	g.App.Payments.SetWebhookClock(func() time.Time { return frozen })
	id := pendingInReview(t, g, m, "resolved-bound")
	resolved(t, g, id, "failed", "customer abandoned checkout")
	ref := providers.Reference(m.ID, "resolved-bound")
	h, raw, err := ps.Webhook(ref)
	require.NoError(t, err)
	hook := "/v1/webhooks/paystack/" + m.ID
	for range payments.HookLookupBurst {
		require.Equal(t, http.StatusOK, g.Do("POST", hook, raw, headerPairs(h)...).StatusCode)
	}
	res := g.Do("POST", hook, raw, headerPairs(h)...)
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, string(res.Body))
	p := ledgerByKey(t, g, m.ID, "resolved-bound")
	require.Equal(t, payments.FailureResolved, p.FailureCode)
	require.NotNil(t, p.RecheckAt)
	require.True(t, p.RecheckAt.Before(time.Now().Add(time.Minute)), "looked at within the bound's refill, not RECHECK_AFTER: %v", p.RecheckAt)
}
