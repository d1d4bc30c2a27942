package tenants

import (
	"context"
	"errors"
	"fmt"

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
	// StaleHashes is how many live client credentials are still hashed
	// under the previous key (or before hashes named their key). Each is
	// hashed again at its client's next token request; until then the
	// previous key must stay, or those merchants need new credentials.
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
			blob, changed, err := s.keys.accounts.Reseal(accountAAD(r.TenantID, r.Provider), r.Secrets)
			if errors.Is(err, secretbox.ErrOpen) {
				rep.Unreadable = append(rep.Unreadable, r.TenantID+"/"+r.Provider)
				continue
			}
			if err != nil || !changed {
				continue
			}
			res := db.Model(&accountRow{}).Where("tenant_id = ? AND provider = ? AND secrets = ?", r.TenantID, r.Provider, r.Secrets).
				UpdateColumn("secrets", blob)
			if res.Error != nil {
				return rep, fmt.Errorf("tenants: reseal %s/%s: %w", r.TenantID, r.Provider, res.Error)
			}
			rep.Accounts += int(res.RowsAffected)
		}
		if len(rows) < resealBatch {
			break
		}
		after = rows[len(rows)-1]
	}
	var last string
	for {
		var rows []credentialRow
		if err := db.Select("client_id", "secret_hash").Where("client_id > ? AND revoked_at IS NULL", last).
			Order("client_id").Limit(resealBatch).Find(&rows).Error; err != nil {
			return rep, fmt.Errorf("tenants: reseal: %w", err)
		}
		for _, r := range rows {
			if !s.keys.current(r.SecretHash) {
				rep.StaleHashes++
			}
		}
		if len(rows) < resealBatch {
			break
		}
		last = rows[len(rows)-1].ClientID
	}
	return rep, nil
}
