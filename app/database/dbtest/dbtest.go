// Package dbtest gives each test its own, migrated database: a fresh schema
// on the PostgreSQL of TEST_DATABASE_URL, or a fresh SQLite file. Tests never
// share state, so they can run in parallel.
package dbtest

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbclock"
)

// DefaultURL is used when TEST_DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// BaseURL is the PostgreSQL server tests run against.
func BaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// PostgresURL creates an empty, migrated schema for this test and returns a
// URL whose connections all use it (search_path), so a subprocess gateway can
// be pointed at it too. The schema is dropped when the test ends.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := BaseURL()
	admin, err := database.Open(base, database.Options{MaxOpenConns: 2, PipelineConns: -1})
	if err != nil {
		t.Fatalf("dbtest: %v (is PostgreSQL running? set TEST_DATABASE_URL)", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "t_" + hex.EncodeToString(b)
	if err := admin.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		t.Fatalf("dbtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		_ = database.Close(admin)
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("dbtest: TEST_DATABASE_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dsn := u.String()
	db := open(t, dsn, database.Options{MaxOpenConns: 2, PipelineConns: -1})
	if _, err := database.Migrate(db); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	_ = database.Close(db)
	return dsn
}

// Postgres returns a connection pool on a fresh migrated schema.
func Postgres(t testing.TB) *gorm.DB {
	t.Helper()
	return open(t, PostgresURL(t), database.Options{})
}

// PostgresWith is Postgres with the pool sized by o.
func PostgresWith(t testing.TB, o database.Options) *gorm.DB {
	t.Helper()
	return open(t, PostgresURL(t), o)
}

// SQLitePath returns the path of a fresh migrated SQLite file.
func SQLitePath(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.db")
	db := open(t, path, database.Options{})
	if _, err := database.Migrate(db); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	_ = database.Close(db)
	return path
}

// SQLite returns a fresh migrated SQLite database.
func SQLite(t testing.TB) *gorm.DB {
	t.Helper()
	return open(t, SQLitePath(t), database.Options{})
}

// Each runs f once per engine, as subtests "postgres" and "sqlite", for the
// store tests that must hold on both.
func Each(t *testing.T, f func(t *testing.T, db *gorm.DB)) {
	t.Helper()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f(t, Postgres(t))
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		f(t, SQLite(t))
	})
}

func open(t testing.TB, dsn string, o database.Options) *gorm.DB {
	t.Helper()
	db, err := database.Open(dsn, o)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { _ = database.Close(db) })
	return db
}

// Age makes time pass for the rows of table: every named time column of
// every row moves d into the past, so a test sees leases lapse and keys go
// stale by the database's own clock (which the gateway compares against)
// without waiting. The test's schema or file is its own, so every row is
// the test's.
func Age(t testing.TB, db *gorm.DB, d time.Duration, table string, columns ...string) {
	t.Helper()
	set := make([]string, 0, len(columns))
	vars := make([]any, 0, len(columns))
	for _, c := range columns {
		set = append(set, c+" = ?")
		vars = append(vars, dbclock.Shift(db, c, -d))
	}
	if err := db.Exec("UPDATE "+table+" SET "+strings.Join(set, ", "), vars...).Error; err != nil {
		t.Fatalf("dbtest: age %s: %v", table, err)
	}
}
