// Package database opens the gateway's store — PostgreSQL in production, an
// embedded pure-Go SQLite file when no DATABASE_URL is set — and applies the
// versioned schema migrations.
package database

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/oncepay/gateway/app/database/pipeline"
)

// Dialect names the SQL engine behind a *gorm.DB.
type Dialect string

// The dialects the gateway runs on.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// LockTimeout is the PostgreSQL lock_timeout of every connection (unless the
// URL sets one): the longest any statement waits for a row lock.
const LockTimeout = "2s"

// Options tune the connection pool. Zero values take the defaults.
type Options struct {
	MaxOpenConns int
	MaxIdleConns int
	// PipelineConns are the connections, besides the pool, that carry the
	// hot path's single statements in shared round trips (app/database/
	// pipeline); 0 takes the default, a negative number turns it off.
	PipelineConns int
	Logger        *slog.Logger
}

// DefaultPipelineConns is Options.PipelineConns's default.
const DefaultPipelineConns = 2

// IsPostgresURL reports whether url names a PostgreSQL server.
func IsPostgresURL(url string) bool {
	return strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://")
}

// Open connects to url: a postgres:// URL, or else a path of a SQLite file.
func Open(url string, opt Options) (*gorm.DB, error) {
	cfg := &gorm.Config{
		// Errors like duplicate keys come back as gorm.ErrDuplicatedKey, so
		// stores never match driver error strings.
		TranslateError: true,
		// Every write the gateway makes is either a single statement or an
		// explicit transaction; GORM's implicit per-write transaction would
		// only add two round trips to the hot path.
		SkipDefaultTransaction: true,
		Logger:                 logger.Default.LogMode(logger.Silent),
		NowFunc:                func() time.Time { return time.Now().UTC() },
	}
	if IsPostgresURL(url) {
		// No GORM PrepareStmt: pgx already caches a prepared statement per
		// connection for every query (QueryExecModeCacheStatement), while
		// GORM's prepared statements are re-prepared and closed inside
		// every transaction — two extra round trips per statement.
		pcfg, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, fmt.Errorf("database: DATABASE_URL: %w", err)
		}
		if _, set := pcfg.RuntimeParams["lock_timeout"]; !set {
			// No statement of the gateway waits long on a row lock by
			// design; one that does (a storm of claimers on a key whose
			// first claim is not committed yet) gives up, answers "in use",
			// and gives its pooled connection back.
			pcfg.RuntimeParams["lock_timeout"] = LockTimeout
		}
		sqlDB := stdlib.OpenDB(*pcfg)
		db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), cfg)
		if err != nil {
			return nil, fmt.Errorf("database: open postgres: %w", err)
		}
		maxOpen := opt.MaxOpenConns
		if maxOpen == 0 {
			// A gateway request holds a connection only for single statements
			// (never across a provider call), so a small pool per instance
			// saturates PostgreSQL long before it queues.
			maxOpen = 8
		}
		maxIdle := opt.MaxIdleConns
		if maxIdle == 0 {
			maxIdle = maxOpen
		}
		sqlDB.SetMaxOpenConns(maxOpen)
		sqlDB.SetMaxIdleConns(maxIdle)
		sqlDB.SetConnMaxIdleTime(5 * time.Minute)
		sqlDB.SetConnMaxLifetime(30 * time.Minute)
		if n := opt.PipelineConns; n >= 0 {
			if n == 0 {
				n = DefaultPipelineConns
			}
			// A statement that must wait for a row lock waits on the pool,
			// as it would have without the pipeline.
			if err := pipeline.Use(db, pipeline.New(pcfg, pipeline.Options{Conns: n, Patient: sqlDB})); err != nil {
				_ = sqlDB.Close()
				return nil, fmt.Errorf("database: pipeline: %w", err)
			}
		}
		probes.Store(sqlDB, newProbe(pcfg))
		return db, nil
	}
	if dir := filepath.Dir(url); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("database: create %s: %w", dir, err)
		}
	}
	dsn := url + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := gorm.Open(sqlite.Open(dsn), cfg)
	if err != nil {
		return nil, fmt.Errorf("database: open sqlite %s: %w", url, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	// SQLite has one writer. Every transaction begins IMMEDIATE (it takes
	// the write lock up front, so it can never deadlock upgrading a read
	// lock) and waits for it up to busy_timeout; WAL lets readers on the
	// other connections go on meanwhile. A request holding its claim's
	// transaction can therefore still read tenants and providers. The
	// embedded store is for a single development instance.
	sqlDB.SetMaxOpenConns(4)
	return db, nil
}

// DialectOf tells which engine db talks to.
func DialectOf(db *gorm.DB) Dialect {
	if db.Dialector.Name() == "postgres" {
		return Postgres
	}
	return SQLite
}

// Close closes the pool and the pipeline.
func Close(db *gorm.DB) error {
	if p := pipeline.Of(db); p != nil {
		p.Close()
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	closeProbe(sqlDB)
	return sqlDB.Close()
}

// Advice is a server setting, or a state of the statistics, that the
// gateway's query plans depend on and finds wrong.
type Advice struct {
	Setting, Value, Why string
}

// Advise reads the PostgreSQL settings the gateway's query plans depend
// on and returns the ones that are off (nothing on SQLite). Without
// autovacuum (or the statistics it needs, track_counts) the tables are
// never analyzed: every index then costs the planner the same, and the
// reads by merchant and key or by reference may cache a plan that scans a
// merchant's whole history (payments/plan_test.go). The hot path is found
// by primary key and does not care; the rest does. It also names the
// merchant_id statistics that ANALYZE gathered before migration 13 and
// left in place.
func Advise(ctx context.Context, db *gorm.DB) ([]Advice, error) {
	if DialectOf(db) != Postgres {
		return nil, nil
	}
	var autovacuum, trackCounts string
	if err := db.WithContext(ctx).Raw("SELECT current_setting('autovacuum'), current_setting('track_counts')").
		Row().Scan(&autovacuum, &trackCounts); err != nil {
		return nil, fmt.Errorf("database: read settings: %w", err)
	}
	var out []Advice
	const why = "tables are never analyzed, so the planner cannot tell a merchant's one payment from all of them; turn it on (or run ANALYZE regularly)"
	if autovacuum != "on" {
		out = append(out, Advice{"autovacuum", autovacuum, why})
	}
	if trackCounts != "on" {
		out = append(out, Advice{"track_counts", trackCounts, why})
	}
	var stale []string
	if err := db.WithContext(ctx).Raw(`SELECT tablename FROM pg_stats
WHERE schemaname = current_schema() AND attname = 'merchant_id' AND tablename IN ? ORDER BY tablename`, merchantLedTables).
		Scan(&stale).Error; err != nil {
		return nil, fmt.Errorf("database: read statistics: %w", err)
	}
	for _, t := range stale {
		out = append(out, Advice{"statistics on " + t + ".merchant_id", "present",
			"gathered before migration 13; a merchant they never saw looks like no rows, and one of its payments may be found by walking all of them. Drop them: ALTER TABLE " + t +
				" ALTER COLUMN merchant_id TYPE text (same type: no rewrite, indexes kept, a moment's exclusive lock; on Citus run it on each shard)"})
	}
	return out, nil
}
