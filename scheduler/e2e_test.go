package scheduler_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/providers"
)

func payBody(method string) map[string]any {
	return map[string]any{
		"amount": 5000, "currency": "NGN", "email": "ada@example.com",
		"payment_method": method, "description": "Order #1001",
		"metadata": map[string]string{"order": "1001"},
	}
}

// crashed runs the failpoint binary, onboards a merchant and sends one
// payment that kills the gateway at the failpoint, then restarts it with
// the failpoint off and a fast sweeper. Nobody retries.
func crashed(t *testing.T, failpoint, key string) (*apptest.Process, apptest.Merchant, *gorm.DB) {
	t.Helper()
	dbURL := dbtest.PostgresURL(t)
	env := apptest.BaseEnv(dbURL, t.TempDir())
	env["SWEEP_INTERVAL"] = "1s"
	env["SWEEP_STALE_AFTER"] = "2s"
	env["IDEMPOTENCY_LEASE"] = "1s"
	env["PROVIDER_TIMEOUT"] = "500ms"
	env["ONCEPAY_FAILPOINT"] = failpoint
	p := apptest.StartProcess(t, apptest.Binary(t, "failpoint"), env)
	m := p.Onboard(nil)
	_, err := p.TryPay(m, key, payBody("sim_success"))
	require.Error(t, err, "the gateway died mid-request")
	<-p.Exited()

	p.Restart(map[string]string{"ONCEPAY_FAILPOINT": ""})
	db, err := database.Open(dbURL, database.Options{MaxOpenConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(db) })
	return p, m, db
}

// TestSweeperSettlesCrashAfterCharge: the gateway is SIGKILLed after the
// provider charged and before anything was recorded. With no retry from
// anyone, the restarted gateway's sweeper finishes the payment with the
// provider's real outcome and completes the key; a retry then replays it.
func TestSweeperSettlesCrashAfterCharge(t *testing.T) {
	t.Parallel()
	p, m, db := crashed(t, "after_charge", "crash-1")
	ref := providers.Reference(m.ID, "crash-1")
	require.Equal(t, int64(1), count(t, db, "simulator_charges", "reference = ?", ref), "the provider charged")

	eventually(t, 60*time.Second, "the sweeper completes the key", func() bool {
		rec, ok := getKey(t, db, m.ID, "crash-1")
		return ok && rec.Status == idempotency.StatusDone
	})
	rec, _ := getKey(t, db, m.ID, "crash-1")
	pay := getPayment(t, db, m.ID, "crash-1")
	require.Equal(t, payments.StatusSucceeded, pay.Status, "the provider's real outcome")
	require.Equal(t, http.StatusCreated, rec.StatusCode)
	require.Equal(t, pay.ID, rec.ResourceID)
	require.Equal(t, string(payments.Render(&pay).Body), string(rec.Body), "the ledger and the stored answer agree")

	again := p.Pay(m, "crash-1", payBody("sim_success"))
	require.Equal(t, http.StatusCreated, again.StatusCode, string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(rec.Body), string(again.Body), "replayed byte for byte")
	require.Equal(t, rec.Header["Location"], again.Header.Get("Location"))
	require.Equal(t, int64(1), count(t, db, "simulator_charges", "reference = ?", ref), "charged once")
}

// TestSweeperReleasesNeverCharged: the gateway dies after recording the
// payment and before calling the provider. The sweeper finds nothing at
// the provider, fails the payment as not_processed and releases the key;
// the app's retry then charges exactly once.
func TestSweeperReleasesNeverCharged(t *testing.T) {
	t.Parallel()
	p, m, db := crashed(t, "before_charge", "crash-2")
	ref := providers.Reference(m.ID, "crash-2")
	require.Zero(t, count(t, db, "simulator_charges", "reference = ?", ref), "nothing was charged")
	require.Equal(t, int64(1), count(t, db, "idempotency_keys", "merchant_id = ? AND key = ?", m.ID, "crash-2"))

	eventually(t, 60*time.Second, "the sweeper releases the key", func() bool {
		_, ok := getKey(t, db, m.ID, "crash-2")
		return !ok
	})
	pay := getPayment(t, db, m.ID, "crash-2")
	require.Equal(t, payments.StatusFailed, pay.Status)
	require.Equal(t, payments.FailureNotProcessed, pay.FailureCode)
	require.Zero(t, count(t, db, "simulator_charges", "reference = ?", ref), "the sweeper never charges")

	retry := p.Pay(m, "crash-2", payBody("sim_success"))
	require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
	require.Empty(t, retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "succeeded", retry.JSON(t)["status"])
	require.Equal(t, pay.ID, retry.JSON(t)["id"], "same payment, same reference")
	require.Equal(t, int64(1), count(t, db, "simulator_charges", "reference = ?", ref), "charged exactly once")

	replay := p.Pay(m, "crash-2", payBody("sim_success"))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(retry.Body), string(replay.Body))
}
