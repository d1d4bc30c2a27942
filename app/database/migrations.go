package database

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
)

// migration is one versioned schema change. SQL is written once with
// placeholders for the few types the two engines spell differently, so both
// schemas mean the same thing.
type migration struct {
	Version int
	Name    string
	SQL     string
}

// postgresOnly is more SQL of a version, run after its SQL on PostgreSQL
// only: what SQLite has no equivalent of, such as a GIN index.
var postgresOnly = map[int]string{
	8:  `CREATE INDEX payments_metadata_idx ON payments USING gin ((metadata::jsonb))`,
	13: noMerchantStatistics(),
	14: `ALTER TABLE payments SET (fillfactor = 80)`,
	15: `
CREATE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END
$$;
DO $$
BEGIN
	IF to_regclass('pg_dist_partition') IS NOT NULL THEN
		IF EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'audit_events'::regclass
			AND (partmethod <> 'n' OR repmodel = 't')) THEN
			RAISE NOTICE 'audit_events is a Citus reference or distributed table, which takes no triggers: left append-only by grants alone';
			RETURN;
		END IF;
	END IF;
	CREATE TRIGGER audit_events_no_change BEFORE UPDATE OR DELETE ON audit_events
		FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
	CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
		FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();
END
$$`,
}

// merchantLedTables are the tenant tables with indexes led by merchant_id
// besides their unique ones: the planner must not know how many rows a
// merchant has in them (migration 13).
var merchantLedTables = []string{"idempotency_keys", "payments", "refunds", "events", "webhook_deliveries"}

func noMerchantStatistics() string {
	var b strings.Builder
	for _, t := range merchantLedTables {
		fmt.Fprintf(&b, "ALTER TABLE %s ALTER COLUMN merchant_id SET STATISTICS 0;\n", t)
	}
	return b.String()
}

// sqliteOnly is what SQLite runs instead of a migration's SQL, by version:
// for a change the engines cannot spell alike (SQLite cannot alter a
// primary key).
var sqliteOnly = map[int]string{
	9: `
DROP INDEX idempotency_keys_open_idx;
CREATE INDEX idempotency_keys_open_idx ON idempotency_keys (merchant_id, attempted_at) WHERE completed_at IS NULL;
DROP INDEX idempotency_keys_completed_idx;
CREATE INDEX idempotency_keys_done_idx ON idempotency_keys (merchant_id, completed_at) WHERE status = 'done';
DROP INDEX payments_recheck_idx;
CREATE INDEX payments_recheck_idx ON payments (merchant_id, recheck_at) WHERE recheck_at IS NOT NULL;`,
	15: `
CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
BEGIN
	SELECT RAISE(ABORT, 'audit_events is append-only: UPDATE refused');
END;
CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
BEGIN
	SELECT RAISE(ABORT, 'audit_events is append-only: DELETE refused');
END;
CREATE TRIGGER audit_events_no_replace BEFORE INSERT ON audit_events
WHEN EXISTS (SELECT 1 FROM audit_events WHERE id = NEW.id)
BEGIN
	SELECT RAISE(ABORT, 'audit_events is append-only: an event is never written twice');
END`,
}

// migrations are applied in order and never edited once released: a change
// is a new version.
var migrations = []migration{
	{1, "tenants", `
CREATE TABLE tenants (
	id               TEXT PRIMARY KEY,
	name             TEXT NOT NULL,
	status           TEXT NOT NULL,
	default_provider TEXT NOT NULL,
	created_at       {{ts}} NOT NULL,
	updated_at       {{ts}} NOT NULL
);
CREATE INDEX tenants_created_idx ON tenants (created_at, id);
CREATE TABLE tenant_credentials (
	client_id   TEXT PRIMARY KEY,
	tenant_id   TEXT NOT NULL REFERENCES tenants(id),
	secret_hash {{bytes}} NOT NULL,
	created_at  {{ts}} NOT NULL,
	revoked_at  {{ts}}
);
CREATE INDEX tenant_credentials_tenant_idx ON tenant_credentials (tenant_id);
CREATE TABLE provider_accounts (
	tenant_id  TEXT NOT NULL REFERENCES tenants(id),
	provider   TEXT NOT NULL,
	secrets    {{bytes}} NOT NULL,
	created_at {{ts}} NOT NULL,
	updated_at {{ts}} NOT NULL,
	PRIMARY KEY (tenant_id, provider)
);`},
	{2, "idempotency_keys", `
CREATE TABLE idempotency_keys (
	merchant_id      TEXT NOT NULL,
	key              TEXT NOT NULL,
	request_hash     TEXT NOT NULL,
	status           TEXT NOT NULL,
	status_code      INTEGER NOT NULL DEFAULT 0,
	response         {{bytes}},
	response_headers TEXT,
	locked_until     {{ts}} NOT NULL,
	lock_token       TEXT NOT NULL DEFAULT '',
	resource_id      TEXT NOT NULL DEFAULT '',
	created_at       {{ts}} NOT NULL,
	completed_at     {{ts}},
	PRIMARY KEY (merchant_id, key)
);
CREATE INDEX idempotency_keys_sweep_idx ON idempotency_keys (status, created_at);
CREATE INDEX idempotency_keys_purge_idx ON idempotency_keys (status, completed_at);`},
	{3, "payments", `
CREATE TABLE payments (
	id                      TEXT PRIMARY KEY,
	merchant_id             TEXT NOT NULL,
	idempotency_key         TEXT NOT NULL,
	amount                  BIGINT NOT NULL,
	currency                TEXT NOT NULL,
	status                  TEXT NOT NULL,
	provider                TEXT NOT NULL,
	provider_reference      TEXT NOT NULL,
	provider_transaction_id TEXT NOT NULL DEFAULT '',
	failure_code            TEXT NOT NULL DEFAULT '',
	failure_message         TEXT NOT NULL DEFAULT '',
	email                   TEXT NOT NULL,
	payment_method          TEXT NOT NULL,
	description             TEXT NOT NULL DEFAULT '',
	metadata                TEXT NOT NULL DEFAULT '{}',
	attempts                INTEGER NOT NULL DEFAULT 1,
	created_at              {{ts}} NOT NULL,
	updated_at              {{ts}} NOT NULL,
	UNIQUE (merchant_id, idempotency_key)
);
CREATE INDEX payments_list_idx ON payments (merchant_id, created_at, id);
CREATE INDEX payments_reference_idx ON payments (provider_reference);`},
	{4, "simulator_charges", `
CREATE TABLE simulator_charges (
	reference      TEXT PRIMARY KEY,
	transaction_id TEXT NOT NULL,
	amount         BIGINT NOT NULL,
	currency       TEXT NOT NULL,
	payment_method TEXT NOT NULL,
	status         TEXT NOT NULL,
	settle_at      {{ts}},
	created_at     {{ts}} NOT NULL
);`},
	// An index led by status let the planner, on a table without
	// statistics yet (a new deployment, a benchmark), find the key a
	// completion updates by scanning every in-progress entry, dead ones
	// included, instead of using the primary key: the bench saw every
	// completion do so. The sweeper's and the purge's indexes are now on
	// columns the completion's WHERE never names, so only the primary key
	// can serve it. A key is open exactly while completed_at is NULL.
	{5, "idempotency_keys_sweep_and_purge_indexes", `
DROP INDEX idempotency_keys_sweep_idx;
DROP INDEX idempotency_keys_purge_idx;
CREATE INDEX idempotency_keys_open_idx ON idempotency_keys (created_at) WHERE completed_at IS NULL;
CREATE INDEX idempotency_keys_completed_idx ON idempotency_keys (completed_at);`},
	// The promise at its edges (issue 14). attempted_at: the last time a
	// request sent the charge (the claim, or a retry that took the key
	// over); the sweeper trusts a provider's "not found" only long after
	// it, never after the key's creation. looked_up_at: the last lookup a
	// polling GET made, so polls ask the provider at most every few
	// seconds. On payments, request_hash keeps the request's fingerprint
	// after its key's stored answer is purged, and recheck_at is when a
	// payment released as never charged is looked up once more.
	{6, "attempts_fingerprints_rechecks", `
ALTER TABLE idempotency_keys ADD COLUMN attempted_at {{ts}};
ALTER TABLE idempotency_keys ADD COLUMN looked_up_at {{ts}};
UPDATE idempotency_keys SET attempted_at = created_at;
DROP INDEX idempotency_keys_open_idx;
CREATE INDEX idempotency_keys_open_idx ON idempotency_keys (attempted_at) WHERE completed_at IS NULL;
ALTER TABLE payments ADD COLUMN request_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE payments ADD COLUMN recheck_at {{ts}};
CREATE INDEX payments_recheck_idx ON payments (recheck_at) WHERE recheck_at IS NOT NULL;`},
	// Payments made before version 6 learn their request's fingerprint
	// from their key while it is still there (a hash of the raw body, which
	// idempotency.SameRequest still accepts), and those released as
	// not_processed are looked up once more: a charge that landed after
	// such a release was missed until now.
	{7, "backfill_fingerprints_and_rechecks", `
UPDATE payments SET request_hash = COALESCE((SELECT k.request_hash FROM idempotency_keys k
  WHERE k.merchant_id = payments.merchant_id AND k.key = payments.idempotency_key), '')
WHERE request_hash = '';
UPDATE payments SET recheck_at = {{now}} WHERE status = 'failed' AND failure_code = 'not_processed' AND recheck_at IS NULL;`},
	// Refunds (issue 15), under their own idempotency keys. The primary
	// key leads with merchant_id, as every tenant-owned key will (a
	// sharded engine distributes by it). amount_refunded on the payment is
	// the sum of its succeeded and pending refunds, moved only by a
	// conditional UPDATE in the transaction that records a refund, so it
	// can never pass the payment's amount.
	{8, "refunds", `
CREATE TABLE refunds (
	merchant_id        TEXT NOT NULL,
	id                 TEXT NOT NULL,
	payment_id         TEXT NOT NULL,
	idempotency_key    TEXT NOT NULL,
	amount             BIGINT NOT NULL,
	currency           TEXT NOT NULL,
	status             TEXT NOT NULL,
	reason             TEXT NOT NULL DEFAULT '',
	metadata           TEXT NOT NULL DEFAULT '{}',
	provider           TEXT NOT NULL,
	provider_reference TEXT NOT NULL,
	provider_refund_id TEXT NOT NULL DEFAULT '',
	failure_code       TEXT NOT NULL DEFAULT '',
	failure_message    TEXT NOT NULL DEFAULT '',
	request_hash       TEXT NOT NULL DEFAULT '',
	attempts           INTEGER NOT NULL DEFAULT 1,
	created_at         {{ts}} NOT NULL,
	updated_at         {{ts}} NOT NULL,
	PRIMARY KEY (merchant_id, id),
	UNIQUE (merchant_id, idempotency_key)
);
CREATE INDEX refunds_payment_idx ON refunds (merchant_id, payment_id, created_at, id);
ALTER TABLE payments ADD COLUMN amount_refunded BIGINT NOT NULL DEFAULT 0;
CREATE TABLE simulator_refunds (
	reference        TEXT PRIMARY KEY,
	charge_reference TEXT NOT NULL,
	refund_id        TEXT NOT NULL,
	amount           BIGINT NOT NULL,
	status           TEXT NOT NULL,
	settle_at        {{ts}},
	created_at       {{ts}} NOT NULL
);
CREATE TABLE audit_events (
	id          TEXT PRIMARY KEY,
	at          {{ts}} NOT NULL,
	actor       TEXT NOT NULL,
	action      TEXT NOT NULL,
	target_type TEXT NOT NULL,
	target_id   TEXT NOT NULL,
	tenant_id   TEXT NOT NULL DEFAULT '',
	request_id  TEXT NOT NULL DEFAULT '',
	before      TEXT NOT NULL DEFAULT '{}',
	after       TEXT NOT NULL DEFAULT '{}',
	note        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_events_at_idx ON audit_events (at, id);
CREATE INDEX audit_events_tenant_idx ON audit_events (tenant_id, at, id);
CREATE INDEX payments_created_idx ON payments (created_at, id);
CREATE INDEX payments_email_idx ON payments (merchant_id, email, created_at);`},
	// Shard-ready by merchant (issue 19). A sharded PostgreSQL (Citus)
	// distributes a table by one column, and every primary key and unique
	// index must then include it: payments' key becomes (merchant_id, id),
	// and the payment store's writes address that whole key. The sweeper,
	// the purge and the recheck now work merchant by merchant, so their
	// indexes lead with merchant_id; each is partial on a predicate the hot
	// path's statements never imply (open keys; done keys; payments
	// awaiting a recheck), so a completion or a payment's write can still
	// only use its primary key (idempotency/plan_test.go,
	// payments/plan_test.go). SQLite is one file for one instance and never
	// shards: rebuilding its payments table for a new primary key buys
	// nothing there, so on SQLite only the indexes change (sqliteOnly).
	// A table that references payments must name (merchant_id, id).
	{9, "shard_ready_by_merchant", `
ALTER TABLE payments DROP CONSTRAINT payments_pkey;
ALTER TABLE payments ADD CONSTRAINT payments_pkey PRIMARY KEY (merchant_id, id);
DROP INDEX idempotency_keys_open_idx;
CREATE INDEX idempotency_keys_open_idx ON idempotency_keys (merchant_id, attempted_at) WHERE completed_at IS NULL;
DROP INDEX idempotency_keys_completed_idx;
CREATE INDEX idempotency_keys_done_idx ON idempotency_keys (merchant_id, completed_at) WHERE status = 'done';
DROP INDEX payments_recheck_idx;
CREATE INDEX payments_recheck_idx ON payments (merchant_id, recheck_at) WHERE recheck_at IS NOT NULL;`},
	// Events and webhooks (issue 16). An event is written in the
	// transaction (or the one statement) of the state change it reports;
	// enqueued_at marks the outbox relay's hand-over to the delivery queue
	// (River's jobs), so a crash between the change and the delivery loses
	// nothing. dedupe makes a transition's event unique (a replayed 202
	// is not another processing event).
	{10, "events_and_webhooks", `
CREATE TABLE events (
	merchant_id TEXT NOT NULL,
	id          TEXT NOT NULL,
	type        TEXT NOT NULL,
	object_id   TEXT NOT NULL,
	dedupe      TEXT NOT NULL,
	payload     {{bytes}} NOT NULL,
	created_at  {{ts}} NOT NULL,
	enqueued_at {{ts}},
	PRIMARY KEY (merchant_id, id),
	UNIQUE (merchant_id, dedupe)
);
CREATE INDEX events_list_idx ON events (merchant_id, created_at, id);
CREATE INDEX events_outbox_idx ON events (merchant_id, created_at) WHERE enqueued_at IS NULL;
CREATE TABLE webhook_endpoints (
	merchant_id      TEXT NOT NULL,
	id               TEXT NOT NULL,
	url              TEXT NOT NULL,
	events           TEXT NOT NULL DEFAULT '[]',
	description      TEXT NOT NULL DEFAULT '',
	secret           {{bytes}} NOT NULL,
	old_secret       {{bytes}},
	old_secret_until {{ts}},
	disabled_at      {{ts}},
	failing_since    {{ts}},
	created_at       {{ts}} NOT NULL,
	updated_at       {{ts}} NOT NULL,
	PRIMARY KEY (merchant_id, id)
);
CREATE TABLE webhook_deliveries (
	merchant_id TEXT NOT NULL,
	id          TEXT NOT NULL,
	endpoint_id TEXT NOT NULL,
	event_id    TEXT NOT NULL,
	attempt     INTEGER NOT NULL,
	at          {{ts}} NOT NULL,
	status_code INTEGER NOT NULL DEFAULT 0,
	latency_ms  INTEGER NOT NULL DEFAULT 0,
	error       TEXT NOT NULL DEFAULT '',
	outcome     TEXT NOT NULL,
	PRIMARY KEY (merchant_id, id)
);
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (merchant_id, endpoint_id, at, id);
CREATE INDEX webhook_deliveries_event_idx ON webhook_deliveries (merchant_id, event_id, at);`},
	// A provider's refund event may name only the charge's own transaction
	// id (payments.Store.GetByTransactionID): found by index, not by a scan
	// of the merchant's payments.
	{11, "payments_by_provider_transaction", `
CREATE INDEX payments_provider_transaction_idx ON payments (merchant_id, provider, provider_transaction_id)
	WHERE provider_transaction_id <> '';`},
	// The operator desk's refund review queue (status = requires_review,
	// newest first) is read by index however many refunds have settled.
	{12, "refunds_review_queue", `
CREATE INDEX refunds_review_idx ON refunds (created_at, id) WHERE status = 'requires_review';`},
	// Every statement names one merchant, and each of these tables has
	// several indexes led by merchant_id besides the unique ones. A
	// merchant the statistics have never seen (a new one, or any one
	// while the table is young) is estimated at no rows, so an index on
	// merchant_id alone looked as cheap as the primary key, and the
	// planner could find one payment by walking all of the merchant's
	// (measured with the bench's pgbench merchant, new to statistics
	// taken before it paid: each completion read ~7,600 index entries by
	// payments_email_idx after 24 s, and the rate fell 824 → 338/s). Without statistics on merchant_id
	// a merchant is a default share of the table (0.5%), and only a
	// unique index matches one row (payments/plan_test.go). PostgreSQL
	// only (postgresOnly): SQLite's planner prefers the unique index
	// anyway. ANALYZE leaves a column's older statistics in place when
	// it stops gathering them; a deployment analyzed before this version
	// keeps them until they are dropped: Advise warns at start.
	{13, "no_statistics_on_merchant_id", ``},
	// A payment's completion must be a HOT update (the new row version on
	// the same page, no index touched): payments carries nine indexes, and
	// an UPDATE that changes any indexed column writes an entry into every
	// one of them. The completion writes the provider's transaction id,
	// so its index moves out to a table of its own (written then in the
	// same statement as the completion; since, only when a refund of the
	// payment is created, which is when a refund event naming the id can
	// matter: payments.Store.GetByTransactionID), and fillfactor leaves
	// room on each page for the completed version (PostgreSQL only:
	// postgresOnly). Measured with pgbench, same run: PostgreSQL CPU per
	// new payment ~11% lower (bench/README.md).
	{14, "payment_transactions", `
CREATE TABLE payment_transactions (
	merchant_id    TEXT NOT NULL,
	provider       TEXT NOT NULL,
	transaction_id TEXT NOT NULL,
	payment_id     TEXT NOT NULL,
	PRIMARY KEY (merchant_id, provider, transaction_id)
);
INSERT INTO payment_transactions (merchant_id, provider, transaction_id, payment_id)
	SELECT merchant_id, provider, provider_transaction_id, id FROM payments WHERE provider_transaction_id <> ''
	ON CONFLICT DO NOTHING;
DROP INDEX payments_provider_transaction_idx;`},
	// The audit log is append-only in the database too, not only at the
	// API (no route changes it): a statement that updates, deletes or
	// truncates an event fails, whoever sends it — a bug, a hand-run fix,
	// a tool pointed at the wrong table. The engines spell a trigger
	// differently (postgresOnly, sqliteOnly); SQLite's INSERT OR REPLACE
	// deletes without firing DELETE triggers, so an insert of an id that
	// exists is refused too (PostgreSQL's upsert fires the UPDATE trigger).
	// Only the table's owner could drop the triggers. Citus refuses
	// triggers on reference and distributed tables: a deployment that made
	// audit_events one keeps it so, without them (a NOTICE says so; README,
	// "Sharding by merchant").
	{15, "audit_events_append_only", ``},
	// A client secret's hash gets the id of the master key it was made
	// under, so that during a MASTER_KEY rotation the gateway can tell
	// which hashes still need the previous key (tenants.Service.Reseal).
	// Beside the hash, not in it: the hash stays the bare HMAC that older
	// versions verify, during a rolling deploy and after a rollback. In a
	// table of its own, not a column of tenant_credentials: instances of
	// the previous version, still serving while this one migrates, hold
	// their SELECT * on tenant_credentials prepared, and PostgreSQL
	// refuses a cached plan whose result changed (0A000), once per
	// connection: merchants' token and API requests would get 500s. A
	// credential without a row was hashed before this version; its key is
	// recorded at its client's next token request.
	{16, "credential_keys", `
CREATE TABLE tenant_credential_keys (
	client_id TEXT PRIMARY KEY,
	hash_key  TEXT NOT NULL
);`},
	// A refund released as not_processed is looked up once more,
	// RECHECK_AFTER later, as a payment is (payments.recheck_at): in a
	// table of its own, since from 16 on no migration changes an existing
	// table's columns (README).
	{17, "refund_rechecks", `
CREATE TABLE refund_rechecks (
	merchant_id TEXT NOT NULL,
	refund_id   TEXT NOT NULL,
	recheck_at  {{ts}} NOT NULL,
	PRIMARY KEY (merchant_id, refund_id)
);
CREATE INDEX refund_rechecks_due_idx ON refund_rechecks (recheck_at);`},
	// An open key without attempted_at is invisible to the sweeper, the
	// backlog's age and a takeover's "since the attempt" (NULL compares
	// as nothing): its payment would stay processing until the merchant
	// retried. Version 6 filled the column in once, but an instance of an
	// earlier release still serving during that rolling deploy went on
	// writing claims without it. Data only, as from 16 on.
	{18, "open_keys_attempted", `
UPDATE idempotency_keys SET attempted_at = created_at WHERE completed_at IS NULL AND attempted_at IS NULL`},
	// The audit log read by its target ("what happened to pay_…?",
	// GET /admin/v1/audit-events?target_id=), newest first: without it a
	// scan of the whole log (0.6 s at two million events).
	{19, "audit_events_by_target", `
CREATE INDEX audit_events_target_idx ON audit_events (target_id, at, id)`},
	// Why a payment or a refund is in review, and what its provider last
	// answered, for the operator desk: written in the transaction that
	// flags it (never on a payment's way to success, which pays nothing
	// for it), so on-call reads the reason instead of grepping the logs.
	// A table of its own, keyed by (merchant_id, target_id) — a pay_… or
	// a re_… — as from 16 on no migration changes an existing table's
	// columns. One row per target: the last flag's, its answer refreshed
	// while the sweeper keeps asking.
	{20, "reviews", `
CREATE TABLE reviews (
	merchant_id           TEXT NOT NULL,
	target_id             TEXT NOT NULL,
	reason                TEXT NOT NULL,
	flagged_at            {{ts}} NOT NULL,
	provider_outcome      TEXT NOT NULL DEFAULT '',
	provider_id           TEXT NOT NULL DEFAULT '',
	provider_failure_code TEXT NOT NULL DEFAULT '',
	provider_message      TEXT NOT NULL DEFAULT '',
	provider_amount       BIGINT,
	provider_currency     TEXT NOT NULL DEFAULT '',
	provider_error        TEXT NOT NULL DEFAULT '',
	asked_at              {{ts}},
	PRIMARY KEY (merchant_id, target_id)
);`},
	// An operator's Idempotency-Key on POST /admin/v1/tenants and the
	// tenant it made: a retry after a lost answer finds it instead of
	// creating a second tenant. A table of its own, as from 16 on.
	{21, "tenant_create_keys", `
CREATE TABLE tenant_create_keys (
	idempotency_key TEXT PRIMARY KEY,
	tenant_id       TEXT NOT NULL,
	created_at      {{ts}} NOT NULL
);`},
	// A provider's news about a payment (a webhook the gateway could not
	// look at then) since a sweeper took its recheck: that recheck's
	// lookup was made before the news, so its "nothing found" must not end
	// the recheck (payments.Store.LookAgainBy, lookLater). One row per
	// payment however many copies of the news come (a replayed webhook
	// writes nothing more), deleted when a sweeper takes the recheck
	// again. A table of its own, as from 16 on.
	{22, "payment_recheck_news", `
CREATE TABLE payment_recheck_news (
	merchant_id TEXT NOT NULL,
	payment_id  TEXT NOT NULL,
	PRIMARY KEY (merchant_id, payment_id)
);`},
}

// migrationSQL is what m runs on d.
func migrationSQL(d Dialect, m migration) string {
	sql := m.SQL
	if alt, ok := sqliteOnly[m.Version]; ok && d == SQLite {
		sql = alt
	}
	if extra := postgresOnly[m.Version]; d == Postgres && extra != "" {
		sql += ";\n" + extra
	}
	return render(d, sql)
}

// statements splits a migration's SQL at its semicolons, except those in
// a quoted string or identifier, a dollar-quoted body ($$ or $tag$), a
// comment, or between BEGIN or CASE and its END (a SQLite trigger's body).
func statements(sql string) []string {
	var out []string
	add := func(stmt string) {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			out = append(out, stmt)
		}
	}
	start, depth := 0, 0
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'' || c == '"':
			i = skipPast(sql, i+1, sql[i:i+1]) // a doubled quote reopens at once
		case strings.HasPrefix(sql[i:], "--"):
			i = skipPast(sql, i, "\n")
		case c == '$' && dollarTag(sql[i:]) != "":
			tag := dollarTag(sql[i:])
			i = skipPast(sql, i+len(tag), tag)
		case isWordByte(c) && (i == 0 || !isWordByte(sql[i-1])):
			j := i
			for j < len(sql) && isWordByte(sql[j]) {
				j++
			}
			switch strings.ToUpper(sql[i:j]) {
			case "BEGIN", "CASE":
				depth++
			case "END":
				depth = max(depth-1, 0)
			}
			i = j
		case c == ';' && depth == 0:
			add(sql[start:i])
			i++
			start = i
		default:
			i++
		}
	}
	add(sql[start:])
	return out
}

// skipPast returns the index just past the first end in sql from i, or
// len(sql).
func skipPast(sql string, i int, end string) int {
	if j := strings.Index(sql[i:], end); j >= 0 {
		return i + j + len(end)
	}
	return len(sql)
}

// dollarTag is the dollar quote ($$ or $tag$) s starts with, or "".
func dollarTag(s string) string {
	for j := 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '$':
			return s[:j+1]
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || j > 1 && '0' <= c && c <= '9':
		default:
			return ""
		}
	}
	return ""
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func render(d Dialect, sql string) string {
	r := strings.NewReplacer("{{ts}}", "TIMESTAMPTZ", "{{bytes}}", "BYTEA", "{{now}}", "statement_timestamp()")
	if d == SQLite {
		// The Go driver's text form of a UTC time (see dbclock).
		r = strings.NewReplacer("{{ts}}", "DATETIME", "{{bytes}}", "BLOB",
			"{{now}}", "(rtrim(rtrim(strftime('%Y-%m-%d %H:%M:%f', 'now'), '0'), '.') || '+00:00')")
	}
	return r.Replace(sql)
}

// Migrate brings the schema up to date. It is idempotent: applied versions
// are recorded in schema_migrations and skipped. On PostgreSQL an advisory
// lock serialises instances that start together.
func Migrate(db *gorm.DB) (applied int, err error) {
	if err := sameHistory(db, migrations); err != nil {
		return 0, err
	}
	if upToDate(db) {
		return 0, nil
	}
	return apply(db, migrations)
}

// sameHistory refuses a database whose applied versions this build names
// otherwise: one migrated by another build (a branch whose migration took
// the same number). Versions are applied by number alone, so without this
// the build would take the other's table for its own and skip its own —
// or stop half way on a "table already exists".
func sameHistory(db *gorm.DB, ms []migration) error {
	done, err := history(db)
	if err != nil {
		return fmt.Errorf("database: migrate: %w", err)
	}
	return sameNames(done, ms)
}

// sameNames refuses done (history's) where it names a version of ms
// otherwise.
func sameNames(done map[int]string, ms []migration) error {
	for _, m := range ms {
		if name, ok := done[m.Version]; ok && name != m.Name {
			return fmt.Errorf("database: migrate: version %d of this database is %q, of this build %q: another build migrated it; "+
				"run that build, or restore the database from before it", m.Version, name, m.Name)
		}
	}
	return nil
}

// history is what schema_migrations records: each applied version's name,
// nil when the table does not exist (a database never migrated).
func history(db *gorm.DB) (map[int]string, error) {
	if !db.Migrator().HasTable("schema_migrations") {
		return nil, nil
	}
	var rows []struct {
		Version int
		Name    string
	}
	if err := db.Raw("SELECT version, name FROM schema_migrations").Scan(&rows).Error; err != nil {
		return nil, err
	}
	done := make(map[int]string, len(rows))
	for _, r := range rows {
		done[r.Version] = r.Name
	}
	return done, nil
}

// CheckMigrated is the start of a gateway that does not migrate
// (MIGRATE_ON_START=false): it refuses, with one error that names the
// versions and says to run `gateway migrate`, a database this build would
// migrate — a version it knows not applied, or none at all — and one
// another build migrated (a version it knows under another name, or one
// below its newest that it does not know: a branch's). Versions above its
// newest are a newer release's (this is the older binary of a rolling
// deploy or a rollback, which runs on a newer schema, README
// "Configuration"): they are returned, for the start to log, not refused.
// It only reads, so the role that serves needs no more than SELECT on
// schema_migrations.
func CheckMigrated(db *gorm.DB) (newer []int, err error) {
	return checkMigrated(db, migrations)
}

func checkMigrated(db *gorm.DB, ms []migration) (newer []int, err error) {
	const run = "run `gateway migrate` with this build (as the role that owns the schema) before starting it with MIGRATE_ON_START=false"
	done, err := history(db)
	if err != nil {
		return nil, fmt.Errorf("database: read the schema's migrations: %w; %s", err, run)
	}
	newest := ms[len(ms)-1]
	if done == nil {
		return nil, fmt.Errorf("database: the database has no schema (no schema_migrations table; this build's schema is version %d); %s",
			newest.Version, run)
	}
	if err := sameNames(done, ms); err != nil {
		return nil, err
	}
	known := make(map[int]bool, len(ms))
	var missing []string
	for _, m := range ms {
		known[m.Version] = true
		if _, ok := done[m.Version]; !ok {
			missing = append(missing, fmt.Sprintf("%d %s", m.Version, m.Name))
		}
	}
	var foreign []string
	for v, name := range done {
		switch {
		case known[v]:
		case v > newest.Version:
			newer = append(newer, v)
		default:
			foreign = append(foreign, fmt.Sprintf("%d %s", v, name))
		}
	}
	slices.Sort(newer)
	slices.Sort(foreign)
	if len(foreign) > 0 {
		return nil, fmt.Errorf("database: the database has migrations this build does not know below its newest (version %d): %s; "+
			"another build migrated it: run that build, or restore the database from before it", newest.Version, strings.Join(foreign, ", "))
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("database: the schema is behind this build (version %d): not applied: %s; %s",
			newest.Version, strings.Join(missing, ", "), run)
	}
	return newer, nil
}

// apply applies the migrations of ms not applied yet, in order.
func apply(db *gorm.DB, ms []migration) (applied int, err error) {
	d := DialectOf(db)
	err = db.Transaction(func(tx *gorm.DB) error {
		if d == Postgres {
			// Instances starting together wait for the first one's
			// migrations, however long they take.
			if err := tx.Exec("SET LOCAL lock_timeout = 0").Error; err != nil {
				return err
			}
			if err := tx.Exec("SELECT pg_advisory_xact_lock(8402711)").Error; err != nil {
				return err
			}
		}
		if err := tx.Exec(render(d, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at {{ts}} NOT NULL)`)).Error; err != nil {
			return err
		}
		var done []int
		if err := tx.Raw("SELECT version FROM schema_migrations").Scan(&done).Error; err != nil {
			return err
		}
		have := map[int]bool{}
		for _, v := range done {
			have[v] = true
		}
		for _, m := range ms {
			if have[m.Version] {
				continue
			}
			for _, stmt := range statements(migrationSQL(d, m)) {
				if err := tx.Exec(stmt).Error; err != nil {
					return fmt.Errorf("migration %d %s: %w", m.Version, m.Name, err)
				}
			}
			if err := tx.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
				m.Version, m.Name, time.Now().UTC()).Error; err != nil {
				return err
			}
			applied++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("database: migrate: %w", err)
	}
	return applied, nil
}

// upToDate reports whether every version this binary knows is applied,
// found by reads alone, so an instance starting on an up-to-date schema
// (nearly every start) takes no lock and sends no DDL. Every version's row
// commits with the migration itself, so a migration in progress elsewhere
// reads as not applied. Anything unclear says no, and Migrate goes on under
// its lock as always.
func upToDate(db *gorm.DB) bool {
	done, err := history(db)
	if err != nil || done == nil {
		return false
	}
	for _, m := range migrations {
		if _, ok := done[m.Version]; !ok {
			return false
		}
	}
	return true
}

// Version is the newest schema version this binary knows.
func Version() int { return migrations[len(migrations)-1].Version }

// Versions are the schema versions this binary knows, in order. They need
// not be contiguous: a number can be held for a change made on another
// branch (8, see migrations).
func Versions() []int {
	out := make([]int, len(migrations))
	for i, m := range migrations {
		out[i] = m.Version
	}
	return out
}
