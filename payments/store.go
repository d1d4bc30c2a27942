package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/gateway/app/database/dbclock"
)

// Store keeps payments. Every read is scoped to a merchant, and every
// write addresses a payment by its whole primary key, (merchant_id, id):
// on a table sharded by merchant (README, "Sharding by merchant") that is
// what routes a statement to one shard. The key being whole matters for the plan too: a
// WHERE naming only a prefix of some index (merchant_id) once tied, on a
// table without statistics, with the list index, and connections that
// cached that plan scanned all of the merchant's payments on every write
// — the bench's rate fell as the table grew (plan_test.go). Methods that
// take tx run on it (a transaction or nil for the store's pool).
type Store struct{ db *gorm.DB }

// NewStore returns a store over db.
func NewStore(db *gorm.DB) *Store { return &Store{db: db} }

func (s *Store) exec(ctx context.Context, tx *gorm.DB) *gorm.DB {
	if tx == nil {
		tx = s.db
	}
	return tx.WithContext(ctx)
}

func interpret(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gorm.ErrRecordNotFound):
		return ErrNotFound
	default:
		return fmt.Errorf("payments: %s: %w", op, err)
	}
}

// Get returns the merchant's payment with this id; another merchant's id is
// ErrNotFound, exactly like an id that does not exist. The row is found by
// its primary key (see Store).
func (s *Store) Get(ctx context.Context, merchantID, id string) (Payment, error) {
	var p Payment
	err := s.exec(ctx, nil).Where("merchant_id = ? AND id = ?", merchantID, id).Take(&p).Error
	return p, interpret("get", err)
}

// getTx is Get on the caller's transaction.
func (s *Store) getTx(ctx context.Context, tx *gorm.DB, merchantID, id string) (Payment, error) {
	var p Payment
	err := s.exec(ctx, tx).Where("merchant_id = ? AND id = ?", merchantID, id).Take(&p).Error
	return p, interpret("get", err)
}

// getForUpdate is getTx under the payment's row lock until tx ends
// (PostgreSQL; SQLite's transactions take the database's write lock as
// they begin).
func (s *Store) getForUpdate(ctx context.Context, tx *gorm.DB, merchantID, id string) (Payment, error) {
	var p Payment
	db := s.exec(ctx, tx)
	if db.Dialector.Name() == "postgres" {
		db = db.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
	}
	err := db.Where("merchant_id = ? AND id = ?", merchantID, id).Take(&p).Error
	return p, interpret("get", err)
}

// GetByKey returns the payment made under an idempotency key, with its
// age by the database's clock (AgeSeconds).
func (s *Store) GetByKey(ctx context.Context, tx *gorm.DB, merchantID, key string) (Payment, error) {
	var p Payment
	db := s.exec(ctx, tx)
	err := db.Select("*, ? AS age_seconds", dbclock.SecondsSince(db, "created_at")).
		Where("merchant_id = ? AND idempotency_key = ?", merchantID, key).Take(&p).Error
	return p, interpret("get by key", err)
}

// GetByReference returns the merchant's payment with our provider reference.
func (s *Store) GetByReference(ctx context.Context, merchantID, reference string) (Payment, error) {
	var p Payment
	err := s.exec(ctx, nil).Where("merchant_id = ? AND provider_reference = ?", merchantID, reference).Take(&p).Error
	return p, interpret("get by reference", err)
}

// GetByTransactionID returns the merchant's payment the provider knows by
// its own transaction id, through payment_transactions (so payments needs
// no index on it and its completion stays a HOT update, migration 14). The
// events that name a payment by nothing else are refunds' (Flutterwave's
// by tx_id, Stripe's charge.refunded by its PaymentIntent), and a refund
// event only matters for a refund the gateway made: so the lookup row is
// written when a refund of the payment is created or tried again
// (recordTransaction), not by the writes that set the id. A payment never
// refunded through the gateway — nearly all of them — is not found by it,
// and costs PostgreSQL one row and one index entry fewer. An id-only event
// for a refund made outside the gateway (on the provider's dashboard) is
// therefore answered "ignored" where it was "final" before: there is
// nothing of ours to settle either way.
func (s *Store) GetByTransactionID(ctx context.Context, merchantID, provider, txID string) (Payment, error) {
	var p Payment
	err := s.exec(ctx, nil).Where(`merchant_id = ? AND provider = ? AND id = (
  SELECT payment_id FROM payment_transactions WHERE merchant_id = ? AND provider = ? AND transaction_id = ?)`,
		merchantID, provider, merchantID, provider, txID).
		Take(&p).Error
	return p, interpret("get by transaction id", err)
}

// recordTransaction writes the lookup row of the payment's transaction id
// (GetByTransactionID), in tx: the transaction that creates a refund of
// it. Only a succeeded payment is refunded, and its transaction id is
// final by then. Rows written by earlier versions at every completion
// stay, and are found the same way.
func (s *Store) recordTransaction(ctx context.Context, tx *gorm.DB, merchantID, id string) error {
	err := tx.WithContext(ctx).Exec(`INSERT INTO payment_transactions (merchant_id, provider, transaction_id, payment_id)
  SELECT merchant_id, provider, provider_transaction_id, id FROM payments
  WHERE merchant_id = ? AND id = ? AND provider_transaction_id <> ''
  ON CONFLICT DO NOTHING`, merchantID, id).Error
	return interpret("record transaction", err)
}

// insertPayment is InsertNew's statement, written out: it runs once per
// new payment, and GORM's Create spends more CPU reflecting over Payment
// and building the statement than pgx spends sending it. Every column of
// the table is listed (TestInsertNewStoresEveryField reads them back).
// created_at is the database's time, returned so the answer shows it.
const insertPayment = `INSERT INTO payments (id, merchant_id, idempotency_key, amount, currency, status, provider,
  provider_reference, provider_transaction_id, failure_code, failure_message,
  email, payment_method, description, metadata, attempts, request_hash, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (merchant_id, idempotency_key) DO NOTHING
RETURNING created_at`

// InsertNew writes p unless the merchant's key already has a payment
// (inserted is false then, and nothing was written). It sets p.CreatedAt
// (and p.UpdatedAt) to the database's time.
func (s *Store) InsertNew(ctx context.Context, tx *gorm.DB, p *Payment) (inserted bool, err error) {
	db := s.exec(ctx, tx)
	rows, err := db.Raw(insertPayment,
		p.ID, p.MerchantID, p.IdempotencyKey, p.Amount, p.Currency, p.Status, p.Provider,
		p.ProviderReference, p.ProviderTransactionID, p.FailureCode, p.FailureMessage,
		p.Email, p.PaymentMethod, p.Description, p.Metadata, p.Attempts, p.RequestHash,
		dbclock.Now(db), dbclock.Now(db)).Rows()
	if err != nil {
		return false, interpret("insert", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return false, interpret("insert", rows.Err())
	}
	var created any
	if err := rows.Scan(&created); err != nil {
		return false, interpret("insert", err)
	}
	if err := SetCreated(p, created); err != nil {
		return false, err
	}
	return true, interpret("insert", rows.Close())
}

// insertClaimedPayment is insertPayment as the second half of the claim's
// own statement (idempotency.Store.PersistWith): the ledger row selected
// FROM claim, so it is written exactly when the key was won, in the same
// round trip and commit. Its conflict (the key has a payment already) is
// decided by the unique index itself, not by a read: a read by (merchant,
// key) ties with the primary key's merchant prefix on a table without
// statistics, and a guard written as one scanned all of a merchant's
// payments per payment in the bench (plan_test.go).
const insertClaimedPayment = `INSERT INTO payments (id, merchant_id, idempotency_key, amount, currency, status, provider,
  provider_reference, provider_transaction_id, failure_code, failure_message,
  email, payment_method, description, metadata, attempts, request_hash, created_at, updated_at)
SELECT ?, ?, ?, CAST(? AS bigint), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, CAST(? AS integer), ?, ?, ?
FROM claim
ON CONFLICT (merchant_id, idempotency_key) DO NOTHING
RETURNING created_at`

// ClaimedInsert is the ledger row of p as the owner's half of its key's
// claim (idempotency.Store.PersistWith); SetCreated applies the
// created_at it returns.
func (s *Store) ClaimedInsert(p *Payment) clause.Expr {
	now := dbclock.Now(s.db)
	return clause.Expr{SQL: insertClaimedPayment, Vars: []any{
		p.ID, p.MerchantID, p.IdempotencyKey, p.Amount, p.Currency, p.Status, p.Provider,
		p.ProviderReference, p.ProviderTransactionID, p.FailureCode, p.FailureMessage,
		p.Email, p.PaymentMethod, p.Description, p.Metadata, p.Attempts, p.RequestHash, now, now}}
}

// SetCreated sets p's creation (and update) time to created, a timestamp
// as the database returned it.
func SetCreated(p *Payment, created any) error {
	at, err := dbclock.Parse(created)
	if err != nil {
		return interpret("insert", err)
	}
	p.CreatedAt, p.UpdatedAt = at, at
	return nil
}

// adoptHash moves a final payment made before fingerprints were
// canonical, whose request_hash is from (the raw body's hash), to to: the
// canonical fingerprint of the byte-identical retry answered from it, in
// that retry's claim transaction. Its key, claimed under to, and its row
// then agree, so a sweeper that completes the key after the retry died
// does not take it for another request's (anotherRequests) and release
// it. (Refunds came after canonical fingerprints: none holds a raw one.)
func (s *Store) adoptHash(ctx context.Context, tx *gorm.DB, merchantID, id, from, to string) error {
	return interpret("adopt fingerprint", s.exec(ctx, tx).Table("payments").
		Where("merchant_id = ? AND id = ? AND request_hash = ?", merchantID, id, from).
		Update("request_hash", to).Error)
}

// Reopen starts a new attempt on a payment whose key was claimed again —
// after a release (from) or a takeover — conditional on the payment still
// being in the state the caller read (status from, and failure code when
// failed), so it can never undo a settlement that landed meanwhile (a
// recheck or webhook that found the charge). The request's fields replace
// the old ones (nothing was charged for them; a request with other fields
// is refused before this, by fingerprint) and the status goes back to
// processing. The reference never changes. ErrConflict when the payment
// moved on.
func (s *Store) Reopen(ctx context.Context, tx *gorm.DB, p *Payment, from Status, fromCode string) error {
	res := s.exec(ctx, tx).Model(&Payment{}).
		Where("merchant_id = ? AND id = ? AND status = ? AND failure_code = ?", p.MerchantID, p.ID, from, fromCode).
		Updates(map[string]any{
			"amount": p.Amount, "currency": p.Currency, "email": p.Email,
			"payment_method": p.PaymentMethod, "description": p.Description,
			"metadata": p.Metadata, "provider": p.Provider, "status": p.Status,
			"failure_code": "", "failure_message": "", "attempts": p.Attempts,
			"request_hash": p.RequestHash, "recheck_at": nil,
			"updated_at": p.UpdatedAt,
		})
	if res.Error != nil {
		return interpret("reopen", res.Error)
	}
	if res.RowsAffected != 1 {
		return ErrConflict
	}
	p.RecheckAt = nil
	return nil
}

// finishParams is a state change of a payment.
type finishParams struct {
	Status         Status
	TransactionID  string
	FailureCode    string
	FailureMessage string
	At             time.Time
	// RecheckAfter, when positive, schedules one more lookup that long
	// after now (the database's clock): for a release as never charged.
	RecheckAfter time.Duration
}

// applyTo is what Finish writes, on the caller's copy of the payment.
func (f finishParams) applyTo(p *Payment) {
	p.Status, p.FailureCode, p.FailureMessage, p.UpdatedAt = f.Status, f.FailureCode, f.FailureMessage, f.At
	if f.TransactionID != "" {
		p.ProviderTransactionID = f.TransactionID
	}
}

// Finish moves a payment that is still open (processing or under review)
// to a new state. The condition makes concurrent settlers (owner, sweeper,
// webhook) harmless: a payment already final is left alone and ok is false.
func (s *Store) Finish(ctx context.Context, tx *gorm.DB, merchantID, id string, f finishParams) (ok bool, err error) {
	values := map[string]any{
		"status": f.Status, "failure_code": f.FailureCode, "failure_message": f.FailureMessage,
		"updated_at": f.At,
	}
	if f.TransactionID != "" {
		values["provider_transaction_id"] = f.TransactionID
	}
	db := s.exec(ctx, tx)
	if f.RecheckAfter > 0 {
		values["recheck_at"] = dbclock.Plus(db, f.RecheckAfter)
	}
	res := db.Model(&Payment{}).
		Where("merchant_id = ? AND id = ? AND status IN ?", merchantID, id,
			[]Status{StatusProcessing, StatusRequiresReview}).
		Updates(values)
	if res.Error != nil {
		return false, interpret("finish", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// finishClaimed is Finish as the write of idempotency.Store.CompleteWith:
// the same conditional UPDATE, applied only while the request's claim still
// owns its key (the CTE named claim), so the payment's final state and the
// key's stored answer are one statement. The payment must be the claim's:
// its idempotency key is checked too.
func finishClaimed(merchantID, id, key string, f finishParams) clause.Expr {
	return clause.Expr{SQL: `UPDATE payments
  SET status = ?, failure_code = ?, failure_message = ?, updated_at = ?,
      provider_transaction_id = CASE WHEN ?::text = '' THEN provider_transaction_id ELSE ? END
  WHERE merchant_id = ? AND id = ? AND idempotency_key = ? AND status IN (?, ?) AND EXISTS (SELECT 1 FROM claim)
  RETURNING 1`, Vars: []any{
		f.Status, f.FailureCode, f.FailureMessage, f.At,
		f.TransactionID, f.TransactionID,
		merchantID, id, key, StatusProcessing, StatusRequiresReview,
	}}
}

// ListParams selects a page of payments, newest first.
type ListParams struct {
	Status      Status     // optional filters
	CreatedFrom *time.Time // inclusive
	CreatedTo   *time.Time // exclusive
	Email       string
	// Metadata selects payments whose metadata holds every one of these
	// key/value pairs (keys are checked by the handler: [A-Za-z0-9_.-]).
	// On PostgreSQL a GIN index on metadata::jsonb serves the containment
	// test; on SQLite (development) it is a scan of the merchant's rows.
	Metadata map[string]string
	Limit    int
	// After continues a listing: only payments older than this one (by
	// created_at, then id) are returned.
	After *Cursor
}

// Cursor is a position in a listing.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// List returns up to p.Limit+1 payments so the caller can tell whether
// there is another page.
func (s *Store) List(ctx context.Context, merchantID string, p ListParams) ([]Payment, error) {
	q := s.exec(ctx, nil).Where("merchant_id = ?", merchantID)
	if p.Status != "" {
		q = q.Where("status = ?", p.Status)
	}
	if p.CreatedFrom != nil {
		q = q.Where("created_at >= ?", p.CreatedFrom.UTC())
	}
	if p.CreatedTo != nil {
		q = q.Where("created_at < ?", p.CreatedTo.UTC())
	}
	if p.Email != "" {
		q = q.Where("email = ?", p.Email)
	}
	if len(p.Metadata) > 0 {
		if q.Dialector.Name() == "postgres" {
			want, _ := json.Marshal(p.Metadata)
			q = q.Where("metadata::jsonb @> ?::jsonb", string(want))
		} else {
			for k, v := range p.Metadata {
				q = q.Where("json_extract(metadata, ?) = ?", `$."`+k+`"`, v)
			}
		}
	}
	if p.After != nil {
		q = q.Where("(created_at < ?) OR (created_at = ? AND id < ?)", p.After.CreatedAt, p.After.CreatedAt, p.After.ID)
	}
	var out []Payment
	err := q.Order("created_at DESC, id DESC").Limit(p.Limit + 1).Find(&out).Error
	return out, interpret("list", err)
}

// reopenSettled moves a payment released as never charged (failed with a
// retryable code) to the final state the provider reports after all, and
// ends its recheck; ok is false, with nothing written, when the payment is
// no longer in that state, or no longer at that attempt (a retry re-opened
// it, or another settler was first).
func (s *Store) reopenSettled(ctx context.Context, tx *gorm.DB, merchantID, id string, attempts int, f finishParams) (ok bool, err error) {
	values := map[string]any{
		"status": f.Status, "failure_code": f.FailureCode, "failure_message": f.FailureMessage,
		"recheck_at": nil, "updated_at": f.At,
	}
	if f.TransactionID != "" {
		values["provider_transaction_id"] = f.TransactionID
	}
	res := s.exec(ctx, tx).Model(&Payment{}).
		Where("merchant_id = ? AND id = ? AND status = ? AND failure_code IN ? AND attempts = ?", merchantID, id, StatusFailed, retryableCodes, attempts).
		Updates(values)
	if res.Error != nil {
		return false, interpret("reopen settled", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// DueRechecks takes up to limit payments whose recheck time has come, and
// moves their recheck lease forward so no other sweeper takes them
// meanwhile: selected FOR UPDATE SKIP LOCKED on PostgreSQL (disjoint sets
// for concurrent sweepers) and pushed out by lease in the same transaction.
//
// It works merchant by merchant: one unlocked read finds the merchants
// with a recheck due (dueRecheckMerchants), then each merchant's payments
// are taken in a transaction of their own whose statements all name that
// merchant, so on a table sharded by merchant each touches one shard (and
// Citus allows SKIP LOCKED only there).
func (s *Store) DueRechecks(ctx context.Context, limit int, lease time.Duration) ([]Payment, error) {
	var merchants []string
	db := s.exec(ctx, nil)
	if err := db.Raw(dueRecheckMerchants, dbclock.Now(db), limit).Scan(&merchants).Error; err != nil {
		return nil, interpret("due rechecks", err)
	}
	var out []Payment
	for _, m := range merchants {
		if len(out) >= limit {
			break
		}
		var due []Payment
		err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			q := tx
			if tx.Dialector.Name() == "postgres" {
				q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked})
			}
			if err := q.Select("*, ? AS age_seconds", dbclock.SecondsSince(tx, "created_at")).
				Where("merchant_id = ? AND recheck_at IS NOT NULL AND recheck_at < ?", m, dbclock.Now(tx)).
				Order("recheck_at, id").Limit(limit - len(out)).Find(&due).Error; err != nil {
				return err
			}
			if len(due) == 0 {
				return nil
			}
			ids := make([]string, len(due))
			for i := range due {
				ids[i] = due[i].ID
			}
			if err := tx.Model(&Payment{}).Where("merchant_id = ? AND id IN ?", m, ids).
				UpdateColumn("recheck_at", dbclock.Plus(tx, lease)).Error; err != nil {
				return err
			}
			// News from before this take is what its lookup will see.
			if err := tx.Exec(`DELETE FROM payment_recheck_news WHERE merchant_id = ? AND payment_id IN ?`, m, ids).Error; err != nil {
				return err
			}
			var taken []struct{ ID, At string }
			if err := tx.Raw(`SELECT id, `+takenText(tx)+` AS at FROM payments WHERE merchant_id = ? AND id IN ?`,
				m, ids).Scan(&taken).Error; err != nil {
				return err
			}
			at := make(map[string]string, len(taken))
			for _, r := range taken {
				at[r.ID] = r.At
			}
			for i := range due {
				due[i].recheckTaken = at[due[i].ID]
			}
			return nil
		})
		if err != nil {
			return out, interpret("due rechecks", err)
		}
		out = append(out, due...)
	}
	return out, nil
}

// dueRecheckMerchants lists the merchants with a recheck due, oldest due
// first, at most the batch's size of them. It is the one statement of the
// recheck that spans merchants: a read without locks (on a sharded table, a
// multi-shard SELECT, which Citus runs as such); the locking happens per
// merchant. It reads the partial index of payments awaiting a recheck.
const dueRecheckMerchants = `SELECT merchant_id FROM payments
WHERE recheck_at IS NOT NULL AND recheck_at < ?
GROUP BY merchant_id ORDER BY min(recheck_at) LIMIT ?`

// RecheckLater sets when a payment released as never charged is looked up
// again (the database's time + after), or ends its recheck (after <= 0):
// the last lookup found nothing and the failure is final for good. p is
// the payment as the lookup saw it. ok is false when the payment is no
// longer awaiting that recheck: a retry re-opened it meanwhile (its
// attempts moved on, and it may have sent a charge the lookup could not
// have seen), or a provider's event asked for a look since the sweeper
// took it (LookAgainBy), which is newer news than this lookup: the recheck
// then stays due when the sweeper's lease ends, for another look.
func (s *Store) RecheckLater(ctx context.Context, p Payment, after time.Duration) (ok bool, err error) {
	return s.lookLater(ctx, p, after)
}

// lookLater is RecheckLater for a payment of any status: a watched
// resolution is final, succeeded or failed (Service.watchResolution).
//
// The recheck's bookkeeping (here, DueRechecks, LookAgainBy) writes
// recheck_at alone (UpdateColumn): updated_at is when the payment last
// changed, which a merchant reads and a watched resolution's week counts
// from.
func (s *Store) lookLater(ctx context.Context, p Payment, after time.Duration) (ok bool, err error) {
	var at any
	if after > 0 {
		at = dbclock.Plus(s.db, after)
	}
	if p.recheckTaken == "" {
		res := s.exec(ctx, nil).Model(&Payment{}).
			Where("merchant_id = ? AND id = ? AND status = ? AND recheck_at IS NOT NULL AND attempts = ?", p.MerchantID, p.ID, p.Status, p.Attempts).
			UpdateColumn("recheck_at", at)
		return res.RowsAffected == 1, interpret("recheck later", res.Error)
	}
	// A sweeper's take: written only while recheck_at is still that take
	// (not taken again since, nor brought forward by news) and no news
	// came since. Under the payment's row lock, which LookAgainBy takes
	// too: news is either recorded before this reads it, or recorded
	// after this commits, and then schedules a look of its own.
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []string
		q := tx.Model(&Payment{}).
			Where("merchant_id = ? AND id = ? AND status = ? AND attempts = ?", p.MerchantID, p.ID, p.Status, p.Attempts).
			Where(takenAt(tx), p.recheckTaken)
		if tx.Dialector.Name() == "postgres" {
			q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
		}
		if err := q.Pluck("id", &ids).Error; err != nil || len(ids) == 0 {
			return err
		}
		var news int64
		if err := tx.Table("payment_recheck_news").Where("merchant_id = ? AND payment_id = ?", p.MerchantID, p.ID).
			Count(&news).Error; err != nil || news > 0 {
			return err
		}
		res := tx.Model(&Payment{}).Where("merchant_id = ? AND id = ?", p.MerchantID, p.ID).UpdateColumn("recheck_at", at)
		ok = res.RowsAffected == 1
		return res.Error
	})
	return ok, interpret("recheck later", err)
}

// takenText is recheck_at as a take reads it back, and takenAt compares
// recheck_at with that text. On PostgreSQL the text is ISO 8601 in UTC to
// the microsecond, whatever the session's TimeZone and DateStyle (which
// shape CAST(… AS TEXT)), and is compared as the instant it names; on
// SQLite it is the stored text itself.
func takenText(db *gorm.DB) string {
	if db.Dialector.Name() == "postgres" {
		return `to_char(recheck_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
	}
	return "CAST(recheck_at AS TEXT)"
}

func takenAt(db *gorm.DB) string {
	if db.Dialector.Name() == "postgres" {
		return "recheck_at = CAST(? AS TIMESTAMPTZ)"
	}
	return "CAST(recheck_at AS TEXT) = ?"
}

// LookAgainBy makes sure a final payment of status (at its attempts) is
// looked up by the sweeper within after: its recheck is set to the
// database's time + after unless one is due sooner. For news a webhook
// brought that the gateway could not look at then (webhookLookupRefused).
//
// A recheck due sooner may be a sweeper's take with its lookup in flight,
// made before this news: the news is recorded too (payment_recheck_news),
// under the payment's row lock as lookLater reads it, and keeps that
// lookup from ending the recheck when it finds nothing; the look then
// comes again when the take's lease ends. Copies of an event, once a look
// is due within after and the news recorded, only read. Never later:
// copies cannot put a look off.
func (s *Store) LookAgainBy(ctx context.Context, merchantID, id string, status Status, attempts int, after time.Duration) error {
	db := s.exec(ctx, nil)
	var seen struct{ Due, Noted bool }
	if err := db.Raw(`SELECT recheck_at IS NOT NULL AND recheck_at <= ? AS due,
  EXISTS (SELECT 1 FROM payment_recheck_news n WHERE n.merchant_id = payments.merchant_id AND n.payment_id = payments.id) AS noted
FROM payments WHERE merchant_id = ? AND id = ? AND status = ? AND attempts = ?`,
		dbclock.Plus(db, after), merchantID, id, status, attempts).Scan(&seen).Error; err != nil {
		return interpret("look again", err)
	}
	if seen.Due && seen.Noted {
		return nil
	}
	return interpret("look again", s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []string
		q := tx.Model(&Payment{}).Where("merchant_id = ? AND id = ? AND status = ? AND attempts = ?", merchantID, id, status, attempts)
		if tx.Dialector.Name() == "postgres" {
			q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
		}
		if err := q.Pluck("id", &ids).Error; err != nil || len(ids) == 0 {
			return err
		}
		at := dbclock.Plus(tx, after)
		if err := tx.Model(&Payment{}).Where("merchant_id = ? AND id = ? AND (recheck_at IS NULL OR recheck_at > ?)", merchantID, id, at).
			UpdateColumn("recheck_at", at).Error; err != nil {
			return err
		}
		return tx.Exec(`INSERT INTO payment_recheck_news (merchant_id, payment_id)
SELECT merchant_id, id FROM payments WHERE merchant_id = ? AND id = ?
ON CONFLICT (merchant_id, payment_id) DO NOTHING`, merchantID, id).Error
	}))
}

// MarkReview flags a payment still processing for a human; ok is false
// when it was not processing any more.
func (s *Store) MarkReview(ctx context.Context, tx *gorm.DB, merchantID, id string, at time.Time) (ok bool, err error) {
	res := s.exec(ctx, tx).Model(&Payment{}).
		Where("merchant_id = ? AND id = ? AND status = ?", merchantID, id, StatusProcessing).
		Updates(map[string]any{"status": StatusRequiresReview, "updated_at": at})
	return res.RowsAffected == 1, interpret("mark review", res.Error)
}
