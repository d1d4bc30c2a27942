package idempotency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/app/database/pipeline"
	"github.com/oncepay/gateway/app/database/rawsql"
)

// lockTimedOut reports PostgreSQL's lock_not_available (55P03), the error
// of a statement that waited longer than lock_timeout.
func lockTimedOut(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "55P03"
}

// heldTx is the pending part of a claim made with ClaimParams.Hold: the
// claim's INSERT, not yet sent.
//
// Why wait: a payment must be written to the ledger before the provider is
// called (so a crash mid-call leaves something to look up), and the key must
// be claimed before that. Committing the claim and the ledger row
// separately would cost a payment three commits; sending the claim with the
// owner's first rows makes it two (claim + ledger row, then final state +
// stored answer) — and, through PersistWith, the first of them one
// statement — and makes a validation failure cost nothing at all: Release
// has nothing to undo.
//
// Nothing the claim guards can happen before it is made: an owner writes
// its first rows (Persist) before any provider call, and Persist is where
// the INSERT decides, as always, who owns the key. Two requests that both
// found the key free both get a pending claim; the one whose INSERT loses
// gets ErrLostClaim from Persist and answers 409, as if it had come a
// moment later.
//
// Only on PostgreSQL, where the claim's INSERT and the owner's rows can
// share a statement; SQLite has one writer and there a claim commits at
// once (one commit more per payment, for a development store).
type heldTx struct {
	mu      sync.Mutex
	pending *ClaimParams // nil once sent (persisted) or dropped (released)
	// ended, if set, is called once the claim has been sent or dropped
	// (the middleware's admission gate: see Config.Admit).
	ended func()
	// found is set when the claim's INSERT found the key's row (the key
	// was known, or taken meanwhile) or waited past lock_timeout for it
	// (another request's claim not yet committed, or a table locked by
	// maintenance: the read tells which), dropped when the claim was released
	// before it was ever sent (the handler refused the body). A Guard that
	// held the claim without reading the key reads it then: a known key is
	// answered from its row, whatever this body was (see Guard).
	found, dropped bool
}

// unsent reports whether the claim never became this request's: its
// INSERT found the key taken, or it was dropped before it was sent.
func (h *heldTx) unsent() (found, dropped bool) {
	if h == nil {
		return false, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.found, h.dropped
}

func (h *heldTx) setFound() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.found = true
}

// end reports that the claim take returned has been sent or dropped.
func (h *heldTx) end() {
	if h != nil && h.ended != nil {
		h.ended()
	}
}

// take removes and returns the pending claim, or nil if the claim is
// durable (never held, or already persisted or released).
func (h *heldTx) take() *ClaimParams {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.pending
	h.pending = nil
	return p
}

// insertHeld sends the pending claim p of c on db (the pool, or a
// transaction): ErrLostClaim when another request owns the key by now.
func (s *Store) insertHeld(db *gorm.DB, c Claim, p *ClaimParams) error {
	now := dbclock.Now(db)
	res := db.Exec(insertClaim, p.MerchantID, p.Key, p.RequestHash, StatusInProgress, dbclock.Plus(db, p.Lease), c.Token, now, now)
	switch {
	case lockTimedOut(res.Error):
		c.held.setFound()
		return fmt.Errorf("idempotency: claim: %w (%w)", ErrLostClaim, ErrBusy)
	case res.Error != nil:
		return fmt.Errorf("idempotency: claim: %w", res.Error)
	case res.RowsAffected != 1:
		c.held.setFound()
		return fmt.Errorf("idempotency: claim: %w", ErrLostClaim)
	}
	return nil
}

// lockOwned locks c's key in tx (on PostgreSQL; SQLite has one writer)
// and reports ErrLostClaim when c no longer owns it.
func (s *Store) lockOwned(tx *gorm.DB, c Claim) error {
	q := tx.Model(&Record{}).Select("key").
		Where("merchant_id = ? AND key = ? AND status = ? AND lock_token = ?", c.MerchantID, c.Key, StatusInProgress, c.Token)
	if tx.Dialector.Name() == "postgres" {
		q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
	}
	var keys []string
	if err := q.Find(&keys).Error; lockTimedOut(err) {
		// Another transaction holds the key (a settler's takeover): busy.
		return fmt.Errorf("idempotency: lock claim: %w (%w)", ErrLostClaim, ErrBusy)
	} else if err != nil {
		return fmt.Errorf("idempotency: lock claim: %w", err)
	}
	if len(keys) != 1 {
		return fmt.Errorf("idempotency: lock claim: %w", ErrLostClaim)
	}
	return nil
}

// Persist makes the claim durable, running fn (which may be nil) in the
// same commit: for a held claim, the claim's INSERT and fn share one
// transaction; for a durable claim (a takeover, or one already persisted),
// fn runs in a new transaction, once the claim is found still to own the
// key. If fn fails, its writes roll back — and so does a held claim, which
// is then released (nothing was ever visible, so nothing can have happened
// because of it). ErrLostClaim when a held claim's INSERT lost the key to
// another request, or a durable claim no longer owns it (nothing written).
func (s *Store) Persist(ctx context.Context, c Claim, fn func(tx *gorm.DB) error) error {
	p := c.held.take()
	if p == nil {
		if fn == nil {
			return nil
		}
		// The claim committed before (a takeover, or a claim whose owner
		// row existed): fn's transaction first locks the key and checks
		// the claim still owns it. A request that stalled past its lease
		// meanwhile — the sweeper took the key over and may have released
		// it — writes nothing: no payment re-opened under another owner's
		// attempt, or left processing under no key at all.
		return s.exec(ctx, nil).Transaction(func(tx *gorm.DB) error {
			if err := s.lockOwned(tx, c); err != nil {
				return err
			}
			return fn(tx)
		})
	}
	defer c.held.end()
	if fn == nil {
		if err := s.insertHeld(s.exec(ctx, nil), c, p); err != nil {
			c.state.set(endReleased)
			return err
		}
		return nil
	}
	err := s.exec(ctx, nil).Transaction(func(tx *gorm.DB) error {
		if err := s.insertHeld(tx, c, p); err != nil {
			return err
		}
		return fn(tx)
	})
	if err != nil {
		c.state.set(endReleased)
		if errors.Is(err, ErrLostClaim) {
			return err
		}
		return fmt.Errorf("idempotency: persist claim: %w", err)
	}
	return nil
}

// PersistWith is Persist for the common case — a new key whose owner's
// first row is new too — as one statement: the claim's INSERT … ON
// CONFLICT DO NOTHING and the owner's INSERT run together, in one round
// trip and one commit (a payment's claim and ledger row, before the
// provider is called).
//
// insert is the owner's INSERT … SELECT … FROM claim (the claim's CTE: one
// row exactly when it won the key) … ON CONFLICT DO NOTHING RETURNING …;
// dest receive its returned row, and must take NULLs (*any, sql.Null…),
// which they get when it wrote none. The conflict is the owner's own row
// existing already (the key was released earlier, or its answer purged):
// the owner must read that row, not write one.
//
// ok is true when both rows were written. ok is false, with no error, when
// the claim was won but the owner's row exists: the claim is durable now,
// and the caller goes on with Persist, whose fn runs in a new transaction.
// ErrLostClaim when the key is taken: nothing was written.
// errors.ErrUnsupported when c is not held (durable, or on SQLite): use
// Persist.
func (s *Store) PersistWith(ctx context.Context, c Claim, insert clause.Expr, dest ...any) (ok bool, err error) {
	// One statement that touches only this request's rows: it may share a
	// round trip and a commit with other requests' (app/database/pipeline),
	// and is answered only once it has committed.
	db := pipeline.Session(s.db, ctx)
	if !c.Held() || db.Dialector.Name() != "postgres" {
		return false, errors.ErrUnsupported
	}
	c.held.mu.Lock()
	p := *c.held.pending
	c.held.mu.Unlock()
	now := dbclock.Now(db)
	rows, err := rawsql.Raw(db, `WITH claim AS (
  INSERT INTO idempotency_keys (merchant_id, key, request_hash, status, locked_until, lock_token, created_at, attempted_at)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?)
  ON CONFLICT DO NOTHING
  RETURNING 1
), resource AS (?)
SELECT (SELECT count(*) FROM claim) AS claimed, (SELECT count(*) FROM resource) AS written, resource.*
FROM (SELECT 1) AS one LEFT JOIN resource ON true`,
		p.MerchantID, p.Key, p.RequestHash, StatusInProgress, dbclock.Plus(db, p.Lease), c.Token, now, now,
		insert).Rows()
	var claimed, written int
	if err == nil {
		err = scanOne(rows, append([]any{&claimed, &written}, dest...)...)
	}
	switch {
	case lockTimedOut(err):
		c.held.setFound()
		return false, fmt.Errorf("idempotency: claim: %w (%w)", ErrLostClaim, ErrBusy)
	case err != nil:
		return false, fmt.Errorf("idempotency: claim: %w", err)
	case claimed != 1:
		c.held.setFound()
		c.held.take()
		c.held.end()
		c.state.set(endReleased)
		return false, fmt.Errorf("idempotency: claim: %w", ErrLostClaim)
	}
	c.held.take()
	c.held.end()
	return written == 1, nil
}

// Held reports whether the claim is still pending: not yet sent with the
// owner's first rows, nor released.
func (c Claim) Held() bool {
	if c.held == nil {
		return false
	}
	c.held.mu.Lock()
	defer c.held.mu.Unlock()
	return c.held.pending != nil
}

// heldClaim is the pending claim Claim returns for p on PostgreSQL. Its
// lease ends, by this process's clock, Lease after now: the INSERT that
// starts it is sent later, so the bound is conservative.
func (s *Store) heldClaim(p ClaimParams) Claim {
	c := s.newClaim(p.MerchantID, p.Key, uuid.NewString(), p.RequestHash, 0, time.Now().Add(p.Lease), false)
	c.held = &heldTx{pending: &p}
	return c
}
