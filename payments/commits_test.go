package payments_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app"
	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/config"
)

// ledger counts what the gateway asks of PostgreSQL: commits that write
// (an explicit transaction's COMMIT, or a write outside one) and reads of
// the idempotency and payment tables. The simulator's own table stands for
// the provider's storage and is not counted.
type ledger struct {
	mu      sync.Mutex
	commits int
	reads   int
}

func (l *ledger) reset() (commits, reads int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	commits, reads = l.commits, l.reads
	l.commits, l.reads = 0, 0
	return commits, reads
}

func (l *ledger) see(query string, inTx *bool) {
	q := strings.ToUpper(strings.TrimSpace(query))
	if strings.Contains(q, "SIMULATOR_CHARGES") {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case strings.HasPrefix(q, "INSERT"), strings.HasPrefix(q, "UPDATE"), strings.HasPrefix(q, "DELETE"):
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
	if t.wrote {
		t.l.mu.Lock()
		t.l.commits++
		t.l.mu.Unlock()
	}
	return t.tx.Commit()
}
func (t *countingTx) Rollback() error { return t.tx.Rollback() }

// TestDatabaseCostPerPayment holds the hot path to its budget: a new
// payment is two commits (claim + ledger row, then final state + stored
// answer), a replay is one read and no commit, and a body that fails
// validation writes nothing at all.
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
	a, err := app.NewWithDB(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), db)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	g := &apptest.Gateway{T: t, App: a, URL: "http://" + ln.Addr().String(), Client: apptest.NewClient()}

	m := g.Onboard(nil)
	require.Equal(t, http.StatusCreated, g.Pay(m, "warm-up", body("sim_success")).StatusCode)

	l.reset()
	r := g.Pay(m, "new", body("sim_success"))
	require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
	commits, _ := l.reset()
	t.Logf("new payment: %d commits", commits)
	require.LessOrEqual(t, commits, 2, "a new payment commits at most twice")
	require.Positive(t, commits)

	r = g.Pay(m, "new", body("sim_success"))
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	commits, reads := l.reset()
	require.Zero(t, commits, "a replay writes nothing")
	require.Equal(t, 1, reads, "a replay is one read")

	bad := body("sim_success")
	bad["amount"] = -1
	r = g.Pay(m, "invalid", bad)
	require.Equal(t, http.StatusBadRequest, r.StatusCode)
	commits, _ = l.reset()
	require.Zero(t, commits, "a validation failure writes nothing")
}
