/*
 * oncepay.pml: a Promela model of OncePay's idempotency key and payment state
 * machine, checked with spin (`make model`; idempotency/model/README.md says
 * what is modelled, what is abstracted and how to read a trail).
 *
 * It mirrors this Go code. If you change one side, change the other:
 *   idempotency/store.go       Claim, PersistWith / Persist (the claim
 *                              commits with a new key's payment row, or
 *                              alone, before the re-open of an existing
 *                              one, whose transaction checks the claim's
 *                              token: lockOwned), TakeOver (+ MarkAttempt: a retry's
 *                              takeover that re-sends), Complete /
 *                              CompleteWith, Release / ReleaseTx,
 *                              LeaveInProgress, Refuse (a request refused
 *                              by its body, label or provider before it
 *                              opens anything), Stale, PurgeDone
 *   idempotency/middleware.go  claim, or replay a done key, or 409 for a live
 *                              lease, or take over a lapsed one
 *   payments/service.go        Create, open, finish, complete, notCharged /
 *                              neverCharged, unknown, lookUpInstead,
 *                              redriveWindow
 *   payments/settle.go         settle (Lookup, never Charge; mayRelease)
 *   payments/webhook.go        HandleWebhook (a hint: the outcome comes from
 *                              a Lookup), plus the re-open of a failed payment
 *   scheduler/sweep.go         RunOnce / work (Stale, TakeOver, Settle), plus
 *                              the recheck of failed/not_processed payments
 *
 * The model is the protocol after the bug-1 fix. Compile with -DBUG1 for
 * today's behaviour (staleness counted from the key's creation, not_found is
 * failed for good with no recheck, a webhook for a failed payment does
 * nothing; -DBUG1_STALE, -DBUG1_NORECHECK, -DBUG1_WEBHOOK revert one part
 * each): the verifier must then find a charged payment that the ledger
 * holds as failed for good. -DREOPEN_AS_FIRST, -DSTALL_BEFORE_CHARGE and
 * -DRECHECK_NO_VERSION are further holes the model found (README,
 * "Findings"), and -DREFUSE_RELEASES (a refused takeover releases the key
 * of the work in flight) and -DPERSIST_NO_OWNER (a stalled request re-opens
 * the payment under the sweeper's claim, or under none) two that reviewers
 * found: each must be violated too.
 *
 * One key K of one merchant, its payment row P and the provider's record of
 * the reference R (providers.Reference is deterministic per key, so the
 * provider sees one reference). Keys do not interact, so one is enough.
 *
 * Every SQL statement is one atomic step. A process's claim token is its
 * _pid: each process works on at most one claim at a time, and a stalled
 * owner is the same process still running, so two live claims never share
 * a token.
 */

/* -DBUG1 reverts the whole fix; each part can be reverted alone. */
#ifdef BUG1
#define BUG1_STALE     /* staleness from the key's creation: TakeOverRequest does not reset it */
#define BUG1_NORECHECK /* not_found: failed/not_processed for good, no recheck */
#define BUG1_WEBHOOK   /* a webhook for a failed payment is answered "final" */
#endif

/* ---- bounds (README: "Bounds") ---- */
#ifndef MAX_TRIES
#define MAX_TRIES   3   /* requests the app sends (first one + retries) */
#endif
#ifndef MAX_CRASHES
#define MAX_CRASHES 1   /* process crashes in the whole run */
#endif
#ifndef MAX_STALLS
#define MAX_STALLS  1   /* owners paused past their lease */
#endif
#ifndef MAX_HOOKS
#define MAX_HOOKS   2   /* deliveries of the webhook when the late charge lands (0 = lost) */
#endif
#ifndef MAX_PURGES
#define MAX_PURGES  1   /* PurgeDone of the done key */
#endif
#ifndef MAX_REFUSALS
#define MAX_REFUSALS 1  /* requests refused before they open anything (a
                         * label, or a rule a deploy changed) */
#endif

/* ---- idempotency_keys.status ---- */
#define K_ABSENT 0
#define K_INPROG 1
#define K_DONE   2

/* ---- the stored answer (and the answer the app gets) ---- */
#define A_NONE      0   /* not a final answer: 202, 409, 503 */
#define A_SUCCEEDED 1   /* 201 */
#define A_DECLINED  2   /* 402 card_declined */

/* ---- payments.status (+ failure_code) ---- */
#define P_NONE            0  /* no row yet */
#define P_PROCESSING      1  /* (requires_review is not modelled: it behaves as processing) */
#define P_SUCCEEDED       2
#define P_DECLINED        3  /* failed, a decline code: final */
#define P_FAILED_NP       4  /* failed/not_processed, key released, recheck pending */
#define P_FAILED_NP_FINAL 5  /* failed/not_processed, recheck found nothing: final unless the app retries */
#define P_FAILED_UNAVAIL  6  /* failed/provider_unavailable, key released: a certain non-charge */

/* ---- the provider's record of reference R ---- */
#define R_NONE      0  /* no charge */
#define R_INFLIGHT  1  /* accepted, not landed: Lookup says not_found or pending */
#define R_SUCCEEDED 2
#define R_DECLINED  3

/* ---- what a provider call returns to the gateway ---- */
#define X_NONE        0
#define X_SUCCEEDED   1  /* Charge / Lookup: succeeded */
#define X_DECLINED    2  /* Charge / Lookup: failed (declined) */
#define X_UNKNOWN     3  /* Charge: timeout, lost answer, still pending (ErrUnknown, !Final()) */
#define X_NOT_CHARGED 4  /* Charge: connection refused (ErrNotCharged) */
#define X_NOT_FOUND   5  /* Lookup: nothing visible at the provider */
#define X_PENDING     6  /* Lookup: in flight (or a Lookup error: same handling) */

/* ---- how a request handler got the key ---- */
#define H_BUSY    0  /* 409: in progress under a live lease */
#define H_REPLAY  1  /* done: the stored answer */
#define H_FIRST   2  /* claimed; nothing of an earlier attempt can exist */
#define H_REDRIVE 3  /* an earlier attempt's outcome is unknown: re-drive, never release */
#define H_FINAL   4  /* claimed, but the ledger is final (the answer was purged) */
#define H_OPEN    5  /* the claim committed alone (the key's payment exists): Open next */
#define H_REFUSED 6  /* refused before opening anything (400/415); a fresh claim was never sent */
#define H_REFUSED_TAKEN 7  /* refused after taking the key over: Refuse */

#define final(p)     (p == P_SUCCEEDED || p == P_DECLINED)
#define retryable(p) (p == P_FAILED_NP || p == P_FAILED_NP_FINAL || p == P_FAILED_UNAVAIL)
#define ledger(p)    (p == P_SUCCEEDED -> A_SUCCEEDED : A_DECLINED)
#define agrees(a, p) ((a == A_SUCCEEDED && p == P_SUCCEEDED) || (a == A_DECLINED && p == P_DECLINED))

/* ---- the key row ---- */
unsigned key      : 2 = K_ABSENT;
byte     ktok         = 0;  /* lock_token: the owner's _pid */
bit      klive        = 0;  /* locked_until >= now */
bit      kworking     = 0;  /* the owner is still at it (a live owner's lease does not lapse) */
bit      kstale       = 0;  /* >= SWEEP_STALE_AFTER since the last attempt (attempted_at) */
unsigned kans     : 2 = A_NONE;

/* ---- the payment row ---- */
unsigned pay      : 3 = P_NONE;
byte     attempts     = 0;  /* payments.attempts: the recheck's version check */

/* ---- the provider ---- */
unsigned prov     : 2 = R_NONE;
byte     charges      = 0;  /* charges the provider created for R */
byte     hooks        = 0;  /* webhook deliveries still to come */
bit      old          = 0;  /* past redriveWindow: the provider may have forgotten R */

/* ---- fault budgets, the app ---- */
byte     crashes      = 0;
byte     stalls       = 0;
byte     purges       = 0;
byte     refusals     = 0;
bit      app_final    = 0;  /* the app holds a final answer and stops retrying */

chan req = [0] of { bit };   /* the app's requests, to either gateway instance */

/* Reachability probes: with -DPROBE=n, REACH(n, c) fails when c holds there,
 * and `make model` requires each probe to fail, so a change that makes a
 * path of the protocol unreachable (a vacuous model) is noticed. */
#ifdef PROBE
#define REACH(n, c) assert(PROBE != n || !(c))
#else
#define REACH(n, c) skip
#endif

/* Invariants that hold in every state (checked after every write). */
inline INV() {
	/* 1: at most one charge per reference */
	assert(charges <= 1);                                                            /* inv 1 */
	/* 2 (every step): a charged payment is never declined or failed for good in the ledger */
	assert(!(prov == R_SUCCEEDED && (pay == P_DECLINED || pay == P_FAILED_NP_FINAL))); /* inv 2 */
	/* 5: the ledger never records an outcome the provider does not have */
	assert(pay != P_SUCCEEDED || prov == R_SUCCEEDED);                               /* inv 5 */
	assert(pay != P_DECLINED || prov == R_DECLINED);                                 /* inv 5 */
	/* 4: a done key's stored answer agrees with the payment */
	assert(key != K_DONE || agrees(kans, pay));                                      /* inv 4 */
}

inline clearLease() {
	ktok = 0; klive = 0; kworking = 0; kstale = 0
}

/* ==== the SQL statements of idempotency/store.go (with their payment writes) ==== */

/* Store.Claim + PersistWith, one statement: the claim's INSERT is held
 * back and sent with the payment's first write. Only when the key is absent
 * (INSERT … ON CONFLICT DO NOTHING affected a row). A new key's payment is
 * inserted in the same commit; when the key's payment exists (a retry after
 * a release, or after the answer was purged) the claim commits alone and
 * the request opens the payment next, in a transaction of its own (Open). */
inline Claim(h) {
	key = K_INPROG; ktok = _pid; klive = 1; kworking = 1; kstale = 0;
	if
	:: pay == P_NONE ->                         /* InsertNew */
		pay = P_PROCESSING; attempts = 1; h = H_FIRST
	:: pay != P_NONE ->
		/* a processing payment always has its key in progress */
		assert(pay != P_PROCESSING);
		h = H_OPEN
	fi
}

/* Service.open's Persist under a claim that committed alone, or a
 * takeover's: a payment released earlier is re-opened (Reopen,
 * attempts++), a final one answered from the ledger, one still processing
 * re-driven. Between a claim and its Open a recheck or a webhook may have
 * re-opened the payment to final (the key was not absent, so they left it
 * to this request). */
inline Reopen(h) {
	if
	:: retryable(pay) ->                        /* released earlier: Reopen, attempts++ */
		REACH(9, pay == P_FAILED_NP);
#ifdef REOPEN_AS_FIRST
		h = H_FIRST;
#else
		/* A not_processed payment whose recheck is pending may have been
		 * charged: this attempt is a re-drive (README, finding 1). */
		h = (pay == P_FAILED_NP -> H_REDRIVE : H_FIRST);
#endif
		pay = P_PROCESSING; attempts++
	:: final(pay) -> h = H_FINAL;               /* the answer was purged; the ledger has it */
		REACH(3, 1)
	:: pay == P_PROCESSING -> attempts++; h = H_REDRIVE  /* taken over: re-sent */
	fi
}

inline Open(h) {
	atomic {
		if
#ifdef PERSIST_NO_OWNER
		:: true -> Reopen(h)
#else
		/* Persist locks the key and checks the claim's token first
		 * (Store.lockOwned) */
		:: key == K_INPROG && ktok == _pid -> Reopen(h); REACH(12, h == H_FINAL)
		:: else -> h = H_BUSY; REACH(13, 1)     /* ErrLostClaim: 409 */
#endif
		fi;
		INV()
	}
}

/* A retry's takeover: Store.TakeOver and, re-sending, MarkAttempt
 * (attempted_at = now, hence kstale = 0); only when the key is in progress
 * and its lease lapsed. Service.open's Reopen (attempts++) follows in its
 * own transaction (Open). */
inline TakeOverRequest(h) {
	ktok = _pid; klive = 1; kworking = 1;
#ifndef BUG1_STALE
	kstale = 0;                                 /* attempted_at = now */
#endif
	h = H_OPEN                                  /* Open next, in a transaction of its own */
}

/* idempotency/middleware.go: the key's row decides, in one step: claim it,
 * take it over, 409, or replay the stored answer. A request the handler
 * refuses before it opens anything (its Content-Type label, or a rule a
 * deploy changed, so a retry of the same fingerprint can be refused) never
 * sends a fresh claim; one that took the key over has written its token. */
inline Middleware(h, ans) {
	atomic {
		if
		:: key == K_ABSENT -> Claim(h)
		:: key == K_ABSENT && refusals < MAX_REFUSALS -> refusals++; h = H_REFUSED
		:: key == K_INPROG && !klive && refusals < MAX_REFUSALS ->
			refusals++; ktok = _pid; klive = 1; kworking = 1; h = H_REFUSED_TAKEN
		:: key == K_INPROG && !klive -> TakeOverRequest(h)
		:: key == K_INPROG && klive -> h = H_BUSY  /* 409, Retry-After: 1 */
		:: key == K_DONE -> h = H_REPLAY; ans = kans
		fi;
		INV()
	}
}

/* Store.TakeOver (sweeper, webhook): lease lapsed; attempted_at unchanged. */
inline TakeOver(ok) {
	atomic {
		if
		:: key == K_INPROG && !klive -> ktok = _pid; klive = 1; kworking = 1; ok = 1
		:: else -> ok = 0
		fi
	}
}

/* Store.Complete / CompleteWith + finish: the payment's final state and the
 * key's answer in one commit. The payment update is conditional on it being
 * still open; if it is final already, the key gets the ledger's answer. */
inline Complete(outcome, ans) {
	atomic {
		if
		:: key == K_INPROG && ktok == _pid ->
			if
			:: pay == P_PROCESSING ->
				assert(outcome == X_SUCCEEDED || outcome == X_DECLINED);
				pay = (outcome == X_SUCCEEDED -> P_SUCCEEDED : P_DECLINED)
			:: else -> assert(final(pay))           /* settled first by someone else */
			fi;
			ans = ledger(pay);
			key = K_DONE; kans = ans; clearLease()
		:: else -> ans = A_NONE;                    /* ErrLostClaim: 409 */
			REACH(5, 1)
		fi;
		INV()
	}
}

/* neverCharged: Store.Finish(failed, code) + Store.ReleaseTx in one
 * transaction, only while the claim owns the key. A payment already final
 * is not touched; the caller then completes the key from the ledger. */
inline Release(code, ok) {
	atomic {
		if
		:: key == K_INPROG && ktok == _pid && pay == P_PROCESSING ->
			REACH(7, code == P_FAILED_NP && prov == R_INFLIGHT);
			pay = code; key = K_ABSENT; clearLease(); ok = 1
		:: else -> ok = 0
		fi;
		INV()
	}
}

/* Store.Release alone (settle: no ledger row, or a payment already failed as
 * never charged whose release did not happen). */
inline ReleaseKey() {
	atomic {
		if
		:: key == K_INPROG && ktok == _pid -> key = K_ABSENT; clearLease()
		:: else -> skip
		fi
	}
}

/* Store.Refuse of a claim taken over: the earlier attempt's work holds the
 * key, so it is left in progress (LeaveInProgress) for the sweeper or a
 * retry the handler accepts; -DREFUSE_RELEASES releases it as a fresh
 * claim's would be. */
inline Refuse() {
	atomic {
		if
		:: key == K_INPROG && ktok == _pid ->
			REACH(11, pay == P_PROCESSING);
#ifdef REFUSE_RELEASES
			key = K_ABSENT; clearLease()
#else
			klive = 0; kworking = 0
#endif
		:: else -> skip
		fi;
		INV()
	}
}

/* Store.LeaveInProgress: locked_until = now; the key stays in progress. */
inline LeaveInProgress() {
	atomic {
		if
		:: key == K_INPROG && ktok == _pid -> klive = 0; kworking = 0
		:: else -> skip
		fi
	}
}

/* Store.PurgeDone: a done key, after KEY_TTL. */
inline PurgeDone() {
	key = K_ABSENT; kans = A_NONE; purges++
}

/* The recheck's (and the webhook's) re-open of a failed payment to the
 * provider's final outcome: the payment, and the key as done if it is
 * absent (if a retry holds it, the retry completes from the ledger). */
inline ReopenFinal(lk) {
	pay = (lk == X_SUCCEEDED -> P_SUCCEEDED : P_DECLINED);
	if
	:: key == K_ABSENT -> key = K_DONE; kans = ledger(pay)
	:: else -> skip
	fi
}

/* Recheck's write: UPDATE … WHERE status = failed AND failure_code =
 * not_processed AND attempts = v (the attempts read with the Lookup: a retry
 * that re-opened the payment in between bumped it; README, finding 3). */
inline Recheck(lk, v) {
	atomic {
		if
		#ifdef RECHECK_NO_VERSION
		:: pay == P_FAILED_NP ->
#else
		:: pay == P_FAILED_NP && attempts == v ->
#endif
			if
			:: lk == X_SUCCEEDED || lk == X_DECLINED ->
				REACH(1, lk == X_SUCCEEDED);
				ReopenFinal(lk)
			:: lk == X_NOT_FOUND ->
				assert(prov == R_NONE);             /* inv 2: nothing is in flight, nothing will land */
				pay = P_FAILED_NP_FINAL
			:: else -> skip                         /* pending: try later */
			fi
		:: else -> skip
		fi;
		INV()
	}
}

/* ==== the provider ==== */

/* Charge(R), with service.go's redriveWindow check in the same step: a
 * re-drive past the window looks up instead (res = X_NONE). The provider's
 * dedup window exceeds redriveWindow by more than the provider timeout. */
inline ChargeOrLookUpInstead(h, res) {
	atomic {
		if
		:: h == H_REDRIVE && old -> res = X_NONE; REACH(4, 1)
		:: else ->
			if
			:: res = X_NOT_CHARGED                  /* connection refused: never reached */
			:: prov == R_NONE || old ->             /* a new charge (old: the provider forgot R) */
				charges++;
				if
				:: prov = R_SUCCEEDED; res = X_SUCCEEDED
				:: prov = R_DECLINED;  res = X_DECLINED
				:: prov = R_INFLIGHT;  res = X_UNKNOWN  /* lands late */
				fi
			:: prov != R_NONE && !old ->            /* duplicate reference: the first charge's outcome */
				if
				:: prov == R_SUCCEEDED -> res = X_SUCCEEDED
				:: prov == R_DECLINED  -> res = X_DECLINED
				:: prov == R_INFLIGHT  -> res = X_UNKNOWN
				fi
			fi;
			if
			:: skip
			:: res != X_NOT_CHARGED -> res = X_UNKNOWN  /* the answer is lost: timeout */
			fi;
			REACH(6, h == H_REDRIVE && res == X_NOT_CHARGED)
		fi;
		INV()
	}
}

/* Lookup(R): read-only. */
inline Lookup(lk) {
	atomic {
		if
		:: prov == R_NONE      -> lk = X_NOT_FOUND
		:: prov == R_INFLIGHT  -> if :: lk = X_NOT_FOUND :: lk = X_PENDING fi
		:: prov == R_SUCCEEDED -> lk = X_SUCCEEDED
		:: prov == R_DECLINED  -> lk = X_DECLINED
		fi
	}
}

/* A late charge lands, some time later, and the provider sends the signed
 * webhook 0 (lost), 1 or up to MAX_HOOKS times. */
active proctype Provider() {
end_idle:
	do
	:: atomic {
		prov == R_INFLIGHT ->
		if
		:: prov = R_SUCCEEDED
		:: prov = R_DECLINED
		fi;
		hooks = 0;
		do
		:: hooks < MAX_HOOKS -> hooks++
		:: break
		od;
		INV()
	}
	od
}

/* ==== faults ==== */

/* Between any two steps: the process crashes (its claim, if any, keeps its
 * lease until it lapses), or nothing happens. Fault(1) may instead stall the
 * process past its lease (after a provider call returned, before the
 * charge, between a claim and its Open): it carries on later, its writes
 * fenced by its token, and its charge not sent once the lease is over.
 * -DSTALL_BEFORE_CHARGE drops that last check (the charge would go out
 * after the sweeper's "not found"), -DPERSIST_NO_OWNER the token check of
 * Open's transaction. */
inline Fault(canStall) {
	if
	:: atomic {
		crashes < MAX_CRASHES -> crashes++;
		if
		:: key == K_INPROG && ktok == _pid -> kworking = 0
		:: else -> skip
		fi
	   };
	   goto crashed
	:: atomic { canStall && stalls < MAX_STALLS && key == K_INPROG && ktok == _pid && klive ->
		stalls++; klive = 0 }
	:: skip
	fi
}

/* A crash where no claim is held. */
inline Crash() {
	if
	:: atomic { crashes < MAX_CRASHES -> crashes++ }; goto crashed
	:: skip
	fi
}

/* ==== settle (payments/settle.go), under a claim the caller took over ==== */
inline Settle(mayRelease, lk, ans, ok) {
	if
	:: atomic { pay == P_NONE || retryable(pay) } -> ReleaseKey()
	:: atomic { final(pay) } -> Complete(X_NONE, ans)            /* Skipped */
	:: atomic { pay == P_PROCESSING } ->
		Lookup(lk);
		Fault(1);
		if
		:: lk == X_SUCCEEDED || lk == X_DECLINED -> Complete(lk, ans)  /* Resolved */
		:: lk == X_NOT_FOUND && mayRelease ->
#ifdef BUG1_NORECHECK
			Release(P_FAILED_NP_FINAL, ok);
#else
			Release(P_FAILED_NP, ok);                /* recheck pending */
#endif
			if
			:: !ok -> Complete(X_NONE, ans)          /* final meanwhile, or lost the key */
			:: else -> skip                          /* Released */
			fi
		:: else -> LeaveInProgress()                 /* Pending */
		fi
	fi
}

/* ==== the app and the request handlers ==== */

/* The app sends the same request (same key, same body) until it holds a
 * final answer, at most MAX_TRIES times; a retry may go out while an
 * earlier request is still running (the app timed out). */
active proctype App() {
	byte tries = 0;
	do
	:: !app_final && tries < MAX_TRIES -> req!1; tries++
	:: else -> break
	od
}

/* A final answer reaches the app, or is lost on the way (the app retries). */
inline Answer(ans) {
	if
	:: ans != A_NONE ->
		atomic {
			assert(agrees(ans, pay));               /* an answer never disagrees with the ledger */
			if
			:: app_final = 1
			:: skip
			fi
		}
	:: else -> skip
	fi
}

/* A gateway instance: handles the app's requests one at a time
 * (Middleware, then Service.Create). */
active [2] proctype Gateway() {
	byte h, res, lk, ans;
	bit ok;
end_idle:
	do
	:: req?_ ->
		Middleware(h, ans);
		if
		:: h == H_OPEN -> Fault(1); Open(h)     /* a stall here: the sweeper may take over */
		:: else -> skip
		fi;
		if
		:: h == H_BUSY || h == H_REFUSED -> skip     /* 409; 400 or 415 */
		:: h == H_REFUSED_TAKEN -> Fault(0); Refuse() /* 400 or 415 */
		:: h == H_REPLAY -> Answer(ans)
		:: h == H_FINAL ->                           /* the ledger is final: no charge */
			Fault(0);
			Complete(X_NONE, ans); Answer(ans)
		:: h == H_FIRST || h == H_REDRIVE ->
			Fault(1);
			if
#ifndef STALL_BEFORE_CHARGE
			/* The charge goes out only while the claim's lease is
			 * certainly live (Create's deadline from LeaseEnds): 409, not
			 * sent; the key stays in progress for the sweeper. */
			:: !(key == K_INPROG && ktok == _pid && klive) -> REACH(14, 1); goto crashed
			:: key == K_INPROG && ktok == _pid && klive -> skip
#else
			:: true -> skip
#endif
			fi;
			ChargeOrLookUpInstead(h, res);
			Fault(1);
			if
			:: res == X_NONE ->                      /* lookUpInstead */
				Settle(1, lk, ans, ok); Answer(ans)
			:: res == X_SUCCEEDED || res == X_DECLINED ->
				Complete(res, ans); Answer(ans)
			:: res == X_NOT_CHARGED && h == H_FIRST ->
				Release(P_FAILED_UNAVAIL, ok);       /* 503 provider_unavailable */
				if
				:: !ok -> Complete(X_NONE, ans); Answer(ans)
				:: else -> skip
				fi
			:: else -> LeaveInProgress()             /* 202; never release a re-drive */
			fi
		fi;
crashed:
		atomic { h = 0; res = 0; lk = 0; ans = 0; ok = 0 }
	od
}

/* ==== background actors ==== */

/* scheduler/sweep.go: settle stale keys (Stale, TakeOver, Settle). */
active proctype Sweeper() {
	byte lk, ans;
	bit ok;
end_idle:
	do
	:: atomic { key == K_INPROG && !klive && kstale -> TakeOver(ok) } ->
		Fault(0);
		Settle(1, lk, ans, ok);
crashed:
		atomic { lk = 0; ans = 0; ok = 0 }
	od
}

/* The sweeper's recheck of not_processed payments, once no charge for R can
 * still be in flight (RECHECK_AFTER, assumption (b)). Its own process: every
 * gateway instance runs the sweep, so one instance's recheck interleaves with
 * another's settle. */
active proctype SweepRecheck() {
	byte lk, v;
end_idle:
	do
	:: atomic { pay == P_FAILED_NP && prov != R_INFLIGHT -> Lookup(lk); v = attempts } ->
		Crash();
		Recheck(lk, v);
crashed:
		atomic { lk = 0; v = 0 }
	od
}

/* payments/webhook.go: a verified event settles as the sweeper would, but
 * never releases. */
active proctype Webhook() {
	byte ps, lk, ans;
	bit ok;
end_idle:
	do
	:: atomic { hooks > 0 -> hooks--; ps = pay } ->
		if
		:: ps == P_PROCESSING ->
			atomic { TakeOver(ok); REACH(8, ok && prov == R_SUCCEEDED) };
			if
			:: ok -> Fault(0); Settle(0, lk, ans, ok)
			:: else -> skip                          /* deferred: the owner settles */
			fi
#ifndef BUG1_WEBHOOK
		:: ps == P_FAILED_NP || ps == P_FAILED_UNAVAIL ->
			Lookup(lk);
			atomic {
				if
				:: (pay == P_FAILED_NP || pay == P_FAILED_UNAVAIL) &&
				   (lk == X_SUCCEEDED || lk == X_DECLINED) ->
					REACH(2, lk == X_SUCCEEDED);
					ReopenFinal(lk)
				:: else -> skip
				fi;
				INV()
			}
#endif
		:: else -> skip                              /* final: duplicates are harmless */
		fi;
crashed:
		atomic { ps = 0; lk = 0; ans = 0; ok = 0 }
	od
}

/* Time: a dead owner's lease lapses; a lapsed key becomes stale (>=
 * SWEEP_STALE_AFTER since its last attempt); a landed charge passes
 * redriveWindow, and with it the provider's dedup window (which is longer
 * than redriveWindow plus a lease, so it cannot end under a running
 * attempt, and RECHECK_AFTER is far shorter, so no recheck is pending). */
active proctype Clock() {
end_idle:
	do
	:: atomic { key == K_INPROG && klive && !kworking -> klive = 0 }
	:: atomic { key == K_INPROG && !klive && !kstale -> kstale = 1 }
	:: atomic { !old && (prov == R_SUCCEEDED || prov == R_DECLINED) && pay != P_FAILED_NP &&
	            !(key == K_INPROG && kworking) -> old = 1 }
	od
}

/* scheduler/purge.go */
active proctype Purge() {
end_idle:
	do
	:: atomic { purges < MAX_PURGES && key == K_DONE -> PurgeDone() }
	od
}

/* Quiescence: nothing else can move (the app is done, the sweeper has
 * nothing left to do, every charge has landed). */
active proctype Quiescence() {
	timeout ->
	atomic {
		assert(key != K_INPROG);                           /* inv 3: no key in progress forever */
		assert(prov != R_SUCCEEDED || pay == P_SUCCEEDED); /* inv 2: charged => succeeded in the ledger */
		assert(pay != P_FAILED_NP);                        /* inv 3: no recheck left pending */
		assert(pay != P_PROCESSING);                       /* inv 3: no payment left processing */
		INV();
		REACH(10, prov == R_SUCCEEDED && attempts >= 2 && app_final)
	}
}
