package payments_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/providers"
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

// Paystack and Flutterwave sign no timestamp, so anyone who has seen one
// signed delivery can post it again at will. Every copy verifies, and each
// would have the gateway look the payment up at the provider (the
// merchant's API quota) while it is still open there. A flood of one
// delivery costs a few lookups, is answered 503 with Retry-After past
// them (never 500, never an ERROR, one WARN a minute), and loses nothing:
// once the provider has the charge final, its own delivery a few minutes
// later settles the payment — the identical bytes included — and so does
// the sweeper in the meantime.
func TestAReplayedWebhookCostsAFewLookups(t *testing.T) {
	t.Parallel()
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
			hook := "/v1/webhooks/" + f.name + "/" + m.ID
			var mu sync.Mutex
			now := time.Now()
			g.App.Payments.SetWebhookClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
			later := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

			// flood posts one captured delivery n times, as fast as the
			// gateway answers, and says how many lookups it cost.
			flood := func(h http.Header, b []byte, n int) int {
				before := lookups()
				for range n {
					r := g.Do("POST", hook, b, headerPairs(h)...)
					switch r.StatusCode {
					case http.StatusOK:
					case http.StatusServiceUnavailable:
						require.Equal(t, "rate_limited", r.Code(t), string(r.Body))
						require.NotEmpty(t, r.Header.Get("Retry-After"))
					default:
						t.Fatalf("a replay answered %d: %s", r.StatusCode, r.Body)
					}
				}
				return lookups() - before
			}

			for _, key := range []string{"replayed", "swept"} {
				r := g.Pay(m, key, providerBody(f, f.pending))
				require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			}
			ref := providers.Reference(m.ID, "replayed")
			h, b, err := webhook(ref)
			require.NoError(t, err)
			require.LessOrEqual(t, flood(h, b, 60), 5, "sixty copies of one delivery")
			swept := providers.Reference(m.ID, "swept")
			sh, sb, err := webhook(swept)
			require.NoError(t, err)
			require.LessOrEqual(t, flood(sh, sb, 20), 5, "a payment's limit is its own")

			logs := g.Logs.String()
			require.NotContains(t, logs, `"level":"ERROR"`)
			require.LessOrEqual(t, strings.Count(logs, "webhook for a payment looked up moments ago"), 1, logs)

			// Now the provider has the charge final, and sends its event.
			require.NoError(t, settle(ref, providers.OutcomeSucceeded))
			require.NoError(t, settle(swept, providers.OutcomeSucceeded))
			r := g.Do("POST", hook, b, headerPairs(h)...)
			require.Equal(t, http.StatusServiceUnavailable, r.StatusCode, "still within the flood's limit: %s", r.Body)
			require.Equal(t, payments.StatusProcessing, ledgerByKey(t, g, m.ID, "replayed").Status)

			// Refused, the provider sends it again (Paystack 3 minutes
			// later): settled, from the same bytes.
			later(3 * time.Minute)
			r = g.Do("POST", hook, b, headerPairs(h)...)
			require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
			require.Equal(t, "resolved", r.JSON(t)["status"])
			require.Equal(t, payments.StatusSucceeded, ledgerByKey(t, g, m.ID, "replayed").Status)
			// Final now: copies cost no lookup at all.
			require.Zero(t, flood(h, b, 20))

			// The sweeper never waits on webhooks.
			ageKeys(t, g, time.Hour)
			require.Equal(t, 1, sweep(t, g).Resolved)
			require.Equal(t, payments.StatusSucceeded, ledgerByKey(t, g, m.ID, "swept").Status)
		})
	}
}
