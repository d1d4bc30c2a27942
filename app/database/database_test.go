package database_test

import (
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
		require.Len(t, versions, database.Version())
		for _, table := range []string{"tenants", "tenant_credentials", "provider_accounts", "idempotency_keys", "payments", "simulator_charges"} {
			require.True(t, db.Migrator().HasTable(table), table)
		}
	})
}
