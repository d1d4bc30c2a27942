package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/oncepay/gateway/app/secretbox"
)

// resealBatch is how many endpoints one statement reads.
const resealBatch = 500

// Reseal seals every webhook endpoint's signing secret (and the previous
// one, while it still signs) under box's current key, after MASTER_KEY was
// rotated. It returns how many endpoints it rewrote and names those whose
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
			aad := secretAAD(ep.MerchantID, ep.ID)
			secret, changed, err := box.Reseal(aad, ep.Secret)
			if errors.Is(err, secretbox.ErrOpen) {
				unreadable = append(unreadable, ep.MerchantID+"/"+ep.ID)
				continue
			}
			old := ep.OldSecret
			if old != nil {
				// An old secret that no longer opens is one whose grace
				// period the previous key outlived; it is not worth a
				// complaint, only not carrying forward.
				var oldChanged bool
				if old, oldChanged, err = box.Reseal(aad, ep.OldSecret); err != nil {
					old, oldChanged = nil, true
				}
				changed = changed || oldChanged
			}
			if !changed {
				continue
			}
			q := db.Model(&Endpoint{}).Where("merchant_id = ? AND id = ? AND secret = ?", ep.MerchantID, ep.ID, ep.Secret)
			if ep.OldSecret == nil {
				q = q.Where("old_secret IS NULL")
			} else {
				q = q.Where("old_secret = ?", ep.OldSecret)
			}
			res := q.UpdateColumns(map[string]any{"secret": secret, "old_secret": old})
			if res.Error != nil {
				return n, unreadable, fmt.Errorf("events: reseal %s/%s: %w", ep.MerchantID, ep.ID, res.Error)
			}
			n += int(res.RowsAffected)
		}
		if len(rows) < resealBatch {
			return n, unreadable, nil
		}
		after = rows[len(rows)-1]
	}
}
