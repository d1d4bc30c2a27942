package database_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
)

// notTenantOwned are the tables that are not distributed by merchant on a
// sharded PostgreSQL (README, "Sharding by merchant"), each with the
// reason. Every other table is tenant-owned: it must carry merchant_id in
// its primary key and in every unique index, and its foreign keys must stay
// within a merchant. A new table lands in that rule by default; listing it
// here needs a reason a reviewer can check.
var notTenantOwned = map[string]string{
	"tenants": "reference table: the merchants themselves, read on every request, " +
		"small; replicated to every node (create_reference_table)",
	"tenant_credentials": "reference table: looked up by client_id before the merchant " +
		"is known (the token exchange), so it cannot be routed by merchant",
	"tenant_credential_keys": "reference table beside tenant_credentials: which master key " +
		"hashed a client secret, keyed by client_id like it (read at the token exchange)",
	"tenant_create_keys": "reference table beside tenants: an operator's Idempotency-Key on a " +
		"tenant creation, looked up before the tenant exists, so it cannot be routed by merchant",
	"provider_accounts": "reference table: a merchant's provider secrets, keyed by " +
		"(tenant_id, provider); small, read through a cache",
	"simulator_charges": "the built-in simulator provider's own records, keyed by our " +
		"reference: the provider's data, not a tenant's (a real provider keeps it on its side)",
	"simulator_refunds": "the simulator provider's refunds, keyed by our refund reference: " +
		"the provider's data, like simulator_charges",
	"audit_events": "the operators' log across tenants (tenant_id says whom an event is " +
		"about, empty for none); append-only (triggers, which Citus refuses on reference tables) and small: " +
		"a plain table on the coordinator (citus_add_local_table_to_metadata)",
	"schema_migrations": "the migrator's bookkeeping: one row per schema version",
}

// queueTables are River's (the webhook deliveries' queue, migrated by
// events.New), not tenant-owned for the same reason as a whole: its jobs
// are keyed by River's own ids and its workers lock them across
// merchants (FOR UPDATE SKIP LOCKED over the queue), so on Citus they
// stay plain tables on the coordinator (README, "Sharding by merchant").
const queueTables = "river_"

// referenceTables are the tables of notTenantOwned that tenant-owned tables
// may reference (Citus allows a distributed table's foreign key to a
// reference table, and not the other way round).
var referenceTables = map[string]bool{"tenants": true, "tenant_credentials": true, "tenant_credential_keys": true,
	"tenant_create_keys": true, "provider_accounts": true}

// TestSchemaIsShardReadyByMerchant reads the catalog of the migrated schema
// and fails when a tenant-owned table's primary key or a unique index does
// not include merchant_id, or when a foreign key crosses merchants: what a
// database that distributes tables by merchant_id (Citus and its kin)
// needs, since it enforces uniqueness and foreign keys only within a shard.
func TestSchemaIsShardReadyByMerchant(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	// River's tables too, as the running gateway has them.
	sqlDB, err := db.DB()
	require.NoError(t, err)
	migrator, err := rivermigrate.New(riverdatabasesql.New(sqlDB), nil)
	require.NoError(t, err)
	_, err = migrator.Migrate(context.Background(), rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	problems := shardProblems(t, db)
	require.Empty(t, problems, "the schema does not shard by merchant_id:\n%s", strings.Join(problems, "\n"))

	t.Run("CatchesWhatItChecks", func(t *testing.T) {
		t.Parallel()
		// The same check on tables made to break each rule, in a schema
		// of their own: it must name every one.
		db := dbtest.Postgres(t)
		for _, stmt := range []string{
			`CREATE TABLE orders (id TEXT PRIMARY KEY, merchant_id TEXT NOT NULL)`,
			`CREATE TABLE invoices (merchant_id TEXT NOT NULL, id TEXT NOT NULL, number TEXT NOT NULL,
				order_id TEXT REFERENCES orders(id), PRIMARY KEY (merchant_id, id))`,
			`CREATE UNIQUE INDEX invoices_number_idx ON invoices (number)`,
			`CREATE TABLE notes (id TEXT PRIMARY KEY)`,
			`CREATE TABLE shipments (merchant_id TEXT NOT NULL, id TEXT NOT NULL, invoice_id TEXT NOT NULL,
				other_merchant TEXT NOT NULL, PRIMARY KEY (merchant_id, id),
				FOREIGN KEY (other_merchant, invoice_id) REFERENCES invoices (merchant_id, id))`,
		} {
			require.NoError(t, db.Exec(stmt).Error)
		}
		got := strings.Join(shardProblems(t, db), "\n")
		for _, want := range []string{
			"orders: primary key (id) lacks merchant_id",
			"invoices: unique index invoices_number_idx (number) lacks merchant_id",
			"invoices: foreign key invoices_order_id_fkey to orders does not pair merchant_id with merchant_id",
			"notes: tenant-owned but has no merchant_id column",
			"shipments: foreign key shipments_other_merchant_invoice_id_fkey to invoices does not pair merchant_id with merchant_id",
		} {
			require.Contains(t, got, want)
		}
	})
}

// shardProblems lists, one line each, what keeps the current schema of db
// from being distributed by merchant_id.
func shardProblems(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	var tables []string
	require.NoError(t, db.Raw(`SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
		ORDER BY 1`).Scan(&tables).Error)
	require.NotEmpty(t, tables)
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	hasColumn := func(table, column string) bool {
		var n int64
		require.NoError(t, db.Raw(`SELECT count(*) FROM pg_attribute
			WHERE attrelid = (current_schema() || '.' || ?)::regclass AND attname = ? AND NOT attisdropped`,
			table, column).Scan(&n).Error)
		return n == 1
	}
	for _, table := range tables {
		if _, ok := notTenantOwned[table]; ok || strings.HasPrefix(table, queueTables) {
			continue
		}
		if !hasColumn(table, "merchant_id") {
			bad("%s: tenant-owned but has no merchant_id column (add it, or list the table in notTenantOwned with a reason)", table)
			continue
		}
		// The primary key and every unique index, with their columns.
		type index struct {
			Name    string
			Primary bool
			Columns string
		}
		var indexes []index
		require.NoError(t, db.Raw(`SELECT i.relname AS name, x.indisprimary AS primary,
				(SELECT string_agg(a.attname, ',' ORDER BY k.ord) FROM unnest(x.indkey) WITH ORDINALITY k(attnum, ord)
				 JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum) AS columns
			FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
			WHERE x.indrelid = (current_schema() || '.' || ?)::regclass AND (x.indisunique OR x.indisprimary)
			ORDER BY i.relname`, table).Scan(&indexes).Error)
		hasPrimary := false
		for _, ix := range indexes {
			has := slices.Contains(strings.Split(ix.Columns, ","), "merchant_id")
			switch {
			case ix.Primary:
				hasPrimary = true
				if !has {
					bad("%s: primary key (%s) lacks merchant_id", table, ix.Columns)
				}
			case !has:
				bad("%s: unique index %s (%s) lacks merchant_id", table, ix.Name, ix.Columns)
			}
		}
		if !hasPrimary {
			bad("%s: no primary key", table)
		}
	}
	// Foreign keys: referencing column → referenced column, pairwise.
	type fk struct {
		Name, From, To string
		Pairs          string // "from_col=to_col,…"
	}
	var fks []fk
	require.NoError(t, db.Raw(`SELECT c.conname AS name, f.relname AS "from", r.relname AS "to",
			(SELECT string_agg(fa.attname || '=' || ra.attname, ',' ORDER BY k.ord)
			 FROM unnest(c.conkey, c.confkey) WITH ORDINALITY k(fcol, rcol, ord)
			 JOIN pg_attribute fa ON fa.attrelid = c.conrelid AND fa.attnum = k.fcol
			 JOIN pg_attribute ra ON ra.attrelid = c.confrelid AND ra.attnum = k.rcol) AS pairs
		FROM pg_constraint c JOIN pg_class f ON f.oid = c.conrelid JOIN pg_class r ON r.oid = c.confrelid
		WHERE c.contype = 'f' AND c.connamespace = current_schema()::regnamespace
		ORDER BY c.conname`).Scan(&fks).Error)
	for _, k := range fks {
		_, fromOther := notTenantOwned[k.From]
		_, toOther := notTenantOwned[k.To]
		switch {
		case fromOther && toOther:
			// Between reference tables (credentials → tenants): replicated together.
		case toOther:
			if !referenceTables[k.To] {
				bad("%s: foreign key %s to %s, a table that is neither tenant-owned nor a reference table", k.From, k.Name, k.To)
			}
		case fromOther:
			bad("%s: foreign key %s to the tenant-owned %s: a reference table cannot reference a distributed one", k.From, k.Name, k.To)
		case !strings.Contains(","+k.Pairs+",", ",merchant_id=merchant_id,"):
			bad("%s: foreign key %s to %s does not pair merchant_id with merchant_id (%s): it could cross merchants", k.From, k.Name, k.To, k.Pairs)
		}
	}
	return problems
}
