package payments_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/flutterwave"
	"github.com/oncepay/gateway/providers/flutterwave/flutterwavetest"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
	"github.com/oncepay/gateway/providers/stripe/stripetest"
	"github.com/oncepay/gateway/scheduler"
)

// refundOf posts a refund of payment id under key.
func refundOf(g *apptest.Gateway, m apptest.Merchant, id, key string, body any) apptest.Response {
	g.T.Helper()
	return g.Do("POST", "/v1/payments/"+id+"/refunds", raw(body), "Authorization", "Bearer "+m.Token, "Idempotency-Key", key,
		"Content-Type", "application/json")
}

// paid makes a succeeded payment of amount and returns its id.
func paid(t *testing.T, g *apptest.Gateway, m apptest.Merchant, key string, amount int64) string {
	t.Helper()
	b := body("sim_success")
	b["amount"] = amount
	r := g.Pay(m, key, b)
	require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
	return r.JSON(t)["id"].(string)
}

func simRefunds(t *testing.T, g *apptest.Gateway, merchantID, key string) int {
	t.Helper()
	n, err := g.App.Sim.Refunds(context.Background(), providers.RefundReference(merchantID, key))
	require.NoError(t, err)
	return n
}

func amountRefunded(t *testing.T, g *apptest.Gateway, m apptest.Merchant, id string) float64 {
	t.Helper()
	return g.Get(m, "/v1/payments/"+id).JSON(t)["amount_refunded"].(float64)
}

// TestRefundContract walks the refund contract table on both stores: the
// payment contract's rows, under refund keys, plus what only refunds have.
func TestRefundContract(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) { t.Parallel(); refundContract(t, apptest.Start(t)) })
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); refundContract(t, apptest.Start(t, apptest.SQLite())) })
}

func refundContract(t *testing.T, g *apptest.Gateway) {
	m := g.Onboard(nil)
	other := g.Onboard(nil)

	t.Run("FullRefundIs201AndReplaysByteForByte", func(t *testing.T) {
		t.Parallel()
		id := paid(t, g, m, "p-full", 5000)
		first := refundOf(g, m, id, "r-full", map[string]any{"reason": "requested_by_customer"})
		require.Equal(t, http.StatusCreated, first.StatusCode, string(first.Body))
		r := first.JSON(t)
		require.Equal(t, "refund", r["object"])
		require.Equal(t, "succeeded", r["status"])
		require.Equal(t, float64(5000), r["amount"], "no amount: all that is left")
		require.Equal(t, id, r["payment_id"])
		require.Equal(t, "/v1/refunds/"+r["id"].(string), first.Header.Get("Location"))
		requireReplay(t, first, refundOf(g, m, id, "r-full", map[string]any{"reason": "requested_by_customer"}))
		require.Equal(t, 1, simRefunds(t, g, m.ID, "r-full"))
		require.Equal(t, float64(5000), amountRefunded(t, g, m, id))
		got := g.Get(m, "/v1/refunds/"+r["id"].(string))
		require.Equal(t, http.StatusOK, got.StatusCode)
		require.Equal(t, "succeeded", got.JSON(t)["status"])
	})

	t.Run("PartialRefundsUpToTheAmount", func(t *testing.T) {
		t.Parallel()
		id := paid(t, g, m, "p-part", 5000)
		require.Equal(t, http.StatusCreated, refundOf(g, m, id, "r-part-1", map[string]any{"amount": 3000}).StatusCode)
		require.Equal(t, http.StatusCreated, refundOf(g, m, id, "r-part-2", map[string]any{"amount": 2000}).StatusCode)
		over := refundOf(g, m, id, "r-part-3", map[string]any{"amount": 1})
		require.Equal(t, http.StatusBadRequest, over.StatusCode, string(over.Body))
		require.Equal(t, "refund_exceeds_remaining", over.Code(t))
		require.Equal(t, float64(0), over.JSON(t)["amount_refundable"])
		nothing := refundOf(g, m, id, "r-part-4", map[string]any{})
		require.Equal(t, "refund_exceeds_remaining", nothing.Code(t))
		_, err := g.App.Keys.Get(context.Background(), m.ID, "r-part-3")
		require.Error(t, err, "a refused refund releases its key")
		list := g.Get(m, "/v1/payments/"+id+"/refunds?limit=1")
		require.Equal(t, http.StatusOK, list.StatusCode)
		page := list.JSON(t)
		require.Len(t, page["data"], 1)
		require.Equal(t, true, page["has_more"])
		next := g.Get(m, "/v1/payments/"+id+"/refunds?limit=1&cursor="+page["next_cursor"].(string)).JSON(t)
		require.Len(t, next["data"], 1)
		require.Equal(t, false, next["has_more"])
	})

	t.Run("ContractErrors", func(t *testing.T) {
		t.Parallel()
		id := paid(t, g, m, "p-err", 5000)
		noKey := g.Do("POST", "/v1/payments/"+id+"/refunds", []byte(`{}`), "Authorization", "Bearer "+m.Token)
		require.Equal(t, http.StatusBadRequest, noKey.StatusCode)
		require.Equal(t, "idempotency_key_missing", noKey.Code(t))
		require.Equal(t, http.StatusCreated, refundOf(g, m, id, "r-err", map[string]any{"amount": 100}).StatusCode)
		mismatch := refundOf(g, m, id, "r-err", map[string]any{"amount": 200})
		require.Equal(t, http.StatusUnprocessableEntity, mismatch.StatusCode)
		require.Equal(t, "idempotency_key_mismatch", mismatch.Code(t))
		require.Equal(t, http.StatusUnprocessableEntity, g.Pay(m, "r-err", body("sim_success")).StatusCode, "a refund's key is not a payment's")
		bad := refundOf(g, m, id, "r-bad", map[string]any{"amount": -5})
		require.Equal(t, http.StatusBadRequest, bad.StatusCode)
		require.Equal(t, "invalid_request", bad.Code(t))
		dup := g.Do("POST", "/v1/payments/"+id+"/refunds", []byte(`{"amount":1,"AMOUNT":5000}`), "Authorization", "Bearer "+m.Token,
			"Idempotency-Key", "r-dup", "Content-Type", "application/json")
		require.Equal(t, http.StatusBadRequest, dup.StatusCode)
		long := refundOf(g, m, id, "r-long", map[string]any{"reason": string(make([]byte, 201))})
		require.Equal(t, http.StatusBadRequest, long.StatusCode)
		null := refundOf(g, m, id, "r-null", map[string]any{"metadata": map[string]any{"k": nil}})
		require.Equal(t, http.StatusBadRequest, null.StatusCode, "a null metadata value is not stored as \"\"")
	})

	t.Run("OnlySucceededPaymentsOfTheCaller", func(t *testing.T) {
		t.Parallel()
		declined := g.Pay(m, "p-declined", body("sim_decline"))
		require.Equal(t, http.StatusPaymentRequired, declined.StatusCode)
		did := declined.JSON(t)["payment"].(map[string]any)["id"].(string)
		r := refundOf(g, m, did, "r-declined", map[string]any{})
		require.Equal(t, http.StatusConflict, r.StatusCode)
		require.Equal(t, "payment_not_refundable", r.Code(t))

		id := paid(t, g, m, "p-mine", 5000)
		theirs := refundOf(g, other, id, "r-theirs", map[string]any{})
		require.Equal(t, http.StatusNotFound, theirs.StatusCode)
		require.Equal(t, "payment_not_found", theirs.Code(t))
		require.Equal(t, http.StatusNotFound, refundOf(g, m, "pay_00000000000000000000000000000000", "r-none", map[string]any{}).StatusCode)
		require.Equal(t, http.StatusNotFound, refundOf(g, m, "pay_%00", "r-nul", map[string]any{}).StatusCode)
		require.Equal(t, float64(0), amountRefunded(t, g, m, id))

		ok := refundOf(g, m, id, "r-mine", map[string]any{"amount": 10})
		require.Equal(t, http.StatusCreated, ok.StatusCode)
		rid := ok.JSON(t)["id"].(string)
		require.Equal(t, http.StatusNotFound, g.Get(other, "/v1/refunds/"+rid).StatusCode)
		require.Equal(t, http.StatusNotFound, g.Get(other, "/v1/payments/"+id+"/refunds").StatusCode)
	})

	t.Run("SameKeyWhileOwnerHoldsLeaseIs409", func(t *testing.T) {
		t.Parallel()
		id := paid(t, g, m, "p-busy", 5000)
		b := raw(map[string]any{"amount": 100})
		_, _, err := g.App.Keys.Claim(context.Background(), idempotency.ClaimParams{
			MerchantID: m.ID, Key: "r-busy", Lease: time.Hour,
			RequestHash: idempotency.Fingerprint("POST", "/v1/payments/"+id+"/refunds", b),
		})
		require.NoError(t, err)
		r := refundOf(g, m, id, "r-busy", map[string]any{"amount": 100})
		require.Equal(t, http.StatusConflict, r.StatusCode, string(r.Body))
		require.Equal(t, "idempotency_key_in_use", r.Code(t))
		require.Equal(t, "1", r.Header.Get("Retry-After"))
		require.Equal(t, 0, simRefunds(t, g, m.ID, "r-busy"))
		require.Equal(t, float64(0), amountRefunded(t, g, m, id))
	})

	t.Run("LapsedLeaseIsTakenOver", func(t *testing.T) {
		t.Parallel()
		id := paid(t, g, m, "p-lapsed", 5000)
		b := raw(map[string]any{"amount": 100})
		_, _, err := g.App.Keys.Claim(context.Background(), idempotency.ClaimParams{
			MerchantID: m.ID, Key: "r-lapsed", Lease: -time.Second,
			RequestHash: idempotency.Fingerprint("POST", "/v1/payments/"+id+"/refunds", b),
		})
		require.NoError(t, err)
		r := refundOf(g, m, id, "r-lapsed", map[string]any{"amount": 100})
		require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
		require.Equal(t, "succeeded", r.JSON(t)["status"])
		require.Equal(t, 1, simRefunds(t, g, m.ID, "r-lapsed"))
		requireReplay(t, r, refundOf(g, m, id, "r-lapsed", map[string]any{"amount": 100}))
		require.Equal(t, float64(100), amountRefunded(t, g, m, id))
	})

	t.Run("ProviderDownIs503AndReleasesTheKey", func(t *testing.T) {
		t.Parallel()
		id := paid(t, g, m, "p-down", 5000)
		r := refundOf(g, m, id, "r-down", map[string]any{"amount": 1000, "reason": "sim_unavailable"})
		require.Equal(t, http.StatusServiceUnavailable, r.StatusCode, string(r.Body))
		require.Equal(t, "provider_unavailable", r.Code(t))
		require.Equal(t, float64(0), amountRefunded(t, g, m, id), "the reservation was given back")
		again := refundOf(g, m, id, "r-down", map[string]any{"amount": 1000})
		require.Equal(t, http.StatusCreated, again.StatusCode, string(again.Body))
		require.Equal(t, float64(1000), amountRefunded(t, g, m, id))
		require.Equal(t, 1, simRefunds(t, g, m.ID, "r-down"))
	})

	t.Run("RefusedByTheProviderIs201FailedAndGivesTheAmountBack", func(t *testing.T) {
		t.Parallel()
		id := paid(t, g, m, "p-refused", 5000)
		r := refundOf(g, m, id, "r-refused", map[string]any{"reason": "sim_decline"})
		require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
		require.Equal(t, "failed", r.JSON(t)["status"])
		require.Equal(t, float64(0), amountRefunded(t, g, m, id))
		requireReplay(t, r, refundOf(g, m, id, "r-refused", map[string]any{"reason": "sim_decline"}))
		require.Equal(t, http.StatusCreated, refundOf(g, m, id, "r-refused-2", map[string]any{}).StatusCode, "still refundable")
	})

	t.Run("LostAnswerIs202AndTheRetryRefundsOnce", func(t *testing.T) {
		t.Parallel()
		id := paid(t, g, m, "p-lost", 5000)
		first := refundOf(g, m, id, "r-lost", map[string]any{"amount": 700, "reason": "sim_timeout"})
		require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
		require.Equal(t, "pending", first.JSON(t)["status"])
		require.Equal(t, float64(700), amountRefunded(t, g, m, id), "a pending refund counts")
		second := refundOf(g, m, id, "r-lost", map[string]any{"amount": 700, "reason": "sim_timeout"})
		require.Equal(t, http.StatusCreated, second.StatusCode, string(second.Body))
		require.Equal(t, "succeeded", second.JSON(t)["status"])
		require.Equal(t, first.JSON(t)["id"], second.JSON(t)["id"])
		require.Equal(t, 1, simRefunds(t, g, m.ID, "r-lost"))
		requireReplay(t, second, refundOf(g, m, id, "r-lost", map[string]any{"amount": 700, "reason": "sim_timeout"}))
	})
}

// A refund whose answer is lost, and whom nobody retries, is settled by
// the sweeper by lookup, with one refund at the provider; a pending one
// too, once the provider settles it.
func TestSweeperSettlesRefunds(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("SWEEP_STALE_AFTER", "10m")) // stale only once aged
	m := g.Onboard(nil)
	id := paid(t, g, m, "p", 5000)
	lost := refundOf(g, m, id, "r-lost", map[string]any{"amount": 1000, "reason": "sim_timeout"})
	require.Equal(t, http.StatusAccepted, lost.StatusCode, string(lost.Body))
	pending := refundOf(g, m, id, "r-pending", map[string]any{"amount": 2000, "reason": "sim_pending"})
	require.Equal(t, http.StatusAccepted, pending.StatusCode, string(pending.Body))
	require.Equal(t, scheduler.Counts{}, sweep(t, g), "not stale yet")

	ageKeys(t, g, time.Hour)
	dbtest.Age(t, g.App.DB(), time.Hour, "simulator_refunds", "settle_at")
	c := sweep(t, g)
	require.Equal(t, 2, c.Resolved, "%+v", c)
	for _, k := range []string{"r-lost", "r-pending"} {
		require.Equal(t, 1, simRefunds(t, g, m.ID, k))
		rec, err := g.App.Keys.Get(context.Background(), m.ID, k)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, rec.StatusCode)
	}
	retry := refundOf(g, m, id, "r-lost", map[string]any{"amount": 1000, "reason": "sim_timeout"})
	require.Equal(t, http.StatusCreated, retry.StatusCode)
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "succeeded", retry.JSON(t)["status"])
	require.Equal(t, float64(3000), amountRefunded(t, g, m, id))
}

// Polling a pending refund's Location settles it by lookup.
func TestPollingARefundSettlesIt(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	id := paid(t, g, m, "p", 5000)
	lost := refundOf(g, m, id, "r", map[string]any{"reason": "sim_timeout"})
	require.Equal(t, http.StatusAccepted, lost.StatusCode)
	got := g.Get(m, lost.Header.Get("Location"))
	require.Equal(t, "succeeded", got.JSON(t)["status"])
	require.Equal(t, 1, simRefunds(t, g, m.ID, "r"))
}

// Twenty racing refunds of 1000 with distinct keys on 7000 left: exactly
// seven succeed, whatever the interleaving — on one instance and on three.
func TestRacingRefundsNeverExceedThePayment(t *testing.T) {
	t.Parallel()
	for _, instances := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d instances", instances), func(t *testing.T) {
			t.Parallel()
			g := apptest.Start(t)
			gs := []*apptest.Gateway{g}
			for range instances - 1 {
				gs = append(gs, apptest.Start(t, apptest.Env("DATABASE_URL", g.DBURL)))
			}
			m := g.Onboard(nil)
			id := paid(t, g, m, "p", 8000)
			require.Equal(t, http.StatusCreated, refundOf(g, m, id, "first", map[string]any{"amount": 1000}).StatusCode)
			var wg sync.WaitGroup
			codes := make([]int, 20)
			start := make(chan struct{})
			for i := range 20 {
				wg.Go(func() {
					<-start
					r := refundOf(gs[i%len(gs)], m, id, fmt.Sprintf("racer-%d", i), map[string]any{"amount": 1000})
					codes[i] = r.StatusCode
				})
			}
			close(start)
			wg.Wait()
			won, refused := 0, 0
			for _, c := range codes {
				switch c {
				case http.StatusCreated:
					won++
				case http.StatusBadRequest:
					refused++
				default:
					t.Errorf("unexpected answer %d", c)
				}
			}
			require.Equal(t, 7, won, "%v", codes)
			require.Equal(t, 13, refused)
			require.Equal(t, float64(8000), amountRefunded(t, g, m, id))
			var sum int64
			require.NoError(t, g.App.DB().Raw("SELECT COALESCE(SUM(amount), 0) FROM refunds WHERE payment_id = ? AND status = ?", id, payments.RefundSucceeded).Row().Scan(&sum))
			require.EqualValues(t, 8000, sum)
		})
	}
}

// A refund of all that is left that read the remainder just before
// another refund reserved part of it takes what is left then, rather than
// answering "exceeds the remaining amount" while money is refundable.
func TestRefundOfTheRestTakesWhatIsLeftAfterARace(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	id := paid(t, g, m, "p", 5000)
	ctx := context.Background()
	// Another refund's reservation, not yet committed: the request below
	// waits on the row to read what is left, and reads 4000 once it
	// commits.
	other, err := pgx.Connect(ctx, g.DBURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	tx, err := other.Begin(ctx)
	require.NoError(t, err)
	tag, err := tx.Exec(ctx, `UPDATE payments SET amount_refunded = amount_refunded + 1000 WHERE id = $1`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	answer := make(chan apptest.Response, 1)
	go func() { answer <- refundOf(g, m, id, "the-rest", map[string]any{}) }()
	require.Eventually(t, func() bool {
		var waiting int
		err := other.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database() AND pid <> pg_backend_pid()`).Scan(&waiting)
		select {
		case r := <-answer:
			t.Fatalf("answered while the row was locked: %d %s", r.StatusCode, r.Body)
		default:
		}
		return err == nil && waiting > 0
	}, 10*time.Second, 5*time.Millisecond, "the refund waits on the payment's row (lock_timeout is 2 s once it does)")
	require.NoError(t, tx.Commit(ctx))

	r := <-answer
	require.Equal(t, http.StatusCreated, r.StatusCode, "%s", r.Body)
	require.EqualValues(t, 4000, r.JSON(t)["amount"])
	require.Equal(t, float64(5000), amountRefunded(t, g, m, id))
}

// Each provider's refund through the API against its fake: refunded once,
// settled (at once, or by the provider's signed refund event), replayed.
func TestRefundsThroughEachProvider(t *testing.T) {
	t.Parallel()
	for _, f := range fakes() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			url, _, _, _ := f.start(t)
			g := apptest.Start(t, apptest.Env(f.env, url))
			m := g.Onboard(map[string]any{"default_provider": f.name, "providers": map[string]any{f.name: f.secrets}})
			r := g.Pay(m, "p", providerBody(f, f.success))
			require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
			id := r.JSON(t)["id"].(string)
			first := refundOf(g, m, id, "r", map[string]any{"amount": 2000})
			require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, first.StatusCode, string(first.Body))
			if first.StatusCode == http.StatusAccepted {
				// Queued at the provider (Paystack's way): a poll settles it.
				require.Equal(t, "succeeded", g.Get(m, first.Header.Get("Location")).JSON(t)["status"])
			}
			again := refundOf(g, m, id, "r", map[string]any{"amount": 2000})
			require.Equal(t, http.StatusCreated, again.StatusCode, string(again.Body))
			require.Equal(t, "succeeded", again.JSON(t)["status"])
			over := refundOf(g, m, id, "r-over", map[string]any{"amount": 4000})
			require.Equal(t, "refund_exceeds_remaining", over.Code(t))
		})
	}
}

// A refund event may name the charge by the provider's own id for it and
// nothing else: Flutterwave's by tx_id, Stripe's charge.refunded by its
// PaymentIntent. The gateway records that id for the lookup when it
// creates a refund, not at every payment's completion, so such an event
// finds the payment exactly when there is a refund of ours to settle.
func TestRefundWebhookByTransactionIDOnly(t *testing.T) {
	t.Parallel()
	type rig struct {
		env             [2]string // the base URL's variable and the fake's URL
		currency, token string
		secrets         map[string]string
		pend            func()
		settle          func(ref string, o providers.Outcome) error
		// event is the provider's refund event for the charge.
		event func(t *testing.T, chargeRef, txn string) (http.Header, []byte)
	}
	rigs := map[string]func(t *testing.T) rig{
		"flutterwave": func(t *testing.T) rig {
			fw := flutterwavetest.New(t)
			return rig{[2]string{"FLUTTERWAVE_BASE_URL", fw.URL}, "NGN", flutterwavetest.TokenSuccess,
				map[string]string{"secret_key": flutterwavetest.SecretKey, "secret_hash": flutterwavetest.SecretHash},
				fw.PendNextRefund, fw.SettleRefund,
				func(t *testing.T, _, txn string) (http.Header, []byte) {
					raw := []byte(`{"event":"refund.completed","data":{"id":1,"tx_id":` + txn + `,"status":"completed"}}`)
					h := http.Header{}
					h.Set("Content-Type", "application/json")
					h.Set("Verif-Hash", flutterwavetest.SecretHash)
					h.Set("Flutterwave-Signature", base64.StdEncoding.EncodeToString(flutterwave.Sign(flutterwavetest.SecretHash, raw)))
					return h, raw
				}}
		},
		"stripe": func(t *testing.T) rig {
			st := stripetest.New(t)
			return rig{[2]string{"STRIPE_BASE_URL", st.URL}, "USD", stripetest.TokenSuccess,
				map[string]string{"secret_key": stripetest.SecretKey, "webhook_secret": stripetest.WebhookSecret},
				st.PendNextRefund, st.SettleRefund,
				func(t *testing.T, chargeRef, _ string) (http.Header, []byte) {
					h, raw, err := st.ChargeRefundedWebhook(chargeRef, time.Now())
					require.NoError(t, err)
					return h, raw
				}}
		},
	}
	for name, start := range rigs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := start(t)
			g := apptest.Start(t, apptest.Env(p.env[0], p.env[1]))
			m := g.Onboard(map[string]any{"default_provider": name, "providers": map[string]any{name: p.secrets}})
			b := body(p.token)
			b["currency"] = p.currency
			r := g.Pay(m, "p", b)
			require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
			id := r.JSON(t)["id"].(string)
			txn, _ := r.JSON(t)["provider_transaction_id"].(string)
			require.NotEmpty(t, txn)
			chargeRef := r.JSON(t)["provider_reference"].(string)
			hook := "/v1/webhooks/" + name + "/" + m.ID

			h, raw := p.event(t, chargeRef, txn)
			before := g.Do("POST", hook, raw, headerPairs(h)...)
			require.Equal(t, http.StatusOK, before.StatusCode, string(before.Body))
			require.Equal(t, "ignored", before.JSON(t)["status"], "no refund of ours yet: nothing to find")

			p.pend()
			pending := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
			require.Equal(t, http.StatusAccepted, pending.StatusCode, string(pending.Body))
			// A version that recorded the id at the payment's completion
			// instead may have created the refund (a rolling deploy): no
			// row. The refund's next attempt records it.
			require.NoError(t, g.App.DB().Exec("DELETE FROM payment_transactions").Error)
			ageKeys(t, g, time.Hour)
			again := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
			require.Equal(t, http.StatusAccepted, again.StatusCode, string(again.Body))
			require.NoError(t, p.settle(providers.RefundReference(m.ID, "r"), providers.OutcomeSucceeded))
			h, raw = p.event(t, chargeRef, txn)
			ok := g.Do("POST", hook, raw, headerPairs(h)...)
			require.Equal(t, http.StatusOK, ok.StatusCode, string(ok.Body))
			require.Equal(t, "refunds_settled", ok.JSON(t)["status"])
			retry := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
			require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
			require.Equal(t, "succeeded", retry.JSON(t)["status"])
		})
	}
}

// A provider's signed refund event settles a pending refund at once, by
// lookup; a tampered one changes nothing.
func TestRefundWebhookSettlesAPendingRefund(t *testing.T) {
	t.Parallel()
	ps, g, m, id := paidAtPaystack(t)
	ps.PendNextRefund()
	first := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
	ref := providers.RefundReference(m.ID, "r")
	require.NoError(t, ps.SettleRefund(ref, providers.OutcomeSucceeded))
	h, raw, err := ps.RefundWebhook(ref)
	require.NoError(t, err)
	hook := "/v1/webhooks/paystack/" + m.ID
	bad := g.Do("POST", hook, append([]byte(nil), raw[:len(raw)-1]...), headerPairs(h)...)
	require.Equal(t, http.StatusUnauthorized, bad.StatusCode)
	ok := g.Do("POST", hook, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, ok.StatusCode, string(ok.Body))
	require.Equal(t, "refunds_settled", ok.JSON(t)["status"])
	rec, err := g.App.Keys.Get(context.Background(), m.ID, "r")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, rec.StatusCode, "the key is done with the refund's answer")
	retry := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "succeeded", retry.JSON(t)["status"])
	require.Equal(t, 1, ps.Refunds(ref))
	again := g.Do("POST", hook, raw, headerPairs(h)...)
	require.Equal(t, "final", again.JSON(t)["status"], "a duplicate event is harmless")
}

// A refund's key names its refund however it was claimed: one retried
// after a release (a new key row) used to have no resource, so the
// sweeper settled it as a payment's key — released it, leaving the refund
// the provider made pending for good; or, where a purged payment had used
// the same key string, completed it with that payment's answer. Also for
// such keys left by the version before (no resource): the sweeper finds
// the refund by key and fingerprint.
func TestRefundRetriedAfterARelease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		purgedPayment bool // the key string was a payment's, its answer purged
		legacyKey     bool // the retry's key left without its resource, as before the fix
	}{
		{name: "SweptAsARefund"},
		{name: "KeyOfAPurgedPayment", purgedPayment: true},
		{name: "LegacyKeyWithoutResource", legacyKey: true},
		{name: "LegacyKeyOfAPurgedPayment", purgedPayment: true, legacyKey: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := apptest.Start(t)
			m := g.Onboard(nil)
			id := paid(t, g, m, "p", 5000)
			first := refundOf(g, m, id, "k", map[string]any{"amount": 1000, "reason": "sim_unavailable"})
			require.Equal(t, http.StatusServiceUnavailable, first.StatusCode, string(first.Body))
			if tc.purgedPayment {
				// The released key string taken by a payment, whose answer
				// is then purged. (A refund is no longer made under a key
				// a payment holds — TestAPurgedPaymentsKeyMakesNoRefund —
				// but a payment can still take a released refund's.)
				paid(t, g, m, "k", 700)
				ageKeys(t, g, 100*time.Hour)
				n, err := g.App.Keys.PurgeDone(context.Background(), 72*time.Hour, 0)
				require.NoError(t, err)
				require.EqualValues(t, 2, n)
			}
			lost := refundOf(g, m, id, "k", map[string]any{"amount": 1000, "reason": "sim_timeout"})
			require.Equal(t, http.StatusAccepted, lost.StatusCode, string(lost.Body))
			require.Equal(t, 1, simRefunds(t, g, m.ID, "k"), "the provider refunded")
			refundID := lost.JSON(t)["id"].(string)

			rec, err := g.App.Keys.Get(context.Background(), m.ID, "k")
			require.NoError(t, err)
			require.Equal(t, refundID, rec.ResourceID, "the retry's key names its refund")
			if tc.legacyKey {
				require.NoError(t, g.App.DB().Exec(`UPDATE idempotency_keys SET resource_id = '' WHERE merchant_id = ? AND key = 'k'`, m.ID).Error)
			}

			ageKeys(t, g, time.Hour)
			c := sweep(t, g)
			require.EqualValues(t, 1, c.Resolved, "%+v", c)
			refund := g.Get(m, "/v1/refunds/"+refundID).JSON(t)
			require.Equal(t, "succeeded", refund["status"], "the provider refunded: so does the ledger")
			require.EqualValues(t, 1000, amountRefunded(t, g, m, id))

			retry := refundOf(g, m, id, "k", map[string]any{"amount": 1000, "reason": "sim_timeout"})
			require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
			require.Equal(t, "refund", retry.JSON(t)["object"], "a refund's key never answers a payment")
			require.Equal(t, refundID, retry.JSON(t)["id"])
			require.Equal(t, 1, simRefunds(t, g, m.ID, "k"), "refunded once")
		})
	}
}

// A refund retried after a certain non-refund (503) may change its body;
// without an amount it takes all that is left now, not the amount the
// failed attempt asked for.
func TestRefundRetryWithoutAmountTakesWhatIsLeft(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	for i, tc := range []struct {
		first   map[string]any // answered 503
		between int64          // another key refunds this much first (0: none)
		retry   map[string]any
		want    int64
	}{
		{first: map[string]any{"amount": 1000, "reason": "sim_unavailable"}, retry: map[string]any{}, want: 5000},
		{first: map[string]any{"reason": "sim_unavailable"}, between: 2000, retry: map[string]any{}, want: 3000},
		{first: map[string]any{"reason": "sim_unavailable"}, retry: map[string]any{"amount": 1500}, want: 1500},
	} {
		id := paid(t, g, m, fmt.Sprint("p", i), 5000)
		key := fmt.Sprint("r", i)
		r := refundOf(g, m, id, key, tc.first)
		require.Equal(t, http.StatusServiceUnavailable, r.StatusCode, string(r.Body))
		if tc.between > 0 {
			r = refundOf(g, m, id, key+"-other", map[string]any{"amount": tc.between})
			require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
		}
		r = refundOf(g, m, id, key, tc.retry)
		require.Equal(t, http.StatusCreated, r.StatusCode, "%d: %s", i, r.Body)
		require.EqualValues(t, tc.want, r.JSON(t)["amount"], "%d", i)
		require.EqualValues(t, tc.want+tc.between, amountRefunded(t, g, m, id), "%d", i)
	}
}

// A refund released as not_processed is sent again with the same
// reference, which the provider dedupes to the refund it may have made
// after all: the retry reserves the first attempt's amount, not "all that
// is left" now, or the ledger would record what the provider never
// refunded.
func TestRefundRedriveAfterNotProcessedKeepsItsAmount(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	id := paid(t, g, m, "p", 5000)
	refA := providers.RefundReference(m.ID, "a")
	refC := providers.RefundReference(m.ID, "c")

	c := refundOf(g, m, id, "c", map[string]any{"amount": 2000, "reason": "sim_pending"})
	require.Equal(t, http.StatusAccepted, c.StatusCode, string(c.Body))
	a := refundOf(g, m, id, "a", map[string]any{"reason": "sim_timeout"}) // all that is left: 3000
	require.Equal(t, http.StatusAccepted, a.StatusCode, string(a.Body))
	require.EqualValues(t, 3000, a.JSON(t)["amount"])

	// The provider's lookup does not see A yet (its index lags), and C
	// is declined: the sweeper releases A as not_processed, fails C, and
	// all 5000 is left.
	db := g.App.DB()
	require.NoError(t, db.Exec(`UPDATE simulator_refunds SET reference = 'hidden' WHERE reference = ?`, refA).Error)
	require.NoError(t, db.Exec(`UPDATE simulator_refunds SET status = 'declined' WHERE reference = ?`, refC).Error)
	ageKeys(t, g, time.Hour)
	sweep(t, g)
	require.EqualValues(t, 0, amountRefunded(t, g, m, id))
	require.NoError(t, db.Exec(`UPDATE simulator_refunds SET reference = ? WHERE reference = 'hidden'`, refA).Error)

	retry := refundOf(g, m, id, "a", map[string]any{"reason": "sim_timeout"}) // the same request
	require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
	require.EqualValues(t, 3000, retry.JSON(t)["amount"])
	require.Equal(t, "succeeded", retry.JSON(t)["status"])
	var refunded int64
	require.NoError(t, db.Raw(`SELECT amount FROM simulator_refunds WHERE reference = ?`, refA).Scan(&refunded).Error)
	require.EqualValues(t, 3000, refunded, "the provider refunded once, 3000")
	require.EqualValues(t, 3000, amountRefunded(t, g, m, id), "and so says the ledger")
}

// lateRefund is a refund at Paystack whose answer was lost and that the
// provider's lookup does not see yet (LandLateNext), released by the
// sweeper as not_processed, its amount given back.
type lateRefund struct {
	ps                       *paystacktest.Server
	g                        *apptest.Gateway
	m                        apptest.Merchant
	paymentID, ref, refundID string
}

// refundLandingLate pays 5000 at Paystack and makes a lateRefund of it
// with req under the key "r"; pend keeps it pending at the provider.
func refundLandingLate(t *testing.T, req map[string]any, pend bool, opts ...apptest.Option) lateRefund {
	t.Helper()
	l := lostRefund(t, req, pend, opts...)
	g, m := l.g, l.m
	ageKeys(t, g, time.Hour)
	sweep(t, g)
	got := g.Get(m, "/v1/refunds/"+l.refundID).JSON(t)
	require.Equal(t, "failed", got["status"])
	require.Equal(t, "not_processed", got["failure_code"])
	require.EqualValues(t, 0, amountRefunded(t, g, m, l.paymentID))
	return l
}

// lostRefund pays 5000 at Paystack and refunds it with req under the key
// "r", the answer lost and the refund not yet listed by Paystack
// (LandLateNext): a 202, its key in progress. pend keeps it pending at
// Paystack.
func lostRefund(t *testing.T, req map[string]any, pend bool, opts ...apptest.Option) lateRefund {
	t.Helper()
	ps, g, m, id := paidAtPaystack(t, opts...)
	l := lateRefund{ps: ps, g: g, m: m, paymentID: id, ref: providers.RefundReference(m.ID, "r")}
	if pend {
		ps.PendNextRefund()
	}
	ps.LandLateNext()
	lost := refundOf(g, m, l.paymentID, "r", req)
	require.Equal(t, http.StatusAccepted, lost.StatusCode, string(lost.Body))
	l.refundID = lost.JSON(t)["id"].(string)
	return l
}

// paidAtPaystack onboards a Paystack merchant and pays 5000 under the key
// "p"; it returns the payment's id.
func paidAtPaystack(t *testing.T, opts ...apptest.Option) (*paystacktest.Server, *apptest.Gateway, apptest.Merchant, string) {
	t.Helper()
	ps, g, m := paystackMerchant(t, opts...)
	pay := g.Pay(m, "p", body(paystacktest.TokenSuccess))
	require.Equal(t, http.StatusCreated, pay.StatusCode, string(pay.Body))
	return ps, g, m, pay.JSON(t)["id"].(string)
}

// A refund at Paystack, which does not dedupe a refund's reference, whose
// answer was lost and which Paystack does not list yet: neither the app's
// retry (a takeover once the lease is gone) nor the sweeper past
// SWEEP_STALE_AFTER sends it again or releases it for a retry to send — a
// second refund would be made — until RECHECK_AFTER after it was sent; it
// is looked up instead, and settles once Paystack lists it. At Stripe or
// the simulator, which dedupe, a takeover sends again at once, as before
// (TestRefundContract).
func TestRefundAtAListingProviderIsNotSentTwice(t *testing.T) {
	t.Parallel()
	l := lostRefund(t, map[string]any{"amount": 1500}, false)
	ps, g, m, id, ref, refundID := l.ps, l.g, l.m, l.paymentID, l.ref, l.refundID
	require.Equal(t, 1, ps.Refunds(ref))

	retry := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusAccepted, retry.StatusCode, "a takeover at once: looked up, still unknown: %s", retry.Body)
	require.Equal(t, 1, ps.Refunds(ref), "the retry did not send it again")
	require.Equal(t, "30", retry.Header.Get("Retry-After"), "held: come back less often")

	ageKeys(t, g, 10*time.Minute) // past SWEEP_STALE_AFTER, short of RECHECK_AFTER
	sweep(t, g)
	got := g.Get(m, "/v1/refunds/"+refundID).JSON(t)
	require.Equal(t, "pending", got["status"], "not released: a retry would send it again")
	require.EqualValues(t, 1500, amountRefunded(t, g, m, id), "its amount still reserved")
	// Nor may an operator fail it yet: the merchant would refund again.
	resolve := adminDo(g, "POST", "/admin/v1/refunds/"+refundID+"/resolve", map[string]any{"status": "failed", "note": "not at Paystack"})
	require.Equal(t, http.StatusConflict, resolve.StatusCode, string(resolve.Body))
	require.Equal(t, "refund_in_progress", resolve.Code(t))
	retry = refundOf(g, m, id, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusAccepted, retry.StatusCode, string(retry.Body))
	require.Equal(t, 1, ps.Refunds(ref), "nor did this retry")

	ps.Faults.Land(ref)
	ageKeys(t, g, 10*time.Minute)
	sweep(t, g)
	got = g.Get(m, "/v1/refunds/"+refundID).JSON(t)
	require.Equal(t, "succeeded", got["status"])
	replay := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusCreated, replay.StatusCode, string(replay.Body))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, 1, ps.Refunds(ref), "refunded once")
	require.EqualValues(t, 1500, amountRefunded(t, g, m, id))
}

// A refund at Paystack that never reached it: refused at once when the
// adapter's look-up before the create fails (nothing was sent); released
// (as not_processed) RECHECK_AFTER after it was sent when the create's
// answer was a 5xx, not sooner, and the app's retry then sends it.
func TestRefundAtAListingProviderReleasedAfterRecheckAfter(t *testing.T) {
	t.Parallel()
	ps, g, m, id := paidAtPaystack(t)
	ref := providers.RefundReference(m.ID, "r")
	// A 503 on the look-up Paystack's adapter makes before creating:
	// nothing was sent, said at once (503, the amount given back).
	ps.FailNext(http.StatusServiceUnavailable)
	early := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusServiceUnavailable, early.StatusCode, string(early.Body))
	require.Equal(t, "provider_unavailable", early.Code(t))
	require.Zero(t, amountRefunded(t, g, m, id))
	// A 503 on the create itself: the outcome unknown (and nothing stored
	// there, which the gateway cannot know).
	ps.FailNextPost(http.StatusServiceUnavailable)
	lost := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusAccepted, lost.StatusCode, string(lost.Body))
	refundID := lost.JSON(t)["id"].(string)
	require.Zero(t, ps.Refunds(ref))

	ageKeys(t, g, 50*time.Minute)
	sweep(t, g)
	require.Equal(t, "pending", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["status"], "short of RECHECK_AFTER")
	ageKeys(t, g, 11*time.Minute)
	sweep(t, g)
	got := g.Get(m, "/v1/refunds/"+refundID).JSON(t)
	require.Equal(t, "failed", got["status"])
	require.Equal(t, "not_processed", got["failure_code"])

	retry := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusAccepted, retry.StatusCode, "Paystack queues a refund: %s", retry.Body)
	require.Equal(t, 1, ps.Refunds(ref), "sent once more")
	ageKeys(t, g, 10*time.Minute)
	sweep(t, g)
	require.Equal(t, "succeeded", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["status"])
	require.Equal(t, 1, ps.Refunds(ref), "refunded once")
	require.EqualValues(t, 1500, amountRefunded(t, g, m, id))
}

// A refund released as not_processed (the provider's lookup had nothing)
// that lands at the provider afterwards: the provider's signed refund
// event makes the gateway look again and re-open it — to succeeded (its
// amount reserved again, its key done with the answer), or, still in
// flight at the provider, to pending with its key in progress for the
// sweeper — once; an event before it lands changes nothing. And when its
// amount has gone to other refunds since, nothing is re-opened and the
// discrepancy is logged for a person.
func TestRefundThatLandsAfterItsRelease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		pending, taken bool
	}{
		{name: "Succeeded"},
		{name: "Pending", pending: true},
		{name: "AmountTaken", taken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := refundLandingLate(t, map[string]any{"amount": 1500}, tc.pending)
			ps, g, m, id, ref, refundID := l.ps, l.g, l.m, l.paymentID, l.ref, l.refundID

			hook := "/v1/webhooks/paystack/" + m.ID
			h, raw, err := ps.RefundWebhook(ref)
			require.NoError(t, err)
			early := g.Do("POST", hook, raw, headerPairs(h)...)
			require.Equal(t, http.StatusOK, early.StatusCode, string(early.Body))
			require.Equal(t, "failed", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["status"], "not landed yet: nothing changes")

			ps.Faults.Land(ref)
			if tc.taken {
				// Other refunds hold what is left (as pending ones would).
				require.NoError(t, g.App.DB().Exec(`UPDATE payments SET amount_refunded = amount WHERE id = ?`, id).Error)
			}
			landed := g.Do("POST", hook, raw, headerPairs(h)...)
			require.Equal(t, http.StatusOK, landed.StatusCode, string(landed.Body))
			if tc.taken {
				require.Equal(t, "failed", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["status"], "no room in the ledger")
				require.Contains(t, g.Logs.String(), "the provider refunded more than the ledger shows")
				return
			}
			require.Equal(t, "refunds_settled", landed.JSON(t)["status"])
			require.EqualValues(t, 1500, amountRefunded(t, g, m, id), "reserved again")
			if tc.pending {
				require.Equal(t, "pending", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["status"], "in flight: pending again")
				rec, err := g.App.Keys.Get(context.Background(), m.ID, "r")
				require.NoError(t, err)
				require.Equal(t, idempotency.StatusInProgress, rec.Status, "its key in progress, for the sweeper")
				require.Equal(t, refundID, rec.ResourceID)
				require.NoError(t, ps.SettleRefund(ref, providers.OutcomeSucceeded))
				ageKeys(t, g, time.Hour)
				sweep(t, g)
			}
			got := g.Get(m, "/v1/refunds/"+refundID).JSON(t)
			require.Equal(t, "succeeded", got["status"])
			require.Empty(t, got["failure_code"])
			require.EqualValues(t, 1500, amountRefunded(t, g, m, id))

			retry := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
			require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
			require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
			require.Equal(t, "succeeded", retry.JSON(t)["status"])
			again := g.Do("POST", hook, raw, headerPairs(h)...)
			require.Equal(t, http.StatusOK, again.StatusCode, string(again.Body))
			require.EqualValues(t, 1500, amountRefunded(t, g, m, id), "a duplicate event re-opens nothing")
			require.Equal(t, 1, ps.Refunds(ref), "refunded once")

			var events int64
			require.NoError(t, g.App.DB().Table("events").Where("merchant_id = ? AND object_id = ? AND type = ?",
				m.ID, refundID, "refund.succeeded").Count(&events).Error)
			require.EqualValues(t, 1, events, "refund.succeeded emitted once")
			require.NotContains(t, g.Logs.String(), `"level":"ERROR"`)
		})
	}
}

// A refund that lands after its release while another refund of the
// payment, still in flight, holds its amount: not a discrepancy yet — the
// other may fail — so it is looked at again after SWEEP_STALE_AFTER, and
// re-opened once the room is back; only when the other succeeds is a
// person told that the provider refunded more than the ledger shows.
func TestRefundLandingLateWaitsForRefundsInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		other providers.Outcome
		opts  []apptest.Option
	}{
		{"failed", providers.OutcomeFailed, nil},
		{"succeeded", providers.OutcomeSucceeded, nil},
		{"failed/sqlite", providers.OutcomeFailed, []apptest.Option{apptest.SQLite()}},
	} {
		other := tc.other
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := refundLandingLate(t, map[string]any{"amount": 1500}, false, tc.opts...)
			ps, g, m, id := l.ps, l.g, l.m, l.paymentID
			db := g.App.DB()
			// All that is left, as the ledger sees it, still pending at Paystack.
			ps.PendNextRefund()
			all := refundOf(g, m, id, "r2", map[string]any{})
			require.Equal(t, http.StatusAccepted, all.StatusCode, string(all.Body))
			require.EqualValues(t, 5000, amountRefunded(t, g, m, id))

			ps.Faults.Land(l.ref)
			h, raw, err := ps.RefundWebhook(l.ref)
			require.NoError(t, err)
			landed := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
			require.Equal(t, http.StatusOK, landed.StatusCode, string(landed.Body))
			require.Equal(t, "failed", g.Get(m, "/v1/refunds/"+l.refundID).JSON(t)["status"], "no room while r2 holds it")
			require.NotContains(t, g.Logs.String(), `"level":"ERROR"`, "r2 may yet fail: no one paged")
			var due int64
			require.NoError(t, db.Table("refund_rechecks").Where("merchant_id = ? AND refund_id = ?", m.ID, l.refundID).Count(&due).Error)
			require.EqualValues(t, 1, due, "looked at again later")

			// A recheck while r2 is still in flight waits again.
			dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
			c := sweep(t, g)
			require.Zero(t, c.Reopened+c.Confirmed, "%+v", c)
			require.NoError(t, db.Table("refund_rechecks").Where("merchant_id = ? AND refund_id = ?", m.ID, l.refundID).Count(&due).Error)
			require.EqualValues(t, 1, due, "still scheduled")

			// r2 ends at Paystack (had it checked the balance, it would have
			// refused it) and the sweeper settles it; the next recheck
			// re-opens the refund that landed, or finds the room gone.
			require.NoError(t, ps.SettleRefund(providers.RefundReference(m.ID, "r2"), other))
			ageKeys(t, g, time.Hour)
			dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
			sweep(t, g)
			dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
			sweep(t, g)
			got := g.Get(m, "/v1/refunds/"+l.refundID).JSON(t)
			if other == providers.OutcomeFailed {
				require.Equal(t, "succeeded", got["status"])
				require.EqualValues(t, 1500, amountRefunded(t, g, m, id))
				retry := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
				require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
				require.NotContains(t, g.Logs.String(), `"level":"ERROR"`)
			} else {
				require.Equal(t, "failed", got["status"])
				require.EqualValues(t, 5000, amountRefunded(t, g, m, id))
				require.Contains(t, g.Logs.String(), "the provider refunded more than the ledger shows")
			}
			require.NoError(t, db.Table("refund_rechecks").Where("merchant_id = ? AND refund_id = ?", m.ID, l.refundID).Count(&due).Error)
			require.Zero(t, due, "done with")
			require.Equal(t, 1, ps.Refunds(l.ref), "looked up, never sent again")
		})
	}
}

// The refund in flight that holds the room fails while a recheck finds the
// landed refund: its failure (the refund's row, then the amount given
// back) commits between the recheck's "no room" and its look at what is in
// flight. The recheck reads both under the payment's row lock, so it sees
// the failure whole or not at all: it waits, and the next recheck re-opens
// the refund the provider made. Read between the two, it took the room
// for gone, paged a person and stopped looking.
func TestARefundFailingDuringARecheckIsNotTakenForGoneRoom(t *testing.T) {
	t.Parallel()
	var (
		noRoom  armedOnce
		deliver func()
	)
	l := refundLandingLate(t, map[string]any{"amount": 1500}, false, apptest.OnDB(func(db *gorm.DB) error {
		return db.Callback().Row().Before("gorm:row").Register("refund_fails_during_recheck", func(tx *gorm.DB) {
			if noRoom.take(strings.Contains(tx.Statement.SQL.String(), "AS held")) {
				deliver()
			}
		})
	}))
	ps, g, m, id := l.ps, l.g, l.m, l.paymentID
	db := g.App.DB()
	ps.PendNextRefund()
	all := refundOf(g, m, id, "r2", map[string]any{})
	require.Equal(t, http.StatusAccepted, all.StatusCode, string(all.Body))
	ps.Faults.Land(l.ref)
	r2 := providers.RefundReference(m.ID, "r2")
	require.NoError(t, ps.SettleRefund(r2, providers.OutcomeFailed))
	h, failed, err := ps.RefundWebhook(r2)
	require.NoError(t, err)

	// r2's failure, delivered once the recheck found no room: it either
	// commits before the recheck reads on, or waits for its row lock.
	delivered := make(chan error, 1)
	deliver = func() { deliverMeanwhile(g, m, h, failed, delivered) }
	noRoom.arm()
	dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
	sweep(t, g)
	require.True(t, noRoom.fired.Load(), "the recheck found no room")
	require.NoError(t, <-delivered)
	require.Equal(t, "failed", g.Get(m, "/v1/refunds/"+all.JSON(t)["id"].(string)).JSON(t)["status"])
	require.NotContains(t, g.Logs.String(), "the provider refunded more than the ledger shows")

	dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
	sweep(t, g)
	require.Equal(t, "succeeded", g.Get(m, "/v1/refunds/"+l.refundID).JSON(t)["status"])
	require.EqualValues(t, 1500, amountRefunded(t, g, m, id))
	require.Equal(t, 1, ps.Refunds(l.ref), "looked up, never sent again")
}

// A refund in flight fails (its amount given back) just as a new refund
// has read what is left of the payment: the new refund's answer is
// consistent with one moment — it fits, or it is refused naming the room
// there was. Read in two statements, the refusal could name room enough
// for the refund it refused (400 refund_exceeds_remaining, amount_refundable
// 5000 for 3000): an answer a merchant takes as final, the customer never
// refunded. (Found by a reviewer's probe.)
func TestARefundRefusedForRoomNamesTheRoomItSaw(t *testing.T) {
	t.Parallel()
	var (
		lookedAtRoom armedOnce
		deliver      func()
	)
	// Once the new refund has looked at the room (a locked read of the
	// payment, or a reservation that did not fit), a's failure arrives.
	hook := func(tx *gorm.DB) {
		sql := tx.Statement.SQL.String()
		locked := strings.Contains(sql, `"payments"`) && strings.Contains(sql, "FOR UPDATE")
		noRoom := strings.Contains(sql, "amount_refunded = amount_refunded +") && tx.Statement.RowsAffected == 0
		if lookedAtRoom.take(locked || noRoom) {
			deliver()
		}
	}
	ps, g, m, id := paidAtPaystack(t, apptest.OnDB(func(db *gorm.DB) error {
		return errors.Join(db.Callback().Raw().After("gorm:raw").Register("refund_fails_as_room_is_read", hook),
			db.Callback().Query().After("gorm:query").Register("refund_fails_as_room_is_read", hook))
	}))
	ps.PendNextRefund()
	a := refundOf(g, m, id, "a", map[string]any{"amount": 3000})
	require.Equal(t, http.StatusAccepted, a.StatusCode, string(a.Body))
	ref := providers.RefundReference(m.ID, "a")
	require.NoError(t, ps.SettleRefund(ref, providers.OutcomeFailed))
	h, failed, err := ps.RefundWebhook(ref)
	require.NoError(t, err)

	delivered := make(chan error, 1)
	deliver = func() { deliverMeanwhile(g, m, h, failed, delivered) }
	lookedAtRoom.arm()
	b := refundOf(g, m, id, "b", map[string]any{"amount": 3000})
	require.True(t, lookedAtRoom.fired.Load())
	require.NoError(t, <-delivered)
	require.Equal(t, "failed", g.Get(m, "/v1/refunds/"+a.JSON(t)["id"].(string)).JSON(t)["status"])
	if b.StatusCode == http.StatusBadRequest {
		require.Equal(t, "refund_exceeds_remaining", b.JSON(t)["code"], string(b.Body))
		require.EqualValues(t, 2000, b.JSON(t)["amount_refundable"], "the room as it was while a held 3000: %s", b.Body)
	} else {
		require.Equal(t, http.StatusAccepted, b.StatusCode, string(b.Body))
	}
}

// armedOnce picks, inside a GORM callback registered before the gateway
// serves (apptest.OnDB), the first matching statement once the test has
// armed it: what the test set before arm is visible to the callback then.
type armedOnce struct{ armed, fired atomic.Bool }

func (a *armedOnce) arm() { a.armed.Store(true) }

// take reports whether this statement, which matches or not, is the one.
func (a *armedOnce) take(match bool) bool {
	if match && a.armed.CompareAndSwap(true, false) {
		a.fired.Store(true)
		return true
	}
	return false
}

// deliverMeanwhile posts a Paystack event for m from inside another
// transaction's statement (a GORM callback): the event either ends within
// a second, or waits for that transaction's row locks and ends after it
// commits, while the caller goes on. Its outcome goes to delivered (which
// holds one), put back when read here.
func deliverMeanwhile(g *apptest.Gateway, m apptest.Merchant, h http.Header, raw []byte, delivered chan error) {
	go func() {
		r, err := g.Try("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
		if err == nil && r.StatusCode != http.StatusOK {
			err = fmt.Errorf("webhook answered %d: %s", r.StatusCode, r.Body)
		}
		delivered <- err
	}()
	select {
	case err := <-delivered:
		delivered <- err
	case <-time.After(time.Second):
	}
}

// A scheduled recheck whose lookup found nothing does not end a recheck a
// provider's event moved further ahead meanwhile (it found the refund
// landed, held back by refunds in flight): the event is the newer news.
func TestRefundRecheckDoesNotEndAnEventsReschedule(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]apptest.Option{"postgres": nil, "sqlite": {apptest.SQLite()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := refundLandingLate(t, map[string]any{"amount": 1500}, false, opts...)
			g, m := l.g, l.m
			db := g.App.DB()
			count := func() (n int64) {
				require.NoError(t, db.Table("refund_rechecks").Where("merchant_id = ? AND refund_id = ?", m.ID, l.refundID).Count(&n).Error)
				return n
			}
			dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
			due, err := g.App.Payments.DueRefundRechecks(context.Background(), 10)
			require.NoError(t, err)
			require.Len(t, due, 1)
			// Between the recheck's lookup and its end, the event's
			// reschedule, as recheckReleasedRefundAgain writes it
			// (SWEEP_STALE_AFTER ahead: here equal to the lease).
			time.Sleep(2 * time.Millisecond) // SQLite's clock moves in milliseconds
			require.NoError(t, db.Exec(`UPDATE refund_rechecks SET recheck_at = ? WHERE refund_id = ?`,
				dbclock.Plus(db, 5*time.Second), l.refundID).Error)
			st, err := g.App.Payments.RecheckRefund(context.Background(), due[0])
			require.NoError(t, err)
			require.Equal(t, payments.Confirmed, st, "not landed, as the lookup saw it")
			require.EqualValues(t, 1, count(), "the event's recheck stands")

			// Taken again and found nothing again, unmoved: ended.
			dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
			due, err = g.App.Payments.DueRefundRechecks(context.Background(), 10)
			require.NoError(t, err)
			require.Len(t, due, 1)
			st, err = g.App.Payments.RecheckRefund(context.Background(), due[0])
			require.NoError(t, err)
			require.Equal(t, payments.Confirmed, st)
			require.Zero(t, count(), "looked at, and done with")
		})
	}
}

// Refunds in flight too small to make room for a refund that landed after
// its release, even were they all to fail, do not hold it back: the
// discrepancy is reported at once.
func TestRefundLandingLateNotHeldByRefundsTooSmall(t *testing.T) {
	t.Parallel()
	l := refundLandingLate(t, map[string]any{"amount": 1500}, false)
	ps, g, m, id := l.ps, l.g, l.m, l.paymentID
	most := refundOf(g, m, id, "r3", map[string]any{"amount": 3600})
	require.Equal(t, http.StatusAccepted, most.StatusCode, "Paystack queues a refund: %s", most.Body)
	ageKeys(t, g, 10*time.Minute)
	sweep(t, g)
	require.Equal(t, "succeeded", g.Get(m, "/v1/refunds/"+most.JSON(t)["id"].(string)).JSON(t)["status"])
	ps.PendNextRefund()
	small := refundOf(g, m, id, "r2", map[string]any{"amount": 100})
	require.Equal(t, http.StatusAccepted, small.StatusCode, string(small.Body))

	ps.Faults.Land(l.ref)
	h, raw, err := ps.RefundWebhook(l.ref)
	require.NoError(t, err)
	landed := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, landed.StatusCode, string(landed.Body))
	require.Equal(t, "failed", g.Get(m, "/v1/refunds/"+l.refundID).JSON(t)["status"])
	require.Contains(t, g.Logs.String(), "the provider refunded more than the ledger shows", "100 in flight cannot make room for 1500")
}

// A retry that claims the refund's key while the provider's event re-opens
// it: the event's transaction waits for the retry's claim, finds the key
// taken and leaves the refund to the retry — no second reservation, and
// no false alarm of a provider that refunded more than the ledger shows.
// (Not parallel: it watches PostgreSQL's lock waits.)
func TestRefundReopenLeavesARacingRetryAlone(t *testing.T) {
	l := refundLandingLate(t, map[string]any{"amount": 4000}, false)
	ps, g, m, id, ref, refundID := l.ps, l.g, l.m, l.paymentID, l.ref, l.refundID
	ps.Faults.Land(ref)

	db := g.App.DB()
	var hash string
	require.NoError(t, db.Raw(`SELECT request_hash FROM refunds WHERE id = ?`, refundID).Scan(&hash).Error)
	// The retry's claim transaction, as openRefund runs it, held open.
	tx := db.Begin()
	require.NoError(t, tx.Exec(`INSERT INTO idempotency_keys (merchant_id, key, request_hash, status, locked_until, lock_token, created_at, attempted_at)
VALUES (?, 'r', ?, 'in_progress', now() + interval '1 minute', 'tok', now(), now())`, m.ID, hash).Error)

	h, raw, err := ps.RefundWebhook(ref)
	require.NoError(t, err)
	done := make(chan int, 1)
	go func() {
		resp, err := g.Try("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
		if err != nil {
			done <- -1
			return
		}
		done <- resp.StatusCode
	}()
	deadline := time.Now().Add(10 * time.Second)
	for { // until the event's transaction waits for the retry's claim
		var n int64
		require.NoError(t, db.Raw(`SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&n).Error)
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the event never waited")
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, tx.Exec(`UPDATE payments SET amount_refunded = amount_refunded + 4000 WHERE id = ?`, id).Error)
	require.NoError(t, tx.Exec(`UPDATE refunds SET status = 'pending', failure_code = '', attempts = attempts + 1 WHERE id = ?`, refundID).Error)
	require.NoError(t, tx.Commit().Error)
	require.Equal(t, http.StatusOK, <-done)

	require.EqualValues(t, 4000, amountRefunded(t, g, m, id), "reserved once, by the retry")
	require.Equal(t, "pending", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["status"], "the retry's to settle")
	require.NotContains(t, g.Logs.String(), "the provider refunded more than the ledger shows", "no false alarm")
}

// The key string of a refund released as not_processed is the merchant's
// to use again; when a payment has taken it, the refund that lands
// afterwards is still re-opened by the provider's event — without its key,
// which stays the payment's.
func TestRefundReopenWhenItsKeyWentToAPayment(t *testing.T) {
	t.Parallel()
	l := refundLandingLate(t, map[string]any{"amount": 1500}, false)
	p2 := l.g.Pay(l.m, "r", body(paystacktest.TokenSuccess))
	require.Equal(t, http.StatusCreated, p2.StatusCode, string(p2.Body))
	l.ps.Faults.Land(l.ref)
	h, raw, err := l.ps.RefundWebhook(l.ref)
	require.NoError(t, err)
	resp := l.g.Do("POST", "/v1/webhooks/paystack/"+l.m.ID, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(resp.Body))
	require.Equal(t, "refunds_settled", resp.JSON(t)["status"])
	require.Equal(t, "succeeded", l.g.Get(l.m, "/v1/refunds/"+l.refundID).JSON(t)["status"])
	require.EqualValues(t, 1500, amountRefunded(t, l.g, l.m, l.paymentID))
	replay := l.g.Pay(l.m, "r", body(paystacktest.TokenSuccess))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, p2.Body, replay.Body, "the key is still the payment's")
}

// A refund released as not_processed is looked up once more RECHECK_AFTER
// later, by the sweeper, even with no event from the provider: one that
// landed meanwhile is re-opened as succeeded, one still unknown to the
// provider is confirmed failed for good; either way once.
func TestRefundRecheckAfterItsRelease(t *testing.T) {
	t.Parallel()
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprint("landed=", landed), func(t *testing.T) {
			t.Parallel()
			l := refundLandingLate(t, map[string]any{"amount": 1500}, false)
			db := l.g.App.DB()
			var due int64
			require.NoError(t, db.Table("refund_rechecks").Where("merchant_id = ? AND refund_id = ?", l.m.ID, l.refundID).Count(&due).Error)
			require.EqualValues(t, 1, due, "a recheck is scheduled at the release")
			c := sweep(t, l.g)
			require.Zero(t, c.Reopened+c.Confirmed, "not before RECHECK_AFTER: %+v", c)

			if landed {
				l.ps.Faults.Land(l.ref)
			}
			dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
			c = sweep(t, l.g)
			got := l.g.Get(l.m, "/v1/refunds/"+l.refundID).JSON(t)
			if landed {
				require.EqualValues(t, 1, c.Reopened, "%+v", c)
				require.Equal(t, "succeeded", got["status"])
				require.EqualValues(t, 1500, amountRefunded(t, l.g, l.m, l.paymentID))
				retry := refundOf(l.g, l.m, l.paymentID, "r", map[string]any{"amount": 1500})
				require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
				require.Equal(t, "succeeded", retry.JSON(t)["status"])
			} else {
				require.EqualValues(t, 1, c.Confirmed, "%+v", c)
				require.Equal(t, "failed", got["status"])
				require.EqualValues(t, 0, amountRefunded(t, l.g, l.m, l.paymentID))
			}
			require.NoError(t, db.Table("refund_rechecks").Where("merchant_id = ?", l.m.ID).Count(&due).Error)
			require.Zero(t, due, "looked at once")
			dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
			c = sweep(t, l.g)
			require.Zero(t, c.Reopened+c.Confirmed, "%+v", c)
			require.Equal(t, 1, l.ps.Refunds(l.ref), "refunded once, looked up only")
		})
	}
}

// A refund's recheck whose lookup fails is tried again after
// SWEEP_STALE_AFTER, and given up, with a warning, once REVIEW_AFTER has
// passed since the release: never rechecked forever.
func TestRefundRecheckGivesUpAfterReviewAfter(t *testing.T) {
	t.Parallel()
	l := refundLandingLate(t, map[string]any{"amount": 1500}, false)
	db := l.g.App.DB()
	count := func() (n int64) {
		require.NoError(t, db.Table("refund_rechecks").Where("merchant_id = ?", l.m.ID).Count(&n).Error)
		return n
	}
	dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
	l.ps.FailNext(http.StatusInternalServerError)
	c := sweep(t, l.g)
	require.EqualValues(t, 1, c.Pending, "%+v", c)
	require.EqualValues(t, 1, count(), "tried again later")

	dbtest.Age(t, db, 30*24*time.Hour, "refund_rechecks", "recheck_at")
	dbtest.Age(t, db, 30*24*time.Hour, "refunds", "updated_at")
	l.ps.FailNext(http.StatusInternalServerError)
	c = sweep(t, l.g)
	require.EqualValues(t, 1, c.Pending, "%+v", c)
	require.Zero(t, count(), "given up past REVIEW_AFTER")
	require.Contains(t, l.g.Logs.String(), "refund recheck given up")
	require.Equal(t, "failed", l.g.Get(l.m, "/v1/refunds/"+l.refundID).JSON(t)["status"])
}

// A retry refused for what its fingerprint does not cover (a Content-Type
// that is not JSON) after taking over a key whose work is in flight leaves
// the key in progress: released, the payment would be orphaned (nothing
// would settle it) and the refund sent again by the next retry's fresh
// claim, which would skip the look-up a takeover makes at Paystack.
func TestRefusedRetryKeepsTheKeyOfWorkInFlight(t *testing.T) {
	t.Parallel()
	form := func(g *apptest.Gateway, m apptest.Merchant, path, key string, body any) apptest.Response {
		return g.Do("POST", path, raw(body), "Authorization", "Bearer "+m.Token, "Idempotency-Key", key,
			"Content-Type", "application/x-www-form-urlencoded")
	}
	t.Run("Payment", func(t *testing.T) {
		t.Parallel()
		g := apptest.Start(t)
		m := g.Onboard(nil)
		lost := g.Pay(m, "inflight", body("sim_timeout"))
		require.Equal(t, http.StatusAccepted, lost.StatusCode, string(lost.Body))
		refused := form(g, m, "/v1/payments", "inflight", body("sim_timeout"))
		require.Equal(t, http.StatusUnsupportedMediaType, refused.StatusCode, string(refused.Body))
		rec, err := g.App.Keys.Get(context.Background(), m.ID, "inflight")
		require.NoError(t, err, "the key is still there")
		require.Equal(t, idempotency.StatusInProgress, rec.Status)
		ageKeys(t, g, time.Hour)
		require.Equal(t, 1, sweep(t, g).Resolved, "the sweeper settles it")
		require.Equal(t, payments.StatusSucceeded, ledgerByKey(t, g, m.ID, "inflight").Status)
	})
	t.Run("RefundAtPaystack", func(t *testing.T) {
		t.Parallel()
		l := lostRefund(t, map[string]any{"amount": 1500}, false)
		ps, g, m, id, ref := l.ps, l.g, l.m, l.paymentID, l.ref
		refused := form(g, m, "/v1/payments/"+id+"/refunds", "r", map[string]any{"amount": 1500})
		require.Equal(t, http.StatusUnsupportedMediaType, refused.StatusCode, string(refused.Body))
		// The fingerprint lowercases the path: the id in capitals is the
		// same request, refused as an id the gateway never makes.
		upper := refundOf(g, m, strings.ToUpper(id), "r", map[string]any{"amount": 1500})
		require.Equal(t, http.StatusNotFound, upper.StatusCode, string(upper.Body))
		again := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
		require.Equal(t, http.StatusAccepted, again.StatusCode, string(again.Body))
		require.Equal(t, 1, ps.Refunds(ref), "not sent again")
	})
}

// keyReusedByAnotherRequest pays under the key "k", then leaves "k" in
// progress (its lease lapsed) under another request — the same payment
// with amount 9999 — whose payment was never opened: as a request that
// reused the key after the purge leaves it when it dies between its claim
// (committed alone, as PersistWith does when the key's payment exists)
// and its mismatch's release. It returns the first answer and the other
// request's body.
func keyReusedByAnotherRequest(t *testing.T) (*apptest.Gateway, apptest.Merchant, apptest.Response, map[string]any) {
	t.Helper()
	g := apptest.Start(t, apptest.Env("REPLAY_CACHE_SIZE", "0"))
	m := g.Onboard(nil)
	first := g.Pay(m, "k", body("sim_success"))
	require.Equal(t, http.StatusCreated, first.StatusCode, string(first.Body))
	other := body("sim_success")
	other["amount"] = 9999
	require.NoError(t, g.App.DB().Exec(`UPDATE idempotency_keys SET status = ?, completed_at = NULL, status_code = 0,
  response = NULL, response_headers = NULL, request_hash = ?, locked_until = ? WHERE merchant_id = ? AND key = ?`, idempotency.StatusInProgress,
		idempotency.Fingerprint("POST", "/v1/payments", raw(other)), time.Now().Add(-time.Minute), m.ID, "k").Error)
	return g, m, first, other
}

// A key refused as another request's (422) is released even when taken
// over: it holds no work of this request, and left in progress it would be
// settled by the sweeper with the other request's payment. And a webhook
// endpoint's key, whose change commits with its completion, is released
// on a refusal whether taken over or not.
func TestRefusalsThatReleaseTakenOverKeys(t *testing.T) {
	t.Parallel()
	g, m, _, other := keyReusedByAnotherRequest(t)
	mismatch := g.Pay(m, "k", other)
	require.Equal(t, http.StatusUnprocessableEntity, mismatch.StatusCode, string(mismatch.Body))
	_, err := g.App.Keys.Get(context.Background(), m.ID, "k")
	require.ErrorIs(t, err, idempotency.ErrNotFound, "released: nothing of this request's to keep")

	// An endpoint's key left in progress (a crash before its one commit
	// would leave none; here, written directly) under a body that fails
	// validation, taken over by that body's retry: released on the 400,
	// so the corrected body is a new request, not a 422.
	bad, good := []byte(`{"url":"not a url"}`), []byte(`{"url":"https://example.com/hooks"}`)
	now := time.Now()
	require.NoError(t, g.App.DB().Exec(`INSERT INTO idempotency_keys (merchant_id, key, request_hash, status, locked_until, lock_token, created_at, attempted_at)
VALUES (?, 'we', ?, ?, ?, 'x', ?, ?)`, m.ID, idempotency.Fingerprint("POST", "/v1/webhook_endpoints", bad), idempotency.StatusInProgress,
		now.Add(-time.Minute), now, now).Error)
	endpoint := func(b []byte) apptest.Response {
		return g.Do("POST", "/v1/webhook_endpoints", b, "Authorization", "Bearer "+m.Token, "Idempotency-Key", "we", "Content-Type", "application/json")
	}
	refused := endpoint(bad)
	require.Equal(t, http.StatusBadRequest, refused.StatusCode, string(refused.Body))
	created := endpoint(good)
	require.Equal(t, http.StatusCreated, created.StatusCode, string(created.Body))
}

// A key left in progress by a request that reused it, with another body,
// after its first payment's answer was purged (and died before its
// mismatch released the key): the sweeper releases it instead of
// completing it with that payment, which the request's retry would then
// have replayed as its own.
func TestSweeperDoesNotHandAnotherRequestsAnswer(t *testing.T) {
	t.Parallel()
	g, m, first, other := keyReusedByAnotherRequest(t)
	ageKeys(t, g, time.Hour)
	c := sweep(t, g)
	require.Equal(t, 1, c.Released, "%+v", c)
	retry := g.Pay(m, "k", other)
	require.Equal(t, http.StatusUnprocessableEntity, retry.StatusCode, "never the other payment's answer: %s", retry.Body)
	same := g.Pay(m, "k", body("sim_success"))
	require.Equal(t, http.StatusCreated, same.StatusCode, string(same.Body))
	require.Equal(t, first.JSON(t)["id"], same.JSON(t)["id"], "the first request's retry is still answered from the ledger")
}

// A payment made before fingerprints were canonical keeps the hash of its
// raw body. A byte-identical retry after its key was purged is answered
// from the ledger and moves the row to its canonical fingerprint, in its
// claim's commit: had the retry died before completing its key, the
// sweeper would otherwise take the key for another request's and release
// it, and the same JSON in other bytes would get a 422 instead of the
// answer. (Refunds came after canonical fingerprints.)
func TestLegacyFingerprintIsAdoptedByItsRetry(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("REPLAY_CACHE_SIZE", "0"))
	m := g.Onboard(nil)
	db := g.App.DB()
	payBytes := []byte(`{"amount":5000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success"}`)
	payOther := []byte(`{ "payment_method": "sim_success", "email": "ada@example.com", "currency": "NGN", "amount": 5000 }`)
	first := g.Pay(m, "k", payBytes)
	require.Equal(t, http.StatusCreated, first.StatusCode, string(first.Body))
	id := first.JSON(t)["id"].(string)

	// As an older version left it: the raw body's hash, the key purged.
	legacy := idempotency.LegacyFingerprint("POST", "/v1/payments", payBytes)
	canonical := idempotency.Fingerprint("POST", "/v1/payments", payBytes)
	require.NoError(t, db.Exec(`UPDATE payments SET request_hash = ? WHERE id = ?`, legacy, id).Error)
	require.NoError(t, db.Exec(`DELETE FROM idempotency_keys WHERE merchant_id = ? AND key = ?`, m.ID, "k").Error)

	retry := g.Pay(m, "k", payBytes)
	require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
	require.Equal(t, string(first.Body), string(retry.Body), "answered from the ledger, as first answered")
	var hash string
	require.NoError(t, db.Raw(`SELECT request_hash FROM payments WHERE id = ?`, id).Scan(&hash).Error)
	require.Equal(t, canonical, hash, "the row took the retry's canonical fingerprint")

	// Had that retry died before completing its key:
	require.NoError(t, db.Exec(`UPDATE idempotency_keys SET status = ?, completed_at = NULL, status_code = 0,
  response = NULL, response_headers = NULL, locked_until = ? WHERE merchant_id = ? AND key = ?`,
		idempotency.StatusInProgress, time.Now().Add(-time.Minute), m.ID, "k").Error)
	ageKeys(t, g, time.Hour)
	c := sweep(t, g)
	require.Zero(t, c.Released, "completed, not taken for another request's: %+v", c)
	again := g.Pay(m, "k", payOther)
	require.Equal(t, http.StatusCreated, again.StatusCode, "the same JSON in other bytes: %s", again.Body)
	require.Equal(t, id, again.JSON(t)["id"])
	require.Equal(t, 1, charges(t, g, m.ID, "k"), "charged once")
}

// pendingAtPaystack makes a refund of 1500 (key "r") that Paystack holds
// pending, its key's leases long lapsed, for an operator to resolve.
func pendingAtPaystack(t *testing.T) (ps *paystacktest.Server, g *apptest.Gateway, m apptest.Merchant, paymentID, refundID string) {
	t.Helper()
	ps, g, m, paymentID = paidAtPaystack(t)
	ps.PendNextRefund()
	first := refundOf(g, m, paymentID, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
	ageKeys(t, g, 48*time.Hour)
	return ps, g, m, paymentID, first.JSON(t)["id"].(string)
}

// An operator fails a refund only on the provider's word: failing gives
// the amount back to be refunded again, so while the provider cannot be
// asked the resolution waits (503), and while it holds the refund pending
// it is refused (409).
func TestARefundIsFailedOnlyOnTheProvidersWord(t *testing.T) {
	t.Parallel()
	ps, g, m, id, refundID := pendingAtPaystack(t)

	ps.FailNext(http.StatusInternalServerError)
	down := adminDo(g, "POST", "/admin/v1/refunds/"+refundID+"/resolve", map[string]any{"status": "failed", "note": "looks lost"})
	require.Equal(t, http.StatusServiceUnavailable, down.StatusCode, string(down.Body))
	require.Equal(t, "provider_unavailable", down.Code(t))
	require.NotEmpty(t, down.Header.Get("Retry-After"))
	held := adminDo(g, "POST", "/admin/v1/refunds/"+refundID+"/resolve", map[string]any{"status": "failed", "note": "looks lost"})
	require.Equal(t, http.StatusConflict, held.StatusCode, string(held.Body))
	require.Equal(t, "provider_disagrees", held.Code(t))
	require.Equal(t, float64(1500), amountRefunded(t, g, m, id), "still reserved")
	require.NotContains(t, g.Logs.String(), `"level":"ERROR"`)
}

// A refund an operator resolved without the provider's final answer is
// watched as a payment's resolution is: "failed" on the provider's "no
// record" gave the amount back, and should the refund have landed when it
// is looked at again, RECHECK_AFTER later, that is an ERROR (the customer
// may be refunded twice); a final answer, or still no record, ends the
// watch.
func TestAnUnconfirmedRefundResolutionIsWatched(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		opts     []apptest.Option
		inFlight bool // it reappears pending, to be paid out later
	}{
		{"postgres", nil, false},
		{"sqlite", []apptest.Option{apptest.SQLite()}, false},
		{"postgres/inFlight", nil, true},
		{"sqlite/inFlight", []apptest.Option{apptest.SQLite()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := apptest.Start(t, tc.opts...)
			m := g.Onboard(nil)
			id := paid(t, g, m, "p", 5000)
			first := refundOf(g, m, id, "r", map[string]any{"amount": 1500, "reason": "sim_pending"})
			require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
			refundID := first.JSON(t)["id"].(string)
			ageKeys(t, g, 48*time.Hour)
			db := g.App.DB()
			var ref string
			require.NoError(t, db.Raw(`SELECT provider_reference FROM refunds WHERE id = ?`, refundID).Scan(&ref).Error)
			// The provider has no record of it, for now.
			require.NoError(t, db.Exec(`UPDATE simulator_refunds SET reference = reference || '-away' WHERE reference = ?`, ref).Error)
			r := adminDo(g, "POST", "/admin/v1/refunds/"+refundID+"/resolve", map[string]any{"status": "failed", "note": "no such refund"})
			require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
			require.Equal(t, float64(0), amountRefunded(t, g, m, id), "its amount given back")
			watched := func() int {
				var n int
				require.NoError(t, db.Raw(`SELECT count(*) FROM refund_rechecks WHERE refund_id = ?`, refundID).Scan(&n).Error)
				return n
			}
			require.Equal(t, 1, watched())
			due := func() {
				dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
				sweep(t, g)
			}
			// It lands after all, before the look RECHECK_AFTER later —
			// paid out, or still in flight.
			require.NoError(t, db.Exec(`UPDATE simulator_refunds SET reference = ? WHERE reference = ?`, ref, ref+"-away").Error)
			if tc.inFlight {
				dbtest.Age(t, db, -30*24*time.Hour, "simulator_refunds", "settle_at")
			} else {
				dbtest.Age(t, db, time.Hour, "simulator_refunds", "settle_at")
			}
			due()
			twice := func() int { return strings.Count(g.Logs.String(), "may be refunded twice") }
			require.Equal(t, 1, twice(), g.Logs.String())
			require.Contains(t, g.Logs.String(), refundID)
			require.Zero(t, watched(), "a final answer ends the watch")
			due()
			require.Equal(t, 1, twice(), "said once")
			got := g.Get(m, "/v1/refunds/"+refundID).JSON(t)
			require.Equal(t, "failed", got["status"], "the ledger stays the operator's")
		})
	}
}

// "Succeeded" while the provider cannot be asked is the operator's call,
// and watched: a refund the provider then fails is an ERROR (the customer
// was not refunded).
func TestARefundResolvedSucceededBlindIsWatched(t *testing.T) {
	t.Parallel()
	ps, g, m, _, refundID := pendingAtPaystack(t)
	ps.FailNext(http.StatusInternalServerError)
	r := adminDo(g, "POST", "/admin/v1/refunds/"+refundID+"/resolve", map[string]any{"status": "succeeded", "note": "the bank shows it"})
	require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
	watched := func() int {
		var n int
		require.NoError(t, g.App.DB().Raw(`SELECT count(*) FROM refund_rechecks WHERE refund_id = ?`, refundID).Scan(&n).Error)
		return n
	}
	due := func() {
		dbtest.Age(t, g.App.DB(), 2*time.Hour, "refund_rechecks", "recheck_at")
		sweep(t, g)
	}
	ps.FailNext(http.StatusInternalServerError)
	due()
	require.Equal(t, 1, watched(), "the provider could not be asked: looked at again later")
	due()
	require.Equal(t, 1, watched(), "still pending: looked at again later")
	notRefunded := func() int { return strings.Count(g.Logs.String(), "the customer was not refunded") }
	require.Zero(t, notRefunded())

	require.NoError(t, ps.SettleRefund(providers.RefundReference(m.ID, "r"), providers.OutcomeFailed))
	due()
	require.Equal(t, 1, notRefunded(), g.Logs.String())
	require.Zero(t, watched(), "a final answer ends the watch")
	due()
	require.Equal(t, 1, notRefunded(), "said once")
	require.Equal(t, "succeeded", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["status"], "the ledger stays the operator's")
}

// A refund resolution the provider still gives no final answer about is
// watched for a week at most.
func TestARefundResolutionIsWatchedForAWeek(t *testing.T) {
	t.Parallel()
	ps, g, _, _, refundID := pendingAtPaystack(t)
	ps.FailNext(http.StatusInternalServerError)
	r := adminDo(g, "POST", "/admin/v1/refunds/"+refundID+"/resolve", map[string]any{"status": "succeeded", "note": "the bank shows it"})
	require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
	dbtest.Age(t, g.App.DB(), 8*24*time.Hour, "refunds", "updated_at")
	dbtest.Age(t, g.App.DB(), 2*time.Hour, "refund_rechecks", "recheck_at")
	sweep(t, g)
	var n int
	require.NoError(t, g.App.DB().Raw(`SELECT count(*) FROM refund_rechecks WHERE refund_id = ?`, refundID).Scan(&n).Error)
	require.Zero(t, n, "given up after a week")
	require.Contains(t, g.Logs.String(), "stopped watching a refund")
	require.NotContains(t, g.Logs.String(), `"level":"ERROR"`)
}

// A refund can fail after it succeeded (Stripe: the customer's card or
// account closed since; refund.updated says so). The event makes the
// gateway look again: the refund is failed in the ledger too, its amount
// is given back to the payment (so it can be refunded again), and the
// merchant gets refund.failed. A retry of the refund's key still replays
// what was answered then; a second event changes nothing more.
func TestARefundThatFailsAfterSucceedingGivesItsAmountBack(t *testing.T) {
	t.Parallel()
	st, g, m := stripeMerchant(t)
	b := body(stripetest.TokenSuccess)
	b["currency"] = "USD"
	paid := g.Pay(m, "p", b)
	require.Equal(t, http.StatusCreated, paid.StatusCode, string(paid.Body))
	id := paid.JSON(t)["id"].(string)
	first := refundOf(g, m, id, "r", map[string]any{"amount": 5000})
	require.Equal(t, http.StatusCreated, first.StatusCode, string(first.Body))
	require.Equal(t, "succeeded", first.JSON(t)["status"])
	refundID := first.JSON(t)["id"].(string)
	require.EqualValues(t, 5000, g.Get(m, "/v1/payments/"+id).JSON(t)["amount_refunded"])

	ref := providers.RefundReference(m.ID, "r")
	require.NoError(t, st.FailRefund(ref))
	h, raw, err := st.RefundWebhook(ref, time.Now())
	require.NoError(t, err)
	hook := "/v1/webhooks/stripe/" + m.ID
	ok := g.Do("POST", hook, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, ok.StatusCode, string(ok.Body))
	require.Equal(t, "refunds_settled", ok.JSON(t)["status"])

	got := g.Get(m, "/v1/refunds/"+refundID).JSON(t)
	require.Equal(t, "failed", got["status"])
	require.Equal(t, "declined", got["failure_code"], "the adapter's code for a refund the bank refused")
	require.EqualValues(t, 0, g.Get(m, "/v1/payments/"+id).JSON(t)["amount_refunded"], "its amount is given back")
	var types []string
	for _, e := range g.Get(m, "/v1/events").JSON(t)["data"].([]any) {
		types = append(types, e.(map[string]any)["type"].(string))
	}
	require.Contains(t, types, "refund.failed")
	require.Contains(t, g.Logs.String(), "has failed since")

	retry := refundOf(g, m, id, "r", map[string]any{"amount": 5000})
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(first.Body), string(retry.Body), "the answer given then, byte for byte")
	again := g.Do("POST", hook, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, again.StatusCode, string(again.Body))
	require.EqualValues(t, 0, g.Get(m, "/v1/payments/"+id).JSON(t)["amount_refunded"], "given back once")

	anew := refundOf(g, m, id, "r2", map[string]any{"amount": 5000})
	require.Equal(t, http.StatusCreated, anew.StatusCode, "the whole amount can be refunded again: %s", anew.Body)
}

// A key a payment holds stays that payment's once its stored answer is
// purged (KEY_TTL): a refund sent under it is 422, as it was before the
// purge, and nothing is refunded; the payment's own retry is still
// answered from the ledger, never 422.
func TestAPurgedPaymentsKeyMakesNoRefund(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	b := body("sim_success")
	first := g.Pay(m, "shared", b)
	require.Equal(t, http.StatusCreated, first.StatusCode, string(first.Body))
	id := first.JSON(t)["id"].(string)
	before := refundOf(g, m, id, "shared", map[string]any{"amount": 100})
	require.Equal(t, http.StatusUnprocessableEntity, before.StatusCode, string(before.Body))

	ageKeys(t, g, 100*time.Hour)
	n, err := g.App.Keys.PurgeDone(context.Background(), 72*time.Hour, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	after := refundOf(g, m, id, "shared", map[string]any{"amount": 100})
	require.Equal(t, http.StatusUnprocessableEntity, after.StatusCode, string(after.Body))
	require.Equal(t, "idempotency_key_mismatch", after.Code(t))
	require.EqualValues(t, 0, amountRefunded(t, g, m, id), "nothing refunded")
	retry := g.Pay(m, "shared", b)
	require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, id, retry.JSON(t)["id"])
}

// The event naming a refund that is still succeeded changes nothing. One
// whose look-up cannot be made is a 503 — it may be the only word of a
// failure — and its redelivery records it. A failed refund under the
// reference that is not the one the ledger recorded (one sent again) does
// not fail ours: an ERROR, the ledger unchanged.
func TestRefundEventsAboutASucceededRefund(t *testing.T) {
	t.Parallel()
	st, g, m := stripeMerchant(t)
	b := body(stripetest.TokenSuccess)
	b["currency"] = "USD"
	id := g.Pay(m, "p", b).JSON(t)["id"].(string)
	first := refundOf(g, m, id, "r", map[string]any{"amount": 5000})
	require.Equal(t, "succeeded", first.JSON(t)["status"], string(first.Body))
	ref := providers.RefundReference(m.ID, "r")
	hook := "/v1/webhooks/stripe/" + m.ID

	h, raw, err := st.RefundWebhook(ref, time.Now())
	require.NoError(t, err)
	ok := g.Do("POST", hook, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, ok.StatusCode, string(ok.Body))
	require.Equal(t, "final", ok.JSON(t)["status"], "still succeeded: nothing to do")

	require.NoError(t, st.FailRefund(ref))
	h, raw, err = st.RefundWebhook(ref, time.Now())
	require.NoError(t, err)
	st.FailNext(http.StatusInternalServerError)
	down := g.Do("POST", hook, raw, headerPairs(h)...)
	require.Equal(t, http.StatusServiceUnavailable, down.StatusCode, "the provider must send it again: %s", down.Body)
	require.Equal(t, "succeeded", g.Get(m, "/v1/refunds/"+first.JSON(t)["id"].(string)).JSON(t)["status"])

	// The ledger recorded another provider refund than the one that failed.
	recorded := ""
	require.NoError(t, g.App.DB().Raw(`SELECT provider_refund_id FROM refunds WHERE merchant_id = ?`, m.ID).Scan(&recorded).Error)
	require.NoError(t, g.App.DB().Exec(`UPDATE refunds SET provider_refund_id = 're_another' WHERE merchant_id = ?`, m.ID).Error)
	other := g.Do("POST", hook, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, other.StatusCode, string(other.Body))
	require.Equal(t, "succeeded", g.Get(m, "/v1/refunds/"+first.JSON(t)["id"].(string)).JSON(t)["status"], "not ours that failed")
	require.EqualValues(t, 5000, amountRefunded(t, g, m, id))
	require.Contains(t, g.Logs.String(), "not the one recorded")

	// The redelivery, the recorded refund being the one that failed.
	require.NoError(t, g.App.DB().Exec(`UPDATE refunds SET provider_refund_id = ? WHERE merchant_id = ?`, recorded, m.ID).Error)
	again := g.Do("POST", hook, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, again.StatusCode, string(again.Body))
	require.Equal(t, "failed", g.Get(m, "/v1/refunds/"+first.JSON(t)["id"].(string)).JSON(t)["status"])
	require.EqualValues(t, 0, amountRefunded(t, g, m, id))
}

// A refund released as not_processed keeps the recheck its release
// scheduled when a retry then makes it: that recheck finds a succeeded
// refund, as it would one an operator resolved. If the provider has failed
// the refund since (a card closed) and no webhook says so, that look is
// the only word of it: the ledger follows the provider, as for the
// webhook — the refund failed, its amount given back, refund.failed sent —
// and it is not reported as an operator's resolution gone wrong.
func TestALeftRecheckFindsARefundFailedSince(t *testing.T) {
	t.Parallel()
	st := stripetest.New(t)
	a, logs, _ := apptest.Build(t, apptest.Env("STRIPE_BASE_URL", st.URL))
	var blip atomic.Bool // the database refuses the refund's update
	require.NoError(t, a.DB().Callback().Update().Before("gorm:update").Register("refund_update_blip", func(tx *gorm.DB) {
		if tx.Statement.Table == "refunds" && blip.Load() {
			tx.AddError(errors.New("a database blip"))
		}
	}))
	g, _ := apptest.Serve(t, a, logs)
	m := g.Onboard(map[string]any{"default_provider": "stripe", "providers": map[string]any{
		"stripe": map[string]string{"secret_key": stripetest.SecretKey, "webhook_secret": stripetest.WebhookSecret}}})
	b := body(stripetest.TokenSuccess)
	b["currency"] = "USD"
	paid := g.Pay(m, "p", b)
	require.Equal(t, http.StatusCreated, paid.StatusCode, string(paid.Body))
	id := paid.JSON(t)["id"].(string)
	ref := providers.RefundReference(m.ID, "r")

	st.LandLateNext()
	lost := refundOf(g, m, id, "r", map[string]any{"amount": 5000})
	require.Equal(t, http.StatusAccepted, lost.StatusCode, string(lost.Body))
	refundID := lost.JSON(t)["id"].(string)
	ageKeys(t, g, time.Hour)
	sweep(t, g)
	require.Equal(t, "not_processed", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["failure_code"], "released")

	st.Land(ref)
	retry := refundOf(g, m, id, "r", map[string]any{"amount": 5000})
	require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
	require.Equal(t, "succeeded", retry.JSON(t)["status"])
	require.EqualValues(t, 5000, amountRefunded(t, g, m, id))

	require.NoError(t, st.FailRefund(ref))
	// The failure cannot be recorded at the first look: the watch goes
	// on, since nothing else may ever say so.
	blip.Store(true)
	dbtest.Age(t, g.App.DB(), 2*time.Hour, "refund_rechecks", "recheck_at")
	sweep(t, g)
	blip.Store(false)
	require.Equal(t, "succeeded", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["status"])
	var watched int64
	require.NoError(t, g.App.DB().Table("refund_rechecks").Where("refund_id = ?", refundID).Count(&watched).Error)
	require.EqualValues(t, 1, watched, "looked at again")

	dbtest.Age(t, g.App.DB(), 2*time.Hour, "refund_rechecks", "recheck_at")
	sweep(t, g)
	got := g.Get(m, "/v1/refunds/"+refundID).JSON(t)
	require.Equal(t, "failed", got["status"], "the ledger follows the provider")
	require.EqualValues(t, 0, amountRefunded(t, g, m, id), "its amount is given back")
	var types []string
	for _, e := range g.Get(m, "/v1/events").JSON(t)["data"].([]any) {
		types = append(types, e.(map[string]any)["type"].(string))
	}
	require.Contains(t, types, "refund.failed")
	require.NotContains(t, g.Logs.String(), "operator resolved as succeeded")
	again := refundOf(g, m, id, "r", map[string]any{"amount": 5000})
	require.Equal(t, string(retry.Body), string(again.Body), "the key replays what was answered then")
}

// A refund that lands at the provider while the sweeper's lookup, the one
// that releases it as never made, is on its way back: its event comes in
// that moment and is put off (the sweeper holds the key). The sweeper
// looks once more after the release and re-opens the refund as
// succeeded, instead of telling the merchant it failed — who might refund
// the customer again — until its recheck RECHECK_AFTER later.
func TestARefundLandingDuringTheReleasingLookupIsNotLost(t *testing.T) {
	t.Parallel()
	ps := paystacktest.New(t)
	u, err := url.Parse(ps.URL)
	require.NoError(t, err)
	var (
		g     *apptest.Gateway
		m     apptest.Merchant
		ref   string
		armed atomic.Bool
		hooks = make(chan apptest.Response, 1)
	)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.Request.Method == http.MethodGet && r.Request.URL.Path == "/refund" && armed.CompareAndSwap(true, false) {
			// Listed without ours — and ours lands before the answer is back.
			ps.Land(ref)
			h, raw, err := ps.RefundWebhook(ref)
			if err != nil {
				return err
			}
			hooks <- g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
		}
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	g = apptest.Start(t, apptest.Env("PAYSTACK_BASE_URL", srv.URL))
	m = g.Onboard(map[string]any{"default_provider": "paystack",
		"providers": map[string]any{"paystack": map[string]string{"secret_key": paystacktest.SecretKey}}})
	pay := g.Pay(m, "p", body(paystacktest.TokenSuccess))
	require.Equal(t, http.StatusCreated, pay.StatusCode, string(pay.Body))
	id := pay.JSON(t)["id"].(string)
	ref = providers.RefundReference(m.ID, "r")
	ps.LandLateNext()
	lost := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusAccepted, lost.StatusCode, string(lost.Body))
	refundID := lost.JSON(t)["id"].(string)

	ageKeys(t, g, time.Hour)
	armed.Store(true)
	c := sweep(t, g)
	require.False(t, armed.Load(), "the refund landed during the sweeper's lookup")
	hook := <-hooks
	require.Equal(t, http.StatusOK, hook.StatusCode, string(hook.Body))
	require.NotEqual(t, "refunds_settled", hook.JSON(t)["status"], "put off: the sweeper held the key")

	require.Equal(t, 1, c.Reopened, "%+v", c)
	got := g.Get(m, "/v1/refunds/"+refundID).JSON(t)
	require.Equal(t, "succeeded", got["status"])
	require.EqualValues(t, 1500, amountRefunded(t, g, m, id))
	retry := refundOf(g, m, id, "r", map[string]any{"amount": 1500})
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "succeeded", retry.JSON(t)["status"])
	require.Equal(t, 1, ps.Refunds(ref), "refunded once")
}
