package database_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

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

// A database another build migrated — its version 20 is another
// migration than this build's — is refused with both names, before
// anything is applied: applying by number alone would skip this build's
// migration and take the other's table for it.
func TestMigrateRefusesAnotherBuildsHistory(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		last := database.Version()
		var name string
		require.NoError(t, db.Raw("SELECT name FROM schema_migrations WHERE version = ?", last).Scan(&name).Error)
		require.NoError(t, db.Exec("UPDATE schema_migrations SET name = 'someone_elses' WHERE version = ?", last).Error)
		_, err := database.Migrate(db)
		require.ErrorContains(t, err, fmt.Sprintf("version %d of this database is \"someone_elses\"", last))
		// A version this build does not know yet (a newer build's) is no
		// conflict: an older instance during a rolling deploy.
		require.NoError(t, db.Exec("UPDATE schema_migrations SET name = ? WHERE version = ?", name, last).Error)
		require.NoError(t, db.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'newer', ?)", last+1, time.Now().UTC()).Error)
		_, err = database.Migrate(db)
		require.NoError(t, err)
	})
}

// CheckMigrated (MIGRATE_ON_START=false) starts only on this build's
// schema: behind, empty or another build's is refused with the versions
// and what to run; a newer release's versions are no conflict (an older
// instance during a rolling deploy, as with Migrate).
func TestCheckMigrated(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		newer, err := database.CheckMigrated(db)
		require.NoError(t, err)
		require.Empty(t, newer)

		last := database.Version()
		var name string
		require.NoError(t, db.Raw("SELECT name FROM schema_migrations WHERE version = ?", last).Scan(&name).Error)
		require.NoError(t, db.Exec("UPDATE schema_migrations SET name = 'someone_elses' WHERE version = ?", last).Error)
		_, err = database.CheckMigrated(db)
		require.ErrorContains(t, err, fmt.Sprintf("version %d of this database is \"someone_elses\"", last))
		require.NoError(t, db.Exec("UPDATE schema_migrations SET name = ? WHERE version = ?", name, last).Error)

		// A version below the newest that the build does not know is
		// another branch's.
		_, err = database.CheckMigratedWithout(db, last-1)
		require.ErrorContains(t, err, fmt.Sprintf("migrations this build does not know below its newest (version %d): %d ", last, last-1))

		require.NoError(t, db.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'newer', ?)", last+1, time.Now().UTC()).Error)
		newer, err = database.CheckMigrated(db)
		require.NoError(t, err)
		require.Equal(t, []int{last + 1}, newer)

		require.NoError(t, db.Exec("DELETE FROM schema_migrations WHERE version IN (?, ?)", last-1, last).Error)
		_, err = database.CheckMigrated(db)
		require.EqualError(t, err, fmt.Sprintf("database: the schema is behind this build (version %d): not applied: %d %s, %d %s; "+
			"run `gateway migrate` with this build (as the role that owns the schema) before starting it with MIGRATE_ON_START=false",
			last, last-1, database.Name(last-1), last, name))

		require.NoError(t, db.Exec("DROP TABLE schema_migrations").Error)
		_, err = database.CheckMigrated(db)
		require.ErrorContains(t, err, "the database has no schema")
		require.ErrorContains(t, err, "run `gateway migrate`")
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

// Migration 18 gives an open key written without attempted_at (by an
// instance older than version 6, still serving while 6 ran) its creation
// as its last attempt: the sweeper selects keys by attempted_at, and a
// NULL would leave the key's payment processing until a merchant retry.
func TestMigrationDatesOpenKeysWithoutAnAttempt(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		insert := func(key, status string, completed any) {
			require.NoError(t, db.Exec(`INSERT INTO idempotency_keys (merchant_id, key, request_hash, status, locked_until, lock_token, created_at, completed_at)
VALUES ('ten_m', ?, 'h', ?, '2026-01-01 00:00:00+00:00', 'tok', '2026-01-01 00:00:00+00:00', ?)`, key, status, completed).Error)
		}
		insert("open", "in_progress", nil)
		insert("done", "done", "2026-01-01 00:00:01+00:00")
		require.NoError(t, db.Exec("DELETE FROM schema_migrations WHERE version = 18").Error)
		n, err := database.Migrate(db)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		var stale int64
		require.NoError(t, db.Raw(`SELECT count(*) FROM idempotency_keys
WHERE completed_at IS NULL AND attempted_at < '2026-01-02 00:00:00+00:00'`).Row().Scan(&stale))
		require.EqualValues(t, 1, stale, "the open key is the sweeper's to find")
		var untouched int64
		require.NoError(t, db.Raw("SELECT count(*) FROM idempotency_keys WHERE key = 'done' AND attempted_at IS NULL").Row().Scan(&untouched))
		require.EqualValues(t, 1, untouched, "a finished key needs no sweep")
	})
}

// Migration 14 moves the lookup by the provider's transaction id from an
// index on payments to payment_transactions: every payment that already
// had one is found through the new table, and the index is gone (its
// column is written by every completion, which must stay a HOT update).
func TestMigrationMovesTransactionIDsOutOfPayments(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		insert := func(merchant, id, provider, txn string) {
			require.NoError(t, db.Exec(`INSERT INTO payments (id, merchant_id, idempotency_key, amount, currency, status, provider,
  provider_reference, provider_transaction_id, email, payment_method, created_at, updated_at)
VALUES (?, ?, ?, 1, 'NGN', 'succeeded', ?, ?, ?, 'a@b.c', 'tok', '2026-01-01 00:00:00+00:00', '2026-01-01 00:00:00+00:00')`,
				id, merchant, "k-"+id, provider, "ref-"+id, txn).Error)
		}
		// The schema as version 13 left it.
		require.NoError(t, db.Exec("DROP TABLE payment_transactions").Error)
		require.NoError(t, db.Exec(`CREATE INDEX payments_provider_transaction_idx ON payments (merchant_id, provider, provider_transaction_id)
	WHERE provider_transaction_id <> ''`).Error)
		require.NoError(t, db.Exec("DELETE FROM schema_migrations WHERE version = 14").Error)
		insert("ten_a", "pay_1", "paystack", "1234")
		insert("ten_a", "pay_2", "stripe", "pi_2")
		insert("ten_b", "pay_3", "paystack", "1234") // the same id at another merchant
		insert("ten_a", "pay_open", "paystack", "")  // never charged: nothing to find it by

		require.True(t, db.Migrator().HasIndex("payments", "payments_provider_transaction_idx"))
		n, err := database.Migrate(db)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		type row struct{ MerchantID, Provider, TransactionID, PaymentID string }
		var rows []row
		require.NoError(t, db.Raw(`SELECT merchant_id, provider, transaction_id, payment_id FROM payment_transactions
ORDER BY merchant_id, provider, transaction_id`).Scan(&rows).Error)
		require.Equal(t, []row{
			{"ten_a", "paystack", "1234", "pay_1"},
			{"ten_a", "stripe", "pi_2", "pay_2"},
			{"ten_b", "paystack", "1234", "pay_3"},
		}, rows)
		require.False(t, db.Migrator().HasIndex("payments", "payments_provider_transaction_idx"))
	})
}

// The audit log is append-only in the database itself: inserting works,
// and updating, deleting (or, on PostgreSQL, truncating) an event fails
// and leaves it as it was.
func TestAuditLogIsAppendOnly(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		insert := func(id string) error {
			return db.Exec(`INSERT INTO audit_events (id, at, actor, action, target_type, target_id)
VALUES (?, ?, 'admin', 'tenant.created', 'tenant', 'ten_1')`, id, time.Now().UTC()).Error
		}
		require.NoError(t, insert("aud_1"))
		refused := []string{
			"UPDATE audit_events SET note = 'rewritten' WHERE id = 'aud_1'",
			"UPDATE audit_events SET note = 'rewritten'",
			"DELETE FROM audit_events WHERE id = 'aud_1'",
			"DELETE FROM audit_events",
		}
		if database.DialectOf(db) == database.Postgres {
			refused = append(refused, "TRUNCATE audit_events",
				"INSERT INTO audit_events (id, at, actor, action, target_type, target_id) VALUES ('aud_1', now(), 'x', 'x', 'x', 'x') ON CONFLICT (id) DO UPDATE SET note = 'rewritten'")
		} else {
			refused = append(refused,
				"INSERT OR REPLACE INTO audit_events (id, at, actor, action, target_type, target_id, note) VALUES ('aud_1', '2026-01-01', 'x', 'x', 'x', 'x', 'rewritten')",
				"REPLACE INTO audit_events (id, at, actor, action, target_type, target_id, note) VALUES ('aud_1', '2026-01-01', 'x', 'x', 'x', 'x', 'rewritten')")
		}
		for _, stmt := range refused {
			err := db.Exec(stmt).Error
			require.ErrorContains(t, err, "append-only", stmt)
		}
		var notes []string
		require.NoError(t, db.Raw("SELECT note FROM audit_events").Scan(&notes).Error)
		require.Equal(t, []string{""}, notes, "the event is as it was written")
		require.NoError(t, insert("aud_2"), "appending still works")
	})
}

// Migrate on an up-to-date schema needs no DDL: under a role that may
// create nothing it applies nothing and succeeds; with a version missing
// it goes on to the DDL, which that role may not run.
func TestMigrateOnAnUpToDateSchemaSendsNoDDL(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresURL(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	schema := u.Query().Get("search_path")
	admin, err := database.Open(dsn, database.Options{MaxOpenConns: 1, PipelineConns: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(admin) })
	role := "gw_" + schema
	require.NoError(t, admin.Exec("CREATE ROLE "+role+" LOGIN").Error)
	t.Cleanup(func() {
		admin.Exec("DROP OWNED BY " + role)
		admin.Exec("DROP ROLE " + role)
	})
	for _, grant := range []string{
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT ON schema_migrations TO " + role,
	} {
		require.NoError(t, admin.Exec(grant).Error, grant)
	}
	u.User = url.User(role)
	readOnly, err := database.Open(u.String(), database.Options{MaxOpenConns: 1, PipelineConns: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(readOnly) })

	n, err := database.Migrate(readOnly)
	require.NoError(t, err, "an up-to-date schema needs no DDL")
	require.Zero(t, n)

	require.NoError(t, admin.Exec("DELETE FROM schema_migrations WHERE version = ?", database.Version()).Error)
	_, err = database.Migrate(readOnly)
	require.ErrorContains(t, err, "permission denied")
}

// Migration 15 on a Citus deployment whose audit_events is a reference
// table (Citus refuses triggers there) adds none and still applies; on a
// Citus local table it adds them. Citus's catalog is stood in for by a
// table of the same name and columns in the test's schema.
func TestAppendOnlyMigrationOnCitus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		partmethod, repmod string
		triggers           int
	}{
		{"reference table", "n", "t", 0},
		{"distributed table", "h", "s", 0},
		{"local table", "n", "s", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.Postgres(t)
			for _, stmt := range []string{
				"DROP TRIGGER audit_events_no_change ON audit_events",
				"DROP TRIGGER audit_events_no_truncate ON audit_events",
				"DROP FUNCTION audit_events_append_only()",
				"DELETE FROM schema_migrations WHERE version = 15",
				"CREATE TABLE pg_dist_partition (logicalrelid regclass, partmethod \"char\", repmodel \"char\")",
			} {
				require.NoError(t, db.Exec(stmt).Error, stmt)
			}
			require.NoError(t, db.Exec("INSERT INTO pg_dist_partition VALUES ('audit_events', ?, ?)", tc.partmethod, tc.repmod).Error)
			n, err := database.Migrate(db)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			var triggers int
			require.NoError(t, db.Raw("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'audit_events'::regclass AND NOT tgisinternal").Scan(&triggers).Error)
			require.Equal(t, tc.triggers, triggers)
		})
	}
}

// During a rolling deploy the previous release's instances keep serving
// while this one migrates, with their statements prepared on their
// connections, and PostgreSQL refuses to run a cached plan whose result
// changed ("cached plan must not change result type", 0A000): a merchant's
// request on an old instance would get a 500 once per connection. So no
// migration from version 16 on may add, drop or retype a column of a
// table that exists before it (a new table, an index, a constraint are
// fine). Each is checked from the schema just before it, through the
// newest: a release that brings several is covered from any of them.
func TestMigrationsKeepThePreviousReleasesQueriesRunning(t *testing.T) {
	t.Parallel()
	const firstChecked = 16 // versions 6 and 8 added columns
	for _, v := range database.Versions() {
		if v < firstChecked {
			continue
		}
		t.Run(fmt.Sprintf("from_%d", v-1), func(t *testing.T) {
			t.Parallel()
			checkPreparedSelectsSurvive(t, v)
		})
	}
}

// checkPreparedSelectsSurvive migrates a fresh schema to just before
// version, prepares a SELECT * of each table on one connection, migrates
// to the newest version and runs them again.
func checkPreparedSelectsSurvive(t *testing.T, version int) {
	admin, err := database.Open(dbtest.BaseURL(), database.Options{MaxOpenConns: 1, PipelineConns: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(admin) })
	schema := fmt.Sprintf("t_rolling_%d_%s", version, strconv.FormatInt(time.Now().UnixNano(), 36))
	require.NoError(t, admin.Exec("CREATE SCHEMA "+schema).Error)
	t.Cleanup(func() { admin.Exec("DROP SCHEMA " + schema + " CASCADE") })
	u, err := url.Parse(dbtest.BaseURL())
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	// The old instance: one connection, so every statement it prepares
	// stays prepared on it.
	old, err := database.Open(u.String(), database.Options{MaxOpenConns: 1, PipelineConns: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(old) })
	_, err = database.MigrateBefore(old, version)
	require.NoError(t, err)
	var tables []string
	require.NoError(t, old.Raw("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename").Scan(&tables).Error)
	require.NotEmpty(t, tables)
	readAll := func() error {
		for _, table := range tables {
			rows, err := old.Raw("SELECT * FROM " + table + " LIMIT 1").Rows()
			if err != nil {
				return fmt.Errorf("%s: %w", table, err)
			}
			for rows.Next() {
			}
			if err := rows.Close(); err != nil {
				return fmt.Errorf("%s: %w", table, err)
			}
		}
		return nil
	}
	require.NoError(t, readAll())

	fresh, err := database.Open(u.String(), database.Options{MaxOpenConns: 1, PipelineConns: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(fresh) })
	n, err := database.Migrate(fresh)
	require.NoError(t, err)
	require.Equal(t, database.Version()-version+1, n, "version %d through the newest", version)
	require.NoError(t, readAll(), "the previous release's prepared SELECT * of each table still runs")
}
