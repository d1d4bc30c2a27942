package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/scheduler"
)

// TestSweepOutcomes runs one sweep over one key per case and checks what
// became of the key and its payment, and the counts the run reported.
func TestSweepOutcomes(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		const m = "ten_a"
		ref := func(key string) string { return providers.Reference(m, key) }
		answers := map[string]providers.Result{
			ref("succeeded"): {Outcome: providers.OutcomeSucceeded, TransactionID: "tx_1"},
			ref("failed"):    {Outcome: providers.OutcomeFailed, FailureCode: "insufficient_funds", FailureMessage: "Not enough."},
			ref("not-found"): {Outcome: providers.OutcomeNotFound},
			ref("pending"):   {Outcome: providers.OutcomePending},
			ref("review"):    {Outcome: providers.OutcomePending},
		}
		fake := newFake(func(_ context.Context, r string) (providers.Result, error) {
			if res, ok := answers[r]; ok {
				return res, nil
			}
			return providers.Result{}, fmt.Errorf("fake: %w: 503", providers.ErrUnknown)
		})
		old, lapsed := 10*time.Minute, -time.Minute
		seed(t, db, []stuck{
			{merchant: m, key: "succeeded", age: old, leaseLeft: lapsed, payment: status(payments.StatusProcessing)},
			{merchant: m, key: "failed", age: old, leaseLeft: lapsed, payment: status(payments.StatusProcessing)},
			{merchant: m, key: "not-found", age: old, leaseLeft: lapsed, payment: status(payments.StatusProcessing)},
			{merchant: m, key: "pending", age: old, leaseLeft: lapsed, payment: status(payments.StatusProcessing)},
			{merchant: m, key: "provider-error", age: old, leaseLeft: lapsed, payment: status(payments.StatusProcessing)},
			{merchant: m, key: "review", age: 25 * time.Hour, leaseLeft: lapsed, payment: status(payments.StatusProcessing)},
			{merchant: m, key: "already-final", age: old, leaseLeft: lapsed, payment: status(payments.StatusSucceeded)},
			{merchant: m, key: "no-payment", age: old, leaseLeft: lapsed},
			// Failed as never charged, but the release did not follow (a
			// crash or cancellation between the two): released, not
			// completed as a decline.
			{merchant: m, key: "half-released", age: old, leaseLeft: lapsed,
				payment: status(payments.StatusFailed), failureCode: payments.FailureNotProcessed},
			{merchant: m, key: "half-unavailable", age: old, leaseLeft: lapsed,
				payment: status(payments.StatusFailed), failureCode: payments.FailureProviderUnavailable},
			// Not candidates:
			{merchant: m, key: "young", age: time.Minute, leaseLeft: lapsed, payment: status(payments.StatusProcessing)},
			{merchant: m, key: "leased", age: old, leaseLeft: time.Hour, payment: status(payments.StatusProcessing)},
			{merchant: m, key: "done", age: old, leaseLeft: lapsed, payment: status(payments.StatusSucceeded),
				status: idempotency.StatusDone, completedAgo: time.Minute},
		})

		in := instanceOn(db, fake)
		cfg := in.config(3) // several batches
		var observed []scheduler.Counts
		cfg.Observe = func(job string, c scheduler.Counts) {
			require.Equal(t, scheduler.JobSweep, job)
			observed = append(observed, c)
		}
		c, err := scheduler.NewSweeper(cfg).RunOnce(context.Background())
		require.NoError(t, err)
		want := scheduler.Counts{Resolved: 2, Released: 4, Pending: 2, Review: 1, Skipped: 1, Errors: 1}
		require.Equal(t, want, c)
		require.Equal(t, []scheduler.Counts{want}, observed)

		for _, key := range []string{"succeeded", "failed", "already-final"} {
			rec, ok := getKey(t, db, m, key)
			require.True(t, ok, key)
			require.Equal(t, idempotency.StatusDone, rec.Status, key)
			p := getPayment(t, db, m, key)
			// Exactly the answer the create handler would have sent.
			want := payments.Render(&p)
			require.Equal(t, want.Status, rec.StatusCode, key)
			require.Equal(t, string(want.Body), string(rec.Body), key)
			require.Equal(t, want.Header, rec.Header, key)
		}
		require.Equal(t, payments.StatusSucceeded, getPayment(t, db, m, "succeeded").Status)
		require.Equal(t, "tx_1", getPayment(t, db, m, "succeeded").ProviderTransactionID)
		failed := getPayment(t, db, m, "failed")
		require.Equal(t, payments.StatusFailed, failed.Status)
		require.Equal(t, "insufficient_funds", failed.FailureCode)
		rec, _ := getKey(t, db, m, "failed")
		require.Equal(t, 402, rec.StatusCode)

		for _, key := range []string{"not-found", "no-payment", "half-released", "half-unavailable"} {
			_, ok := getKey(t, db, m, key)
			require.False(t, ok, "%s: released", key)
		}
		require.Equal(t, payments.FailureProviderUnavailable, getPayment(t, db, m, "half-unavailable").FailureCode)
		nf := getPayment(t, db, m, "not-found")
		require.Equal(t, payments.StatusFailed, nf.Status)
		require.Equal(t, payments.FailureNotProcessed, nf.FailureCode)

		for key, ps := range map[string]payments.Status{
			"pending": payments.StatusProcessing, "provider-error": payments.StatusProcessing,
			"review": payments.StatusRequiresReview,
			"young":  payments.StatusProcessing, "leased": payments.StatusProcessing,
		} {
			rec, ok := getKey(t, db, m, key)
			require.True(t, ok, key)
			require.Equal(t, idempotency.StatusInProgress, rec.Status, key)
			require.Equal(t, ps, getPayment(t, db, m, key).Status, key)
		}
		rec, _ = getKey(t, db, m, "done")
		require.Equal(t, `{"stored":true}`, string(rec.Body), "a done key is never rewritten")

		lookups, charges := fake.counts()
		require.Zero(t, charges, "a sweeper never charges")
		for _, key := range []string{"young", "leased", "done", "already-final", "no-payment", "half-released", "half-unavailable"} {
			require.Zero(t, lookups[ref(key)], key)
		}
		for _, key := range []string{"succeeded", "failed", "pending", "provider-error", "review"} {
			require.Equal(t, 1, lookups[ref(key)], "%s: looked up once, even across batches", key)
		}
		// Released, then looked up once more: a charge that landed during
		// the first lookup had its webhook put off (payments.lookOnceMore).
		require.Equal(t, 2, lookups[ref("not-found")], "not-found: looked up twice, even across batches")

		// The next run sees the pending ones again, and nothing else.
		require.NoError(t, db.Exec("UPDATE idempotency_keys SET locked_until = ? WHERE status = 'in_progress' AND key <> 'leased'",
			time.Now().UTC().Add(-time.Second)).Error)
		c, err = scheduler.NewSweeper(cfg).RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, scheduler.Counts{Pending: 2, Review: 1, Errors: 1}, c)
	})
}

// TestSweepThreeInstancesRace has three sweepers, each with its own pool as
// three gateway instances would, race over 1,000 stuck keys: every key is
// looked up and completed exactly once, and none is left behind.
func TestSweepThreeInstancesRace(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresURL(t)
	fake := newFake(func(context.Context, string) (providers.Result, error) {
		return providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: "tx"}, nil
	})
	const n = 1000
	rows := make([]stuck, n)
	for i := range rows {
		rows[i] = stuck{merchant: fmt.Sprintf("ten_%d", i%7), key: fmt.Sprintf("k-%04d", i),
			age: time.Hour + time.Duration(i)*time.Millisecond, leaseLeft: -time.Minute,
			payment: status(payments.StatusProcessing)}
	}
	check := newInstance(t, dsn, fake, 4)
	seed(t, check.db, rows)

	var (
		mu    sync.Mutex
		total scheduler.Counts
		runs  []scheduler.Counts
		wg    sync.WaitGroup
	)
	start := make(chan struct{})
	for range 3 {
		in := newInstance(t, dsn, fake, 4)
		sw := scheduler.NewSweeper(in.config(50))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := sw.RunOnce(context.Background())
			mu.Lock()
			defer mu.Unlock()
			require.NoError(t, err)
			runs = append(runs, c)
			total.Resolved += c.Resolved
			total.Lost += c.Lost
			total.Errors += c.Errors
			total.Skipped += c.Skipped
		}()
	}
	close(start)
	wg.Wait()
	t.Logf("per-instance counts: %+v", runs)

	require.Equal(t, n, total.Resolved, "every key resolved exactly once across instances")
	require.Zero(t, total.Errors)
	require.Zero(t, total.Skipped, "no key was settled twice")
	require.Equal(t, int64(n), count(t, check.db, "idempotency_keys", "status = 'done'"))
	require.Equal(t, int64(n), count(t, check.db, "payments", "status = 'succeeded'"))
	lookups, charges := fake.counts()
	require.Zero(t, charges)
	require.Len(t, lookups, n)
	for ref, k := range lookups {
		require.Equal(t, 1, k, "reference %s looked up %d times", ref, k)
	}
}

// TestShutdownDuringSweep stops the scheduler while a sweep is inside a
// provider call that only ends when its context is cancelled: the run
// returns, and every key is either still in progress with its payment
// processing, or done with its payment final.
func TestShutdownDuringSweep(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresURL(t)
	const m = "ten_s"
	entered := make(chan string, 1)
	returned := make(chan error, 1)
	fake := newFake(func(ctx context.Context, ref string) (providers.Result, error) {
		if ref != providers.Reference(m, "k-3") {
			return providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: "tx"}, nil
		}
		entered <- ref
		<-ctx.Done()
		returned <- ctx.Err()
		return providers.Result{}, fmt.Errorf("fake: %w: %v", providers.ErrUnknown, ctx.Err())
	})
	var rows []stuck
	for i := range 8 {
		rows = append(rows, stuck{merchant: m, key: fmt.Sprintf("k-%d", i),
			age: time.Hour - time.Duration(i)*time.Second, leaseLeft: -time.Minute,
			payment: status(payments.StatusProcessing)})
	}
	in := newInstance(t, dsn, fake, 4)
	seed(t, in.db, rows)

	cfg := in.config(2)
	cfg.Concurrency = 1 // one key at a time: the keys before k-3 end, those after wait
	cfg.SweepInterval = 20 * time.Millisecond
	cfg.StopTimeout = 20 * time.Second
	observed := make(chan scheduler.Counts, 10)
	cfg.Observe = func(_ string, c scheduler.Counts) { observed <- c }
	s, err := scheduler.New(cfg)
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { _ = s.Stop() })

	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the sweep never reached the blocking provider call")
	}
	require.NoError(t, s.Stop(), "the running sweep returned once cancelled")
	select {
	case err := <-returned:
		require.ErrorIs(t, err, context.Canceled, "the job's context was cancelled")
	default:
		t.Fatal("Stop returned before the provider call ended")
	}
	first := <-observed
	require.Equal(t, 3, first.Resolved, "the keys before the blocked one were finished")

	for _, r := range rows {
		rec, ok := getKey(t, in.db, m, r.key)
		require.True(t, ok, r.key)
		p := getPayment(t, in.db, m, r.key)
		switch rec.Status {
		case idempotency.StatusDone:
			require.Equal(t, payments.StatusSucceeded, p.Status, r.key)
			var view map[string]any
			require.NoError(t, json.Unmarshal(rec.Body, &view))
			require.Equal(t, p.ID, view["id"], r.key)
		case idempotency.StatusInProgress:
			require.Equal(t, payments.StatusProcessing, p.Status, r.key)
		default:
			t.Fatalf("%s: status %q", r.key, rec.Status)
		}
	}
	require.Equal(t, payments.StatusProcessing, getPayment(t, in.db, m, "k-3").Status)
	require.Equal(t, int64(3), count(t, in.db, "idempotency_keys", "status = 'done'"))
	require.Equal(t, int64(5), count(t, in.db, "idempotency_keys", "status = 'in_progress'"))
}

// TestPurge deletes exactly the done keys past the TTL, in several
// batches, and never a key in progress or a payment.
func TestPurge(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		const ttl = 72 * time.Hour
		var rows []stuck
		expired := map[string]bool{}
		for i := range 10 {
			k := fmt.Sprintf("old-done-%d", i)
			expired[k] = true
			rows = append(rows, stuck{merchant: fmt.Sprintf("ten_%d", i%3), key: k, age: ttl + 2*time.Hour,
				status: idempotency.StatusDone, completedAgo: ttl + time.Hour + time.Duration(i)*time.Minute,
				payment: status(payments.StatusSucceeded)})
		}
		for i := range 3 {
			rows = append(rows, stuck{merchant: "ten_0", key: fmt.Sprintf("recent-done-%d", i), age: ttl + 2*time.Hour,
				status: idempotency.StatusDone, completedAgo: ttl - time.Hour, payment: status(payments.StatusFailed)})
			rows = append(rows, stuck{merchant: "ten_1", key: fmt.Sprintf("old-in-progress-%d", i), age: 10 * ttl,
				leaseLeft: -ttl, payment: status(payments.StatusProcessing)})
		}
		seed(t, db, rows)
		keysBefore := count(t, db, "idempotency_keys", "1 = 1")
		paymentsBefore := count(t, db, "payments", "1 = 1")

		var observed []scheduler.Counts
		p := scheduler.NewPurger(scheduler.Config{
			Keys: idempotency.NewStore(db), Log: quiet, KeyTTL: ttl, PurgeBatch: 3,
			Observe: func(job string, c scheduler.Counts) {
				require.Equal(t, scheduler.JobPurge, job)
				observed = append(observed, c)
			},
		})
		c, err := p.RunOnce(context.Background())
		require.NoError(t, err)
		// One statement deletes at most 3 rows: 10 took several batches.
		require.Equal(t, int64(10), c.Deleted)
		require.Equal(t, []scheduler.Counts{{Deleted: 10}}, observed)

		require.Equal(t, keysBefore-10, count(t, db, "idempotency_keys", "1 = 1"))
		require.Equal(t, paymentsBefore, count(t, db, "payments", "1 = 1"), "payments are never purged")
		for _, r := range rows {
			_, ok := getKey(t, db, r.merchant, r.key)
			require.Equal(t, !expired[r.key], ok, r.key)
		}

		c, err = p.RunOnce(context.Background())
		require.NoError(t, err)
		require.Zero(t, c.Deleted)
	})
}

// TestSweepSettlesKeysConcurrently: a backlog is settled SWEEP_CONCURRENCY
// keys at a time — lookups overlap up to the bound and never past it —
// with fewer connections than workers (no connection is held across a
// provider call), each key looked up once.
func TestSweepSettlesKeysConcurrently(t *testing.T) {
	t.Parallel()
	const workers, n = 8, 40
	var (
		mu             sync.Mutex
		inFlight, most int
	)
	full := make(chan struct{})
	fake := newFake(func(context.Context, string) (providers.Result, error) {
		open := func() {
			select {
			case <-full:
			default:
				close(full)
			}
		}
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == workers {
			open()
		}
		mu.Unlock()
		defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		select {
		case <-full: // every worker is in a lookup at once
		case <-time.After(20 * time.Second):
			mu.Lock()
			open() // fail once, not once per key
			mu.Unlock()
			return providers.Result{}, fmt.Errorf("fake: %w: the lookups never overlapped", providers.ErrUnknown)
		}
		return providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: "tx"}, nil
	})
	in := newInstance(t, dbtest.PostgresURL(t), fake, 4)
	rows := make([]stuck, n)
	for i := range rows {
		rows[i] = stuck{merchant: fmt.Sprintf("ten_%d", i%3), key: fmt.Sprintf("k-%02d", i), age: time.Hour,
			leaseLeft: -time.Minute, payment: status(payments.StatusProcessing)}
	}
	seed(t, in.db, rows)
	cfg := in.config(10)
	cfg.Concurrency = workers
	c, err := scheduler.NewSweeper(cfg).RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, scheduler.Counts{Resolved: n}, c)
	require.Equal(t, workers, most, "as many lookups at once as SWEEP_CONCURRENCY, and no more")
	lookups, charges := fake.counts()
	require.Zero(t, charges)
	require.Len(t, lookups, n)
	for ref, k := range lookups {
		require.Equal(t, 1, k, ref)
	}
}

// TestSweepPacesLookupsPerProvider: at SWEEP_PROVIDER_RATE one an hour,
// a run asks the provider once; the keys behind it, whose turn would come
// after their claims' leases, are left in progress for the next run — not
// looked up, not released, and the run does not wait an hour.
func TestSweepPacesLookupsPerProvider(t *testing.T) {
	t.Parallel()
	fake := newFake(func(context.Context, string) (providers.Result, error) {
		return providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: "tx"}, nil
	})
	in := newInstance(t, dbtest.PostgresURL(t), fake, 4)
	db := in.db
	in.service = payments.NewService(db, in.keys, accounts{fake}, payments.Config{
		Lease: 30 * time.Second, ReviewAfter: 24 * time.Hour, Log: quiet, SweepProviderRate: 1.0 / 3600,
	})
	var rows []stuck
	for i := range 3 {
		rows = append(rows, stuck{merchant: "ten_p", key: fmt.Sprintf("k-%d", i), age: time.Hour,
			leaseLeft: -time.Minute, payment: status(payments.StatusProcessing)})
	}
	seed(t, db, rows)
	// No deadline on the run: a worker's turn must come within its
	// claim's lease, and the limiter knows at once that it would not.
	c, err := scheduler.NewSweeper(in.config(10)).RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, scheduler.Counts{Resolved: 1, Pending: 2, Errors: 2}, c)
	lookups, _ := fake.counts()
	require.Len(t, lookups, 1, "one lookup in the hour")
	require.Equal(t, int64(2), count(t, db, "idempotency_keys", "status = 'in_progress'"))
	require.Equal(t, int64(2), count(t, db, "payments", "status = 'processing'"))
}

// A settler that panics — a provider adapter's bug — costs its own key a
// run, not the process: the sweep goes on with the other keys, counts the
// panic as an error and logs it, and the key is left for a later run.
func TestASettlerThatPanicsIsThatKeysError(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	const m = "ten_panic"
	fake := newFake(func(_ context.Context, ref string) (providers.Result, error) {
		if ref == providers.Reference(m, "bad") {
			panic("adapter bug")
		}
		return providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: "tx"}, nil
	})
	seed(t, db, []stuck{
		{merchant: m, key: "bad", age: time.Hour, leaseLeft: -time.Minute, payment: status(payments.StatusProcessing)},
		{merchant: m, key: "good", age: time.Hour, leaseLeft: -time.Minute, payment: status(payments.StatusProcessing)},
	})
	in := instanceOn(db, fake)
	var logs apptest.SyncBuffer
	cfg := in.config(10)
	cfg.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	c, err := scheduler.NewSweeper(cfg).RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, c.Resolved, "%+v", c)
	require.Equal(t, 1, c.Errors, "%+v", c)
	require.Contains(t, logs.String(), "a settler panicked")
	require.Contains(t, logs.String(), "adapter bug")
}

// A sweeper's lookup is bounded by its claim's lease, as a charge is: a
// provider that hangs for PROVIDER_TIMEOUT (longer than the lease) must
// not keep a worker asking on behalf of a key another owner may have taken
// over since. The key is left in progress for the next run.
func TestASweepersLookupEndsWithItsLease(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	deadlines := make(chan time.Duration, 1)
	fake := newFake(func(ctx context.Context, _ string) (providers.Result, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			deadlines <- -1
			return providers.Result{}, fmt.Errorf("fake: %w: no deadline", providers.ErrUnknown)
		}
		deadlines <- time.Until(dl)
		<-ctx.Done()
		return providers.Result{}, fmt.Errorf("fake: %w: %v", providers.ErrUnknown, ctx.Err())
	})
	in := newInstance(t, dbtest.PostgresURL(t), fake, 4)
	in.service = payments.NewService(in.db, in.keys, accounts{fake}, payments.Config{
		Lease: lease, ReviewAfter: 24 * time.Hour, Log: quiet,
	})
	seed(t, in.db, []stuck{{merchant: "ten_l", key: "k", age: time.Hour, leaseLeft: -time.Minute,
		payment: status(payments.StatusProcessing)}})
	cfg := in.config(10)
	cfg.Lease = lease
	c, err := scheduler.NewSweeper(cfg).RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, c.Pending)
	left := <-deadlines
	require.Positive(t, left, "the lookup has a deadline")
	require.LessOrEqual(t, left, lease, "within the claim's lease")
	require.Equal(t, int64(1), count(t, in.db, "payments", "status = 'processing'"))
}

// A recheck's turn at a paced provider must come within the lease
// DueRechecks took on it, as a key's does: one still waiting when it ends
// is taken again (by the run's next batch or another instance) and looked
// up twice. Past the lease the recheck is left for SWEEP_STALE_AFTER,
// asking nothing — and since nothing was asked it is no provider failure:
// not an error, and a payment past REVIEW_AFTER is not reinstated for it.
func TestRechecksArePacedWithinTheirLease(t *testing.T) {
	t.Parallel()
	fake := newFake(func(context.Context, string) (providers.Result, error) {
		return providers.Result{Outcome: providers.OutcomeNotFound}, nil
	})
	in := newInstance(t, dbtest.PostgresURL(t), fake, 4)
	db := in.db
	in.service = payments.NewService(db, in.keys, accounts{fake}, payments.Config{
		Lease: 30 * time.Second, ReviewAfter: 24 * time.Hour, Log: quiet, SweepProviderRate: 1.0 / 3600,
	})
	var rows []stuck
	for i := range 3 {
		rows = append(rows, stuck{merchant: "ten_r", key: fmt.Sprintf("k-%d", i), age: 25 * time.Hour, // past REVIEW_AFTER
			leaseLeft: -time.Hour, payment: status(payments.StatusFailed), failureCode: payments.FailureNotProcessed})
	}
	seed(t, db, rows)
	require.NoError(t, db.Exec("DELETE FROM idempotency_keys").Error) // released
	require.NoError(t, db.Exec("UPDATE payments SET recheck_at = ?", time.Now().Add(-time.Minute)).Error)
	// A guard, not a measure: without the lease a worker waits its turn
	// for the hour. No deadline on ctx, which the limiter would see.
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(time.Minute, cancel).Stop()
	defer cancel()
	c, err := scheduler.NewSweeper(in.config(10)).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, scheduler.Counts{Confirmed: 1, Pending: 2}, c)
	lookups, _ := fake.counts()
	require.Len(t, lookups, 1, "one lookup in the hour")
	require.Equal(t, int64(2), count(t, db, "payments", "recheck_at > ?", time.Now()), "the others looked at later")
	require.Equal(t, int64(3), count(t, db, "payments", "status = 'failed'"), "none reinstated: the provider was never asked")
}
