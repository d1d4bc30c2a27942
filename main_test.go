package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
)

// `gateway migrate` leaves the database ready for every instance: the
// schema's migrations and River's queue tables, on both engines.
func TestMigrateCommand(t *testing.T) {
	for name, url := range map[string]func(t testing.TB) string{
		"postgres": dbtest.PostgresURL,
		"sqlite":   func(testing.TB) string { return "" }, // DATA_DIR's file
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("DATA_DIR", dir)
			t.Setenv("DATABASE_URL", url(t))
			t.Setenv("LOG_LEVEL", "error")
			require.NoError(t, migrate())

			cfg, _, err := load()
			require.NoError(t, err)
			db, err := database.Open(cfg.DatabaseURL(), database.Options{MaxOpenConns: 1, PipelineConns: -1})
			require.NoError(t, err)
			defer database.Close(db)
			require.True(t, db.Migrator().HasTable("river_job"), "River's tables")
			var version int
			require.NoError(t, db.Raw("SELECT max(version) FROM schema_migrations").Scan(&version).Error)
			require.Equal(t, database.Version(), version)
		})
	}
}
