package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/payments"
)

// Job names, as passed to Config.Observe and written in the logs.
const (
	JobSweep = "sweep"
	JobPurge = "purge"
)

// Settler finishes the payment of a key the caller has taken over, and
// rechecks payments and refunds released as never charged or refunded. *payments.Service
// implements it; see payments.Service.Settle and Recheck for the
// settlements and errors they return.
type Settler interface {
	Settle(ctx context.Context, claim idempotency.Claim) (payments.Settlement, error)
	DueRechecks(ctx context.Context, limit int) ([]payments.Payment, error)
	Recheck(ctx context.Context, p payments.Payment) (payments.Settlement, error)
	DueRefundRechecks(ctx context.Context, limit int) ([]payments.Refund, error)
	RecheckRefund(ctx context.Context, r payments.Refund) (payments.Settlement, error)
}

// Counts is what one run of a job did.
//
// For the sweep, every candidate key lands in exactly one of Resolved,
// Released, Pending, Review, Skipped, Lost or (when it could not be worked
// at all) Errors; a key whose settlement came with an error (a provider
// that could not tell) is counted under its settlement and in Errors too.
type Counts struct {
	Resolved int // the provider's final outcome recorded, key completed
	Released int // the provider never saw the charge, key released
	Pending  int // still unknown, left in progress for the next run
	Review   int // unknown past REVIEW_AFTER, payment requires_review
	Skipped  int // the payment was already final; key completed from the ledger
	Lost     int // another instance took the key over first
	Errors   int // keys whose take-over or settlement returned an error
	// Rechecks of payments released as never charged:
	Reopened  int // the provider had the charge after all: payment re-opened to its outcome
	Confirmed int // still nothing at the provider: the failure is final
	Deleted   int64
}

// Backlog is the work the keys hold open as a sweep left it
// (idempotency.Store.Backlog): keys with no stored answer yet, and the age
// of the oldest one's last attempt. A backlog that only grows, or an
// oldest key older than REVIEW_AFTER, wants a person (README: alerts).
type Backlog struct {
	Open       int64
	OldestOpen time.Duration
}

// Config is what the scheduler needs. Zero durations and sizes take the
// defaults of config.Schedule.
type Config struct {
	// DB is the pool the sweeper's short selection transactions run on.
	DB *gorm.DB
	// Keys is the idempotency key store (its pool is DB's).
	Keys *idempotency.Store
	// Settler settles a taken-over key: *payments.Service.
	Settler Settler
	// Log receives one line per run, and gocron's own warnings.
	Log *slog.Logger
	// Observe, if set, is called after each run of a job with its counts,
	// for metrics. It must not block.
	Observe func(job string, c Counts)
	// ObserveRun, if set, is called after each run of a job with how long
	// it took and the error it ended with (context.Canceled at shutdown),
	// for metrics. It must not block.
	ObserveRun func(job string, d time.Duration, err error)
	// ObserveBacklog, if set, is called after each sweep that could
	// measure the backlog, for metrics. It must not block.
	ObserveBacklog func(Backlog)

	SweepInterval time.Duration // SWEEP_INTERVAL (2m)
	StaleAfter    time.Duration // SWEEP_STALE_AFTER (5m)
	SweepBatch    int           // SWEEP_BATCH (100)
	// Concurrency is how many keys a run settles at once
	// (SWEEP_CONCURRENCY, 32): a backlog of lookups 100 ms each settles
	// at hundreds a second, not ten. The lookups' pace per provider is
	// payments' (SWEEP_PROVIDER_RATE).
	Concurrency int
	// Lease is the lease the sweeper takes on a key it works
	// (IDEMPOTENCY_LEASE, 30s); it must exceed the provider timeout.
	Lease time.Duration

	PurgeSchedule string        // PURGE_SCHEDULE, cron in UTC ("0 3 * * *")
	PurgeBatch    int           // PURGE_BATCH (1000)
	KeyTTL        time.Duration // KEY_TTL (72h)

	// StopTimeout bounds how long Stop waits for a cancelled run to
	// return (10s).
	StopTimeout time.Duration
}

func (c *Config) defaults() {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 2 * time.Minute
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = 5 * time.Minute
	}
	if c.SweepBatch <= 0 {
		c.SweepBatch = 100
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 32
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.PurgeSchedule == "" {
		c.PurgeSchedule = "0 3 * * *"
	}
	if c.PurgeBatch <= 0 {
		c.PurgeBatch = 1000
	}
	if c.KeyTTL <= 0 {
		c.KeyTTL = 72 * time.Hour
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
}

// Scheduler runs the sweep and the purge in-process on a gocron v2
// scheduler in UTC. Each job is a singleton (a tick that finds the previous
// run still going is skipped, not queued). Start it once; Stop it before the
// database closes.
type Scheduler struct {
	cron    gocron.Scheduler
	sweeper *Sweeper
	purger  *Purger
	log     *slog.Logger
	timeout time.Duration

	mu       sync.Mutex
	stopping bool
	running  sync.WaitGroup

	stopOnce sync.Once
	stopErr  error
}

// New builds the scheduler and its two jobs; nothing runs until Start.
func New(cfg Config) (*Scheduler, error) {
	cfg.defaults()
	if cfg.DB == nil || cfg.Keys == nil || cfg.Settler == nil {
		return nil, errors.New("scheduler: DB, Keys and Settler are required")
	}
	cron, err := gocron.NewScheduler(
		gocron.WithLocation(time.UTC),
		gocron.WithLogger(quietLogger{cfg.Log}),
		gocron.WithStopTimeout(cfg.StopTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	s := &Scheduler{
		cron:    cron,
		sweeper: NewSweeper(cfg),
		purger:  NewPurger(cfg),
		log:     cfg.Log,
		timeout: cfg.StopTimeout,
	}
	_, err = cron.NewJob(gocron.DurationJob(cfg.SweepInterval),
		gocron.NewTask(s.job(JobSweep, s.sweeper.RunOnce)),
		gocron.WithName(JobSweep),
		gocron.WithSingletonMode(gocron.LimitModeReschedule))
	if err == nil && cfg.ObserveBacklog != nil {
		// The backlog gauges from the start, not only once the first sweep
		// has run (one SWEEP_INTERVAL later): a read, nothing settled.
		_, err = cron.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
			gocron.NewTask(s.job(jobBacklog, func(ctx context.Context) (Counts, error) {
				s.sweeper.measure(ctx)
				return Counts{}, nil
			})),
			gocron.WithName(jobBacklog))
	}
	if err == nil {
		_, err = cron.NewJob(gocron.CronJob(cfg.PurgeSchedule, false),
			gocron.NewTask(s.job(JobPurge, s.purger.RunOnce)),
			gocron.WithName(JobPurge),
			gocron.WithSingletonMode(gocron.LimitModeReschedule))
	}
	if err != nil {
		_ = cron.Shutdown()
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	return s, nil
}

// Sweeper is the sweep job, for tests and admin tooling that trigger a run.
func (s *Scheduler) Sweeper() *Sweeper { return s.sweeper }

// Purger is the purge job.
func (s *Scheduler) Purger() *Purger { return s.purger }

// jobBacklog measures the backlog once, at Start.
const jobBacklog = "backlog"

// Start schedules the jobs. The first sweep runs one SWEEP_INTERVAL after
// Start; the backlog gauges are measured at once.
func (s *Scheduler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return
	}
	s.cron.Start()
}

// Stop stops scheduling, cancels the context of a running job and waits for
// it to return (up to StopTimeout). No job starts once Stop has begun. A run
// cut short leaves every key it had not finished in progress (see doc.go),
// so the next run, here or on another instance, picks it up. Stop may be
// called more than once, and without Start.
func (s *Scheduler) Stop() error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopping = true
		s.mu.Unlock()
		// Shutdown cancels the jobs' context (their parent is the
		// scheduler's shutdown context) and waits for them up to
		// StopTimeout.
		err := s.cron.Shutdown()
		done := make(chan struct{})
		go func() { s.running.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(s.timeout):
			err = errors.Join(err, errors.New("scheduler: a job did not return after its context was cancelled"))
		}
		if err != nil {
			s.log.Warn("scheduler stopped uncleanly", "err", err)
		}
		s.stopErr = err
	})
	return s.stopErr
}

// job wraps a run so that it never starts once Stop has begun and Stop can
// wait for it to return. gocron passes the job's context as the first
// argument; it is cancelled on Shutdown.
func (s *Scheduler) job(name string, run func(context.Context) (Counts, error)) func(context.Context) {
	return func(ctx context.Context) {
		if !s.enter() {
			return
		}
		defer s.running.Done()
		_, _ = run(ctx) // the run logs and observes itself
	}
}

func (s *Scheduler) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.running.Add(1)
	return true
}

// report writes the one log line of a run and calls the hook.
func report(ctx context.Context, cfg *Config, job string, c Counts, d time.Duration, err error) {
	level := slog.LevelInfo
	if err != nil && !errors.Is(err, context.Canceled) || c.Errors > 0 {
		level = slog.LevelWarn
	}
	attrs := []any{"job", job, "duration", d}
	switch job {
	case JobPurge:
		attrs = append(attrs, "deleted", c.Deleted)
	default:
		attrs = append(attrs, "resolved", c.Resolved, "released", c.Released, "pending", c.Pending,
			"review", c.Review, "skipped", c.Skipped, "lost", c.Lost, "errors", c.Errors,
			"reopened", c.Reopened, "confirmed", c.Confirmed)
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	cfg.Log.Log(ctx, level, "scheduler: "+job+" run", attrs...)
	if cfg.Observe != nil {
		cfg.Observe(job, c)
	}
	if cfg.ObserveRun != nil {
		cfg.ObserveRun(job, d, err)
	}
}

// quietLogger hands gocron's chatter to slog one level down: its Info
// lines ("new scheduler created") are debug for us.
type quietLogger struct{ l *slog.Logger }

func (q quietLogger) Debug(msg string, args ...any) { q.l.Debug(msg, args...) }
func (q quietLogger) Info(msg string, args ...any)  { q.l.Debug(msg, args...) }
func (q quietLogger) Warn(msg string, args ...any)  { q.l.Warn(msg, args...) }
func (q quietLogger) Error(msg string, args ...any) { q.l.Error(msg, args...) }
