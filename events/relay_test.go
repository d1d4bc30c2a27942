package events

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/secretbox"
)

// relayService is a Service on db with an hour's retry schedule, logging
// to logs.
func relayService(t *testing.T, db *gorm.DB, logs io.Writer) *Service {
	t.Helper()
	box, err := secretbox.New(bytes.Repeat([]byte{7}, 32), "test")
	require.NoError(t, err)
	s, err := New(context.Background(), Config{DB: db, Box: box, Schedule: []time.Duration{time.Hour},
		Log: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	return s
}

// oneEventForOneEndpoint makes merchant m1, its endpoint we_1 (its secret
// sealed as given) and one payment.succeeded event, not yet handed over.
func oneEventForOneEndpoint(t *testing.T, db *gorm.DB, secret []byte) {
	t.Helper()
	now := time.Now().UTC()
	require.NoError(t, db.Exec(`INSERT INTO tenants (id, name, status, default_provider, created_at, updated_at)
VALUES ('m1', 'M', 'active', 'simulator', ?, ?)`, now, now).Error)
	require.NoError(t, db.Exec(`INSERT INTO webhook_endpoints (merchant_id, id, url, secret, created_at, updated_at)
VALUES ('m1', 'we_1', 'https://example.com/hook', ?, ?, ?)`, secret, now, now).Error)
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
		return NewEmitter(nil).Emit(context.Background(), tx, Params{MerchantID: "m1", Type: PaymentSucceeded, ObjectID: "pay_1", Object: map[string]any{"id": "pay_1"}})
	}))
}

// One relay run hands a busy merchant's whole backlog to the queue — not
// one batch a run, which a merchant making more than relayBatch payments a
// second would outrun for good — and the other merchants' events with it.
func TestARelayRunDrainsTheBacklog(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		s := relayService(t, db, io.Discard)
		now := time.Now().UTC()
		for _, m := range []string{"m1", "m2"} {
			require.NoError(t, db.Exec(`INSERT INTO tenants (id, name, status, default_provider, created_at, updated_at)
VALUES (?, 'M', 'active', 'simulator', ?, ?)`, m, now, now).Error)
		}
		require.NoError(t, db.Exec(`INSERT INTO webhook_endpoints (merchant_id, id, url, secret, created_at, updated_at)
VALUES ('m1', 'we_1', 'https://example.com/hook', ?, ?, ?)`, []byte("sealed"), now, now).Error)
		busy := 2*relayBatch + 1
		em := NewEmitter(nil)
		require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
			for i := range busy {
				obj := fmt.Sprintf("pay_%d", i)
				if err := em.Emit(ctx, tx, Params{MerchantID: "m1", Type: PaymentSucceeded, ObjectID: obj, Object: map[string]any{"id": obj}}); err != nil {
					return err
				}
			}
			return em.Emit(ctx, tx, Params{MerchantID: "m2", Type: PaymentSucceeded, ObjectID: "pay_x", Object: map[string]any{"id": "pay_x"}})
		}))

		var m1Waiting, m2Waiting int64
		require.NoError(t, db.Table("events").Where("merchant_id = 'm1' AND enqueued_at IS NULL").Count(&m1Waiting).Error)
		require.NoError(t, db.Table("events").Where("merchant_id = 'm2' AND enqueued_at IS NULL").Count(&m2Waiting).Error)
		require.Equal(t, int64(busy), m1Waiting, "m1's events wait for the relay")
		require.Zero(t, m2Waiting, "m2 has no endpoint: its event is born handed over, and the relay never touches it")

		require.NoError(t, s.Relay(ctx))
		var waiting, jobs int64
		require.NoError(t, db.Table("events").Where("enqueued_at IS NULL").Count(&waiting).Error)
		require.Zero(t, waiting, "one run hands over every waiting event")
		require.NoError(t, db.Table("river_job").Where("queue = ?", queue).Count(&jobs).Error)
		require.Equal(t, int64(busy), jobs, "one delivery job per event to m1's endpoint, none for m2 (no endpoint)")
	})
}

// The retry schedule, step by step, each delay jittered by ±10% (so a
// receiver coming back is not met by every retry at once); past the
// schedule's end, its last step.
func TestNextRetryFollowsTheScheduleWithJitter(t *testing.T) {
	t.Parallel()
	sch := []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute}
	w := &deliveryWorker{s: &Service{cfg: Config{Schedule: sch}}}
	for attempt, want := range map[int]time.Duration{1: sch[0], 2: sch[1], 3: sch[2], 9: sch[2]} {
		seen := map[time.Duration]bool{}
		for range 50 {
			before := time.Now()
			d := w.NextRetry(&river.Job[DeliveryArgs]{JobRow: &rivertype.JobRow{Attempt: attempt}}).Sub(before)
			require.GreaterOrEqual(t, d, want*9/10-time.Millisecond, "attempt %d", attempt)
			require.LessOrEqual(t, d, want*11/10+time.Millisecond, "attempt %d", attempt)
			seen[d.Round(want/1000)] = true
		}
		require.Greater(t, len(seen), 10, "attempt %d: the delays are jittered", attempt)
	}
}

// A delivery of one event to one endpoint is in the queue once while it
// waits or runs: redeliveries asked for meanwhile add nothing (a merchant
// cannot fill the queue all merchants share with copies); once it has run,
// a redelivery queues it again. On both stores.
func TestARedeliveryOfAWaitingDeliveryAddsNothing(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		s := relayService(t, db, io.Discard)
		enqueue := func(endpoints ...string) (inFlight int) {
			require.NoError(t, db.Transaction(func(tx *gorm.DB) (err error) {
				inFlight, err = s.enqueue(ctx, tx, "m1", "evt_1", endpoints)
				return err
			}))
			return inFlight
		}
		jobs := func() (n int64) {
			require.NoError(t, db.Table("river_job").Where("queue = ?", queue).Count(&n).Error)
			return n
		}
		require.Zero(t, enqueue("we_1", "we_2"))
		for range 5 {
			require.Equal(t, 2, enqueue("we_1", "we_2"), "told: both still in flight")
		}
		require.Equal(t, int64(2), jobs(), "one per endpoint while it waits")
		require.NoError(t, db.Exec("UPDATE river_job SET state = 'completed', finalized_at = ? WHERE queue = ?", time.Now().UTC(), queue).Error)
		require.Zero(t, enqueue("we_1"))
		require.Equal(t, int64(3), jobs(), "delivered: a redelivery goes again")
	})
}

// A job whose endpoint already has its share of this instance's workers
// snoozes before it reads anything: a merchant's backlog going round the
// queue costs the database nothing the other merchants' deliveries need.
// (The event named here does not exist: a read would cancel the job.)
func TestABusyEndpointsJobSnoozesBeforeReading(t *testing.T) {
	t.Parallel()
	s := &Service{busy: map[string]int{"we_busy": perEndpoint}}
	err := s.deliver(context.Background(), DeliveryArgs{MerchantID: "m1", EventID: "evt_missing", EndpointID: "we_busy"}, 1, false)
	var snooze *river.JobSnoozeError
	require.ErrorAs(t, err, &snooze)
	require.Equal(t, perEndpoint, s.busy["we_busy"], "its share given back untouched")
}

// A delivery the gateway itself cannot make — here, an endpoint's secret
// no key opens — is retried like a receiver's failure, and on its last
// attempt written to the deliveries log as failed (and an ERROR), so the
// merchant and an operator can see the event was never sent. On both
// stores.
func TestADeliveryTheGatewayCannotMakeIsLoggedWhenGivenUp(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		var logs bytes.Buffer
		s := relayService(t, db, &logs)
		oneEventForOneEndpoint(t, db, []byte("sealed under a key long gone"))
		var ev Event
		require.NoError(t, db.Where("merchant_id = 'm1'").First(&ev).Error)
		a := DeliveryArgs{MerchantID: "m1", EventID: ev.ID, EndpointID: "we_1"}
		deliveries := func() (d []Delivery) {
			require.NoError(t, db.Where("merchant_id = 'm1'").Find(&d).Error)
			return d
		}

		require.Error(t, s.deliver(ctx, a, 1, false))
		require.Empty(t, deliveries(), "retried: nothing to show yet")
		require.Error(t, s.deliver(ctx, a, 2, true))
		d := deliveries()
		require.Len(t, d, 1)
		require.Equal(t, "failed", d[0].Outcome)
		require.Contains(t, d[0].Error, "signing secret")
		require.Contains(t, logs.String(), "level=ERROR")
	})
}

// The backlog's age is a stalled queue's, not a dead endpoint's: an event
// not yet handed over counts from when it was made, a job due to run from
// when it fell due, and a job waiting for its retry not at all (one
// merchant's endpoint down for a day must not page anyone). On both
// stores.
func TestTheBacklogsAgeIsWhatCouldGoNow(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		s := relayService(t, db, io.Discard)
		now := time.Now().UTC()
		oneEventForOneEndpoint(t, db, []byte("sealed"))
		require.NoError(t, db.Exec("UPDATE events SET created_at = ?", now.Add(-10*time.Minute)).Error)
		b, err := s.Backlog(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), b.Depth)
		require.InDelta(t, 600, b.OldestAge.Seconds(), 60, "an event the relay has not handed over")

		require.NoError(t, s.Relay(ctx))
		require.NoError(t, db.Exec("UPDATE river_job SET state = 'retryable', scheduled_at = ?, created_at = ? WHERE queue = ?",
			now.Add(time.Hour), now.Add(-24*time.Hour), queue).Error)
		b, err = s.Backlog(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), b.Depth)
		require.Zero(t, b.OldestAge, "a retry waiting for its time is no stall")

		require.NoError(t, db.Exec("UPDATE river_job SET state = 'available', scheduled_at = ? WHERE queue = ?",
			now.Add(-5*time.Minute), queue).Error)
		b, err = s.Backlog(ctx)
		require.NoError(t, err)
		require.InDelta(t, 300, b.OldestAge.Seconds(), 60, "due five minutes ago and not taken")

		// A retry past its time that River's leader has not made available
		// (a stalled scheduler) waits as much.
		require.NoError(t, db.Exec("UPDATE river_job SET state = 'retryable', scheduled_at = ? WHERE queue = ?",
			now.Add(-7*time.Minute), queue).Error)
		b, err = s.Backlog(ctx)
		require.NoError(t, err)
		require.InDelta(t, 420, b.OldestAge.Seconds(), 60, "overdue retry")
	})
}
