package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/gateway/bench/internal/rig"
)

// paymentSQL is what one new payment costs PostgreSQL on the gateway's hot
// path, written out for pgbench: the claim and ledger row's one statement
// (INSERT the key ON CONFLICT DO NOTHING, and the ledger row FROM its
// RETURNING: idempotency.Store.PersistWith with payments'
// insertClaimedPayment, sent without reading the key first:
// idempotency.Guard), then the completion's one statement (lock the key,
// finish the payment, write its event, store the answer on the key:
// idempotency.Store.CompleteWith with payments' finishClaimed and the
// event). The conditions and the ~600-byte stored answer mirror
// idempotency/store.go, payments/store.go and events/store.go, so the tps
// is the ceiling for the same work without HTTP, auth, JSON and the Go
// code around it. Every transaction is a new payment: :k counts each
// client's transactions up from the run's start in microseconds
// (runPgbench's -D k), and the ids and keys are :k then the client, so,
// like the gateway's time-ordered ids (app/ids) and the bench's
// sequential keys, each run's rows go to the end of their indexes; the
// provider reference is a hash, as the gateway's is.
const paymentSQL = `\set k :k + 1
WITH claim AS (
  INSERT INTO idempotency_keys (merchant_id, key, request_hash, status, locked_until, lock_token, created_at, attempted_at)
  VALUES ('ten_pgbench', 'pgb-' || :k || '-' || :client_id, '9f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6f7a8b9c05f2c0d9e4b7a41c3a8e6f1d2', 'in_progress', statement_timestamp() + interval '30 seconds', 'lock-' || :k, statement_timestamp(), statement_timestamp())
  ON CONFLICT DO NOTHING
  RETURNING 1
) INSERT INTO payments (id, merchant_id, idempotency_key, amount, currency, status, provider, provider_reference, provider_transaction_id, failure_code, failure_message, email, payment_method, description, metadata, attempts, request_hash, created_at, updated_at)
  SELECT 'pay_' || :k || '_' || :client_id, 'ten_pgbench', 'pgb-' || :k || '-' || :client_id, 5000, 'NGN', 'processing', 'simulator', 'op-' || md5('pgb-' || :k || '-' || :client_id), '', '', '', 'ada@example.com', 'sim_success', '', '{}', 1, '9f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6f7a8b9c05f2c0d9e4b7a41c3a8e6f1d2', statement_timestamp(), statement_timestamp()
  FROM claim ON CONFLICT (merchant_id, idempotency_key) DO NOTHING RETURNING created_at;
WITH claim AS (
  SELECT 1 FROM idempotency_keys
  WHERE merchant_id = 'ten_pgbench' AND key = 'pgb-' || :k || '-' || :client_id AND status = 'in_progress' AND lock_token = 'lock-' || :k
  FOR UPDATE
), resource AS (
  UPDATE payments
  SET status = 'succeeded', failure_code = '', failure_message = '', updated_at = now(),
      provider_transaction_id = CASE WHEN ('sim_' || :k || '_' || :client_id)::text = '' THEN provider_transaction_id ELSE 'sim_' || :k || '_' || :client_id END
  WHERE merchant_id = 'ten_pgbench' AND id = 'pay_' || :k || '_' || :client_id AND idempotency_key = 'pgb-' || :k || '-' || :client_id AND status IN ('processing', 'requires_review') AND EXISTS (SELECT 1 FROM claim)
  RETURNING 1
), event AS (
  INSERT INTO events (merchant_id, id, type, object_id, dedupe, payload, created_at, enqueued_at)
  SELECT 'ten_pgbench', 'evt_' || (:k)::text || '_' || (:client_id)::text, 'payment.succeeded', 'pay_' || (:k)::text || '_' || (:client_id)::text, 'payment.succeeded/pay_' || (:k)::text || '_' || (:client_id)::text,
    '{"id":"evt_x","type":"payment.succeeded","data":{"object":{"id":"pay_x","object":"payment","amount":5000,"currency":"NGN","status":"succeeded","provider":"simulator","email":"ada@example.com","metadata":{}}}}',
    statement_timestamp(), CASE WHEN EXISTS (SELECT 1 FROM webhook_endpoints WHERE merchant_id = 'ten_pgbench' AND disabled_at IS NULL) THEN NULL ELSE statement_timestamp() END
  WHERE EXISTS (SELECT 1 FROM resource) ON CONFLICT (merchant_id, dedupe) DO NOTHING RETURNING 1
), done AS (
  UPDATE idempotency_keys
  SET status = 'done', status_code = 201, completed_at = now(),
      response = convert_to('{"id":"pay_' || :k || '_' || :client_id || '","object":"payment","amount":5000,"currency":"NGN","status":"succeeded","provider":"simulator","provider_reference":"op-5f2c0d9e4b7a41c3a8e6f1d2b3c4a5e6f7a8b9c0","provider_transaction_id":"sim_2b6c7d8e0f1a2b3c4d5e6f708192a3b4","email":"ada@example.com","metadata":{},"idempotency_key":"pgb-' || :k || '-' || :client_id || '","attempts":1,"created_at":"2026-01-02T10:00:00.123456Z","updated_at":"2026-01-02T10:00:00.234567Z"}', 'UTF8'),
      response_headers = '{"Content-Type":"application/json","Location":"/v1/payments/pay_' || :k || '_' || :client_id || '"}',
      resource_id = CASE WHEN ('pay_' || :k || '_' || :client_id)::text = '' THEN resource_id ELSE 'pay_' || :k || '_' || :client_id END
  WHERE merchant_id = 'ten_pgbench' AND key = 'pgb-' || :k || '-' || :client_id AND status = 'in_progress' AND lock_token = 'lock-' || :k AND EXISTS (SELECT 1 FROM resource)
  RETURNING 1
)
SELECT (SELECT count(*) FROM claim) AS owned, (SELECT count(*) FROM done) AS completed;
`

// simulatorSQL is the one more write a simulator payment makes: the
// simulator keeps its charges in the gateway's database
// (simulator_charges), so the gateway's new-payment path on the simulator is
// three commits, not two. Run as a second pgbench script for the fair
// comparison.
const simulatorSQL = `INSERT INTO simulator_charges (reference, transaction_id, amount, currency, payment_method, status, created_at)
  VALUES ('op-' || md5('pgb-' || :k || '-' || :client_id), 'sim_' || :k || '_' || :client_id, 5000, 'NGN', 'sim_success', 'succeeded', now())
  ON CONFLICT DO NOTHING;
`

// ceilingDatabase is a fresh database of the gateway's schema for one
// round's pgbench ceilings. They write tens of thousands of payments a
// round; in the gateway's own database those rows would grow the tables
// (and their indexes, which the machine's 128 MB of shared buffers then
// hold less of) that the gateway's next round writes to, a handicap the
// seed's table, which only the seed writes, never has. A fresh one each
// round likewise keeps the ceiling from measuring its own earlier rounds.
// It is migrated by the gateway binary itself, warmed up by the first
// script and analyzed, as the gateway's database is after its warm-up.
// The caller drops it.
func ceilingDatabase(ctx context.Context, pgbench string, o options, dir string) (db *rig.Database, err error) {
	if db, err = rig.CreateDatabase(ctx, o.db, "oncepay_ceiling"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			dropCeiling(db)
		}
	}()
	if out, err := rig.Run(o.gateway, []string{"migrate"}, rig.GatewayEnv(db.URL, dir), time.Minute); err != nil {
		return nil, fmt.Errorf("migrate the ceiling's database: %w: %s", err, out)
	}
	warm := scripts[0]
	if _, err := runPgbench(ctx, pgbench, db.URL, warm.sql, max(1, warm.payments), o.conns, min(2*time.Second, o.duration), filepath.Join(dir, "warmup")); err != nil {
		return nil, err
	}
	if err := db.Analyze(ctx); err != nil {
		return nil, err
	}
	return db, nil
}

// dropCeiling drops a ceiling's database, saying so when it cannot (the
// next run's CreateDatabase drops it once it is an hour old).
func dropCeiling(db *rig.Database) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.Drop(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench: drop the ceiling's database:", err)
	}
}

// findPgbench returns the pgbench binary: the flag, then PATH, then the
// PostgreSQL install directories.
func findPgbench(flag string) string {
	if flag != "" {
		return flag
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(m) > 0 {
		return m[len(m)-1]
	}
	return ""
}

// runPgbench runs script for d with conns connections and returns the
// per-transaction latencies from pgbench's own log (one line per script
// run: client, transaction number, latency in µs, …), so percentiles are
// computed the same way as for the gateway.
func runPgbench(ctx context.Context, bin, dbURL, script string, payments, conns int, d time.Duration, dir string) (result, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	sf := filepath.Join(dir, "script.sql")
	if err := os.WriteFile(sf, []byte(script), 0o644); err != nil {
		return result{}, err
	}
	prefix := filepath.Join(dir, "pgbench_log")
	secs := max(1, int(d.Round(time.Second)/time.Second))
	// The scripts' :k starts at the run's microsecond, which no earlier
	// run's count reaches; a script of n payments a transaction numbers
	// them :k × n + j, so k starts at that divided by n.
	start := time.Now().UnixMicro() / int64(payments)
	cmd := exec.CommandContext(ctx, bin, "-n", "-M", "prepared", "-c", strconv.Itoa(conns), "-j", "2", "-D", "k="+strconv.FormatInt(start, 10),
		"-T", strconv.Itoa(secs), "-f", sf, "--log", "--log-prefix", prefix, dbURL)
	pg0, okPg := postgresCPU()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("pgbench: %v\n%s", err, out)
	}
	// pgbench's backends have exited; give the postmaster a moment to reap
	// them, so their CPU time is in its children's times.
	time.Sleep(200 * time.Millisecond)
	pg1, okPg1 := postgresCPU()
	cpu := cpuUse{
		postgres: pg1 - pg0,
		client:   cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(),
		ok:       okPg && okPg1,
	}
	logs, _ := filepath.Glob(prefix + ".*")
	var lat []time.Duration
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			return result{}, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 3 {
				continue
			}
			if us, err := strconv.ParseInt(fs[2], 10, 64); err == nil {
				// Each payment of the transaction waited as long as it.
				for range payments {
					lat = append(lat, time.Duration(us)*time.Microsecond)
				}
			}
		}
		f.Close()
	}
	if len(lat) == 0 {
		return result{}, fmt.Errorf("pgbench wrote no transaction log:\n%s", out)
	}
	r := result{elapsed: time.Duration(secs) * time.Second, latencies: lat, statuses: map[int]int{0: len(lat)}, cpu: cpu}
	return r, nil
}

// scripts are the ceilings measured each round. The first is the ceiling:
// every statement a new payment executes in `new`, the simulator's charge
// row included (on the simulator that row is written to the same
// PostgreSQL, so the gateway's rate pays for it). The second leaves that
// row out, as a real provider would keep it on its side.
//
// The third is the same SQL as the gateway's database pipeline sends it
// (app/database/pipeline): the claims of several payments in one round
// trip and one commit, their charge rows in one statement (as the
// simulator's batcher writes them), then their completions in one round
// trip and one commit. Each of its transactions is pipelinedPayments
// payments, and counts as that many.
var scripts = []struct {
	name, short, what, sql string
	payments               int // payments per pgbench transaction (0: one)
}{
	{"pgbench: same SQL as new", "the same SQL", "every statement of a new payment: claim and ledger row, the simulator's charge row, completion with its event (3 commits)", paymentSQL + simulatorSQL, 0},
	{"pgbench: without the simulator row", "the SQL without the simulator's row", "the same without the simulator's charge row (2 commits)", paymentSQL, 0},
	{"pgbench: same SQL, pipelined", "the same SQL pipelined", fmt.Sprintf("the same SQL, %d payments per round trip and commit, as the gateway's pipeline sends it", pipelinedPayments), pipelinedSQL(pipelinedPayments), pipelinedPayments},
}

// pipelinedPayments is how many payments the pipelined script sends
// together.
const pipelinedPayments = 8

// pipelinedSQL is paymentSQL and simulatorSQL for n payments at once: the
// n claims in one pipeline and transaction, the n charge rows in one
// INSERT (synchronous_commit off, as the simulator's batcher), the n
// completions in one pipeline and transaction.
func pipelinedSQL(n int) string {
	body := paymentSQL[strings.Index(paymentSQL, "\n")+1:]
	i := strings.Index(body[1:], "WITH claim AS (") + 1
	claim, complete := body[:i], body[i:]
	key := regexp.MustCompile(`:k\b`)
	var b strings.Builder
	each := func(stmt string) {
		for j := range n {
			b.WriteString(key.ReplaceAllString(stmt, fmt.Sprintf(":k%d", j)))
		}
	}
	b.WriteString("\\set k :k + 1\n")
	for j := range n {
		fmt.Fprintf(&b, "\\set k%d :k * %d + %d\n", j, n, j)
	}
	b.WriteString("\\startpipeline\nBEGIN;\n")
	each(claim)
	b.WriteString("COMMIT;\n\\endpipeline\n")
	b.WriteString("WITH async AS (SELECT set_config('synchronous_commit', 'off', true))\nINSERT INTO simulator_charges (reference, transaction_id, amount, currency, payment_method, status, created_at)\nSELECT v.* FROM async, (VALUES ")
	for j := range n {
		if j > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "('op-' || md5('pgb-' || :k%d || '-' || :client_id), 'sim_' || :k%d || '_' || :client_id, 5000, 'NGN', 'sim_success', 'succeeded', now())", j, j)
	}
	b.WriteString(") AS v(reference, transaction_id, amount, currency, payment_method, status, created_at)\nON CONFLICT DO NOTHING;\n")
	b.WriteString("\\startpipeline\nBEGIN;\n")
	each(complete)
	b.WriteString("COMMIT;\n\\endpipeline\n")
	return b.String()
}

// ceilings runs every script once, for o.duration each, with as many
// connections as the gateway's pool.
func ceilings(ctx context.Context, bin string, o options, dir string) ([]result, error) {
	db, err := ceilingDatabase(ctx, bin, o, dir)
	if err != nil {
		return nil, err
	}
	defer dropCeiling(db)
	var out []result
	for i, s := range scripts {
		r, err := runPgbench(ctx, bin, db.URL, s.sql, max(1, s.payments), o.conns, o.duration, filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		r.name, r.what = s.name, s.what
		slices.Sort(r.latencies)
		fmt.Fprintf(os.Stderr, "bench:          %s %8.0f tx/s\n", r.name, r.rate())
		out = append(out, r)
	}
	return out, nil
}

// round is one run of new payments and the ceilings measured right after.
type round struct {
	new     result
	pool    poolDelta // the gateway's /metrics over new, for the pipeline's sharing
	seed    result    // the seed's bare handler, right after new; empty without it
	ceiling []result  // one per script; empty without pgbench
}

// ratio is new payments' rate as a fraction of script i's.
func (r round) ratio(i int) float64 {
	if i >= len(r.ceiling) || r.ceiling[i].rate() == 0 {
		return 0
	}
	return r.new.rate() / r.ceiling[i].rate()
}

// medianRound is the round whose new-payment rate is the median.
func medianRound(rs []round) round {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b round) int { return cmpRate(a.new, b.new) })
	return s[len(s)/2]
}

// medianCeiling is, for script i, the round whose rate is the median.
func medianCeiling(rs []round, i int) result {
	var s []result
	for _, r := range rs {
		if i < len(r.ceiling) {
			s = append(s, r.ceiling[i])
		}
	}
	slices.SortFunc(s, cmpRate)
	return s[len(s)/2]
}

func cmpRate(a, b result) int { return cmp.Compare(a.rate(), b.rate()) }
