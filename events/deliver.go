package events

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/audit"
	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/app/failpoint"
	"github.com/oncepay/gateway/app/ids"
	"github.com/oncepay/gateway/app/logthrottle"
	"github.com/oncepay/gateway/app/secretbox"
)

// Limits of the delivery.
const (
	// attemptTimeout is how long a receiver has to answer 2xx.
	attemptTimeout = 10 * time.Second
	// maxResponse is how much of a receiver's answer is read (never logged).
	maxResponse = 64 << 10
	// disableAfter is how long an endpoint may fail without a success
	// before it is disabled.
	disableAfter = 5 * 24 * time.Hour
	// perEndpoint and perMerchant bound an instance's concurrent
	// deliveries to one endpoint and to one merchant's endpoints, so one
	// slow merchant cannot take every worker (workers of them).
	perEndpoint = 4
	perMerchant = 8
	maxWorkers  = 32
	queue       = "webhooks"
)

// DeliveryArgs is the queue's job: deliver one event to one endpoint.
type DeliveryArgs struct {
	MerchantID string `json:"merchant_id"`
	EventID    string `json:"event_id"`
	EndpointID string `json:"endpoint_id"`
}

// Kind names the job for River.
func (DeliveryArgs) Kind() string { return "webhook_delivery" }

// relayArgs is the periodic job that hands new events to the queue.
type relayArgs struct{}

func (relayArgs) Kind() string { return "events_relay" }

// purgeArgs is the periodic job that deletes events past Retention.
type purgeArgs struct{}

func (purgeArgs) Kind() string { return "events_purge" }

// Config configures the service.
type Config struct {
	DB  *gorm.DB
	Box *secretbox.Box
	// Schedule is the delay before each retry (WEBHOOK_RETRY_SCHEDULE);
	// a delivery is tried len(Schedule)+1 times.
	Schedule []time.Duration
	// Production refuses endpoints that are not https, or that resolve to
	// a loopback, private, link-local or metadata address (checked at
	// delivery time, on the address dialled).
	Production bool
	// RelayEvery is how often the relay hands new events to the queue.
	RelayEvery time.Duration
	Log        *slog.Logger
	Now        func() time.Time
	// Observe, if set, counts deliveries (outcome) and times attempts.
	Observe func(outcome string, d time.Duration)
	// NoMigrate checks that River's migrations are applied instead of
	// applying them (MIGRATE_ON_START=false: the gateway serves as a role
	// that owns no table), and leaves River's daily reindexing, which
	// only an index's owner may run, to that owner (README, "Two database
	// roles").
	NoMigrate bool
}

// Service owns endpoints, the events API's reads and the delivery queue.
type Service struct {
	cfg    Config
	store  *Store
	river  *river.Client[*sql.Tx]
	client *http.Client

	mu   sync.Mutex
	busy map[string]int // endpoint or merchant id → deliveries in flight here
}

// New builds the service and its queue (migrating River's tables). Start
// runs it.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if len(cfg.Schedule) == 0 || cfg.Box == nil {
		return nil, errors.New("events: a retry schedule and a secret box are required")
	}
	if cfg.RelayEvery <= 0 {
		cfg.RelayEvery = time.Second
	}
	s := &Service{cfg: cfg, store: NewStore(cfg.DB), busy: map[string]int{}}
	s.client = safeClient(cfg.Production)
	q, err := queueOn(cfg.DB)
	if err != nil {
		return nil, err
	}
	driver := q.driver
	var reindex []string // nil: River's default indexes
	if cfg.NoMigrate {
		if err := q.check(ctx, cfg.Log); err != nil {
			return nil, err
		}
		reindex = []string{}
	} else if err := q.migrate(ctx, cfg.Log); err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &deliveryWorker{s: s})
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, _ *river.Job[relayArgs]) error { return s.Relay(ctx) }))
	river.AddWorker(workers, &purgeWorker{s: s})
	s.river, err = river.NewClient(driver, &river.Config{
		Logger:  quiet(cfg.Log),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}, queue: {MaxWorkers: maxWorkers}},
		Workers: workers,
		PeriodicJobs: []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(cfg.RelayEvery), func() (river.JobArgs, *river.InsertOpts) {
				return relayArgs{}, &river.InsertOpts{MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByPeriod: cfg.RelayEvery}}
			}, &river.PeriodicJobOpts{RunOnStart: true}),
			river.NewPeriodicJob(river.PeriodicInterval(time.Hour), func() (river.JobArgs, *river.InsertOpts) {
				return purgeArgs{}, &river.InsertOpts{MaxAttempts: 1}
			}, nil),
		},
		ReindexerIndexNames: reindex,
		FetchPollInterval:   200 * time.Millisecond,
		JobTimeout:          attemptTimeout + 5*time.Second,
		// A delivery whose instance died mid-attempt is retried once it
		// has run 30 s (an attempt ends within JobTimeout, 15 s; River's
		// default waits an hour); its rescuer looks every 30 s.
		RescueStuckJobsAfter: 30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return s, nil
}

// purgeWorker deletes events and deliveries past Retention, hourly. It
// runs longer than a delivery may (a month of a busy gateway's rows);
// what one run leaves, the next deletes.
type purgeWorker struct {
	river.WorkerDefaults[purgeArgs]
	s *Service
}

func (w *purgeWorker) Work(ctx context.Context, _ *river.Job[purgeArgs]) error {
	_, err := w.s.Purge(ctx)
	return err
}

// Purge deletes events and deliveries past Retention now, as the hourly
// job does, and returns how many events it deleted.
func (s *Service) Purge(ctx context.Context) (int64, error) { return s.store.purge(ctx, 1000) }

func (w *purgeWorker) Timeout(*river.Job[purgeArgs]) time.Duration { return 30 * time.Minute }

// queueMigrationLock is the advisory lock instances starting together
// take around River's migrations (the schema's own use another).
const queueMigrationLock = 8402712

// MigrateQueue brings River's tables (the deliveries' queue) up to date
// on db: `gateway migrate` runs it beside the schema's migrations, and New
// again (it is idempotent), so the queue is ready whichever ran first —
// unless Config.NoMigrate, when New only checks.
func MigrateQueue(ctx context.Context, db *gorm.DB, log *slog.Logger) error {
	q, err := queueOn(db)
	if err != nil {
		return err
	}
	if log == nil {
		log = slog.Default()
	}
	return q.migrate(ctx, log)
}

// queueDB is River's view of the gateway's database.
type queueDB struct {
	sql      *sql.DB
	driver   riverdriver.Driver[*sql.Tx]
	postgres bool
}

func queueOn(db *gorm.DB) (queueDB, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return queueDB{}, err
	}
	if db.Dialector.Name() == "postgres" {
		return queueDB{sqlDB, riverdatabasesql.New(sqlDB), true}, nil
	}
	return queueDB{sqlDB, riversqlite.New(sqlDB), false}, nil
}

// migrate brings River's tables up to date.
func (q queueDB) migrate(ctx context.Context, log *slog.Logger) error {
	m, err := rivermigrate.New(q.driver, &rivermigrate.Config{Logger: quiet(log)})
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	if err := q.up(ctx, m); err != nil {
		return fmt.Errorf("events: migrate the queue: %w", err)
	}
	return nil
}

// check fails unless River's tables are up to date. A version this build
// does not know (a newer River's) is no conflict, as for the schema's own
// migrations (River's Validate, as its Migrate, looks only for the
// versions it knows).
func (q queueDB) check(ctx context.Context, log *slog.Logger) error {
	m, err := rivermigrate.New(q.driver, &rivermigrate.Config{Logger: quiet(log)})
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	res, err := m.Validate(ctx, nil)
	if err != nil {
		return fmt.Errorf("events: read the queue's (River's) migrations: %w; run `gateway migrate` with this build "+
			"(as the role that owns the schema) before starting it with MIGRATE_ON_START=false", err)
	}
	if !res.OK {
		all := m.AllVersions()
		return fmt.Errorf("events: the queue's (River's) tables are behind this build (River version %d): %s; run `gateway migrate` "+
			"with this build (as the role that owns the schema) before starting it with MIGRATE_ON_START=false",
			all[len(all)-1].Version, strings.Join(res.Messages, "; "))
	}
	return nil
}

// up runs m's migrations. On PostgreSQL instances that start together
// take turns: River's migrations are not safe to run concurrently (two
// CREATE TYPEs collide in pg_type). The lock is a session's, held on one
// connection while River migrates on others, as River runs some
// migrations outside a transaction.
func (q queueDB) up(ctx context.Context, m *rivermigrate.Migrator[*sql.Tx]) error {
	if !q.postgres {
		_, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil)
		return err
	}
	conn, err := q.sql.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Wait as long as the first instance's migrations take.
	if _, err := conn.ExecContext(ctx, "SET lock_timeout = 0"); err != nil {
		return err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "RESET lock_timeout")
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", queueMigrationLock); err != nil {
		return err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", queueMigrationLock)
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// quiet hands River's chatter to slog one level down, and each of its
// lines at most once a minute: while PostgreSQL is away River logs an
// ERROR for every fetch it fails, ten a second, which would drown the
// gateway's own line saying so.
func quiet(l *slog.Logger) *slog.Logger {
	return slog.New(levelDown{logthrottle.New(l.Handler(), time.Minute, nil)})
}

type levelDown struct{ slog.Handler }

func (h levelDown) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelError {
		r.Level -= 4 // info → debug, warn → info
	}
	return h.Handler.Handle(ctx, r)
}

func (h levelDown) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, l-4)
}

// Start runs the queue (deliveries, the relay) until Stop.
func (s *Service) Start(ctx context.Context) error { return s.river.Start(ctx) }

// Stop lets running deliveries finish (up to ctx) and stops the queue.
func (s *Service) Stop(ctx context.Context) error { return s.river.Stop(ctx) }

// StopAndCancel stops the queue, cancelling running deliveries (they are
// retried).
func (s *Service) StopAndCancel(ctx context.Context) error { return s.river.StopAndCancel(ctx) }

// Store is the service's store (reads for handlers and tests).
func (s *Service) Store() *Store { return s.store }

// Relay batches: events per merchant per transaction, merchants per pass.
const (
	relayBatch     = 200
	relayMerchants = 100
	// relayBudget bounds one run's passes; a backlog left then is the next
	// run's (every RelayEvery).
	relayBudget = 20 * time.Second
)

// Relay hands the events not yet enqueued to the queue: per merchant, in
// one transaction that inserts a delivery job per subscribed endpoint and
// marks the events enqueued, so each event is handed over exactly once. A
// run makes passes over the merchants with events waiting, a batch each
// per pass, until none is left (or relayBudget is spent): a busy merchant
// is not held to one batch a second, nor does it make the others wait.
func (s *Service) Relay(ctx context.Context) error {
	deadline := time.Now().Add(relayBudget)
	for {
		merchants, err := s.store.pendingMerchants(ctx, relayMerchants)
		if err != nil {
			return err
		}
		if len(merchants) == 0 {
			return nil
		}
		failpoint.Hit("before_relay") // events committed, none queued yet
		more := len(merchants) == relayMerchants
		for _, m := range merchants {
			n, err := s.relayMerchant(ctx, m)
			if err != nil {
				// The others' events go on; this merchant's wait for the next run.
				s.cfg.Log.WarnContext(ctx, "events not handed to the queue; retried next run", "merchant_id", m, "err", err)
				continue
			}
			more = more || n == relayBatch
		}
		if !more || ctx.Err() != nil || time.Now().After(deadline) {
			return nil
		}
	}
}

// relayMerchant hands up to relayBatch of a merchant's waiting events to
// the queue, in one transaction; n is how many.
func (s *Service) relayMerchant(ctx context.Context, m string) (n int, err error) {
	err = s.cfg.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		evs, err := s.store.takePending(ctx, tx, m, relayBatch)
		if err != nil || len(evs) == 0 {
			return err
		}
		eps, err := s.store.endpoints(ctx, tx, m)
		if err != nil {
			return err
		}
		var jobs []river.InsertManyParams
		ids := make([]string, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
			for _, ep := range eps {
				if ep.DisabledAt == nil && ep.Wants(e.Type) {
					jobs = append(jobs, s.job(m, e.ID, ep.ID))
				}
			}
		}
		if _, err := s.insertJobs(ctx, tx, jobs); err != nil {
			return err
		}
		n = len(evs)
		return s.store.markEnqueued(ctx, tx, m, ids)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

type riverParams = river.InsertManyParams

// insertJobs puts delivery jobs in the queue in tx, the caller's
// transaction: they exist exactly if it commits.
// It reports how many were not inserted because the same delivery already
// waits or runs (waitingOnce).
func (s *Service) insertJobs(ctx context.Context, tx *gorm.DB, jobs []riverParams) (waiting int, err error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
	if !ok {
		return 0, errors.New("events: enqueue: not a database/sql transaction")
	}
	res, err := s.river.InsertManyTx(ctx, sqlTx, jobs)
	if err != nil {
		return 0, fmt.Errorf("events: enqueue: %w", err)
	}
	for _, r := range res {
		if r.UniqueSkippedAsDuplicate {
			waiting++
		}
	}
	return waiting, nil
}

func (s *Service) job(merchantID, eventID, endpointID string) river.InsertManyParams {
	return river.InsertManyParams{Args: DeliveryArgs{MerchantID: merchantID, EventID: eventID, EndpointID: endpointID},
		InsertOpts: &river.InsertOpts{Queue: queue, MaxAttempts: len(s.cfg.Schedule) + 1, UniqueOpts: waitingOnce}}
}

// waitingOnce makes a delivery job unique per event and endpoint while one
// waits or runs: a redelivery asked for while the event is still on its
// way to the endpoint adds nothing, so a merchant cannot fill the queue —
// which every merchant's deliveries share — with copies of one delivery.
// A job waiting for a retry (retryable) does not count, so a redelivery
// after a receiver's failure goes now, not at the retry; River allows only
// that state to be left out.
var waitingOnce = river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateScheduled,
}}

// deliveryWorker delivers one event to one endpoint per attempt.
type deliveryWorker struct {
	river.WorkerDefaults[DeliveryArgs]
	s *Service
}

// NextRetry follows the retry schedule, with ±10% jitter so a receiver's
// recovery is not met by every retry at once.
func (w *deliveryWorker) NextRetry(job *river.Job[DeliveryArgs]) time.Time {
	sch := w.s.cfg.Schedule
	i := min(max(job.Attempt-1, 0), len(sch)-1)
	d := float64(sch[i]) * (0.9 + 0.2*rand.Float64())
	return time.Now().Add(time.Duration(d))
}

// Timeout bounds an attempt (the receiver's 10 s, and the bookkeeping).
func (w *deliveryWorker) Timeout(*river.Job[DeliveryArgs]) time.Duration {
	return attemptTimeout + 5*time.Second
}

func (w *deliveryWorker) Work(ctx context.Context, job *river.Job[DeliveryArgs]) error {
	return w.s.deliver(ctx, job.Args, job.Attempt, job.Attempt >= job.MaxAttempts)
}

// errDelivery is a receiver's failure, retried by the queue.
type errDelivery struct{ msg string }

func (e errDelivery) Error() string { return "events: delivery: " + e.msg }

func (s *Service) deliver(ctx context.Context, a DeliveryArgs, attempt int, last bool) error {
	if !s.take(a.MerchantID, a.EndpointID) {
		// This endpoint (or merchant) has its share of workers here: back
		// off 1–5 s, spread, so a backlog does not churn the queue. Before
		// any read: a merchant's backlog snoozing round the queue must not
		// cost the database the others' deliveries need.
		return river.JobSnooze(time.Second + rand.N(4*time.Second))
	}
	defer s.give(a.MerchantID, a.EndpointID)
	// internal is a failure of the gateway's own, before anything is sent:
	// retried by the queue like a receiver's, and on the last attempt
	// written to the deliveries log as failed — otherwise the event would
	// be dropped with no trace the merchant or an operator could find.
	internal := func(what string, err error) error {
		if last {
			s.record(ctx, &Delivery{MerchantID: a.MerchantID, EndpointID: a.EndpointID, EventID: a.EventID, Attempt: attempt,
				Outcome: "failed", Error: "the gateway could not " + what + "; it was never sent (support has the details)"})
			if s.cfg.Observe != nil {
				s.cfg.Observe("failed", 0)
			}
			s.cfg.Log.ErrorContext(ctx, "webhook delivery given up: the gateway could not "+what,
				"merchant_id", a.MerchantID, "endpoint_id", a.EndpointID, "event_id", a.EventID, "err", err)
		}
		return err
	}
	ev, err := s.store.Get(ctx, a.MerchantID, a.EventID)
	if errors.Is(err, ErrNotFound) {
		return river.JobCancel(err) // purged past Retention
	}
	if err != nil {
		return internal("read the event", err)
	}
	ep, err := s.store.endpoint(ctx, nil, a.MerchantID, a.EndpointID)
	if errors.Is(err, ErrNotFound) || (err == nil && ep.DisabledAt != nil) {
		s.record(ctx, &Delivery{MerchantID: a.MerchantID, EndpointID: a.EndpointID, EventID: a.EventID, Attempt: attempt,
			Outcome: "skipped", Error: "the endpoint was disabled or deleted"})
		if s.cfg.Observe != nil {
			s.cfg.Observe("skipped", 0)
		}
		return river.JobCancel(errors.New("events: endpoint gone"))
	}
	if err != nil {
		return internal("read the endpoint", err)
	}
	secrets, err := s.secrets(&ep)
	if err != nil {
		// A secret no key opens (MASTER_KEY_PREVIOUS removed before
		// `gateway reseal` finished): every delivery to this endpoint
		// fails until the merchant rotates the secret.
		return internal("open the endpoint's signing secret", err)
	}
	ts := s.cfg.Now().Unix()
	sig, err := Signatures(secrets, ev.ID, ts, ev.Payload)
	if err != nil {
		return internal("sign the event", err)
	}
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, ep.URL, strings.NewReader(string(ev.Payload)))
	if err != nil {
		// The URL was checked when it was stored: no retry changes it.
		last = true
		return river.JobCancel(internal("make a request of the endpoint's URL", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "OncePay-Webhooks/1")
	req.Header.Set("webhook-id", ev.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	start := time.Now()
	resp, err := s.client.Do(req)
	d := Delivery{MerchantID: a.MerchantID, EndpointID: ep.ID, EventID: ev.ID, Attempt: attempt}
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse)) // read (bounded), never logged
		_ = resp.Body.Close()
		d.StatusCode = resp.StatusCode
	}
	took := time.Since(start)
	d.LatencyMS = took.Milliseconds()
	ok := err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300
	switch {
	case ok:
		d.Outcome = "delivered"
	case err != nil:
		d.Error = deliveryError(err, s.cfg.Production)
	default:
		d.Error = fmt.Sprintf("answered %d", resp.StatusCode)
	}
	if !ok {
		d.Outcome = "retrying"
		if last {
			d.Outcome = "failed"
		}
	}
	disabled, herr := s.health(ctx, &ep, ok)
	if disabled {
		d.Outcome = "failed"
	}
	s.record(ctx, &d)
	if s.cfg.Observe != nil {
		s.cfg.Observe(d.Outcome, took)
	}
	switch {
	case ok:
		// Delivered: a failed bookkeeping write must not send it again.
		if herr != nil {
			s.cfg.Log.WarnContext(ctx, "webhook endpoint health not recorded", "endpoint_id", ep.ID, "err", herr)
		}
		return nil
	case herr != nil:
		return herr
	case disabled:
		return river.JobCancel(errors.New("events: endpoint disabled"))
	}
	return errDelivery{d.Error}
}

// deliveryError is a transport error as the deliveries log shows it: the
// kind, never the receiver's body.
func deliveryError(err error, production bool) string {
	var ne net.Error
	var dns *net.DNSError
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout after 10s"
	case errors.Is(err, errForbiddenAddress), production && errors.As(err, &dns):
		// One answer for both in production: which internal names exist
		// is not the merchant's to probe.
		return "the endpoint resolves to no address deliveries may reach"
	}
	msg := err.Error()
	// net/http's error quotes the whole URL, and a merchant may have put a
	// token in its query ("?token=…"): the deliveries log and the queue's
	// own record of the job keep the method and the cause, not the URL.
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Op + ": " + ue.Err.Error()
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

// health records an attempt's outcome on the endpoint: a success ends a
// failing streak; a failure starts one, and one 5 days long disables the
// endpoint (an audit event says so).
func (s *Service) health(ctx context.Context, ep *Endpoint, ok bool) (disabled bool, err error) {
	now := s.now()
	if ok {
		return false, s.store.endStreak(ctx, ep.MerchantID, ep.ID)
	}
	if err := s.store.startStreak(ctx, ep.MerchantID, ep.ID, now); err != nil {
		return false, err
	}
	if ep.FailingSince == nil || now.Sub(*ep.FailingSince) < disableAfter {
		return false, nil
	}
	// Conditional on the row as it is now, not the snapshot this attempt
	// read: concurrent failures disable (and audit) once, and a success
	// or a merchant's re-enable meanwhile wins.
	err = s.cfg.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if disabled, err = s.store.disableFailing(ctx, tx, ep.MerchantID, ep.ID, now, now.Add(-disableAfter)); err != nil || !disabled {
			return err
		}
		return audit.Record(ctx, tx, audit.Change{Action: audit.EndpointDisabled, TargetType: "webhook_endpoint",
			TargetID: ep.ID, TenantID: ep.MerchantID, Before: map[string]any{"url": ep.URL, "failing_since": ep.FailingSince},
			After: map[string]any{"disabled": true}, Note: "failing for 5 days without a success", System: true})
	})
	if err != nil {
		return false, err
	}
	if disabled {
		s.cfg.Log.WarnContext(ctx, "webhook endpoint disabled: failing for 5 days", "merchant_id", ep.MerchantID, "endpoint_id", ep.ID)
	}
	return disabled, nil
}

func (s *Service) record(ctx context.Context, d *Delivery) {
	d.ID = ids.New("dlv_")
	if err := s.store.insertDelivery(ctx, d); err != nil {
		s.cfg.Log.WarnContext(ctx, "webhook delivery not logged", "event_id", d.EventID, "err", err)
	}
}

func (s *Service) take(merchantID, endpointID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[endpointID] >= perEndpoint || s.busy[merchantID] >= perMerchant {
		return false
	}
	s.busy[endpointID]++
	s.busy[merchantID]++
	return true
}

func (s *Service) give(merchantID, endpointID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range []string{endpointID, merchantID} {
		if s.busy[k]--; s.busy[k] <= 0 {
			delete(s.busy, k)
		}
	}
}

// secrets are the endpoint's signing secrets: the current one, and the
// previous one while its 24 hours after a rotation last.
func (s *Service) secrets(ep *Endpoint) ([]string, error) {
	cur, err := s.cfg.Box.Open(secretAAD(ep.MerchantID, ep.ID), ep.Secret)
	if err != nil {
		return nil, err
	}
	out := []string{string(cur)}
	if ep.OldSecret != nil && ep.OldSecretUntil != nil && s.cfg.Now().Before(*ep.OldSecretUntil) {
		if old, err := s.cfg.Box.Open(secretAAD(ep.MerchantID, ep.ID), ep.OldSecret); err == nil {
			out = append(out, string(old))
		}
	}
	return out, nil
}

func secretAAD(merchantID, id string) []byte { return []byte(merchantID + "\x00" + id) }

// errForbiddenAddress is a delivery to an address production refuses.
var errForbiddenAddress = errors.New("events: forbidden address")

// safeClient is the receivers' HTTP client. In production it dials only
// public addresses: the check runs on the address being dialled, after
// resolution, so a name that resolves (or re-resolves, DNS rebinding) to
// a private address is refused. It never follows redirects.
func safeClient(production bool) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	if production {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(host)
			if err != nil || !publicAddress(ip) {
				return errForbiddenAddress
			}
			return nil
		}
	}
	return &http.Client{
		Transport: &http.Transport{DialContext: dialer.DialContext, TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute, ResponseHeaderTimeout: attemptTimeout},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// publicAddress reports whether ip is one a delivery may reach in
// production: not loopback, private, link-local (the cloud metadata
// address 169.254.169.254 among them), unspecified, multicast, or one of
// the special-purpose ranges; an IPv6 address that embeds an IPv4 one
// (v4-mapped, v4-compatible, NAT64, 6to4) is judged by the IPv4 address
// it reaches.
func publicAddress(ip netip.Addr) bool {
	ip = ip.Unmap()
	if v4, ok := embeddedV4(ip); ok {
		return publicAddress(v4)
	}
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() {
		return false
	}
	for _, p := range specialPurpose {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// specialPurpose are IANA special-purpose ranges a public receiver never
// has (RFC 6890 and kin): "this network", CGNAT, IETF protocol
// assignments (Oracle's metadata is 192.0.0.192), documentation,
// benchmarking, reserved, site-local, Teredo, ORCHID and discard.
var specialPurpose = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{"0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "fec0::/10", "2001::/32", "2001:10::/28", "2001:20::/28",
		"2001:db8::/32", "100::/64"} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// embeddedV4 is the IPv4 address an IPv6 one carries to: NAT64
// (64:ff9b::/96, 64:ff9b:1::/48), 6to4 (2002::/16) and the deprecated
// v4-compatible form (::a.b.c.d).
func embeddedV4(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is6() {
		return netip.Addr{}, false
	}
	b := ip.As16()
	switch {
	case netip.MustParsePrefix("64:ff9b::/96").Contains(ip), netip.MustParsePrefix("64:ff9b:1::/48").Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case netip.MustParsePrefix("2002::/16").Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case netip.MustParsePrefix("::/96").Contains(ip) && !ip.IsUnspecified() && !ip.IsLoopback():
		return netip.AddrFrom4([4]byte(b[12:16])), true
	}
	return netip.Addr{}, false
}

// checkURL validates an endpoint URL: absolute, http(s) (https only in
// production), no credentials, at most 2048 bytes; in production a
// literal address must be public (names are checked when dialled).
func checkURL(raw string, production bool) error {
	if len(raw) > 2048 {
		return errors.New("must be at most 2048 characters")
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return errors.New("must be an absolute http(s) URL")
	case u.User != nil:
		return errors.New("must not hold credentials (user:password@)")
	case u.Fragment != "" || strings.HasSuffix(raw, "#"):
		// Never sent to the receiver: it could only mislead whoever reads it.
		return errors.New("must not have a #fragment (it is never sent)")
	}
	if p := u.Port(); p != "" {
		// url.Parse takes any digits: a port no connection can use would
		// fail every delivery, found out only on the first event.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return errors.New("must have a port from 1 to 65535")
		}
	}
	if production {
		if u.Scheme != "https" {
			return errors.New("must be https")
		}
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil && !publicAddress(ip) {
			return errors.New("must not be a loopback, private or link-local address")
		}
		if h := strings.ToLower(u.Hostname()); h == "localhost" || strings.HasSuffix(h, ".localhost") {
			return errors.New("must not be a loopback address")
		}
	}
	return nil
}

// Backlog is what is not yet delivered: events not yet handed to the
// queue, and delivery jobs not yet finished (waiting, retrying, running).
type Backlog struct {
	Depth int64
	// OldestAge is how long the longest-waiting delivery that could go now
	// has waited (0: none): an event not yet handed to the queue, since it
	// was made, or a job due to run, since it fell due. A retry waiting
	// for its time (one merchant's endpoint down for hours) is not a
	// stalled queue, and pages nobody.
	OldestAge time.Duration
}

// Backlog measures the delivery backlog (a fan-out read, for metrics).
func (s *Service) Backlog(ctx context.Context) (Backlog, error) {
	db := s.cfg.DB.WithContext(ctx)
	var row struct {
		N         int64
		JobAge    *float64
		UnhandAge *float64
	}
	// Each source's age by its own column: River and the gateway write
	// times differently on SQLite, where a min() across both would compare
	// text.
	jobAge := dbclock.SecondsSince(db, "min(scheduled_at)")
	// A retry past its time that River's leader has not made available
	// yet is waiting as much as an available job: counted, so a stalled
	// scheduler pages too.
	due := dbclock.SecondsSince(db, "scheduled_at")
	unhandAge := dbclock.SecondsSince(db, "min(created_at)")
	err := db.Raw(`SELECT
  (SELECT count(*) FROM river_job WHERE queue = ? AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled'))
    + (SELECT count(*) FROM events WHERE enqueued_at IS NULL) AS n,
  (SELECT `+jobAge.SQL+` FROM river_job WHERE queue = ? AND state IN ('available', 'retryable', 'scheduled')
    AND `+due.SQL+` >= 0) AS job_age,
  (SELECT `+unhandAge.SQL+` FROM events WHERE enqueued_at IS NULL) AS unhand_age`, queue, queue).Scan(&row).Error
	if err != nil {
		return Backlog{}, fmt.Errorf("events: backlog: %w", err)
	}
	b := Backlog{Depth: row.N}
	for _, age := range []*float64{row.JobAge, row.UnhandAge} {
		if age != nil && *age > 0 {
			b.OldestAge = max(b.OldestAge, time.Duration(*age*float64(time.Second)))
		}
	}
	return b, nil
}
