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
		require.Len(t, versions, database.Version())
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
}
