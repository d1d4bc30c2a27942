package database

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A migration's SQL splits at its semicolons, except in strings, quoted
// identifiers, dollar-quoted bodies, comments, and BEGIN or CASE … END.
func TestStatements(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, sql string
		want      []string
	}{
		{"plain", "CREATE TABLE a (x INT);\nCREATE INDEX b ON a (x);\n", []string{"CREATE TABLE a (x INT)", "CREATE INDEX b ON a (x)"}},
		{"empty pieces", " ;\n;SELECT 1;", []string{"SELECT 1"}},
		{"quoted", "INSERT INTO a VALUES ('x;y', 'it''s; fine'); SELECT \"a;b\" FROM c", []string{"INSERT INTO a VALUES ('x;y', 'it''s; fine')", "SELECT \"a;b\" FROM c"}},
		{"comment", "SELECT 1; -- it's; a $$ comment\nSELECT 2", []string{"SELECT 1", "-- it's; a $$ comment\nSELECT 2"}},
		{"dollar body", "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n\tRAISE EXCEPTION 'no';\nEND\n$$;\nCREATE TRIGGER t BEFORE DELETE ON a FOR EACH ROW EXECUTE FUNCTION f()",
			[]string{"CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n\tRAISE EXCEPTION 'no';\nEND\n$$", "CREATE TRIGGER t BEFORE DELETE ON a FOR EACH ROW EXECUTE FUNCTION f()"}},
		{"tagged dollar body", "DO $x$ BEGIN PERFORM '$$;'; END $x$; SELECT $1", []string{"DO $x$ BEGIN PERFORM '$$;'; END $x$", "SELECT $1"}},
		{"sqlite trigger", "CREATE TRIGGER t BEFORE UPDATE ON a\nBEGIN\n\tSELECT RAISE(ABORT, 'no');\n\tSELECT CASE WHEN 1 THEN 2 END;\n\tSELECT spend, backend FROM b;\nEND;\nSELECT 3",
			[]string{"CREATE TRIGGER t BEFORE UPDATE ON a\nBEGIN\n\tSELECT RAISE(ABORT, 'no');\n\tSELECT CASE WHEN 1 THEN 2 END;\n\tSELECT spend, backend FROM b;\nEND", "SELECT 3"}},
		{"begin in a name", "CREATE TRIGGER begin_audit BEFORE DELETE ON a FOR EACH ROW EXECUTE FUNCTION f(); SELECT 4",
			[]string{"CREATE TRIGGER begin_audit BEFORE DELETE ON a FOR EACH ROW EXECUTE FUNCTION f()", "SELECT 4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, statements(tc.sql))
		})
	}
}

// Every released migration splits, as it runs on each engine, exactly as
// it did when the runner split on every ";"; the ones written since into
// the statements they are.
func TestMigrationsSplitAsReleased(t *testing.T) {
	t.Parallel()
	later := map[Dialect]map[int]int{Postgres: {15: 2}, SQLite: {15: 3}}
	for _, m := range migrations {
		for _, d := range []Dialect{Postgres, SQLite} {
			sql := migrationSQL(d, m)
			if n, ok := later[d][m.Version]; ok {
				require.Len(t, statements(sql), n, "migration %d on %v", m.Version, d)
				continue
			}
			var plain []string
			for _, s := range strings.Split(sql, ";") {
				if s = strings.TrimSpace(s); s != "" {
					plain = append(plain, s)
				}
			}
			require.Equal(t, plain, statements(sql), "migration %d on %v", m.Version, d)
		}
	}
}
