package tenants

import (
	"errors"
	"strings"
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
	CreatedAt  time.Time
	RevokedAt  *time.Time
}

func (credentialRow) TableName() string { return "tenant_credentials" }

// credentialColumns are credentialRow's, named: a column added later to
// tenant_credentials must not change what this version's prepared SELECT
// returns (PostgreSQL refuses to run a cached plan whose result type
// changed, once per connection: a 500 for a merchant).
var credentialColumns = []string{"client_id", "tenant_id", "secret_hash", "created_at", "revoked_at"}

// credentialKeyRow names the master key a credential's secret hash was
// made under (migration 16); a credential without one was hashed before
// ids were recorded.
type credentialKeyRow struct {
	ClientID string `gorm:"primaryKey"`
	HashKey  string
}

func (credentialKeyRow) TableName() string { return "tenant_credential_keys" }

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

// createKeyRow is an operator's Idempotency-Key on a tenant creation and
// the tenant it made (migration 21): a table of its own, since from 16 on
// no migration changes an existing table's columns.
type createKeyRow struct {
	IdempotencyKey string `gorm:"primaryKey"`
	TenantID       string
	CreatedAt      time.Time
}

func (createKeyRow) TableName() string { return "tenant_create_keys" }

// claimCreateKey records key as creating tenantID and reports whether it
// did; false when the key has a tenant already. On PostgreSQL a concurrent
// claim of the same key waits for the first's transaction and then finds
// its row, so two racing retries create one tenant.
func claimCreateKey(db *gorm.DB, key, tenantID string, at time.Time) (bool, error) {
	res := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&createKeyRow{IdempotencyKey: key, TenantID: tenantID, CreatedAt: at})
	return res.RowsAffected == 1, res.Error
}

// createdUnder is the tenant a creation under key made.
func createdUnder(db *gorm.DB, key string) (string, error) {
	var r createKeyRow
	err := db.Where("idempotency_key = ?", key).Take(&r).Error
	return r.TenantID, err
}

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

// tenantFilter narrows a listing ("": no condition).
type tenantFilter struct{ status, name string }

// likeEscaper escapes LIKE's wildcards (and its escape character), so a
// name searched for is matched as the text it is.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

func listTenants(db *gorm.DB, f tenantFilter, after *pageKey, limit int) ([]tenantRow, error) {
	var rows []tenantRow
	q := db.Order("created_at, id").Limit(limit)
	if f.status != "" {
		q = q.Where("status = ?", f.status)
	}
	if f.name != "" {
		q = q.Where(`lower(name) LIKE ? ESCAPE '\'`, "%"+likeEscaper.Replace(strings.ToLower(f.name))+"%")
	}
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

// insertCredential writes a credential and its hash key's id; db is the
// caller's transaction.
func insertCredential(db *gorm.DB, r *credentialRow, keyID string) error {
	if err := db.Create(r).Error; err != nil {
		return err
	}
	return db.Create(&credentialKeyRow{ClientID: r.ClientID, HashKey: keyID}).Error
}

// credentialKey is the id of the key a credential's hash was made under,
// "" when not recorded.
func credentialKey(db *gorm.DB, clientID string) (string, error) {
	var keys []string
	err := db.Model(&credentialKeyRow{}).Where("client_id = ?", clientID).Limit(1).Pluck("hash_key", &keys).Error
	if err != nil || len(keys) == 0 {
		return "", err
	}
	return keys[0], nil
}

// credentialKeys are the recorded hash key ids of the given credentials.
func credentialKeys(db *gorm.DB, clientIDs []string) (map[string]string, error) {
	var rows []credentialKeyRow
	if err := db.Where("client_id IN ?", clientIDs).Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.ClientID] = r.HashKey
	}
	return out, nil
}

func getCredential(db *gorm.DB, clientID string) (credentialRow, error) {
	var r credentialRow
	if !wellFormedID("cli_", clientID) {
		return r, errCredentialNotFound
	}
	err := db.Select(credentialColumns).Where("client_id = ?", clientID).Take(&r).Error
	return r, notFound(err, errCredentialNotFound)
}

// replaceSecretHash swaps a credential's hash, if it still is old, and
// records the key it was made under.
func replaceSecretHash(db *gorm.DB, clientID string, old, hash []byte, keyID string) (n int64, err error) {
	err = db.Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&credentialRow{}).Where("client_id = ? AND secret_hash = ? AND revoked_at IS NULL", clientID, old).
			UpdateColumn("secret_hash", hash)
		if n = res.RowsAffected; res.Error != nil || n == 0 {
			return res.Error
		}
		return tx.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "client_id"}},
			DoUpdates: clause.AssignmentColumns([]string{"hash_key"})}).
			Create(&credentialKeyRow{ClientID: clientID, HashKey: keyID}).Error
	})
	return n, err
}

// revokeCredentials revokes every live credential of the tenant.
func revokeCredentials(db *gorm.DB, tenantID string, at time.Time) (int64, error) {
	res := db.Model(&credentialRow{}).Where("tenant_id = ? AND revoked_at IS NULL", tenantID).
		UpdateColumn("revoked_at", at)
	return res.RowsAffected, res.Error
}
