package database_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		// dbtest already migrated once; a second run applies nothing.
		n, err := database.Migrate(db)
		require.NoError(t, err)
		require.Zero(t, n)
		var versions []int
		require.NoError(t, db.Raw("SELECT version FROM schema_migrations ORDER BY version").Scan(&versions).Error)
		require.Equal(t, database.Versions(), versions)
		for _, table := range []string{"tenants", "tenant_credentials", "provider_accounts", "idempotency_keys", "payments", "simulator_charges"} {
			require.True(t, db.Migrator().HasTable(table), table)
		}
	})
}

// Advise names the statistics settings that are off, and nothing else.
func TestAdviseNamesStatisticsSettingsThatAreOff(t *testing.T) {
	t.Parallel()
	advice, err := database.Advise(context.Background(), dbtest.SQLite(t))
	require.NoError(t, err)
	require.Empty(t, advice, "nothing to advise on SQLite")

	db := dbtest.Postgres(t)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	sqlDB.SetMaxOpenConns(1) // the SET below must reach the connection Advise uses
	var autovacuum string
	require.NoError(t, db.Raw("SHOW autovacuum").Row().Scan(&autovacuum))
	settings := func() []string {
		advice, err := database.Advise(context.Background(), db)
		require.NoError(t, err)
		var names []string
		for _, a := range advice {
			require.NotEmpty(t, a.Why)
			names = append(names, a.Setting+"="+a.Value)
		}
		return names
	}

	want := []string{}
	if autovacuum != "on" { // a server setting: whatever this machine has
		want = append(want, "autovacuum="+autovacuum)
	}
	require.NoError(t, db.Exec("SET track_counts = on").Error)
	require.ElementsMatch(t, want, settings())
	require.NoError(t, db.Exec("SET track_counts = off").Error)
	require.ElementsMatch(t, append(want, "track_counts=off"), settings())
	require.NoError(t, db.Exec("SET track_counts = on").Error)

	// Statistics on payments.merchant_id, as ANALYZE gathered them before
	// migration 13, are named until dropped the way the advice says.
	require.NoError(t, db.Exec(`INSERT INTO payments (id, merchant_id, idempotency_key, amount, currency, status, provider,
  provider_reference, email, payment_method, created_at, updated_at)
SELECT 'pay_' || i, 'ten_a', 'k' || i, 100, 'NGN', 'succeeded', 'simulator', 'ref' || i, 'e@example.com', 'card', now(), now()
FROM generate_series(1, 100) i`).Error)
	require.NoError(t, db.Exec("ANALYZE payments").Error)
	require.ElementsMatch(t, want, settings(), "migration 13: no statistics on merchant_id")
	require.NoError(t, db.Exec("ALTER TABLE payments ALTER COLUMN merchant_id SET STATISTICS -1").Error)
	require.NoError(t, db.Exec("ANALYZE payments").Error)
	require.NoError(t, db.Exec("ALTER TABLE payments ALTER COLUMN merchant_id SET STATISTICS 0").Error)
	require.NoError(t, db.Exec("ANALYZE payments").Error)
	require.ElementsMatch(t, append(want, "statistics on payments.merchant_id=present"), settings(), "ANALYZE leaves them")
	require.NoError(t, db.Exec("ALTER TABLE payments ALTER COLUMN merchant_id TYPE text").Error)
	require.ElementsMatch(t, want, settings(), "dropped as the advice says")
}

// Migration 7 backfills what payments made before version 6 lack: the
// request's fingerprint from their key while it exists, and a recheck for
// those released as not_processed.
func TestMigrationBackfillsLegacyPayments(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		insert := func(id, key, status, code string) {
			require.NoError(t, db.Exec(`INSERT INTO payments (id, merchant_id, idempotency_key, amount, currency, status, provider,
  provider_reference, failure_code, email, payment_method, created_at, updated_at)
VALUES (?, 'ten_m', ?, 1, 'NGN', ?, 'simulator', ?, ?, 'a@b.c', 'tok', '2026-01-01 00:00:00+00:00', '2026-01-01 00:00:00+00:00')`,
				id, key, status, "ref-"+id, code).Error)
		}
		insert("pay_with_key", "k1", "succeeded", "")
		insert("pay_purged", "k2", "succeeded", "")
		insert("pay_np", "k3", "failed", "not_processed")
		require.NoError(t, db.Exec(`INSERT INTO idempotency_keys (merchant_id, key, request_hash, status, locked_until, created_at)
VALUES ('ten_m', 'k1', 'legacy-hash', 'done', '2026-01-01 00:00:00+00:00', '2026-01-01 00:00:00+00:00')`).Error)
		require.NoError(t, db.Exec("DELETE FROM schema_migrations WHERE version = 7").Error)
		n, err := database.Migrate(db)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		var hash string
		require.NoError(t, db.Raw("SELECT request_hash FROM payments WHERE id = 'pay_with_key'").Row().Scan(&hash))
		require.Equal(t, "legacy-hash", hash)
		require.NoError(t, db.Raw("SELECT request_hash FROM payments WHERE id = 'pay_purged'").Row().Scan(&hash))
		require.Empty(t, hash, "nothing to learn it from")
		var due int64
		require.NoError(t, db.Raw("SELECT count(*) FROM payments WHERE recheck_at IS NOT NULL").Row().Scan(&due))
		require.EqualValues(t, 1, due, "the not_processed payment is looked up once more")
	})
}
