package tenants

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/secretbox"
)

// ResealReport is what one re-seal pass found and did (the gateway's
// reseal command, after MASTER_KEY was rotated).
type ResealReport struct {
	// Accounts is how many provider accounts' secrets were sealed again
	// under the current key.
	Accounts int
	// Unreadable names the accounts (tenant/provider) whose secrets open
	// under neither key: they were left as they are, and their payments
	// fail until the merchant's secrets are set again.
	Unreadable []string
	// StaleHashes is how many live client credentials are not known to be
	// hashed under the current key: made under the previous one, or before
	// the key's id was recorded (migration 16). Each is hashed again, or
	// its key recorded, at its client's next token request; until then a
	// rotation must keep the previous key, or those merchants need new
	// credentials.
	StaleHashes int
}

// resealBatch is how many rows one statement reads: a pass over a large
// table holds no long transaction and little memory.
const resealBatch = 500

// Reseal seals every provider account's secrets under the current master
// key and counts the client credentials still hashed under an older one.
// It is safe beside serving instances and safe to run again: each row is
// replaced only if it still holds what was read, and a row already under
// the current key is not written.
func (s *Service) Reseal(ctx context.Context) (ResealReport, error) {
	var rep ResealReport
	db := s.db.WithContext(ctx)
	var after accountRow
	for {
		var rows []accountRow
		if err := db.Where("(tenant_id, provider) > (?, ?)", after.TenantID, after.Provider).
			Order("tenant_id, provider").Limit(resealBatch).Find(&rows).Error; err != nil {
			return rep, fmt.Errorf("tenants: reseal: %w", err)
		}
		for _, r := range rows {
			done, ok, err := s.resealAccount(db, r)
			if err != nil {
				return rep, err
			}
			if !ok {
				rep.Unreadable = append(rep.Unreadable, r.TenantID+"/"+r.Provider)
			}
			rep.Accounts += done
		}
		if len(rows) < resealBatch {
			break
		}
		after = rows[len(rows)-1]
	}
	var last string
	for {
		var ids []string
		if err := db.Model(&credentialRow{}).Where("client_id > ? AND revoked_at IS NULL", last).
			Order("client_id").Limit(resealBatch).Pluck("client_id", &ids).Error; err != nil {
			return rep, fmt.Errorf("tenants: reseal: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		keys, err := credentialKeys(db, ids)
		if err != nil {
			return rep, fmt.Errorf("tenants: reseal: %w", err)
		}
		for _, id := range ids {
			if keys[id] != s.keys.currentKey() {
				rep.StaleHashes++
			}
		}
		if len(ids) < resealBatch {
			break
		}
		last = ids[len(ids)-1]
	}
	return rep, nil
}

// resealAccount reseals one provider account's secrets: 1 if it rewrote
// the row, ok false if they open under neither key. A row changed between
// the read and the write (the merchant's secrets set again, possibly by an
// instance not yet given the new key) is read again.
func (s *Service) resealAccount(db *gorm.DB, r accountRow) (done int, ok bool, err error) {
	for range resealTries {
		blob, changed, err := s.keys.accounts.Reseal(accountAAD(r.TenantID, r.Provider), r.Secrets)
		if errors.Is(err, secretbox.ErrOpen) {
			return 0, false, nil
		}
		if !changed {
			return 0, true, nil
		}
		res := db.Model(&accountRow{}).Where("tenant_id = ? AND provider = ? AND secrets = ?", r.TenantID, r.Provider, r.Secrets).
			UpdateColumn("secrets", blob)
		if res.Error != nil {
			return 0, true, fmt.Errorf("tenants: reseal %s/%s: %w", r.TenantID, r.Provider, res.Error)
		}
		if res.RowsAffected == 1 {
			return 1, true, nil
		}
		if r, err = getAccount(db, r.TenantID, r.Provider); errors.Is(err, errAccountNotFound) {
			return 0, true, nil // deleted meanwhile
		} else if err != nil {
			return 0, true, fmt.Errorf("tenants: reseal %s/%s: %w", r.TenantID, r.Provider, err)
		}
	}
	return 0, true, fmt.Errorf("tenants: reseal %s/%s: changed by others %d times in a row; run reseal again", r.TenantID, r.Provider, resealTries)
}

// resealTries is how often a re-seal reads a row again that changed
// between its read and its write before it gives up.
const resealTries = 5
