package payments

import (
	"context"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/gateway/app/database/dbclock"
)

// The refunds ledger's statements. Every one names the merchant: the
// refunds table's primary key is (merchant_id, id).

// RefundByKey returns the refund made under an idempotency key, with its
// age by the database's clock.
func (s *Store) RefundByKey(ctx context.Context, tx *gorm.DB, merchantID, key string) (Refund, error) {
	var r Refund
	db := s.exec(ctx, tx)
	err := db.Select("*, ? AS age_seconds", dbclock.SecondsSince(db, "created_at")).
		Where("merchant_id = ? AND idempotency_key = ?", merchantID, key).Take(&r).Error
	return r, interpret("refund by key", err)
}

// GetRefund returns the merchant's refund with this id; another
// merchant's is ErrNotFound.
func (s *Store) GetRefund(ctx context.Context, merchantID, id string) (Refund, error) {
	var r Refund
	err := s.exec(ctx, nil).Where("merchant_id = ? AND id = ?", merchantID, id).Take(&r).Error
	return r, interpret("get refund", err)
}

// ListRefunds returns up to limit+1 of a payment's refunds, newest first,
// after the cursor when one is given.
func (s *Store) ListRefunds(ctx context.Context, merchantID, paymentID string, limit int, after *Cursor) ([]Refund, error) {
	q := s.exec(ctx, nil).Where("merchant_id = ? AND payment_id = ?", merchantID, paymentID)
	if after != nil {
		q = q.Where("(created_at < ?) OR (created_at = ? AND id < ?)", after.CreatedAt, after.CreatedAt, after.ID)
	}
	var out []Refund
	err := q.Order("created_at DESC, id DESC").Limit(limit + 1).Find(&out).Error
	return out, interpret("list refunds", err)
}

// openRefund are the states a settler may still move a refund from.
var openRefund = []RefundStatus{RefundPending, RefundRequiresReview}

// pendingRefunds returns a payment's refunds still open, for a
// provider's refund event.
func (s *Store) pendingRefunds(ctx context.Context, merchantID, paymentID string) ([]Refund, error) {
	var out []Refund
	err := s.exec(ctx, nil).Where("merchant_id = ? AND payment_id = ? AND status IN ?", merchantID, paymentID, openRefund).
		Order("created_at, id").Limit(100).Find(&out).Error
	return out, interpret("pending refunds", err)
}

// insertRefund writes r, stamped with the database's time.
func (s *Store) insertRefund(ctx context.Context, tx *gorm.DB, r *Refund) error {
	db := s.exec(ctx, tx)
	rows, err := db.Raw(`INSERT INTO refunds (merchant_id, id, payment_id, idempotency_key, amount, currency, status, reason,
  metadata, provider, provider_reference, provider_refund_id, failure_code, failure_message, request_hash, attempts,
  created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING created_at`,
		r.MerchantID, r.ID, r.PaymentID, r.IdempotencyKey, r.Amount, r.Currency, r.Status, r.Reason,
		r.Metadata, r.Provider, r.ProviderReference, r.ProviderRefundID, r.FailureCode, r.FailureMessage,
		r.RequestHash, r.Attempts, dbclock.Now(db), dbclock.Now(db)).Rows()
	if err != nil {
		return interpret("insert refund", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return interpret("insert refund", rows.Err())
	}
	var created any
	if err := rows.Scan(&created); err != nil {
		return interpret("insert refund", err)
	}
	at, err := dbclock.Parse(created)
	if err != nil {
		return interpret("insert refund", err)
	}
	r.CreatedAt, r.UpdatedAt = at, at
	return interpret("insert refund", rows.Close())
}

// reopenRefund starts a new attempt on a refund whose key was claimed
// again, conditional on the state the caller read (see Store.Reopen); the
// request's fields replace the old ones (after a certain non-refund
// nothing was refunded for them).
func (s *Store) reopenRefund(ctx context.Context, tx *gorm.DB, r *Refund, from RefundStatus, fromCode string, fromAttempts int) error {
	res := s.exec(ctx, tx).Model(&Refund{}).
		Where("merchant_id = ? AND id = ? AND status = ? AND failure_code = ? AND attempts = ?", r.MerchantID, r.ID, from, fromCode, fromAttempts).
		Updates(map[string]any{
			"status": r.Status, "failure_code": "", "failure_message": "", "attempts": r.Attempts,
			"amount": r.Amount, "reason": r.Reason, "metadata": r.Metadata,
			"request_hash": r.RequestHash, "updated_at": r.UpdatedAt,
		})
	if res.Error != nil {
		return interpret("reopen refund", res.Error)
	}
	if res.RowsAffected != 1 {
		return ErrConflict
	}
	return nil
}

// refundParams is a refund's state change.
type refundParams struct {
	Status         RefundStatus
	RefundID       string
	FailureCode    string
	FailureMessage string
	At             time.Time
}

func (f refundParams) applyTo(r *Refund) {
	r.Status, r.FailureCode, r.FailureMessage, r.UpdatedAt = f.Status, f.FailureCode, f.FailureMessage, f.At
	if f.RefundID != "" {
		r.ProviderRefundID = f.RefundID
	}
}

// finishRefund moves an open refund to its outcome; ok is false, with
// nothing written, when it is final already (another settler won).
func (s *Store) finishRefund(ctx context.Context, tx *gorm.DB, merchantID, id string, f refundParams) (ok bool, err error) {
	values := map[string]any{"status": f.Status, "failure_code": f.FailureCode, "failure_message": f.FailureMessage, "updated_at": f.At}
	if f.RefundID != "" {
		values["provider_refund_id"] = f.RefundID
	}
	res := s.exec(ctx, tx).Model(&Refund{}).
		Where("merchant_id = ? AND id = ? AND status IN ?", merchantID, id, openRefund).Updates(values)
	if res.Error != nil {
		return false, interpret("finish refund", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// succeededRefund returns the payment's succeeded refund under the
// provider reference, for a provider's event about it; ErrNotFound when
// there is none.
func (s *Store) succeededRefund(ctx context.Context, merchantID, paymentID, reference string) (Refund, error) {
	var r Refund
	err := s.exec(ctx, nil).Where("merchant_id = ? AND payment_id = ? AND provider_reference = ? AND status = ?",
		merchantID, paymentID, reference, RefundSucceeded).Take(&r).Error
	return r, interpret("succeeded refund", err)
}

// failSucceededRefund moves a succeeded refund to f (failed); ok is false,
// with nothing written, when it is no longer succeeded.
func (s *Store) failSucceededRefund(ctx context.Context, tx *gorm.DB, merchantID, id string, f refundParams) (ok bool, err error) {
	res := s.exec(ctx, tx).Model(&Refund{}).Where("merchant_id = ? AND id = ? AND status = ?", merchantID, id, RefundSucceeded).
		Updates(map[string]any{"status": f.Status, "failure_code": f.FailureCode, "failure_message": f.FailureMessage, "updated_at": f.At})
	if res.Error != nil {
		return false, interpret("fail succeeded refund", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// releasedRefunds returns a payment's refunds released as not_processed,
// for a provider's refund event: the refund may have landed after all.
func (s *Store) releasedRefunds(ctx context.Context, merchantID, paymentID string) ([]Refund, error) {
	var out []Refund
	err := s.exec(ctx, nil).Where("merchant_id = ? AND payment_id = ? AND status = ? AND failure_code = ?",
		merchantID, paymentID, RefundFailed, FailureNotProcessed).Order("created_at, id").Limit(100).Find(&out).Error
	return out, interpret("released refunds", err)
}

// reopenReleasedRefund moves a refund released as not_processed, still at
// attempt attempts, to f (succeeded, or pending); ok is false, with
// nothing written, when it moved on.
func (s *Store) reopenReleasedRefund(ctx context.Context, tx *gorm.DB, merchantID, id string, attempts int, f refundParams) (ok bool, err error) {
	values := map[string]any{"status": f.Status, "failure_code": "", "failure_message": "", "updated_at": f.At}
	if f.RefundID != "" {
		values["provider_refund_id"] = f.RefundID
	}
	res := s.exec(ctx, tx).Model(&Refund{}).
		Where("merchant_id = ? AND id = ? AND status = ? AND failure_code = ? AND attempts = ?",
			merchantID, id, RefundFailed, FailureNotProcessed, attempts).Updates(values)
	if res.Error != nil {
		return false, interpret("reopen refund", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// markRefundReview flags a pending refund requires_review; ok is false
// when it is no longer pending.
func (s *Store) markRefundReview(ctx context.Context, tx *gorm.DB, merchantID, id string, at time.Time) (ok bool, err error) {
	res := s.exec(ctx, tx).Model(&Refund{}).Where("merchant_id = ? AND id = ? AND status = ?", merchantID, id, RefundPending).
		Updates(map[string]any{"status": RefundRequiresReview, "updated_at": at})
	if res.Error != nil {
		return false, interpret("flag refund for review", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// reserve adds amount to the payment's amount_refunded in one conditional
// statement: only a succeeded payment, and only while the sum of its
// succeeded and pending refunds stays within its amount. Concurrent
// reservations queue on the payment's row and each re-checks the sum, so
// no interleaving of any number of requests on any number of instances
// refunds more than was charged. ok is false, with nothing written, when
// the refund does not fit.
func (s *Store) reserve(ctx context.Context, tx *gorm.DB, merchantID, paymentID string, amount int64) (ok bool, err error) {
	res := s.exec(ctx, tx).Exec(`UPDATE payments SET amount_refunded = amount_refunded + ?
WHERE id = ? AND merchant_id = ? AND status = ? AND amount_refunded + ? <= amount`,
		amount, paymentID, merchantID, StatusSucceeded, amount)
	if res.Error != nil {
		return false, interpret("reserve refund", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// lockPayment holds the payment's row until tx ends (PostgreSQL; SQLite
// serializes writing transactions already).
func (s *Store) lockPayment(ctx context.Context, tx *gorm.DB, merchantID, paymentID string) error {
	db := s.exec(ctx, tx)
	if db.Dialector.Name() != "postgres" {
		return nil
	}
	var ids []string
	err := db.Model(&Payment{}).Where("merchant_id = ? AND id = ?", merchantID, paymentID).
		Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate}).Pluck("id", &ids).Error
	return interpret("lock payment", err)
}

// inFlightCouldMakeRoom reports whether refunds of a payment other than
// except whose outcome is not yet final (pending, or left for review) hold
// enough that, were the provider to refuse them, amount would fit in what
// is left: their amounts are reserved, and come back if they fail.
func (s *Store) inFlightCouldMakeRoom(ctx context.Context, tx *gorm.DB, merchantID, paymentID, except string, amount int64) (bool, error) {
	var row struct{ Held, Room int64 }
	err := s.exec(ctx, tx).Raw(`SELECT COALESCE(sum(r.amount), 0) AS held, COALESCE(max(p.amount - p.amount_refunded), 0) AS room
FROM payments p LEFT JOIN refunds r ON r.merchant_id = p.merchant_id AND r.payment_id = p.id AND r.id <> ? AND r.status IN (?, ?)
WHERE p.merchant_id = ? AND p.id = ?`, except, RefundPending, RefundRequiresReview, merchantID, paymentID).Scan(&row).Error
	return row.Held > 0 && row.Room+row.Held >= amount, interpret("refunds in flight", err)
}

// unreserve gives a failed refund's amount back to the payment.
func (s *Store) unreserve(ctx context.Context, tx *gorm.DB, merchantID, paymentID string, amount int64) error {
	res := s.exec(ctx, tx).Exec(`UPDATE payments SET amount_refunded = amount_refunded - ?
WHERE id = ? AND merchant_id = ? AND amount_refunded >= ?`, amount, paymentID, merchantID, amount)
	if res.Error == nil && res.RowsAffected != 1 {
		return ErrConflict
	}
	return interpret("unreserve refund", res.Error)
}

// scheduleRefundRecheck has the refund looked up again after after (the
// database's time), in tx: the release's transaction.
func (s *Store) scheduleRefundRecheck(ctx context.Context, tx *gorm.DB, merchantID, refundID string, after time.Duration) error {
	db := s.exec(ctx, tx)
	err := db.Exec(`INSERT INTO refund_rechecks (merchant_id, refund_id, recheck_at) VALUES (?, ?, ?)
ON CONFLICT (merchant_id, refund_id) DO UPDATE SET recheck_at = excluded.recheck_at`,
		merchantID, refundID, dbclock.Plus(db, after)).Error
	return interpret("schedule refund recheck", err)
}

// refundRecheckDue reports when a released refund's recheck is due, and
// false when it has none (confirmed, or never released as not_processed).
func (s *Store) refundRecheckDue(ctx context.Context, tx *gorm.DB, merchantID, refundID string) (time.Time, bool, error) {
	var rows []struct{ RecheckAt time.Time }
	err := s.exec(ctx, tx).Table("refund_rechecks").Select("recheck_at").
		Where("merchant_id = ? AND refund_id = ?", merchantID, refundID).Scan(&rows).Error
	if err != nil || len(rows) == 0 {
		return time.Time{}, false, interpret("refund recheck", err)
	}
	return rows[0].RecheckAt, true, nil
}

// recheckReleasedRefundAgain schedules a released refund's recheck after
// after, as scheduleRefundRecheck, but outside the release's transaction:
// only while the refund is still released at attempts, the attempt the
// caller looked at. One sent again (and perhaps released again) since has
// its own recheck, which this must not move closer.
func (s *Store) recheckReleasedRefundAgain(ctx context.Context, merchantID, refundID string, attempts int, after time.Duration) error {
	db := s.exec(ctx, nil)
	err := db.Exec(`INSERT INTO refund_rechecks (merchant_id, refund_id, recheck_at)
SELECT CAST(? AS TEXT), CAST(? AS TEXT), ? WHERE EXISTS (SELECT 1 FROM refunds
  WHERE merchant_id = ? AND id = ? AND attempts = ? AND status = ? AND failure_code = ?)
ON CONFLICT (merchant_id, refund_id) DO UPDATE SET recheck_at = excluded.recheck_at`,
		merchantID, refundID, dbclock.Plus(db, after), merchantID, refundID, attempts, RefundFailed, FailureNotProcessed).Error
	return interpret("reschedule refund recheck", err)
}

// refundRecheckLater moves a refund's recheck to after from now (the
// database's time), or ends it (after <= 0) — only while the refund is
// still at attempts, the attempt the recheck looked at: a refund sent
// again and released again since has its own recheck, scheduled by that
// release, which this one must not end or move. Nor does it end a recheck
// moved since DueRefundRechecks took it (taken: its recheck_at then, as
// the database wrote it; empty for a refund not taken that way): a
// provider's event found the refund landed and held back by refunds in
// flight (recheckReleasedRefundAgain), which is newer news than this
// recheck's lookup.
func (s *Store) refundRecheckLater(ctx context.Context, merchantID, refundID string, attempts int, after time.Duration, taken string) error {
	db := s.exec(ctx, nil)
	same := ` AND NOT EXISTS (SELECT 1 FROM refunds WHERE refunds.merchant_id = ? AND refunds.id = ? AND refunds.attempts <> ?)`
	if after <= 0 {
		unmoved, vars := "", []any{merchantID, refundID}
		if taken != "" {
			unmoved, vars = " AND "+takenAt(db), append(vars, taken)
		}
		return interpret("end refund recheck", db.Exec(`DELETE FROM refund_rechecks WHERE merchant_id = ? AND refund_id = ?`+unmoved+same,
			append(vars, merchantID, refundID, attempts)...).Error)
	}
	return interpret("reschedule refund recheck", db.Exec(`UPDATE refund_rechecks SET recheck_at = ? WHERE merchant_id = ? AND refund_id = ?`+same,
		dbclock.Plus(db, after), merchantID, refundID, merchantID, refundID, attempts).Error)
}

// dueRefundRecheckMerchants is dueRecheckMerchants for refunds: the one
// statement of the refunds' recheck that spans merchants, a read without
// locks.
const dueRefundRecheckMerchants = `SELECT merchant_id FROM refund_rechecks
WHERE recheck_at < ?
GROUP BY merchant_id ORDER BY min(recheck_at) LIMIT ?`

// DueRefundRechecks takes refunds whose recheck is due, as DueRechecks
// takes payments: per merchant, in a transaction whose statements all
// name it, the due rows locked (SKIP LOCKED on PostgreSQL, so concurrent
// sweepers take disjoint ones) and their recheck moved lease ahead, so
// another sweeper takes one again only if this one died with it.
func (s *Store) DueRefundRechecks(ctx context.Context, limit int, lease time.Duration) ([]Refund, error) {
	var merchants []string
	db := s.exec(ctx, nil)
	if err := db.Raw(dueRefundRecheckMerchants, dbclock.Now(db), limit).Scan(&merchants).Error; err != nil {
		return nil, interpret("due refund rechecks", err)
	}
	var out []Refund
	for _, m := range merchants {
		if len(out) >= limit {
			break
		}
		var due []Refund
		err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			lock := ""
			if tx.Dialector.Name() == "postgres" {
				lock = " FOR UPDATE SKIP LOCKED"
			}
			var ids []string
			if err := tx.Raw(`SELECT refund_id FROM refund_rechecks WHERE merchant_id = ? AND recheck_at < ?
ORDER BY recheck_at, refund_id LIMIT ?`+lock, m, dbclock.Now(tx), limit-len(out)).Scan(&ids).Error; err != nil {
				return err
			}
			if len(ids) == 0 {
				return nil
			}
			if err := tx.Exec(`UPDATE refund_rechecks SET recheck_at = ? WHERE merchant_id = ? AND refund_id IN ?`,
				dbclock.Plus(tx, lease), m, ids).Error; err != nil {
				return err
			}
			var taken []struct{ RefundID, At string }
			if err := tx.Raw(`SELECT refund_id, `+takenText(tx)+` AS at FROM refund_rechecks WHERE merchant_id = ? AND refund_id IN ?`,
				m, ids).Scan(&taken).Error; err != nil {
				return err
			}
			if err := tx.Where("merchant_id = ? AND id IN ?", m, ids).Order("created_at, id").Find(&due).Error; err != nil {
				return err
			}
			for i := range due {
				for _, k := range taken {
					if k.RefundID == due[i].ID {
						due[i].recheckTaken = k.At
					}
				}
			}
			return nil
		})
		if err != nil {
			return out, interpret("due refund rechecks", err)
		}
		out = append(out, due...)
	}
	return out, nil
}
