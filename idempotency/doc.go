// Package idempotency makes a retried mutating request take effect at most
// once. It owns the idempotency_keys store and the Fiber middleware that
// claims, replays and takes over keys; it knows nothing about payments, so
// refunds and any later mutating route reuse it unchanged.
//
// # Keys
//
// A key is scoped to a merchant: (merchant_id, key) is the primary key, and
// every query on a key filters on both, so the same key from two merchants
// names two unrelated rows. The merchant comes from the verified token
// (Config.Scope), never from the request. A key is stored with the
// Fingerprint of the method, route and canonical body of the request that
// first used it; reusing the key for anything else is a mismatch (422).
//
// # State machine
//
// A key's row moves through these states. Nothing about a key lives in
// memory: every transition is one conditional SQL statement, and
// RowsAffected == 1 says who won it, so the guarantees hold across any
// number of gateway instances on one database.
//
//	from          transition                         to
//	(no row)      Claim: INSERT … ON CONFLICT        in_progress (token T, lease L)
//	in_progress   Complete(T), in the caller's tx    done (terminal, replayed)
//	              (or CompleteWith: one statement)
//	in_progress   Release(T)                         (no row): next Claim is fresh
//	in_progress   LeaveInProgress(T): L = now        in_progress, lease ended
//	in_progress   owner stops (error, panic, crash)  in_progress until L lapses
//	in_progress   TakeOver, once L < now             in_progress (token T', lease L')
//	(no row)      PutDone (an outcome learned late)  done
//	done          PurgeDone, after the key TTL       (no row)
//
// Claimed: the first request inserts the row in_progress with a random
// lock_token and a lease (locked_until = now + Lease). The insert that
// affects a row owns the key; a request whose insert does nothing reads the
// row instead and is answered from it:
//
//   - done: the stored status, headers and body, byte for byte, with
//     Idempotent-Replayed: true;
//   - in_progress, lease live: 409 with Retry-After: 1;
//   - in_progress, lease lapsed: taken over (below).
//
// Completed: the owner stores its final answer with Complete, in the same
// transaction as the resource's final state, so a replay never disagrees
// with the ledger. done is terminal; the purge deletes done rows after the
// key TTL (PurgeDone), never a row in progress.
//
// Released: nothing happened outside the gateway (invalid body, a provider
// that certainly never saw the charge), so the owner deletes its row and the
// next request with the key is a fresh first request.
//
// Left in progress: the outcome is unknown (a provider timeout). The owner
// ends its lease now but keeps the row in_progress, so the client's next
// retry takes the key over at once and re-drives the work with the same
// provider reference, which the provider dedupes.
//
// Left with its lease: if the owner does none of the above — it returned an
// error, panicked, or the process died — the row stays in_progress until the
// lease lapses. That is the safe default: a request that may have charged is
// never forgotten. A retry then takes it over, or the sweeper (Stale, then
// TakeOver) resolves it by looking the reference up.
//
// Taken over: once locked_until has passed, TakeOver installs a new
// lock_token and lease with one UPDATE conditional on status and lease, so
// exactly one of any number of contenders wins; the loser answers 409. The
// old owner's token is fenced off: its Complete, Release, LeaveInProgress or
// SetResource returns ErrLostClaim and it must roll back. A Claim from
// TakeOver has TakenOver set, telling the handler that earlier work may
// exist and must be re-driven, not restarted.
//
// # Held claims (PostgreSQL)
//
// The middleware claims with ClaimParams.Hold: the claim's INSERT is not
// sent at once but with the owner's first writes — Persist runs it and
// them in one transaction, and PersistWith, for a new key whose payment is
// new too, in one statement (a data-modifying CTE: the claim's INSERT … ON
// CONFLICT DO NOTHING, and the ledger row's INSERT … SELECT from it). A new
// payment thus costs two commits and two statements before the provider
// is answered (claim + ledger row, then final state + stored answer), and
// a body that fails validation writes nothing at all: Release has nothing
// to undo. Nothing a claim guards happens before its INSERT: an owner
// writes its first rows before any provider call. Two requests that both
// found a key free both run until their first write, where the INSERT
// decides; the loser gets ErrLostClaim and answers 409, as if it had come
// a moment later. A claim still pending when the handler returns was never
// sent, and is dropped. SQLite has a single writer and no data-modifying
// CTEs, so there a claim commits at once.
//
// Middleware answers retries from one read: it looks the key up before it
// claims, and only the INSERT decides who owns a new key. Guard, which the
// gateway mounts, knows its handler and sends the held claim without that
// read (a new key, nearly every request, is one round trip fewer: a new
// payment is two, the claim with its ledger row and the completion). When
// the INSERT finds the key, or the handler refuses the body before sending
// it, Guard reads the key then and answers from its row (a replay, 422,
// 409, or a takeover that runs the handler again), dropping what the
// handler said: the answers are Middleware's, the read comes after the
// handler's validation instead of before it. A read that fails is a 503,
// even after the handler refused the body: the key may hold this very
// request's answer. (A sealed answer that does not open, ErrUnreadable,
// is a 500: no retry helps.)
//
// Under load those two statements of concurrent requests share round
// trips and commits (app/database/pipeline). Nothing above changes: each
// request's statement still applies whole or not at all, ON CONFLICT
// decides between two claims of one key in one batch as it would between
// two commits, a statement the server refuses costs its company nothing
// (they run again alone), and no request learns its outcome before the
// commit that makes it durable.
//
// # Time
//
// Every time of a key is written, and every comparison of times made, by
// the database's clock inside the statement (package dbclock): the lease
// (locked_until = now + Lease, lapsed when locked_until < now), the last
// attempt (attempted_at, set by the claim and by a retry that sends the
// work again after a takeover, MarkAttempt; never by a settler or a
// lookup), the last poll's lookup (looked_up_at) and completion
// (completed_at, which the purge compares with now - KEY_TTL). Gateway
// instances whose own clocks disagree therefore agree on who owns a key and
// on what is stale; no instance's clock is ever compared with another's.
// The lease must exceed the provider timeout, or a retry could take over a
// request that is still waiting on the provider.
//
// # Fingerprints
//
// A key's request_hash is Fingerprint of the method, the route and the
// body's RFC 8785 canonical form: spacing, member order and string escapes
// do not make another request, any changed value does. Keys stored before
// canonical fingerprints hold a hash of the raw body, which SameRequest
// still accepts for a byte-identical retry.
package idempotency
