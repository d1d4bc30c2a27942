package scheduler

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/payments"
)

// Sweeper resolves keys left in progress by a request that never finished
// them (a crash, a provider timeout nobody retried). See the package
// documentation for the protocol.
type Sweeper struct {
	cfg Config
	// mu keeps runs of one Sweeper from overlapping when RunOnce is called
	// by hand while the scheduled run is going; gocron's singleton mode
	// already keeps scheduled runs apart.
	mu sync.Mutex
}

// NewSweeper returns a sweeper; only DB, Keys, Settler and the sweep
// settings of cfg are used.
func NewSweeper(cfg Config) *Sweeper {
	cfg.defaults()
	return &Sweeper{cfg: cfg}
}

type keyID struct{ merchant, key string }

// RunOnce sweeps merchant by merchant — the merchants with stale keys,
// oldest first, each until a batch of its candidates comes back short — or
// until ctx ends, then rechecks the payments whose recheck is due.
//
// Candidates are in-progress keys whose last attempt is StaleAfter old and
// whose lease lapsed before the run began, both by the database's clock: a
// key the run leaves pending gets its lease ended now, so it is not picked
// again until the next run, and a batch of pending keys cannot starve the
// ones behind it. The error is ctx's when the run was cut short, or the
// database's when candidates could not be selected; per-key errors are
// logged and counted, not returned.
func (s *Sweeper) RunOnce(ctx context.Context) (c Counts, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	defer func() { report(ctx, &s.cfg, JobSweep, c, time.Since(start), err) }()

	began, err := dbclock.Read(s.cfg.DB.WithContext(ctx))
	if err != nil {
		return c, err
	}
	params := idempotency.StaleParams{StaleAfter: s.cfg.StaleAfter, LapsedBefore: began, Limit: s.cfg.SweepBatch}
	merchants, err := s.cfg.Keys.StaleMerchants(ctx, params)
	if err != nil {
		return c, err
	}
	seen := make(map[keyID]struct{})
	w := s.workers(ctx, &c)
	for _, m := range merchants {
		params.MerchantID = m
		if err = s.sweepMerchant(ctx, params, seen, w); err != nil {
			break
		}
	}
	if err == nil {
		err = s.recheck(ctx, w)
	}
	if err == nil {
		err = s.recheckRefunds(ctx, w)
	}
	w.wait()
	if err == nil {
		s.measure(ctx)
	}
	return c, err
}

// measure reports the backlog the run left (after its settlements, so it
// is what is left) to ObserveBacklog, and logs it.
func (s *Sweeper) measure(ctx context.Context) {
	if s.cfg.ObserveBacklog == nil {
		return
	}
	var b Backlog
	var err error
	if b.Open, b.OldestOpen, err = s.cfg.Keys.Backlog(ctx); err != nil {
		if ctx.Err() == nil {
			s.cfg.Log.WarnContext(ctx, "sweep: could not measure the backlog", "err", err)
		}
		return
	}
	s.cfg.ObserveBacklog(b)
}

// pool settles up to SWEEP_CONCURRENCY keys at once. Ownership is still
// each key's TakeOver (or each payment's recheck lease), so however many
// workers run here and on other instances, a key has one settler.
type pool struct {
	ctx   context.Context
	tasks chan func(*Counts)
	wg    sync.WaitGroup
	mu    sync.Mutex
	total *Counts
}

func (s *Sweeper) workers(ctx context.Context, total *Counts) *pool {
	p := &pool{ctx: ctx, tasks: make(chan func(*Counts)), total: total}
	for range s.cfg.Concurrency {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for task := range p.tasks {
				c := s.settle(ctx, task)
				p.mu.Lock()
				p.total.merge(c)
				p.mu.Unlock()
			}
		}()
	}
	return p
}

// settle runs one task. A panic in it (a provider adapter's bug, say) is
// that key's error, not the process's end: the worker goroutine is the
// sweeper's, out of reach of gocron's recovery and Fiber's, and a panic
// every SWEEP_INTERVAL would take every instance down with every request
// in flight. The key keeps its lease and is settled again by a later run.
func (s *Sweeper) settle(ctx context.Context, task func(*Counts)) (c Counts) {
	defer func() {
		if r := recover(); r != nil {
			s.cfg.Log.ErrorContext(ctx, "sweep: a settler panicked; its key is left for a later run",
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			c.Errors++
		}
	}()
	task(&c)
	return c
}

// submit hands task to a free worker; false when the run was cut short.
func (p *pool) submit(task func(*Counts)) bool {
	select {
	case p.tasks <- task:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// wait lets the submitted tasks finish.
func (p *pool) wait() {
	close(p.tasks)
	p.wg.Wait()
}

// sweepMerchant works one merchant's candidates, a batch at a time, until
// a batch comes back short or brings nothing new. Every statement names
// the merchant, so on a database sharded by merchant each touches one
// shard (Citus runs SKIP LOCKED only there).
func (s *Sweeper) sweepMerchant(ctx context.Context, params idempotency.StaleParams, seen map[keyID]struct{}, w *pool) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := s.candidates(ctx, params)
		if err != nil {
			return err
		}
		fresh := 0
		// The next batch is selected once this one's keys are taken over
		// (not finished): selected again before, they would look new, or
		// a batch of them would look like the merchant's end.
		var taken sync.WaitGroup
		for _, rec := range batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			id := keyID{rec.MerchantID, rec.Key}
			if _, dup := seen[id]; dup {
				continue // a take-over that failed; do not spin on it
			}
			seen[id] = struct{}{}
			fresh++
			taken.Add(1)
			if !w.submit(func(c *Counts) { s.work(ctx, rec, c, taken.Done) }) {
				taken.Done()
				return ctx.Err()
			}
		}
		taken.Wait()
		if len(batch) < s.cfg.SweepBatch || fresh == 0 {
			return nil
		}
	}
}

// recheck looks up, once more, the payments released as never charged
// whose RECHECK_AFTER has passed, a batch at a time until a batch comes
// back short. Each payment is taken by one sweeper (DueRechecks leases it).
func (s *Sweeper) recheck(ctx context.Context, w *pool) error {
	return recheckDue(ctx, s, w, s.cfg.Settler.DueRechecks, s.cfg.Settler.Recheck,
		func(p payments.Payment) []any { return []any{"merchant_id", p.MerchantID, "payment_id", p.ID} })
}

// recheckRefunds is recheck for refunds released as not_processed
// (DueRefundRechecks leases each to one sweeper).
func (s *Sweeper) recheckRefunds(ctx context.Context, w *pool) error {
	return recheckDue(ctx, s, w, s.cfg.Settler.DueRefundRechecks, s.cfg.Settler.RecheckRefund,
		func(r payments.Refund) []any { return []any{"merchant_id", r.MerchantID, "refund_id", r.ID} })
}

// recheckDue takes what due leases, a batch at a time until a batch comes
// back short, and gives each to recheck on w; names is what a failure's
// log line says of it.
func recheckDue[T any](ctx context.Context, s *Sweeper, w *pool, due func(context.Context, int) ([]T, error),
	recheck func(context.Context, T) (payments.Settlement, error), names func(T) []any) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := due(ctx, s.cfg.SweepBatch)
		if err != nil {
			return err
		}
		for _, x := range batch {
			ok := w.submit(func(c *Counts) {
				res, err := recheck(ctx, x)
				c.add(res)
				if err != nil {
					c.Errors++
					if ctx.Err() == nil {
						s.cfg.Log.WarnContext(ctx, "sweep: recheck", append(names(x), "err", err)...)
					}
				}
			})
			if !ok {
				return ctx.Err()
			}
		}
		if len(batch) < s.cfg.SweepBatch {
			return nil
		}
	}
}

// candidates selects one batch in a short transaction. On PostgreSQL the
// rows are locked FOR UPDATE SKIP LOCKED while it is open, so concurrent
// sweepers select disjoint batches; the locks go with the commit, before
// any provider call. Ownership is then decided per key by TakeOver.
func (s *Sweeper) candidates(ctx context.Context, p idempotency.StaleParams) ([]idempotency.Record, error) {
	var recs []idempotency.Record
	err := s.cfg.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		recs, err = s.cfg.Keys.Stale(ctx, tx, p)
		return err
	})
	return recs, err
}

// work owns one candidate and settles it; taken is called once the
// take-over is decided.
func (s *Sweeper) work(ctx context.Context, rec idempotency.Record, c *Counts, taken func()) {
	log := s.cfg.Log.With("merchant_id", rec.MerchantID, "idempotency_key", rec.Key)
	claim, ok, err := s.cfg.Keys.TakeOver(ctx, idempotency.TakeOverParams{MerchantID: rec.MerchantID, Key: rec.Key, Lease: s.cfg.Lease})
	taken()
	if err != nil {
		c.Errors++
		if ctx.Err() == nil {
			log.WarnContext(ctx, "sweep: take over failed", "err", err)
		}
		return
	}
	if !ok {
		// Another instance (or a retry) took it, or it was finished or
		// released since the selection: not ours.
		c.Lost++
		return
	}
	res, err := s.cfg.Settler.Settle(ctx, claim)
	c.add(res)
	if err != nil {
		c.Errors++
		if ctx.Err() == nil {
			log.WarnContext(ctx, "sweep: settle", "settlement", string(res), "err", err)
		}
	}
}

// merge adds o's counts to c.
func (c *Counts) merge(o Counts) {
	c.Resolved += o.Resolved
	c.Released += o.Released
	c.Pending += o.Pending
	c.Review += o.Review
	c.Skipped += o.Skipped
	c.Lost += o.Lost
	c.Errors += o.Errors
	c.Reopened += o.Reopened
	c.Confirmed += o.Confirmed
	c.Deleted += o.Deleted
}

// add counts one settlement or recheck result.
func (c *Counts) add(s payments.Settlement) {
	switch s {
	case payments.Resolved:
		c.Resolved++
	case payments.Released:
		c.Released++
	case payments.Pending:
		c.Pending++
	case payments.Review:
		c.Review++
	case payments.Skipped:
		c.Skipped++
	case payments.Reopened:
		c.Reopened++
	case payments.Confirmed:
		c.Confirmed++
	}
}
