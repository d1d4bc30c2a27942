package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
)

// tenantOwned are the tables distributed by merchant_id on a sharded
// PostgreSQL (app/database/shard_test.go lists the others, with reasons).
var tenantOwned = map[string]bool{"payments": true, "idempotency_keys": true, "refunds": true, "events": true,
	"webhook_endpoints": true, "webhook_deliveries": true, "refund_rechecks": true, "reviews": true,
	"payment_recheck_news": true}

// fanOut are the only statements on tenant-owned tables allowed not to
// name one merchant, each with why: reads without locks that find which
// merchants have work, so that every statement after them (and every row
// lock) names one merchant. On Citus they run as multi-shard SELECTs,
// which it allows; FOR UPDATE SKIP LOCKED it allows only in a single-shard
// query, and no fan-out carries it.
var fanOut = []struct {
	prefix, why string
}{
	{"SELECT merchant_id FROM idempotency_keys\nWHERE completed_at IS NULL", "the sweeper's merchants with stale keys (StaleMerchants)"},
	{"SELECT DISTINCT merchant_id FROM idempotency_keys WHERE status =", "the purge's merchants with expired done keys (PurgeDone)"},
	{"SELECT merchant_id FROM payments\nWHERE recheck_at IS NOT NULL", "the recheck's merchants with a recheck due (DueRechecks)"},
	{"SELECT merchant_id FROM refund_rechecks\nWHERE recheck_at <", "the refunds' recheck's merchants with a recheck due (DueRefundRechecks)"},
	{"SELECT merchant_id FROM events WHERE enqueued_at IS NULL", "the relay's merchants with events to hand to the queue (pendingMerchants)"},
	{"SELECT count(*) AS open, COALESCE(max(", "the sweep's measure of the backlog for the metrics (Backlog)"},
}

// TestHotPathFiltersOnMerchant drives the real gateway through every path
// that touches a tenant-owned table — a new payment, a replay, a decline, a
// provider timeout and its retry's takeover, a release, a poll, reads and
// listings, refunds (answered, lost and settled by the sweeper, read and
// listed), the events relay, webhook deliveries and endpoints, the events
// API, the sweeper (release, pending, review, recheck and re-open) and
// both purges — captures every statement it sends, and EXPLAINs each one:
// every scan of a tenant-owned table must filter on merchant_id (in its
// index condition or filter), and every INSERT must write it, so that on a
// database sharded by merchant each statement routes to one shard. The
// only exceptions are fanOut's lock-free reads. It lists the statements
// and the index each used.
func TestHotPathFiltersOnMerchant(t *testing.T) {
	t.Parallel()
	// Built, not started: the callbacks below go on before the app runs
	// (its jobs read the database at start).
	a, logs, _ := apptest.Build(t, apptest.Env("REVIEW_AFTER", "2h"), apptest.Env("RECHECK_AFTER", "1h"))
	db := a.DB()

	type stmt struct {
		sql  string
		vars []any
	}
	var (
		mu       sync.Mutex
		captured []stmt
		on       atomic.Bool
	)
	capture := func(d *gorm.DB) {
		if !on.Load() || d.Statement.SQL.Len() == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		captured = append(captured, stmt{d.Statement.SQL.String(), append([]any(nil), d.Statement.Vars...)})
	}
	cb := db.Callback()
	require.NoError(t, cb.Create().After("gorm:create").Register("test:hotpath", capture))
	require.NoError(t, cb.Query().After("gorm:query").Register("test:hotpath", capture))
	require.NoError(t, cb.Update().After("gorm:update").Register("test:hotpath", capture))
	require.NoError(t, cb.Delete().After("gorm:delete").Register("test:hotpath", capture))
	require.NoError(t, cb.Row().After("gorm:row").Register("test:hotpath", capture))
	require.NoError(t, cb.Raw().After("gorm:raw").Register("test:hotpath", capture))
	g, _ := apptest.Serve(t, a, logs)
	// quietly runs the test's own statements (making time pass) uncaptured.
	quietly := func(f func()) { on.Store(false); defer on.Store(true); f() }
	age := func(d time.Duration) {
		quietly(func() {
			dbtest.Age(t, db, d, "idempotency_keys", "locked_until", "created_at", "attempted_at", "looked_up_at", "completed_at")
			dbtest.Age(t, db, d, "payments", "created_at", "recheck_at")
		})
	}
	land := func(method string) { // the simulator's charges of method land now
		quietly(func() {
			require.NoError(t, db.Exec("UPDATE simulator_charges SET settle_at = ? WHERE payment_method = ?",
				time.Now().Add(-time.Hour), method).Error)
		})
	}
	ctx := context.Background()
	sweep := func() {
		_, err := g.App.Scheduler.Sweeper().RunOnce(ctx)
		require.NoError(t, err)
	}

	m := g.Onboard(nil)
	// A live endpoint, so the merchant's events wait for the relay's
	// hand-over (a merchant without one has its events born handed over).
	var delivered atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { delivered.Add(1) }))
	t.Cleanup(receiver.Close)
	hook := g.Do("POST", "/v1/webhook_endpoints", []byte(`{"url":"`+receiver.URL+`"}`),
		"Authorization", "Bearer "+m.Token, "Idempotency-Key", "hp-endpoint", "Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, hook.StatusCode, string(hook.Body))
	pay := func(key, method string) apptest.Response {
		return g.Pay(m, key, map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": method})
	}
	on.Store(true)

	ok := pay("hp-success", "sim_success")
	require.Equal(t, http.StatusCreated, ok.StatusCode, string(ok.Body))
	require.Equal(t, http.StatusCreated, pay("hp-success", "sim_success").StatusCode) // replay
	require.Equal(t, http.StatusPaymentRequired, pay("hp-decline", "sim_decline").StatusCode)
	require.Equal(t, http.StatusServiceUnavailable, pay("hp-unavailable", "sim_unavailable").StatusCode)
	require.Equal(t, http.StatusBadRequest, g.Pay(m, "hp-invalid", map[string]any{"amount": -1}).StatusCode)
	timeout := pay("hp-timeout", "sim_timeout")
	require.Equal(t, http.StatusAccepted, timeout.StatusCode, string(timeout.Body))
	require.Equal(t, http.StatusCreated, pay("hp-timeout", "sim_timeout").StatusCode) // takeover, duplicate → lookup
	pending := pay("hp-pending", "sim_pending")
	require.Equal(t, http.StatusAccepted, pending.StatusCode)
	quietly(func() { time.Sleep(6 * time.Second) }) // past the poll's rate limit and the lease
	require.Equal(t, http.StatusOK, g.Get(m, "/v1/payments/"+pending.JSON(t)["id"].(string)).StatusCode)
	id := ok.JSON(t)["id"].(string)
	require.Equal(t, http.StatusOK, g.Get(m, "/v1/payments/"+id).StatusCode)
	list := g.Get(m, "/v1/payments?limit=1&status=succeeded")
	require.Equal(t, http.StatusOK, list.StatusCode)
	next, _ := list.JSON(t)["next_cursor"].(string)
	require.NotEmpty(t, next)
	require.Equal(t, http.StatusOK, g.Get(m, "/v1/payments?limit=1&cursor="+next).StatusCode)
	// A webhook finds its payment by reference (the webhook handler's read).
	p, err := g.App.Payments.Store().GetByKey(ctx, nil, m.ID, "hp-success")
	require.NoError(t, err)
	_, err = g.App.Payments.Store().GetByReference(ctx, m.ID, p.ProviderReference)
	require.NoError(t, err)

	// Refunds: one answered, one whose answer is lost (settled by the
	// sweeper below), their reads and listing; then the relay hands the
	// events of all of it to the queue.
	refund := func(key, reason string) apptest.Response {
		return g.Do("POST", "/v1/payments/"+id+"/refunds", []byte(`{"amount":1000,"reason":"`+reason+`"}`),
			"Authorization", "Bearer "+m.Token, "Idempotency-Key", key, "Content-Type", "application/json")
	}
	re := refund("hp-refund", "requested_by_customer")
	require.Equal(t, http.StatusCreated, re.StatusCode, string(re.Body))
	require.Equal(t, http.StatusCreated, refund("hp-refund", "requested_by_customer").StatusCode) // replay
	require.Equal(t, http.StatusAccepted, refund("hp-refund-lost", "sim_timeout").StatusCode)
	require.Equal(t, http.StatusOK, g.Get(m, "/v1/refunds/"+re.JSON(t)["id"].(string)).StatusCode)
	require.Equal(t, http.StatusOK, g.Get(m, "/v1/payments/"+id+"/refunds").StatusCode)
	require.NoError(t, g.App.Events.Relay(ctx))
	// The endpoint's deliveries (River's worker, in the background), and
	// the merchant's reads and changes of endpoints and events.
	require.Eventually(t, func() bool { return delivered.Load() > 0 }, 20*time.Second, 50*time.Millisecond)
	ep := hook.JSON(t)["id"].(string)
	require.Eventually(t, func() bool {
		data, _ := g.Get(m, "/v1/webhook_endpoints/"+ep+"/deliveries").JSON(t)["data"].([]any)
		return len(data) > 0
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, http.StatusOK, g.Get(m, "/v1/webhook_endpoints").StatusCode)
	require.Equal(t, http.StatusOK, g.Get(m, "/v1/webhook_endpoints/"+ep).StatusCode)
	evs := g.Get(m, "/v1/events?limit=1")
	require.Equal(t, http.StatusOK, evs.StatusCode)
	evID := evs.JSON(t)["data"].([]any)[0].(map[string]any)["id"].(string)
	require.Equal(t, http.StatusOK, g.Get(m, "/v1/events/"+evID).StatusCode)
	mutate := func(method, path, key, body string) {
		r := g.Do(method, path, []byte(body), "Authorization", "Bearer "+m.Token, "Idempotency-Key", key, "Content-Type", "application/json")
		require.Less(t, r.StatusCode, 300, string(r.Body))
	}
	mutate("POST", "/v1/events/"+evID+"/redeliver", "hp-redeliver", "")
	// The redelivery's attempt is logged while statements are captured
	// (earlier ones may have run in a quiet stretch).
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, st := range captured {
			if strings.HasPrefix(st.sql, "INSERT INTO webhook_deliveries") {
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond)
	mutate("PATCH", "/v1/webhook_endpoints/"+ep, "hp-patch", `{"description":"hot path"}`)
	mutate("POST", "/v1/webhook_endpoints/"+ep+"/rotate_secret", "hp-rotate", "")

	// The sweeper: a late charge released as not_processed, a pending one
	// left, then past REVIEW_AFTER flagged; the recheck re-opens the late one.
	late := pay("hp-late", "sim_late")
	require.Equal(t, http.StatusAccepted, late.StatusCode)
	quietly(func() { require.Equal(t, http.StatusAccepted, pay("hp-stuck", "sim_pending").StatusCode) })
	age(10 * time.Minute)
	sweep() // the late charge is still hidden: released; the stuck one pending
	age(3 * time.Hour)
	land("sim_late")
	sweep() // past REVIEW_AFTER: the stuck one flagged; the recheck finds the late charge
	require.Equal(t, "succeeded", g.Get(m, "/v1/payments/"+late.JSON(t)["id"].(string)).JSON(t)["status"])
	// The purge, once the done keys are past KEY_TTL.
	age(100 * time.Hour)
	_, err = g.App.Scheduler.Purger().RunOnce(ctx)
	require.NoError(t, err)
	quietly(func() {
		dbtest.Age(t, db, 40*24*time.Hour, "events", "created_at")
		dbtest.Age(t, db, 40*24*time.Hour, "webhook_deliveries", "at")
	})
	_, err = g.App.Events.Purge(ctx)
	require.NoError(t, err)
	mutate("DELETE", "/v1/webhook_endpoints/"+ep, "hp-delete", "")
	on.Store(false)

	sqlDB, err := db.DB()
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]string{} // statement → index or scans, for the listing
	fanned := map[string]bool{}
	var bad []string
	for _, st := range captured {
		norm := strings.TrimSpace(st.sql)
		if _, dup := seen[norm]; dup {
			continue
		}
		if strings.Contains(norm, "$") && !firstParam.MatchString(norm) {
			continue // a subquery GORM built for a statement captured whole
		}
		scans := explainScans(t, sqlDB, norm, st.vars...)
		owned := false
		var unscoped, used []string
		for _, s := range scans {
			if !tenantOwned[s.relation] {
				continue
			}
			owned = true
			used = append(used, s.describe())
			if !s.scoped {
				unscoped = append(unscoped, s.describe())
			}
		}
		if !owned {
			continue // tenants, credentials, the simulator's charges, the clock
		}
		seen[norm] = strings.Join(used, "; ")
		if strings.HasPrefix(norm, "INSERT") && !merchantCond.MatchString(norm[:strings.Index(norm, ")")]) {
			unscoped = append(unscoped, "an INSERT that does not write merchant_id")
		}
		if len(unscoped) == 0 {
			continue
		}
		allowed := ""
		for _, f := range fanOut {
			if strings.HasPrefix(norm, f.prefix) {
				allowed = f.why
				fanned[f.prefix] = true
			}
		}
		switch {
		case allowed == "":
			bad = append(bad, fmt.Sprintf("%s\n  does not filter on merchant_id: %s", norm, strings.Join(unscoped, "; ")))
		case strings.Contains(norm, "FOR UPDATE") || !strings.HasPrefix(norm, "SELECT"):
			bad = append(bad, fmt.Sprintf("%s\n  a fan-out (%s) must be a read without locks", norm, allowed))
		}
	}
	listing := make([]string, 0, len(seen))
	for s, plan := range seen {
		listing = append(listing, fmt.Sprintf("%s\n    → %s", oneLine(s), plan))
	}
	sort.Strings(listing)
	t.Logf("%d statements on tenant-owned tables:\n%s", len(listing), strings.Join(listing, "\n"))
	require.Empty(t, bad, "statements a sharded database could not route to one merchant's shard")
	// The check itself: a read by id alone is caught.
	for _, sc := range explainScans(t, sqlDB, "SELECT * FROM payments WHERE id = $1", "pay_x") {
		require.False(t, sc.scoped, "%s is not scoped to a merchant", sc.describe())
	}
	for _, f := range fanOut {
		require.True(t, fanned[f.prefix], "the fan-out %q (%s) did not run: the path is not exercised, or the list is out of date", f.prefix, f.why)
	}
	// The paths the listing must cover, so a change that stops exercising
	// one is seen (each a fragment of its statement).
	all := strings.Join(listing, "\n")
	for _, want := range []string{
		"INSERT INTO idempotency_keys",                                  // the claim (and PutDone, Reinstate)
		"INSERT INTO payments",                                          // the ledger row
		"WITH claim AS",                                                 // the completion (CompleteWith)
		"UPDATE idempotency_keys SET lock_token",                        // a takeover
		"FOR UPDATE SKIP LOCKED",                                        // the sweeper's and the recheck's candidates
		"DELETE FROM \"idempotency_keys\"",                              // a release and the purge
		"UPDATE \"payments\" SET",                                       // finish, re-open, review, recheck
		"SELECT * FROM \"payments\" WHERE merchant_id = $1 AND id = $2", // a read by id
		"ORDER BY created_at DESC, id DESC",                             // the listing
		"provider_reference = $2",                                       // the webhook's read
		"INSERT INTO refunds",                                           // a refund's row
		"UPDATE payments SET amount_refunded",                           // its reservation
		"INSERT INTO events",                                            // a transition's event
		"UPDATE \"events\" SET \"enqueued_at\"",                         // the relay's hand-over
		"INSERT INTO webhook_deliveries",                                // a delivery's log
		"DELETE FROM events WHERE merchant_id",                          // the events purge
		"DELETE FROM webhook_deliveries WHERE merchant_id",              // and their deliveries'
	} {
		require.Contains(t, all, want)
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType     string     `json:"Node Type"`
	Operation    string     `json:"Operation"`
	Relation     string     `json:"Relation Name"`
	Index        string     `json:"Index Name"`
	IndexCond    string     `json:"Index Cond"`
	RecheckCond  string     `json:"Recheck Cond"`
	Filter       string     `json:"Filter"`
	Plans        []planNode `json:"Plans"`
	ParentRelate string     `json:"Parent Relationship"`
}

// scan is one read or write of a relation in a plan, and whether it names
// one merchant.
type scan struct {
	relation, node, index string
	scoped                bool
}

func (s scan) describe() string {
	if s.index != "" {
		return fmt.Sprintf("%s on %s using %s", s.node, s.relation, s.index)
	}
	return fmt.Sprintf("%s on %s", s.node, s.relation)
}

var (
	merchantCond = regexp.MustCompile(`\bmerchant_id\b`)
	firstParam   = regexp.MustCompile(`\$1\b`)
)

// scans collects the plan's scans of relations. A bitmap heap scan's
// condition may sit on its bitmap index scan child; an Insert writes the
// row it is given (its statement names merchant_id: checked by the caller
// through the SQL), so it counts as scoped when its VALUES carry it.
func (n planNode) scans(out []scan) []scan {
	switch {
	case n.NodeType == "ModifyTable" && n.Operation == "Insert":
		out = append(out, scan{relation: n.Relation, node: "Insert", scoped: true})
	case n.Relation != "" && n.NodeType != "ModifyTable":
		cond := n.IndexCond + " " + n.RecheckCond + " " + n.Filter
		for _, c := range n.Plans {
			if c.NodeType == "Bitmap Index Scan" || c.NodeType == "BitmapAnd" || c.NodeType == "BitmapOr" {
				cond += " " + c.IndexCond
			}
		}
		out = append(out, scan{relation: n.Relation, node: n.NodeType, index: n.Index, scoped: merchantCond.MatchString(cond)})
	}
	for _, c := range n.Plans {
		out = c.scans(out)
	}
	return out
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// explainScans is the scans of q's plan (EXPLAIN, never run).
func explainScans(t *testing.T, db *sql.DB, q string, vars ...any) []scan {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN (FORMAT JSON) "+q, vars...)
	require.NoError(t, err, q)
	defer rows.Close()
	var raw string
	require.True(t, rows.Next(), q)
	require.NoError(t, rows.Scan(&raw))
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &plans), raw)
	return plans[0].Plan.scans(nil)
}
