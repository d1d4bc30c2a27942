package events_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
)

// TestAKillBetweenCommitAndDeliveryLosesNoEvent kills the real gateway
// (SIGKILL) after a payment's transition — and its event — committed and
// before the event reached the queue; after a restart the receiver gets
// the event, once, under one webhook-id.
func TestAKillBetweenCommitAndDeliveryLosesNoEvent(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.PostgresURL(t)
	env := apptest.BaseEnv(dbURL, t.TempDir())
	env["ONCEPAY_FAILPOINT"] = "before_relay"
	p := apptest.StartProcess(t, apptest.Binary(t, "failpoint"), env)
	rcv := newReceiver(t, nil)
	m := p.Onboard(nil)
	_, secret := endpoint(t, p.Gateway, m, rcv.URL)

	if r, err := p.TryPay(m, "pay-1", pay("sim_success", 5000)); err == nil {
		require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
	} // else the relay's kill came first; the payment committed all the same
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("the failpoint did not fire")
	}
	require.Empty(t, rcv.got())

	db, err := database.Open(dbURL, database.Options{MaxOpenConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(db) })
	var pending int64
	require.NoError(t, db.Table("events").Where("merchant_id = ? AND enqueued_at IS NULL", m.ID).Count(&pending).Error)
	require.Equal(t, int64(1), pending, "the event committed with the payment and is not yet queued")

	p.Restart(map[string]string{"ONCEPAY_FAILPOINT": ""})
	waitFor(t, "the event after the restart", func() bool { return len(rcv.got()) >= 1 })
	time.Sleep(1500 * time.Millisecond) // more than a relay period: a second copy would show
	hits := rcv.got()
	require.Len(t, hits, 1, "delivered once")
	require.Equal(t, "payment.succeeded", hits[0].event(t)["type"])
	require.NoError(t, verify(secret, hits[0].Header, hits[0].Body, time.Now()))
}
