package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/config"
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

// In JSON logs a duration is milliseconds under a key ending in _ms, and a
// command that fails after the configuration loaded says so in JSON too.
func TestJSONLogs(t *testing.T) {
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev); started = nil })
	var out bytes.Buffer
	started = newLogger(config.Config{Log: config.Log{Level: "info", Format: "json"}, Instance: "i-1"}, &out)
	started.Info("request", slog.Duration("latency", 12345678*time.Nanosecond), "took", 2*time.Second)
	report(io.Discard, "serve", errors.New("database: dial tcp 127.0.0.1:5432: connect: connection refused"))

	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	require.Len(t, lines, 2, out.String())
	var req, stop map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &req))
	require.Equal(t, 12.345, req["latency_ms"])
	require.Equal(t, 2000.0, req["took_ms"])
	require.NotContains(t, req, "latency")
	require.NoError(t, json.Unmarshal(lines[1], &stop), "a start failure is a JSON line")
	require.Equal(t, "ERROR", stop["level"])
	require.Equal(t, "serve", stop["command"])
	require.Contains(t, stop["err"], "connection refused")
}

// A PostgreSQL database with development's generated secrets is refused
// before anything starts: those secrets are one instance's, and a second
// instance on the database could open nothing of the first's.
func TestSharedStoreNeedsItsSecrets(t *testing.T) {
	t.Setenv("DATA_DIR", t.TempDir())
	t.Setenv("LOG_LEVEL", "error")
	t.Setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	cfg, err := config.Load()
	require.NoError(t, err)
	err = sharedStoreSecrets(cfg)
	require.ErrorContains(t, err, "ADMIN_API_KEY")
	require.NotContains(t, err.Error(), cfg.Secrets.AdminAPIKey.Reveal(), "never the generated key itself")

	t.Setenv("ADMIN_API_KEY", "admin-key-0123456789")
	t.Setenv("JWT_SECRET", "0123456789abcdef0123456789abcdef")
	t.Setenv("MASTER_KEY", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
	cfg, err = config.Load()
	require.NoError(t, err)
	require.NoError(t, sharedStoreSecrets(cfg), "secrets given")

	t.Setenv("DATABASE_URL", "")
	t.Setenv("ADMIN_API_KEY", "")
	cfg, err = config.Load()
	require.NoError(t, err)
	require.NoError(t, sharedStoreSecrets(cfg), "the embedded store is one instance's anyway")
}
