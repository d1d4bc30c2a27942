package idempotency

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
)

// lockTimedOut reports PostgreSQL's lock_not_available (55P03), the error
// of a statement that waited longer than lock_timeout.
func lockTimedOut(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "55P03"
}

// heldTx is the open transaction of a claim made with ClaimParams.Hold.
//
// Why hold it: a payment must be written to the ledger before the provider
// is called (so a crash mid-call leaves something to look up), and the key
// must be claimed before that. Committing the claim and the ledger row
// separately would cost a payment three commits; holding the claim's
// transaction open until the owner has written its first rows makes it two
// (claim + ledger row, then final state + stored answer), and makes a
// validation failure cost none: Release is a rollback.
//
// Only on PostgreSQL: SQLite has one writer, so a held transaction would
// stall every other request; there a claim commits at once (one commit
// more per payment, for a development store).
//
// A concurrent claimer of the same key waits on the uncommitted row until
// the owner persists or releases, or until the connection's lock_timeout
// (database.LockTimeout), and then answers "in use" (ErrBusy), which is
// what it is. Hence the rule for an owner while its claim is held: use only
// the claim's transaction (through Persist), never a second pooled
// connection — a storm of waiters on the same key may hold the rest of the
// pool meanwhile.
type heldTx struct {
	mu sync.Mutex
	tx *gorm.DB
	// ended, if set, is called once the transaction has committed or
	// rolled back (the middleware's admission gate: see Config.Admit).
	ended func()
}

// end reports that the transaction take returned has ended.
func (h *heldTx) end() {
	if h != nil && h.ended != nil {
		h.ended()
	}
}

// take removes and returns the open transaction, or nil if the claim is
// durable (never held, or already persisted or released).
func (h *heldTx) take() *gorm.DB {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	tx := h.tx
	h.tx = nil
	return tx
}

// Persist makes the claim durable, running fn (which may be nil) in the
// same commit: for a held claim, fn runs in the claim's open transaction,
// which then commits; for a durable claim (a takeover, or one already
// persisted), fn runs in a new transaction. If fn fails, its writes roll
// back — and so does a held claim, which is then released (nothing was
// ever visible, so nothing can have happened because of it).
func (s *Store) Persist(ctx context.Context, c Claim, fn func(tx *gorm.DB) error) error {
	tx := c.held.take()
	if tx == nil {
		if fn == nil {
			return nil
		}
		return s.exec(ctx, nil).Transaction(fn)
	}
	defer c.held.end()
	if fn != nil {
		if err := fn(tx.WithContext(ctx)); err != nil {
			tx.Rollback()
			c.state.set(endReleased)
			return err
		}
	}
	if err := tx.Commit().Error; err != nil {
		return fmt.Errorf("idempotency: persist claim: %w", err)
	}
	return nil
}

// Held reports whether the claim still waits in an open transaction.
func (c Claim) Held() bool {
	if c.held == nil {
		return false
	}
	c.held.mu.Lock()
	defer c.held.mu.Unlock()
	return c.held.tx != nil
}
