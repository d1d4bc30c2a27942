package payments_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/providers"
)

// TestCrashAfterChargeBeforeRecord kills the real gateway (SIGKILL) after
// the provider charged and before anything was recorded, restarts it, and
// checks the contract: the key is still in progress, a retry within the
// lease is 409, a retry after the lease takes over and answers the real
// outcome, and the provider charged once.
func TestCrashAfterChargeBeforeRecord(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.PostgresURL(t)
	env := apptest.BaseEnv(dbURL, t.TempDir())
	env["IDEMPOTENCY_LEASE"] = "1h" // time passes only when the test says so
	env["SWEEP_STALE_AFTER"] = "2h"
	env["RECHECK_AFTER"] = "3h"
	env["SWEEP_INTERVAL"] = "1h"
	env["ONCEPAY_FAILPOINT"] = "after_charge"
	p := apptest.StartProcess(t, apptest.Binary(t, "failpoint"), env)

	m := p.Onboard(nil)
	_, err := p.TryPay(m, "crash-1", body("sim_success"))
	require.Error(t, err, "the gateway died mid-request")
	<-p.Exited()

	p.Restart(map[string]string{"ONCEPAY_FAILPOINT": ""})
	db, err := database.Open(dbURL, database.Options{MaxOpenConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(db) })

	ref := providers.Reference(m.ID, "crash-1")
	require.Equal(t, int64(1), count(t, db, "simulator_charges", "reference = ?", ref), "the provider charged")
	require.Equal(t, int64(1), count(t, db, "idempotency_keys", "merchant_id = ? AND key = ? AND status = 'in_progress'", m.ID, "crash-1"))
	require.Equal(t, int64(1), count(t, db, "payments", "merchant_id = ? AND status = 'processing'", m.ID))

	busy := p.Pay(m, "crash-1", body("sim_success"))
	require.Equal(t, http.StatusConflict, busy.StatusCode, string(busy.Body))
	require.Equal(t, "1", busy.Header.Get("Retry-After"))

	// The lease lapses.
	require.NoError(t, db.Exec("UPDATE idempotency_keys SET locked_until = ? WHERE merchant_id = ? AND key = ?",
		time.Now().UTC().Add(-time.Second), m.ID, "crash-1").Error)

	settled := p.Pay(m, "crash-1", body("sim_success"))
	require.Equal(t, http.StatusCreated, settled.StatusCode, string(settled.Body))
	require.Equal(t, "succeeded", settled.JSON(t)["status"])
	require.Equal(t, int64(1), count(t, db, "simulator_charges", "reference = ?", ref), "still one charge")
	requireReplay(t, settled, p.Pay(m, "crash-1", body("sim_success")))
}

func count(t *testing.T, db *gorm.DB, table, where string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Table(table).Where(where, args...).Count(&n).Error)
	return n
}
