package tenants

import (
	"errors"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// The GORM models mirror app/database/migrations.go (version 1). They are
// private: the rest of the gateway sees Tenant and Credentials. Every store
// function takes the executor, which may be a transaction.

type tenantRow struct {
	ID              string `gorm:"primaryKey"`
	Name            string
	Status          string
	DefaultProvider string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

func (tenantRow) TableName() string { return "tenants" }

type credentialRow struct {
	ClientID   string `gorm:"primaryKey"`
	TenantID   string
	SecretHash []byte
	// HashKey is the id of the master key SecretHash was made under, ""
	// for hashes made before ids were recorded (migration 16).
	HashKey   string
	CreatedAt time.Time
	RevokedAt *time.Time
}

func (credentialRow) TableName() string { return "tenant_credentials" }

type accountRow struct {
	TenantID  string `gorm:"primaryKey"`
	Provider  string `gorm:"primaryKey"`
	Secrets   []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

func (accountRow) TableName() string { return "provider_accounts" }

var (
	errCredentialNotFound = errors.New("tenants: credential not found")
	errAccountNotFound    = errors.New("tenants: provider account not found")
)

func notFound(err, sentinel error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return sentinel
	}
	return err
}

func insertTenant(db *gorm.DB, r *tenantRow) error { return db.Create(r).Error }

// getTenant reads a tenant by primary key; forUpdate locks the row on
// PostgreSQL (SQLite transactions already hold the one write lock).
func getTenant(db *gorm.DB, id string, forUpdate bool) (tenantRow, error) {
	var r tenantRow
	if !wellFormedID("ten_", id) {
		return r, ErrNotFound
	}
	q := db
	if forUpdate && db.Dialector.Name() == "postgres" {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	err := q.Where("id = ?", id).Take(&r).Error
	return r, notFound(err, ErrNotFound)
}

// pageKey is a keyset position: tenants are listed by (created_at, id).
type pageKey struct {
	CreatedAt time.Time
	ID        string
}

func listTenants(db *gorm.DB, after *pageKey, limit int) ([]tenantRow, error) {
	var rows []tenantRow
	q := db.Order("created_at, id").Limit(limit)
	if after != nil {
		q = q.Where("(created_at, id) > (?, ?)", after.CreatedAt, after.ID)
	}
	err := q.Find(&rows).Error
	return rows, err
}

func updateTenant(db *gorm.DB, id string, cols map[string]any) error {
	res := db.Model(&tenantRow{}).Where("id = ?", id).UpdateColumns(cols)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return ErrNotFound
	}
	return nil
}

// accountNames returns, per tenant id, the providers it has accounts for.
func accountNames(db *gorm.DB, tenantIDs ...string) (map[string][]string, error) {
	out := map[string][]string{}
	if len(tenantIDs) == 0 {
		return out, nil
	}
	var rows []accountRow
	err := db.Select("tenant_id", "provider").Where("tenant_id IN ?", tenantIDs).
		Order("tenant_id, provider").Find(&rows).Error
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.TenantID] = append(out[r.TenantID], r.Provider)
	}
	return out, nil
}

func getAccount(db *gorm.DB, tenantID, provider string) (accountRow, error) {
	var r accountRow
	if !wellFormedID("ten_", tenantID) || !wellFormedName(provider) {
		return r, errAccountNotFound
	}
	err := db.Where("tenant_id = ? AND provider = ?", tenantID, provider).Take(&r).Error
	return r, notFound(err, errAccountNotFound)
}

// upsertAccount creates the account or replaces its secrets.
func upsertAccount(db *gorm.DB, r *accountRow) error {
	return db.Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "tenant_id"}, {Name: "provider"}},
		DoUpdates: clause.AssignmentColumns([]string{"secrets", "updated_at"}),
	}).Create(r).Error
}

func deleteAccount(db *gorm.DB, tenantID, provider string) error {
	return db.Where("tenant_id = ? AND provider = ?", tenantID, provider).Delete(&accountRow{}).Error
}

func insertCredential(db *gorm.DB, r *credentialRow) error { return db.Create(r).Error }

func getCredential(db *gorm.DB, clientID string) (credentialRow, error) {
	var r credentialRow
	if !wellFormedID("cli_", clientID) {
		return r, errCredentialNotFound
	}
	err := db.Where("client_id = ?", clientID).Take(&r).Error
	return r, notFound(err, errCredentialNotFound)
}

// replaceSecretHash swaps a credential's hash and its key's id, if the
// hash still is old.
func replaceSecretHash(db *gorm.DB, clientID string, old, hash []byte, keyID string) (int64, error) {
	res := db.Model(&credentialRow{}).Where("client_id = ? AND secret_hash = ? AND revoked_at IS NULL", clientID, old).
		UpdateColumns(map[string]any{"secret_hash": hash, "hash_key": keyID})
	return res.RowsAffected, res.Error
}

// revokeCredentials revokes every live credential of the tenant.
func revokeCredentials(db *gorm.DB, tenantID string, at time.Time) (int64, error) {
	res := db.Model(&credentialRow{}).Where("tenant_id = ? AND revoked_at IS NULL", tenantID).
		UpdateColumn("revoked_at", at)
	return res.RowsAffected, res.Error
}
