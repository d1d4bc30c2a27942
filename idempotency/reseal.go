package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/oncepay/gateway/app/secretbox"
)

// resealBatch is how many sealed answers one statement reads.
const resealBatch = 500

// Reseal seals every stored answer that shows a secret under the store's
// box's current key, after MASTER_KEY was rotated, and returns how many it
// rewrote. An answer that opens under neither key is counted in
// unreadable and left: its replay is refused as it would be anyway. Safe
// beside serving instances and to run again: an answer is replaced only
// if it still is what was read, and one already under the current key is
// not written. Without the pass such answers still replay while
// MASTER_KEY_PREVIOUS is set, until they are purged with their keys.
func (s *Store) Reseal(ctx context.Context) (n, unreadable int, err error) {
	if s.box == nil {
		return 0, 0, errors.New("idempotency: reseal needs SealWith")
	}
	db := s.exec(ctx, nil)
	var after Record
	for {
		var rows []Record
		// substr reads a bytea (PostgreSQL) or a blob (SQLite) bytewise.
		if err := db.Select("merchant_id", "key", "response").
			Where("(merchant_id, key) > (?, ?) AND status = ? AND substr(response, 1, ?) = ?",
				after.MerchantID, after.Key, StatusDone, len(sealedPrefix), sealedPrefix).
			Order("merchant_id, key").Limit(resealBatch).Find(&rows).Error; err != nil {
			return n, unreadable, fmt.Errorf("idempotency: reseal: %w", err)
		}
		for _, r := range rows {
			if !bytes.HasPrefix(r.Body, sealedPrefix) {
				continue
			}
			blob, changed, err := s.box.Reseal(sealAAD(r.MerchantID, r.Key), r.Body[len(sealedPrefix):])
			if errors.Is(err, secretbox.ErrOpen) {
				unreadable++
				continue
			}
			if err != nil || !changed {
				continue
			}
			res := db.Model(&Record{}).Where("merchant_id = ? AND key = ? AND response = ?", r.MerchantID, r.Key, r.Body).
				UpdateColumn("response", append(bytes.Clone(sealedPrefix), blob...))
			if res.Error != nil {
				return n, unreadable, fmt.Errorf("idempotency: reseal: %w", res.Error)
			}
			n += int(res.RowsAffected)
		}
		if len(rows) < resealBatch {
			return n, unreadable, nil
		}
		after = rows[len(rows)-1]
	}
}
