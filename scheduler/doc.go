// Package scheduler runs the gateway's background jobs in-process on a
// gocron v2 scheduler (in UTC): the sweeper, which settles keys whose
// request never finished them, and the purge, which deletes old done keys.
//
// Both jobs are singletons per process (gocron's WithSingletonMode with
// LimitModeReschedule: a tick that finds the previous run still going is
// skipped). Across processes nothing is elected: every step below is safe
// when any number of gateway instances run it at once on one database,
// because each state change is one conditional statement.
//
// # Lifecycle
//
// app.App builds the Scheduler, starts it when Serve starts and stops it
// when Serve shuts down, before the database closes. Stop marks the
// scheduler stopping (no run starts after that), then shuts gocron down,
// which cancels the context passed to a running job; the run stops between
// keys, or inside a provider call or database statement through the
// context, and Stop waits for it to return (up to StopTimeout).
//
// # The sweep
//
// Every SWEEP_INTERVAL a run takes the keys that are in_progress, whose
// last attempt (the claim, or a retry's takeover that re-sent the charge —
// never the key's creation) is more than SWEEP_STALE_AFTER old, and whose
// lease lapsed, merchant by merchant (StaleMerchants, one lock-free read,
// names the merchants that have such keys, oldest first), in batches of
// SWEEP_BATCH per merchant until a batch comes back short, or until the
// context ends; then it rechecks (below). Every statement after that read
// names one merchant, so on a database sharded by merchant (Citus) each
// touches one shard, which is where Citus allows SKIP LOCKED. Every time
// involved is compared in SQL with the database's clock. A batch's keys
// are settled SWEEP_CONCURRENCY at a time (the next batch is selected once
// they are taken over), each lookup waiting its turn at the provider's
// pace (SWEEP_PROVIDER_RATE a second per provider from this instance, so
// a provider back from an outage is not hammered by its backlog; a run
// whose time is up leaves the waiting keys in progress). For each key:
//
//	step                 statement                                 on loss
//	select candidates    Stale: SELECT … FOR UPDATE SKIP LOCKED,   (rows locked by
//	                     in a short transaction, committed before   another sweeper
//	                     any provider call                          are skipped)
//	own the key          TakeOver: UPDATE … SET lock_token, lease   counted Lost,
//	                     WHERE status='in_progress' AND lease       left alone
//	                     lapsed; RowsAffected == 1 wins
//	settle               payments.Service.Settle(claim): Lookup at
//	                     the provider (never Charge), then one of:
//
//	Lookup says          payment                      key                          counted
//	succeeded / failed   succeeded / failed           done, with the answer the    Resolved
//	                                                  handler would have sent
//	                                                  (same tx as the payment)
//	not_found            failed, not_processed,       released (no row): the app's Released
//	                     recheck_at = now +           retry charges again, same
//	                     RECHECK_AFTER                reference
//	… then, looked up    re-opened to it, as a        re-created done             Reopened
//	once more: final     recheck does (a charge that
//	                     landed during the first
//	                     lookup: its webhook was put
//	                     off while the key was held)
//	… or: pending        processing again             in_progress (reinstated)    Pending
//	pending / error      processing                   in_progress, lease ended     Pending
//	… past REVIEW_AFTER  requires_review              in_progress, lease ended     Review
//	(already final)      unchanged                    done, from the ledger        Skipped
//
// The key's state machine as the sweeper sees it:
//
//	in_progress (lease lapsed, stale)
//	  ── TakeOver won ──▶ in_progress (sweeper's token, lease IDEMPOTENCY_LEASE)
//	        ── Settle: final ──────▶ done (terminal; the purge deletes it after KEY_TTL)
//	        ── Settle: not_found ──▶ (no row)
//	        ── Settle: unknown ────▶ in_progress, lease ended: a later run or a retry
//	        ── cancelled / crash ──▶ in_progress until the sweeper's lease lapses
//	  ── TakeOver lost ──▶ (someone else's; not touched)
//
// Why each key is worked by exactly one instance per run: SKIP LOCKED only
// keeps concurrent selections apart while their transactions are open, and
// the locks end at the commit, before the provider is called; two instances
// can therefore still select the same key a moment apart. TakeOver decides:
// it is conditional on the lease having lapsed and installs a new lease, so
// of any number of contenders exactly one gets RowsAffected == 1, and the
// winner's lease (which exceeds the provider timeout) keeps everyone else
// out while it works. Every later write of the winner is fenced by its lock
// token, and the payment's own transitions are conditional on its status,
// so even a winner that stalled past its lease cannot finish a key twice.
//
// A run considers only keys whose lease lapsed before the run began (the
// database's time, read at the start, bounds the selection). A key the run
// leaves pending has its lease ended "now", which is after the start, so it
// is not selected again in the same run, and a batch of pending keys cannot
// hide the keys behind it.
//
// Cancellation leaves no half-finished key: a key is either untouched, or
// taken over and still in_progress (payment processing or requires_review),
// or finished in one transaction (payment final and key done), or released
// after its payment was marked not_processed. The one two-step end is the
// release (the payment is failed, then the key deleted); if a run is cut
// between the two, the key stays in_progress under a payment failed as
// never charged, and the next run's Settle releases it instead of
// completing it as a decline.
//
// # The recheck
//
// A "not found" long after the last attempt is still only the provider's
// view at one moment: a charge it had queued can land later. So after the
// keys, a run takes the payments whose recheck_at has passed (DueRechecks,
// merchant by merchant like the sweep: SELECT … FOR UPDATE SKIP LOCKED, and
// recheck_at pushed out by a lease in the same transaction, so one sweeper
// owns each) and looks each up once more:
//
//	Lookup says          payment                          key                     counted
//	succeeded / failed   re-opened to it, recheck ended   re-created done with    Reopened
//	                     (only if still failed as never   the answer, unless a
//	                     charged: a retry may be first)   retry holds it
//	not_found            unchanged, recheck ended:        (no row)                Confirmed
//	                     the failure is final for good
//	pending              back to processing: the          re-created in progress  Pending
//	                     charge exists after all          (lease lapsed): swept
//	                                                      as any other
//	error                unchanged, recheck in            (no row)                Pending
//	                     SWEEP_STALE_AFTER; past
//	                     REVIEW_AFTER as pending
//
// The same run watches an operator's resolution the provider had not
// confirmed with a final answer (payments.Service.Resolve schedules it):
// looked up every RECHECK_AFTER, it changes nothing, but a final answer
// that contradicts the resolution — a charge after "failed", none after
// "succeeded" — logs an ERROR naming the payment. A final answer or no
// record ends the watch (Confirmed); pending or an error keeps it (Pending),
// for at most a week. A refund's resolution is watched the same way, from
// refund_rechecks (a refund made after "failed" — its amount was given
// back — or none after "succeeded").
//
// A provider's signed webhook about a released payment runs the same
// lookup at once (payments.HandleWebhook), without ending the recheck when
// it finds nothing.
//
// # SQLite
//
// With no DATABASE_URL the gateway runs on SQLite, a single-writer store
// meant for one instance. There is no SKIP LOCKED (Stale leaves the clause
// out) and no row locks; TakeOver's conditional UPDATE still guarantees a
// single owner per key, so a second instance on the same file would be safe,
// only slower.
//
// # The purge
//
// On PURGE_SCHEDULE (a 5-field cron line, UTC; nightly at 03:00 by default)
// the purge deletes done keys completed more than KEY_TTL ago, PURGE_BATCH
// rows per statement, until a statement deletes fewer. It never deletes a
// key in progress and never a payment: payments are the ledger. The
// payment keeps the request's fingerprint, so a retry of a purged key with
// the same request is a fresh claim that finds the payment final and
// answers it again (marked replayed) without charging, and another request
// under the key is a mismatch.
//
// # Observing
//
// Each run writes one log line with its counts (Counts) and passes them to
// Config.Observe, and its duration and error to Config.ObserveRun, where
// metrics plug in.
package scheduler
