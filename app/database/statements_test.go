package database

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A migration's SQL splits at its semicolons, except inside strings,
// $$-quoted bodies and SQLite triggers' BEGIN … END; every released
// migration splits as it did with a plain split on ";".
func TestStatements(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, sql string
		want      []string
	}{
		{"plain", "CREATE TABLE a (x INT);\nCREATE INDEX b ON a (x);\n", []string{"CREATE TABLE a (x INT)", "CREATE INDEX b ON a (x)"}},
		{"empty pieces", " ;\n;SELECT 1;", []string{"SELECT 1"}},
		{"quoted", "INSERT INTO a VALUES ('x;y', 'it''s; fine'); SELECT 2", []string{"INSERT INTO a VALUES ('x;y', 'it''s; fine')", "SELECT 2"}},
		{"dollar body", "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n\tRAISE EXCEPTION 'no';\nEND\n$$;\nCREATE TRIGGER t BEFORE DELETE ON a FOR EACH ROW EXECUTE FUNCTION f()",
			[]string{"CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n\tRAISE EXCEPTION 'no';\nEND\n$$", "CREATE TRIGGER t BEFORE DELETE ON a FOR EACH ROW EXECUTE FUNCTION f()"}},
		{"sqlite trigger", "CREATE TRIGGER t BEFORE UPDATE ON a\nBEGIN\n\tSELECT RAISE(ABORT, 'no');\n\tSELECT 1;\nEND;\nSELECT 3",
			[]string{"CREATE TRIGGER t BEFORE UPDATE ON a\nBEGIN\n\tSELECT RAISE(ABORT, 'no');\n\tSELECT 1;\nEND", "SELECT 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, statements(tc.sql))
		})
	}
	for _, m := range migrations {
		for _, d := range []Dialect{Postgres, SQLite} {
			sql := render(d, m.SQL)
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
