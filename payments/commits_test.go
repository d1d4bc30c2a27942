package payments_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app"
	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/database/pipeline"
	"github.com/oncepay/gateway/config"
)

// ledger counts what the gateway asks of PostgreSQL: commits that write
// (an explicit transaction's COMMIT, or a write outside one), reads of the
// idempotency and payment tables, and round trips (every statement, BEGIN,
// COMMIT and ROLLBACK). The simulator's own table stands for the
// provider's storage and is not counted.
type ledger struct {
	mu      sync.Mutex
	commits int
	reads   int
	trips   int
}

func (l *ledger) reset() (commits, reads, trips int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	commits, reads, trips = l.commits, l.reads, l.trips
	l.commits, l.reads, l.trips = 0, 0, 0
	return commits, reads, trips
}

func (l *ledger) trip() {
	l.mu.Lock()
	l.trips++
	l.mu.Unlock()
}

// writes reports whether q changes rows: a plain INSERT, UPDATE or DELETE,
// or a WITH statement with one of them inside.
func writes(q string) bool {
	for _, w := range []string{"INSERT", "UPDATE", "DELETE"} {
		if strings.HasPrefix(q, w) || strings.HasPrefix(q, "WITH") && strings.Contains(q, w+" ") {
			return true
		}
	}
	return false
}

func (l *ledger) see(query string, inTx *bool) {
	q := strings.ToUpper(strings.TrimSpace(query))
	if strings.Contains(q, "SIMULATOR_CHARGES") {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trips++
	switch {
	case writes(q):
		if inTx != nil {
			*inTx = true
		} else {
			l.commits++
		}
	case strings.HasPrefix(q, "SELECT") && (strings.Contains(q, "IDEMPOTENCY_KEYS") || strings.Contains(q, "PAYMENTS")):
		l.reads++
	}
}

// countingPool wraps GORM's connection pool.
type countingPool struct {
	inner gorm.ConnPool
	l     *ledger
}

func (p countingPool) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	return p.inner.PrepareContext(ctx, q)
}
func (p countingPool) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	p.l.see(q, nil)
	return p.inner.ExecContext(ctx, q, args...)
}
func (p countingPool) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	p.l.see(q, nil)
	return p.inner.QueryContext(ctx, q, args...)
}
func (p countingPool) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	p.l.see(q, nil)
	return p.inner.QueryRowContext(ctx, q, args...)
}
func (p countingPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	p.l.trip()
	tx, err := p.inner.(gorm.TxBeginner).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &countingTx{tx: tx, l: p.l}, nil
}
func (p countingPool) GetDBConn() (*sql.DB, error) { return p.inner.(*sql.DB), nil }

type countingTx struct {
	tx    *sql.Tx
	l     *ledger
	wrote bool
}

func (t *countingTx) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	return t.tx.PrepareContext(ctx, q)
}
func (t *countingTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	t.l.see(q, &t.wrote)
	return t.tx.ExecContext(ctx, q, args...)
}
func (t *countingTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	t.l.see(q, &t.wrote)
	return t.tx.QueryContext(ctx, q, args...)
}
func (t *countingTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	t.l.see(q, &t.wrote)
	return t.tx.QueryRowContext(ctx, q, args...)
}
func (t *countingTx) Commit() error {
	t.l.trip()
	if t.wrote {
		t.l.mu.Lock()
		t.l.commits++
		t.l.mu.Unlock()
	}
	return t.tx.Commit()
}
func (t *countingTx) Rollback() error {
	t.l.trip()
	return t.tx.Rollback()
}

// TestDatabaseCostPerPayment holds the hot path to its budget: a new
// payment is two commits (claim + ledger row, then final state + stored
// answer) in two round trips (the claim and ledger row's one statement,
// sent without reading the key first, and the completion's one statement
// — six before issue 17), a replay is one read and no commit (then none
// at all, from memory), and a body that fails validation writes nothing.
// Under load, concurrent payments' statements share round trips and
// commits (the database pipeline).
func TestDatabaseCostPerPayment(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.PostgresURL(t)
	env := apptest.BaseEnv(dbURL, t.TempDir())
	cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	db, err := database.Open(dbURL, database.Options{})
	require.NoError(t, err)
	l := &ledger{}
	pool := countingPool{inner: db.ConnPool, l: l}
	db.Config.ConnPool, db.Statement.ConnPool = pool, pool
	require.True(t, pipeline.Wrap(db, func(p gorm.ConnPool) gorm.ConnPool { return countingPool{inner: p, l: l} }))
	a, err := app.NewWithDB(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), db)
	require.NoError(t, err)
	g, _ := apptest.Serve(t, a, nil)

	m := g.Onboard(nil)
	require.Equal(t, http.StatusCreated, g.Pay(m, "warm-up", body("sim_success")).StatusCode)

	l.reset()
	r := g.Pay(m, "new", body("sim_success"))
	require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
	commits, _, trips := l.reset()
	t.Logf("new payment: %d commits, %d round trips", commits, trips)
	require.Equal(t, 2, commits, "a new payment commits twice")
	require.Equal(t, 2, trips, "a new payment's round trips to PostgreSQL")

	// The first replay on an instance sends the claim's INSERT, which
	// finds the key and writes nothing (no row version changes: the
	// ledger counts it as a write statement), then reads the key.
	versions := func() string {
		var v string
		require.NoError(t, db.Raw(`SELECT string_agg(xmin::text, ',' ORDER BY t) FROM (
  SELECT 'k' AS t, xmin FROM idempotency_keys WHERE merchant_id = ? AND key = 'new'
  UNION ALL SELECT 'p', xmin FROM payments WHERE merchant_id = ? AND idempotency_key = 'new') v`, m.ID, m.ID).Scan(&v).Error)
		return v
	}
	before := versions()
	l.reset()
	r = g.Pay(m, "new", body("sim_success"))
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	commits, reads, trips := l.reset()
	t.Logf("first replay: %d write statements, %d reads, %d round trips", commits, reads, trips)
	require.Equal(t, before, versions(), "a replay writes nothing")
	require.Equal(t, 1, reads, "a replay is one read")
	require.Equal(t, 2, trips, "the first replay on an instance: the claim's INSERT finds the key, then its read")

	l.reset()
	r = g.Pay(m, "new", body("sim_success"))
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	commits, reads, trips = l.reset()
	require.Zero(t, commits+reads+trips, "later replays are answered from memory")

	bad := body("sim_success")
	bad["amount"] = -1
	r = g.Pay(m, "invalid", bad)
	require.Equal(t, http.StatusBadRequest, r.StatusCode)
	commits, reads, trips = l.reset()
	t.Logf("invalid body: %d commits, %d reads, %d round trips", commits, reads, trips)
	require.Zero(t, commits, "a validation failure writes nothing")
	require.Equal(t, 1, trips, "a validation failure reads the key, in case it is known")

	// Under load the same two statements per payment share round trips
	// and commits (app/database/pipeline): payments that arrive while the
	// pipeline's connections are busy go together.
	p := pipeline.Of(db)
	require.NotNil(t, p)
	const crowd = 16
	busy := make(chan error, database.DefaultPipelineConns)
	idle := p.Stats()
	for range database.DefaultPipelineConns {
		go func() { busy <- pipeline.Session(db, context.Background()).Exec(`SELECT pg_sleep(2)`).Error }()
	}
	// Both connections are asleep once both sleeps are sent (counted),
	// for long enough that a loaded machine's stall does not wake them
	// before the crowd arrives.
	require.Eventually(t, func() bool {
		return p.Stats().Statements-idle.Statements >= database.DefaultPipelineConns
	}, 5*time.Second, time.Millisecond)
	from := p.Stats()
	var wg sync.WaitGroup
	for i := range crowd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := g.TryPay(m, fmt.Sprint("crowd-", i), body("sim_success"))
			if err != nil || r.StatusCode != http.StatusCreated {
				t.Errorf("crowd %d: %v %v", i, err, r)
			}
		}()
	}
	wg.Wait()
	for range database.DefaultPipelineConns {
		require.NoError(t, <-busy)
	}
	to := p.Stats()
	statements, shared := to.Statements-from.Statements, to.Trips-from.Trips
	t.Logf("%d concurrent new payments: %d statements in %d round trips", crowd, statements, shared)
	require.EqualValues(t, 2*crowd, statements, "two statements per payment")
	require.Less(t, shared, statements, "payments that waited shared round trips")
	require.Zero(t, to.Retried-from.Retried)
}
