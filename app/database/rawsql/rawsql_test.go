package rawsql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/gateway/app/database/rawsql"
)

// dryRun is a PostgreSQL dialect that never connects: statements are only
// built.
func dryRun(t testing.TB) *gorm.DB {
	db, err := gorm.Open(postgres.New(postgres.Config{DSN: "host=127.0.0.1 port=1 user=nobody", PreferSimpleProtocol: true}),
		&gorm.Config{DryRun: true, DisableAutomaticPing: true})
	require.NoError(t, err)
	return db
}

type gormValuer struct{}

func (gormValuer) GormValue(context.Context, *gorm.DB) clause.Expr { return clause.Expr{SQL: "now()"} }

var _ gorm.Valuer = gormValuer{}

// The contract: whatever Raw is given, GORM sees the statement db.Raw would
// have built — the same text and the same values in the same order.
func TestRawBuildsWhatGORMBuilds(t *testing.T) {
	db := dryRun(t)
	now := time.Date(2026, 12, 6, 1, 2, 3, 0, time.UTC)
	inner := clause.Expr{SQL: "INSERT INTO t (a, b) SELECT ?, ? FROM claim WHERE x = ?", Vars: []any{"a", 2, nil}}
	cases := []struct {
		name     string
		query    string
		vars     []any
		rendered bool // Raw renders it itself rather than handing it to GORM
	}{
		{"no vars", "SELECT 1", nil, true},
		{"scalars", "SELECT ?, ?, ?, ?, ?", []any{"s", 1, int64(2), true, 1.5}, true},
		{"a nil, a time, bytes", "UPDATE t SET a = ?, b = ?, c = ?", []any{nil, now, []byte("{}")}, true},
		{"driver.Valuer", "SELECT ?", []any{sql.NullString{String: "x", Valid: true}}, true},
		{"a pointer", "SELECT ?", []any{new(string)}, true},
		{"an expression in parentheses", "WITH claim AS (?), r AS (?) SELECT ?", []any{clause.Expr{SQL: "SELECT ?", Vars: []any{1}}, inner, "z"}, true},
		{"nested expressions", "SELECT (?)", []any{clause.Expr{SQL: "? + (?)", Vars: []any{1, clause.Expr{SQL: "?", Vars: []any{2}}}}}, true},
		{"a placeholder right after a parenthesis", "SELECT count(*) FROM t WHERE a IN (?)", []any{"x"}, true},
		{"a byte-slice type", "SELECT ?", []any{json.RawMessage(`{}`)}, false},
		{"an empty byte-slice type", "SELECT ?", []any{json.RawMessage{}}, false},
		{"a slice, expanded into a list", "SELECT * FROM t WHERE a IN ?", []any{[]string{"x", "y"}}, false},
		{"a slice after a parenthesis", "SELECT * FROM t WHERE a IN (?)", []any{[]int{1, 2}}, false},
		{"an []any", "SELECT ?", []any{[]any{1, "b"}}, false},
		{"a column", "SELECT ? FROM t", []any{clause.Column{Name: "a"}}, false},
		{"a gorm.Valuer", "SELECT ?", []any{gormValuer{}}, false},
		{"named parameters", "SELECT @a", []any{sql.Named("a", 1)}, false},
		{"surplus vars", "SELECT ?", []any{1, 2}, false},
		{"surplus placeholders", "SELECT ?, ?", []any{1}, false},
		{"a slice inside an expression", "SELECT (?)", []any{clause.Expr{SQL: "? IN ?", Vars: []any{1, []int{1, 2}}}}, false},
		{"bytes right after a parenthesis, which GORM splits", "SELECT (?)", []any{[]byte("ab")}, false},
		{"empty bytes right after a parenthesis, which GORM binds as NULL", "VALUES (?)", []any{[]byte{}}, false},
		{"bytes after a parenthesis and a placeholder", "VALUES (?, ?)", []any{1, []byte("ab")}, true},
		{"bytes after a parenthesis and two placeholders", "VALUES (??)", []any{1, []byte("ab")}, false},
		{"bytes in a bare expression", "SELECT ?", []any{clause.Expr{SQL: "?", Vars: []any{[]byte("ab")}, WithoutParentheses: true}}, false},
		{"a value in a bare expression", "SELECT ?", []any{clause.Expr{SQL: "?", Vars: []any{"ab"}, WithoutParentheses: true}}, true},
		{"a sub-query", "SELECT * FROM t WHERE id = (?)", []any{db.Table("u").Select("id")}, false},
		{"a leading query exec mode", "SELECT ?, ?", []any{pgx.QueryExecModeSimpleProtocol, 1}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := db.Raw(tc.query, tc.vars...).Statement
			got := rawsql.Raw(db, tc.query, tc.vars...).Statement
			require.Equal(t, want.SQL.String(), got.SQL.String())
			require.Equal(t, want.Vars, got.Vars)
			require.Equal(t, tc.rendered, rawsql.Renders(tc.query, tc.vars...), "rendered by Raw itself")
		})
	}
}

// On another dialect Raw is db.Raw.
func TestRawOnSQLite(t *testing.T) {
	db, err := gorm.Open(sqlite.Open("file::memory:"), &gorm.Config{DryRun: true})
	require.NoError(t, err)
	q, vars := "SELECT ?, (?)", []any{1, clause.Expr{SQL: "?", Vars: []any{"x"}}}
	want := db.Raw(q, vars...).Statement
	got := rawsql.Raw(db, q, vars...).Statement
	require.Equal(t, want.SQL.String(), got.SQL.String())
	require.Equal(t, want.Vars, got.Vars)
}

// Whatever the text, Raw and GORM agree.
func FuzzRawBuildsWhatGORMBuilds(f *testing.F) {
	f.Add("SELECT ?, (?) FROM t WHERE a = ?", uint8(3), true)
	f.Add("?(?)?", uint8(2), false)
	f.Add("@a ?", uint8(1), true)
	db := dryRun(f)
	f.Fuzz(func(t *testing.T, query string, n uint8, nested bool) {
		vars := make([]any, n%6)
		for i := range vars {
			switch {
			case nested && i%3 == 1:
				vars[i] = clause.Expr{SQL: "(? + ?)", Vars: []any{i, []byte("x")}, WithoutParentheses: i%2 == 0}
			case i%3 == 2:
				vars[i] = []byte("ab")
			default:
				vars[i] = i
			}
		}
		want := db.Raw(query, vars...).Statement
		got := rawsql.Raw(db, query, vars...).Statement
		require.Equal(t, want.SQL.String(), got.SQL.String())
		require.Equal(t, want.Vars, got.Vars)
	})
}

func BenchmarkRaw(b *testing.B) {
	db := dryRun(b)
	q := `WITH claim AS (
  SELECT 1 FROM idempotency_keys
  WHERE merchant_id = ? AND key = ? AND status = ? AND lock_token = ?
  FOR UPDATE
), resource AS (?), done AS (
  UPDATE idempotency_keys
  SET status = ?, status_code = ?, response = ?, response_headers = ?, completed_at = ?,
      resource_id = CASE WHEN ? = '' THEN resource_id ELSE ? END
  WHERE merchant_id = ? AND key = ? AND status = ? AND lock_token = ? AND EXISTS (SELECT 1 FROM resource)
  RETURNING 1
)
SELECT (SELECT count(*) FROM claim) AS owned, (SELECT count(*) FROM done) AS completed`
	write := clause.Expr{SQL: `UPDATE payments SET status = ?, provider_transaction_id = ?, updated_at = ?
WHERE merchant_id = ? AND id = ? AND status = ? AND EXISTS (SELECT 1 FROM claim) RETURNING 1`, Vars: []any{"succeeded", "txn", time.Now(), "m", "p", "processing"}}
	vars := []any{"m", "k", "in_progress", "tok", write, "done", 201, []byte(`{"id":"p"}`), nil, time.Now(), "p", "p", "m", "k", "in_progress", "tok"}
	for _, impl := range []struct {
		name string
		raw  func(*gorm.DB, string, ...any) *gorm.DB
	}{{"gorm", (*gorm.DB).Raw}, {"rawsql", rawsql.Raw}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				impl.raw(db, q, vars...)
			}
		})
	}
}
