package scheduler

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/payments"
)

type noSettler struct{}

func (noSettler) Settle(context.Context, idempotency.Claim) (payments.Settlement, error) {
	panic("no settle expected")
}

func (noSettler) DueRechecks(context.Context, int) ([]payments.Payment, error) {
	panic("no recheck expected")
}

func (noSettler) Recheck(context.Context, payments.Payment) (payments.Settlement, error) {
	panic("no recheck expected")
}

func (noSettler) DueRefundRechecks(context.Context, int) ([]payments.Refund, error) {
	panic("no recheck expected")
}

func (noSettler) RecheckRefund(context.Context, payments.Refund) (payments.Settlement, error) {
	panic("no recheck expected")
}

// TestNoRunAfterStop: once Stop has begun, a tick that gocron already
// dispatched does not start the job body, and Start does nothing.
func TestNoRunAfterStop(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLite(t)
	s, err := New(Config{DB: db, Keys: idempotency.NewStore(db), Settler: noSettler{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	s.Start()
	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop(), "Stop is idempotent")

	ran := false
	s.job(JobSweep, func(context.Context) (Counts, error) { ran = true; return Counts{}, nil })(context.Background())
	require.False(t, ran, "no job body starts after Stop")
	s.Start() // a no-op, not a panic
}

// The backlog gauges are measured at Start, not one SWEEP_INTERVAL later
// by the first sweep.
func TestBacklogMeasuredAtStart(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLite(t)
	keys := idempotency.NewStore(db)
	_, _, err := keys.Claim(context.Background(), idempotency.ClaimParams{MerchantID: "m1", Key: "k", RequestHash: "h", Lease: time.Minute})
	require.NoError(t, err)
	got := make(chan Backlog, 1)
	s, err := New(Config{DB: db, Keys: keys, Settler: noSettler{}, SweepInterval: time.Hour,
		ObserveBacklog: func(b Backlog) { got <- b },
		Log:            slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	s.Start()
	defer func() { require.NoError(t, s.Stop()) }()
	select {
	case b := <-got:
		require.EqualValues(t, 1, b.Open, "the key in progress")
	case <-time.After(30 * time.Second):
		t.Fatal("no backlog measured at start")
	}
}
