package events

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/secretbox"
)

// resealBatch is how many endpoints one statement reads.
const resealBatch = 500

// Reseal seals every webhook endpoint's signing secret (and the previous
// one, after a rotation of the endpoint's secret) under box's current
// key, after MASTER_KEY was rotated. It returns how many endpoints it rewrote and names those whose
// secret opens under neither key (left as they are: their deliveries fail
// until the merchant rotates the secret). Safe beside serving instances
// and to run again: a row is replaced only if it still holds what was
// read, and one already under the current key is not written.
func (s *Store) Reseal(ctx context.Context, box *secretbox.Box) (n int, unreadable []string, err error) {
	db := s.db.WithContext(ctx)
	var after Endpoint
	for {
		var rows []Endpoint
		if err := db.Select("merchant_id", "id", "secret", "old_secret").
			Where("(merchant_id, id) > (?, ?)", after.MerchantID, after.ID).
			Order("merchant_id, id").Limit(resealBatch).Find(&rows).Error; err != nil {
			return n, unreadable, fmt.Errorf("events: reseal: %w", err)
		}
		for _, ep := range rows {
			done, ok, err := s.resealEndpoint(db, box, ep)
			if err != nil {
				return n, unreadable, err
			}
			if !ok {
				unreadable = append(unreadable, ep.MerchantID+"/"+ep.ID)
			}
			n += done
		}
		if len(rows) < resealBatch {
			return n, unreadable, nil
		}
		after = rows[len(rows)-1]
	}
}

// resealEndpoint reseals one endpoint's secrets: 1 if it rewrote the row,
// ok false if its secret opens under neither key. A row changed between
// the read and the write (a rotation of its secret) is read again, so a
// secret the rotation moved to old_secret is resealed too.
func (s *Store) resealEndpoint(db *gorm.DB, box *secretbox.Box, ep Endpoint) (done int, ok bool, err error) {
	for range resealTries {
		aad := secretAAD(ep.MerchantID, ep.ID)
		secret, changed, err := box.Reseal(aad, ep.Secret)
		if errors.Is(err, secretbox.ErrOpen) {
			return 0, false, nil
		}
		old := ep.OldSecret
		if old != nil {
			// One that does not open is left as it is: what cannot be
			// read is never rewritten (with MASTER_KEY_PREVIOUS unset, a
			// pass only checks), and secrets() signs without it.
			if resealed, oldChanged, err := box.Reseal(aad, old); err == nil && oldChanged {
				old, changed = resealed, true
			}
		}
		if !changed {
			return 0, true, nil
		}
		q := db.Model(&Endpoint{}).Where("merchant_id = ? AND id = ? AND secret = ?", ep.MerchantID, ep.ID, ep.Secret)
		if ep.OldSecret == nil {
			q = q.Where("old_secret IS NULL")
		} else {
			q = q.Where("old_secret = ?", ep.OldSecret)
		}
		res := q.UpdateColumns(map[string]any{"secret": secret, "old_secret": old})
		if res.Error != nil {
			return 0, true, fmt.Errorf("events: reseal %s/%s: %w", ep.MerchantID, ep.ID, res.Error)
		}
		if res.RowsAffected == 1 {
			return 1, true, nil
		}
		err = db.Select("merchant_id", "id", "secret", "old_secret").
			Where("merchant_id = ? AND id = ?", ep.MerchantID, ep.ID).Take(&ep).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return 0, true, nil // deleted meanwhile
		}
		if err != nil {
			return 0, true, fmt.Errorf("events: reseal %s/%s: %w", ep.MerchantID, ep.ID, err)
		}
	}
	return 0, true, fmt.Errorf("events: reseal %s/%s: changed by others %d times in a row; run reseal again", ep.MerchantID, ep.ID, resealTries)
}

// resealTries is how often a re-seal reads a row again that changed
// between its read and its write before it gives up.
const resealTries = 5
