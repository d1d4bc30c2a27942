package app_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app"
	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/audit"
	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/config"
	"github.com/oncepay/gateway/events"
)

// servingRole creates a login role with a name of its own (roles are the
// cluster's, not the test schema's) and drops it when the test ends, after
// the gateway that serves as it has stopped (cleanups run last-first). It
// returns the role's name and dsn with the role as its user.
func servingRole(t *testing.T, owner *gorm.DB, dsn string) (role, roleDSN string) {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role = "oncepay_app_" + hex.EncodeToString(b)
	require.NoError(t, owner.Exec("CREATE ROLE "+role+" LOGIN").Error)
	t.Cleanup(func() {
		// What was granted to it here, default privileges included; then
		// the role itself. Its grants in other schemas (none) would
		// make DROP ROLE fail, and the test say so.
		if err := owner.Exec("DROP OWNED BY " + role).Error; err != nil {
			t.Errorf("drop owned by %s: %v", role, err)
		}
		if err := owner.Exec("DROP ROLE " + role).Error; err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.User(role)
	return role, u.String()
}

// schemaOf is the schema dbtest gave the test (its URL's search_path).
func schemaOf(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	s := u.Query().Get("search_path")
	require.NotEmpty(t, s, "dbtest isolates a test in a schema of its own, by search_path")
	return s
}

// readmeGrants is README's block of grants for the serving role ("Two
// database roles"), as written: the test runs it, so the README says
// what works.
func readmeGrants(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "README.md"))
	require.NoError(t, err)
	for _, block := range strings.Split(string(b), "```sql\n")[1:] {
		block = block[:strings.Index(block, "```")]
		if strings.Contains(block, "ALTER DEFAULT PRIVILEGES") {
			return block
		}
	}
	t.Fatal("README.md has no sql block of grants (ALTER DEFAULT PRIVILEGES)")
	return ""
}

// grant runs README's grants in schema, for role, as the owner (the
// README's oncepay_owner is the role that migrated: the test's).
func grant(t *testing.T, owner *gorm.DB, schema, role string) {
	t.Helper()
	var me string
	require.NoError(t, owner.Raw("SELECT current_user").Scan(&me).Error)
	sql := strings.NewReplacer("SCHEMA public", "SCHEMA "+schema, "oncepay_app", role, "oncepay_owner", me).Replace(readmeGrants(t))
	require.NotContains(t, sql, "public", "every line of the grants names the schema")
	for _, stmt := range strings.Split(sql, ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			require.NoError(t, owner.Exec(stmt).Error, stmt)
		}
	}
}

// notOwnerOf stands for PostgreSQL's "must be owner of table
// audit_events" ("of relation", dropping a trigger).
const notOwnerOf = "not the owner of audit_events"

// refused requires err to be PostgreSQL's refusal for want of privilege
// (42501) with want in its message: not being the owner, or not being
// granted — not the audit log's trigger, which raises 42501 too, and would
// hide a grant of UPDATE or DELETE.
func refused(t *testing.T, err error, what, want string) {
	t.Helper()
	var pg *pgconn.PgError
	require.Truef(t, errors.As(err, &pg), "%s: want PostgreSQL's refusal, got %v", what, err)
	require.Equalf(t, "42501", pg.Code, "%s: %v", what, err)
	if want == notOwnerOf {
		require.Regexpf(t, `^must be owner of (table|relation) audit_events$`, pg.Message, "%s", what)
		return
	}
	require.Containsf(t, pg.Message, want, "%s", what)
}

// The production setup of README's "Two database roles": the owner
// migrates (gateway migrate: the schema's and River's migrations), the
// README's grants are run, and the gateway serves as a role that owns
// nothing, with MIGRATE_ON_START=false. The release's own migration is
// applied after the grants, as a deploy does: until it is, the serving
// role refuses to start (with the gateway migrating at start instead, it
// fails on "permission denied for schema"), and the table it creates is
// the serving role's to use by the default privileges. Then the gateway
// takes payments and records the operator's actions, and that role can
// neither disable nor drop the audit log's triggers, nor change or delete
// an event.
func TestServingRoleCannotRewriteTheAuditLog(t *testing.T) {
	t.Parallel()
	ownerDSN := dbtest.PostgresURL(t)
	owner := queueMigrated(t, ownerDSN)
	// The schema of the release before migration 21, which creates a
	// table (tenant_create_keys) and nothing else, as does 22
	// (payment_recheck_news).
	const release, table = 21, "tenant_create_keys"
	require.NoError(t, owner.Exec("DROP TABLE "+table).Error)
	require.NoError(t, owner.Exec("DROP TABLE payment_recheck_news").Error)
	require.NoError(t, owner.Exec("DELETE FROM schema_migrations WHERE version >= ?", release).Error)

	schema := schemaOf(t, ownerDSN)
	role, roleDSN := servingRole(t, owner, ownerDSN)
	grant(t, owner, schema, role)

	_, err := newUnmigratedApp(t, roleDSN)
	require.ErrorContains(t, err, "database: the schema is behind this build")
	require.ErrorContains(t, err, "not applied: "+strconv.Itoa(release)+" "+table)
	require.ErrorContains(t, err, "run `gateway migrate`")

	// The deploy step: gateway migrate, as the owner. Its table, and one
	// with a sequence, are granted by the default privileges.
	_, err = database.Migrate(owner)
	require.NoError(t, err)
	require.NoError(t, owner.Exec("CREATE TABLE later_migration (id BIGSERIAL PRIMARY KEY, note TEXT)").Error)

	g := apptest.Start(t, apptest.Env("DATABASE_URL", roleDSN), apptest.Env("MIGRATE_ON_START", "false"))
	created := g.Do("POST", "/admin/v1/tenants", []byte(`{"name":"Serving Role","default_provider":"simulator"}`),
		"Authorization", "Bearer "+apptest.AdminKey, "Idempotency-Key", "serving-role-tenant")
	require.Equal(t, http.StatusCreated, created.StatusCode, "%s", created.Body)
	var keys int
	require.NoError(t, owner.Raw("SELECT count(*) FROM "+table).Scan(&keys).Error)
	require.Equal(t, 1, keys, "the serving role wrote to the release's new table")
	c := created.JSON(t)
	m := apptest.Merchant{ID: c["id"].(string), ClientID: c["client_id"].(string), ClientSecret: c["client_secret"].(string)}
	m.Token = g.Token(m.ClientID, m.ClientSecret)
	pay := g.Pay(m, "serving-role-1", map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"})
	require.Equal(t, http.StatusCreated, pay.StatusCode, "%s", pay.Body)
	require.Equal(t, "succeeded", pay.JSON(t)["status"])
	r := g.Admin("GET", "/admin/v1/audit-events?tenant_id="+m.ID+"&action="+audit.TenantCreated, nil)
	require.Equal(t, http.StatusOK, r.StatusCode, "%s", r.Body)
	require.Len(t, r.JSON(t)["data"], 1, "the onboarding's audit event: %s", r.Body)
	var before int64
	require.NoError(t, owner.Raw("SELECT count(*) FROM audit_events").Scan(&before).Error)
	require.Positive(t, before)

	as, err := database.Open(roleDSN, database.Options{MaxOpenConns: 1, PipelineConns: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(as) })
	var owns bool
	require.NoError(t, as.Raw("SELECT pg_has_role(current_user, tableowner, 'USAGE') FROM pg_tables WHERE tablename = 'audit_events' AND schemaname = current_schema()").
		Scan(&owns).Error)
	require.False(t, owns, "the serving role is not (a member of) audit_events' owner")
	require.NoError(t, as.Exec("INSERT INTO later_migration (note) VALUES ('granted by default')").Error)

	const notOwner, notGranted = notOwnerOf, "permission denied for table audit_events"
	for _, c := range []struct{ stmt, want string }{
		{"ALTER TABLE audit_events DISABLE TRIGGER ALL", notOwner},
		{"ALTER TABLE audit_events DISABLE TRIGGER audit_events_no_change", notOwner},
		{"DROP TRIGGER audit_events_no_change ON audit_events", notOwner},
		{"DROP TRIGGER audit_events_no_truncate ON audit_events", notOwner},
		{"DROP TABLE audit_events", notOwner},
		{"ALTER TABLE audit_events OWNER TO " + role, notOwner},
		{"CREATE OR REPLACE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
			"permission denied for schema " + schema},
		{"DROP FUNCTION audit_events_append_only() CASCADE", "must be owner of function audit_events_append_only"},
		{"UPDATE audit_events SET note = 'rewritten'", notGranted},
		{"DELETE FROM audit_events", notGranted},
		{"TRUNCATE audit_events", notGranted},
		{"INSERT INTO audit_events SELECT * FROM audit_events LIMIT 1 ON CONFLICT (id) DO UPDATE SET note = 'rewritten'", notGranted},
		{"UPDATE schema_migrations SET name = 'forged'", "permission denied for table schema_migrations"},
		{"CREATE TABLE mine (id INT)", "permission denied for schema " + schema},
	} {
		refused(t, as.Exec(c.stmt).Error, c.stmt, c.want)
	}

	var after int64
	require.NoError(t, owner.Raw("SELECT count(*) FROM audit_events WHERE note <> 'rewritten'").Scan(&after).Error)
	require.Equal(t, before, after, "the audit log is untouched")
	var enabled []string
	require.NoError(t, owner.Raw(`SELECT tgname FROM pg_trigger WHERE tgrelid = 'audit_events'::regclass AND NOT tgisinternal AND tgenabled = 'O' ORDER BY tgname`).
		Scan(&enabled).Error)
	require.Equal(t, []string{"audit_events_no_change", "audit_events_no_truncate"}, enabled)

	// And the gateway still works after the refusals.
	again := g.Pay(m, "serving-role-2", map[string]any{"amount": 700, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"})
	require.Equal(t, http.StatusCreated, again.StatusCode, "%s", again.Body)
	require.NotContains(t, g.Logs.String(), "permission denied", "nothing the gateway (River included) does needs more than the grants")
	require.NotContains(t, g.Logs.String(), "must be owner")
}

// newUnmigratedApp is app.New with the test gateway's environment (apptest.BaseEnv)
// on dsn, and MIGRATE_ON_START=false.
func newUnmigratedApp(t *testing.T, dsn string) (*app.App, error) {
	t.Helper()
	env := apptest.BaseEnv(dsn, t.TempDir())
	env["MIGRATE_ON_START"] = "false"
	cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		t.Cleanup(func() { _ = a.Close() })
	}
	return a, err
}

// With MIGRATE_ON_START=false the gateway does not migrate: on a database
// gateway migrate has not brought to this build's schema — empty, a
// migration missing, River's tables missing — it refuses to start with one
// error naming what is missing and saying to run gateway migrate. As a
// role that owns nothing, it fails so rather than with "permission denied"
// half way through a migration.
func TestNoMigrateOnStartRefusesASchemaBehind(t *testing.T) {
	t.Parallel()
	const run = "run `gateway migrate` with this build (as the role that owns the schema) before starting it with MIGRATE_ON_START=false"

	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		base, err := url.Parse(dbtest.BaseURL())
		require.NoError(t, err)
		owner, err := database.Open(base.String(), database.Options{MaxOpenConns: 2, PipelineConns: -1})
		require.NoError(t, err)
		t.Cleanup(func() { _ = database.Close(owner) })
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		schema := "t_empty_" + hex.EncodeToString(b)
		require.NoError(t, owner.Exec("CREATE SCHEMA "+schema).Error)
		t.Cleanup(func() { owner.Exec("DROP SCHEMA " + schema + " CASCADE") })
		q := base.Query()
		q.Set("search_path", schema)
		base.RawQuery = q.Encode()
		role, roleDSN := servingRole(t, owner, base.String())
		require.NoError(t, owner.Exec("GRANT USAGE ON SCHEMA "+schema+" TO "+role).Error)

		_, err = newUnmigratedApp(t, roleDSN)
		require.EqualError(t, err, "database: the database has no schema (no schema_migrations table; this build's schema is version "+
			strconv.Itoa(database.Version())+"); "+run)
		var tables int
		require.NoError(t, owner.Raw("SELECT count(*) FROM pg_tables WHERE schemaname = ?", schema).Scan(&tables).Error)
		require.Zero(t, tables, "nothing was created")
	})

	t.Run("migration missing", func(t *testing.T) {
		t.Parallel()
		dsn := dbtest.PostgresURL(t)
		owner := queueMigrated(t, dsn)
		last := database.Versions()[len(database.Versions())-1]
		var name string
		require.NoError(t, owner.Raw("SELECT name FROM schema_migrations WHERE version = ?", last).Scan(&name).Error)
		require.NoError(t, owner.Exec("DELETE FROM schema_migrations WHERE version = ?", last).Error)

		_, err := newUnmigratedApp(t, dsn)
		require.EqualError(t, err, "database: the schema is behind this build (version "+strconv.Itoa(last)+"): not applied: "+
			strconv.Itoa(last)+" "+name+"; "+run)
		var applied int
		require.NoError(t, owner.Raw("SELECT count(*) FROM schema_migrations WHERE version = ?", last).Scan(&applied).Error)
		require.Zero(t, applied, "the start did not migrate")
	})

	t.Run("river missing", func(t *testing.T) {
		t.Parallel()
		// dbtest applies the schema's migrations, not River's.
		_, err := newUnmigratedApp(t, dbtest.PostgresURL(t))
		require.ErrorContains(t, err, "events: the queue's (River's) tables are behind this build")
		require.ErrorContains(t, err, "Unapplied migrations: [1 2 3 4 5 6")
		require.ErrorContains(t, err, run)
	})

	t.Run("up to date", func(t *testing.T) {
		t.Parallel()
		dsn := dbtest.PostgresURL(t)
		queueMigrated(t, dsn)
		_, err := newUnmigratedApp(t, dsn)
		require.NoError(t, err)
	})
}

// The embedded store, never migrated, is refused the same way.
func TestNoMigrateOnStartRefusesAnEmptySQLite(t *testing.T) {
	t.Parallel()
	_, err := newUnmigratedApp(t, "")
	require.ErrorContains(t, err, "database: the database has no schema")
	require.ErrorContains(t, err, "run `gateway migrate`")
}

// The real binary, refused so, exits 1 with one ERROR line saying what to
// run: no panic, no stack.
func TestNoMigrateOnStartExitsWithOneLine(t *testing.T) {
	t.Parallel()
	bin := apptest.Binary(t)
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"MIGRATE_ON_START=false", "GATEWAY_ADDR=127.0.0.1:0"}
	for k, v := range apptest.BaseEnv("", t.TempDir()) { // an empty SQLite file
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the start is refused: %v\n%s", err, out)
	require.Equal(t, 1, exit.ExitCode(), "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 1, "%s", out)
	require.Contains(t, lines[0], "level=ERROR")
	require.Contains(t, lines[0], "the database has no schema")
	require.Contains(t, lines[0], "run `gateway migrate`")
	require.NotContains(t, string(out), "goroutine")
}

// queueMigrated opens the database at dsn as its owner, with River's
// tables migrated (dbtest migrates only the gateway's).
func queueMigrated(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
	owner, err := database.Open(dsn, database.Options{MaxOpenConns: 2, PipelineConns: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(owner) })
	require.NoError(t, events.MigrateQueue(context.Background(), owner, slog.New(slog.NewTextHandler(io.Discard, nil))))
	return owner
}
