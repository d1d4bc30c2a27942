package payments

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/database/pipeline"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/providers"
)

// TestHotStatementsUseTheMatchingIndex guards the plans of the statements
// every payment runs, as the gateway runs them: prepared once per pooled
// connection and kept as a generic plan. On a table without statistics
// (every new deployment; autovacuum off or behind), or with statistics that
// do not know the merchant yet, every merchant-led index once cost the
// same as the right one, and connections that cached the list index
// scanned all of the merchant's payments on each completion.
func TestHotStatementsUseTheMatchingIndex(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		prepare func(t *testing.T, db *gorm.DB)
		// analyzed: the table has statistics. Only the hot path's
		// statements (found by primary key) are plan-proof without them;
		// the rarer reads by (merchant, key) and by reference tie with
		// the list index on an empty, never-analyzed table, and rely on
		// autovacuum's first ANALYZE (which invalidates cached plans).
		analyzed bool
		// custom: the plan PostgreSQL makes for the merchant's own id
		// (the first executions of a prepared statement, and every one
		// after while the generic plan looks dearer), rather than the
		// cached generic plan.
		custom bool
	}{
		{"EmptyNeverAnalyzed", func(*testing.T, *gorm.DB) {}, false, false},
		{"AnalyzedWithoutThisMerchant", func(t *testing.T, db *gorm.DB) {
			require.NoError(t, db.Exec(`INSERT INTO payments (id, merchant_id, idempotency_key, amount, currency, status, provider,
  provider_reference, provider_transaction_id, failure_code, failure_message, email, payment_method, description, metadata, attempts, created_at, updated_at)
SELECT 'pay_old' || i, 'ten_big', 'k' || i, 100, 'NGN', 'succeeded', 'simulator', 'ref' || i, '', '', '', 'e@example.com', 'card', '', '{}', 1, now(), now()
FROM generate_series(1, 5000) i`).Error)
			require.NoError(t, db.Exec("ANALYZE payments").Error)
		}, true, false},
		// A merchant the statistics have never seen, planned for its
		// own id: statistics that list every merchant they saw estimate
		// no rows for this one, so any merchant-led index looked as
		// cheap as the primary key, and the bench's pgbench merchant's
		// completions walked its payments by payments_email_idx (tps
		// 824 → 338 in 24 s). Migration 13 takes merchant_id's
		// statistics away, so a merchant is a default share of the
		// table and only a unique index matches one row.
		{"AnalyzedCustomPlanForANewMerchant", func(t *testing.T, db *gorm.DB) {
			require.NoError(t, db.Exec(`INSERT INTO payments (id, merchant_id, idempotency_key, amount, currency, status, provider,
  provider_reference, provider_transaction_id, failure_code, failure_message, email, payment_method, description, metadata, attempts, created_at, updated_at)
SELECT 'pay_old' || i, 'ten_big' || (i % 3), 'k' || i, 100, 'NGN', 'succeeded', 'simulator', 'ref' || i, '', '', '', 'e@example.com', 'card', '', '{}', 1, now(), now()
FROM generate_series(1, 5000) i`).Error)
			require.NoError(t, db.Exec("ANALYZE payments").Error)
		}, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.Postgres(t)
			tc.prepare(t, db)

			type stmt struct {
				sql  string
				vars []any
			}
			var captured []stmt
			capture := func(d *gorm.DB) {
				captured = append(captured, stmt{d.Statement.SQL.String(), append([]any(nil), d.Statement.Vars...)})
			}
			require.NoError(t, db.Callback().Row().After("gorm:row").Register("test:capture", capture))
			require.NoError(t, db.Callback().Query().After("gorm:query").Register("test:capture", capture))

			keys := idempotency.NewStore(db)
			s := NewService(db, keys, nil, Config{})
			c, _, err := keys.Claim(ctx, idempotency.ClaimParams{MerchantID: "ten_new", Key: "k", RequestHash: "h", Lease: time.Minute, Hold: true})
			require.NoError(t, err)
			p, _, err := s.open(ctx, c, "ten_new", input{Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: "card", Provider: "simulator", Metadata: "{}"})
			require.NoError(t, err)
			captured = nil
			_, err = s.finish(ctx, c, &p, providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: "txn_1"})
			require.NoError(t, err)
			_, err = s.store.Get(ctx, "ten_new", p.ID)
			require.NoError(t, err)
			// The reads of the rarer paths: a key that already has its
			// payment (open's conflict, finish's fallback) and a webhook's
			// lookup by reference.
			_, err = s.store.GetByKey(ctx, nil, "ten_new", "k")
			require.NoError(t, err)
			_, err = s.store.GetByReference(ctx, "ten_new", p.ProviderReference)
			require.NoError(t, err)
			require.NoError(t, s.store.recordTransaction(ctx, db, "ten_new", p.ID), "as a refund of it would")
			_, err = s.store.GetByTransactionID(ctx, "ten_new", "simulator", "txn_1")
			require.NoError(t, err)
			require.Len(t, captured, 5, "the completion and the reads")

			sqlDB, err := db.DB()
			require.NoError(t, err)
			conn, err := sqlDB.Conn(ctx)
			require.NoError(t, err)
			defer conn.Close()
			mode := "force_generic_plan"
			if tc.custom {
				mode = "force_custom_plan"
			}
			_, err = conn.ExecContext(ctx, "SET plan_cache_mode = "+mode)
			require.NoError(t, err)
			indexes := []string{"payments_pkey", "payments_list_idx", "payments_merchant_id_idempotency_key_key", "payments_reference_idx", "payments_email_idx"}
			want := [][]string{{"payments_pkey"}, {"payments_pkey"}, {"payments_merchant_id_idempotency_key_key"}, {"payments_reference_idx"},
				{"payment_transactions_pkey", "payments_pkey"}}
			if !tc.analyzed {
				captured = captured[:2]
			}
			for i, st := range captured {
				plan := preparedPlan(t, conn, fmt.Sprintf("p%d", i), st.sql, st.vars)
				for _, w := range want[i] {
					require.Contains(t, plan, w, "%s\n%s", st.sql, plan)
				}
				require.NotContains(t, plan, "Seq Scan on payments", "%s\n%s", st.sql, plan)
				for _, other := range indexes {
					if !slices.Contains(want[i], other) {
						require.NotContains(t, plan, other+" ", "%s\n%s", st.sql, plan)
					}
				}
			}
		})
	}
}

// preparedPlan prepares q (with $n placeholders) and explains the plan
// PostgreSQL caches for it.
func preparedPlan(t *testing.T, conn *sql.Conn, name, q string, vars []any) string {
	t.Helper()
	ctx := context.Background()
	_, err := conn.ExecContext(ctx, "PREPARE "+name+" AS "+q)
	require.NoError(t, err)
	// EXECUTE takes no bind parameters: its arguments are SQL literals.
	args := make([]string, len(vars))
	for i, v := range vars {
		args[i] = literal(t, v)
	}
	rows, err := conn.QueryContext(ctx, "EXPLAIN EXECUTE "+name+"("+strings.Join(args, ", ")+")")
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	return strings.Join(plan, "\n")
}

func literal(t *testing.T, v any) string {
	t.Helper()
	switch v := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return fmt.Sprintf(`'\\x%x'`, v)
	case time.Time:
		return "'" + v.Format(time.RFC3339Nano) + "'"
	case int, int64:
		return fmt.Sprint(v)
	}
	rv := reflect.ValueOf(v)
	require.Equal(t, reflect.String, rv.Kind(), "no literal for %T", v)
	return "'" + strings.ReplaceAll(rv.String(), "'", "''") + "'"
}

// TestCompletionIsAHotUpdate: the completion changes no indexed column of
// payments (the provider's transaction id is looked up through
// payment_transactions, migration 14), so PostgreSQL writes the completed
// version on the same page and leaves payments' nine indexes alone — a
// HOT update, which the table's statistics count. An index on a column
// the completion writes would make every completion insert into all of
// them again (11% of PostgreSQL's CPU per payment, bench/README.md).
func TestCompletionIsAHotUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// One backend for the pool and one for the pipeline, so the flushes
	// below are of the backends that updated.
	db := dbtest.PostgresWith(t, database.Options{MaxOpenConns: 1, PipelineConns: 1})
	keys := idempotency.NewStore(db)
	s := NewService(db, keys, nil, Config{})
	for i, res := range []providers.Result{
		{Outcome: providers.OutcomeSucceeded, TransactionID: "txn_1"},
		{Outcome: providers.OutcomeFailed, FailureCode: "insufficient_funds", FailureMessage: "Not enough money."},
	} {
		key := fmt.Sprintf("k%d", i)
		c, _, err := keys.Claim(ctx, idempotency.ClaimParams{MerchantID: "ten_hot", Key: key, RequestHash: "h", Lease: time.Minute, Hold: true})
		require.NoError(t, err)
		p, _, err := s.open(ctx, c, "ten_hot", input{Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: "card", Provider: "simulator", Metadata: `{"order":"42"}`})
		require.NoError(t, err)
		_, err = s.finish(ctx, c, &p, res)
		require.NoError(t, err)
	}
	require.NoError(t, db.Exec("SELECT pg_stat_force_next_flush()").Error)
	require.NoError(t, pipeline.Session(db, ctx).Exec("SELECT pg_stat_force_next_flush()").Error)
	var updates, hot int64
	require.NoError(t, db.Raw(`SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'payments'::regclass`).
		Row().Scan(&updates, &hot))
	require.EqualValues(t, 2, updates, "one completion each")
	require.EqualValues(t, 2, hot, "HOT updates (a completion that writes an indexed column is not one)")
	// Room on every page for the completed version of its payments.
	var options string
	require.NoError(t, db.Raw(`SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'payments'::regclass`).Row().Scan(&options))
	require.Contains(t, options, "fillfactor=80")
}
