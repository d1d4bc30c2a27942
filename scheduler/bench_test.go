package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/scheduler"
)

// BenchmarkSweepBacklog is recovery after an outage: a backlog of stuck
// payments, each lookup 100 ms at the provider, settled by one run with
// the default SWEEP_CONCURRENCY and SWEEP_PROVIDER_RATE, beside a run one
// key at a time (the sweeper before them). It reports settled keys per
// second and the seconds the backlog took. make bench runs it once each.
func BenchmarkSweepBacklog(b *testing.B) {
	for _, bc := range []struct {
		keys, concurrency int
		rate              float64
	}{
		{200, 1, 0},
		{2000, 32, 200},
		{10000, 32, 200},
	} {
		b.Run(fmt.Sprintf("keys=%d/concurrency=%d/rate=%g", bc.keys, bc.concurrency, bc.rate), func(b *testing.B) {
			var took time.Duration
			for range b.N {
				took += backlog(b, bc.keys, bc.concurrency, bc.rate)
			}
			b.ReportMetric(float64(bc.keys*b.N)/took.Seconds(), "keys/s")
			b.ReportMetric(took.Seconds()/float64(b.N), "s/backlog")
		})
	}
}

func backlog(b *testing.B, n, concurrency int, rate float64) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	fake := newFake(func(ctx context.Context, _ string) (providers.Result, error) {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return providers.Result{}, ctx.Err()
		}
		return providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: "tx"}, nil
	})
	in := newInstance(b, dbtest.PostgresURL(b), fake, 16)
	in.service = payments.NewService(in.db, in.keys, accounts{fake}, payments.Config{
		Lease: 30 * time.Second, ReviewAfter: 24 * time.Hour, Log: quiet, SweepProviderRate: rate})
	rows := make([]stuck, n)
	for i := range rows {
		rows[i] = stuck{merchant: fmt.Sprintf("ten_%d", i%8), key: fmt.Sprintf("k-%05d", i), age: time.Hour,
			leaseLeft: -time.Minute, payment: status(payments.StatusProcessing)}
	}
	seed(b, in.db, rows)
	cfg := in.config(100)
	cfg.Concurrency = concurrency
	b.StartTimer()
	start := time.Now()
	c, err := scheduler.NewSweeper(cfg).RunOnce(context.Background())
	took := time.Since(start)
	b.StopTimer()
	if err != nil || c.Resolved != n {
		b.Fatalf("settled %+v of %d: %v", c, n, err)
	}
	if _, charges := fake.counts(); charges != 0 {
		b.Fatalf("%d charges", charges)
	}
	return took
}
