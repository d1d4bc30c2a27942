package pipeline_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/database/pipeline"
)

var urls sync.Map // *sql.DB → its schema's URL

func dbtestURL(t *testing.T, db *sql.DB) string {
	t.Helper()
	u, ok := urls.Load(db)
	require.True(t, ok)
	return u.(string)
}

// start returns a pipeline of conns connections on a fresh schema with a
// table t (k primary key), and its database/sql handle.
func start(t *testing.T, conns int) (*pipeline.Pipeline, *sql.DB) {
	t.Helper()
	url := dbtest.PostgresURL(t)
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	setup, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	_, err = setup.Exec(context.Background(), `CREATE TABLE t (k text PRIMARY KEY, n int NOT NULL DEFAULT 0)`)
	require.NoError(t, err)
	require.NoError(t, setup.Close(context.Background()))
	p := pipeline.New(cfg, pipeline.Options{Conns: conns})
	t.Cleanup(p.Close)
	db := p.DB()
	urls.Store(db, url)
	return p, db
}

// crowd holds p's only connection busy for a moment, sends f(i) for i in
// [0, n) while it is, and waits for all of them: the n statements find the
// connection taken and go together once it is free.
func crowd(t *testing.T, db *sql.DB, n int, f func(i int)) {
	t.Helper()
	held := make(chan error, 1)
	go func() {
		_, err := db.Exec(`SELECT pg_sleep(0.4)`)
		held <- err
	}()
	time.Sleep(100 * time.Millisecond) // the sleep is on the connection
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); f(i) }()
	}
	wg.Wait()
	require.NoError(t, <-held)
}

func TestConcurrentStatementsShareRoundTrips(t *testing.T) {
	t.Parallel()
	p, db := start(t, 1)
	const n = 20
	affected := make([]int64, n)
	crowd(t, db, n, func(i int) {
		// Two callers per key: ON CONFLICT decides between them inside the
		// batch exactly as it would across commits.
		res, err := db.Exec(`INSERT INTO t (k) VALUES ($1) ON CONFLICT DO NOTHING`, fmt.Sprint("k", i/2))
		if err != nil {
			t.Error(err)
			return
		}
		affected[i], _ = res.RowsAffected()
	})
	for i := 0; i < n; i += 2 {
		require.EqualValues(t, 1, affected[i]+affected[i+1], "key k%d is won exactly once", i/2)
	}
	var count int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM t`).Scan(&count))
	require.Equal(t, n/2, count)
	s := p.Stats()
	require.EqualValues(t, n+2, s.Statements)
	require.Less(t, s.Trips, s.Statements-n/2, "statements that waited went together: %+v", s)
	require.Zero(t, s.Retried)
}

// A statement the server refuses rolls its batch back: every other
// statement of it is run again alone and applied exactly once, and the
// refused one gets the server's error.
func TestARefusedStatementCostsItsCompanyNothing(t *testing.T) {
	t.Parallel()
	p, db := start(t, 1)
	const n = 12
	errs := make([]error, n)
	crowd(t, db, n, func(i int) {
		if i == n/2 {
			_, errs[i] = db.Exec(`INSERT INTO t (k, n) VALUES ('bad', 1 / $1)`, 0)
			return
		}
		_, errs[i] = db.Exec(`INSERT INTO t (k, n) VALUES ($1, 1)`, fmt.Sprint("k", i))
	})
	for i, err := range errs {
		if i == n/2 {
			var pg *pgconn.PgError
			require.True(t, errors.As(err, &pg), "%v", err)
			require.Equal(t, "22012", pg.Code, "division_by_zero")
			continue
		}
		require.NoError(t, err, "statement %d", i)
	}
	var count, sum int
	require.NoError(t, db.QueryRow(`SELECT count(*), coalesce(sum(n), 0) FROM t`).Scan(&count, &sum))
	require.Equal(t, n-1, count)
	require.Equal(t, n-1, sum)
	require.Positive(t, p.Stats().Retried, "the crowd went as one batch, and it was retried")
}

// A batch the server refused runs again one statement at a time; when the
// connection breaks under one of those (a restart, a terminated backend),
// that one's outcome is unknown, but the statements after it were never
// sent: they go on a new connection, each applied once, instead of failing
// on the closed one.
func TestAConnectionBrokenWhileRunningAloneLosesNoOneElse(t *testing.T) {
	t.Parallel()
	_, db := start(t, 1)
	for round := range 3 {
		const n = 8
		errs := make([]error, n)
		crowd(t, db, n, func(i int) {
			// Queued in this order (the batch's): the refusal first, so the
			// batch is rolled back before the termination runs in it.
			time.Sleep(time.Duration(min(i, 2)) * 30 * time.Millisecond)
			switch i {
			case 0:
				_, errs[i] = db.Exec(`SELECT 1 / $1`, 0) // refuses the batch
			case 1:
				_, errs[i] = db.Exec(`SELECT pg_terminate_backend(pg_backend_pid())`)
			default:
				_, errs[i] = db.Exec(`INSERT INTO t (k) VALUES ($1)`, fmt.Sprintf("r%d-%d", round, i))
			}
		})
		var count int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM t WHERE k LIKE $1`, fmt.Sprintf("r%d-%%", round)).Scan(&count))
		told := 0
		for i := 2; i < n; i++ {
			if errs[i] == nil {
				told++
			}
		}
		require.Equal(t, count, told, "round %d: every insert told it succeeded is there, and only those: %v", round, errs)
		require.Equal(t, n-2, count, "round %d: none lost to the broken connection: %v", round, errs)
	}
}

// Rows come back as database/sql values of every common type, NULLs
// included.
func TestRowsAndTypes(t *testing.T) {
	t.Parallel()
	_, db := start(t, 2)
	at := time.Date(2026, 12, 6, 10, 0, 0, 123456000, time.UTC)
	var (
		n     int64
		s     string
		b     []byte
		ts    time.Time
		null  sql.NullString
		ok    bool
		f     float64
		count int
	)
	require.NoError(t, db.QueryRow(`SELECT 42::int8, 'ada'::text, '\x00ff'::bytea, $1::timestamptz, NULL::text, true, 1.5::float8`, at).
		Scan(&n, &s, &b, &ts, &null, &ok, &f))
	require.Equal(t, int64(42), n)
	require.Equal(t, "ada", s)
	require.Equal(t, []byte{0, 0xff}, b)
	require.True(t, at.Equal(ts), "%v", ts)
	require.False(t, null.Valid)
	require.True(t, ok)
	require.Equal(t, 1.5, f)
	rows, err := db.Query(`SELECT g FROM generate_series(1, 3) g`)
	require.NoError(t, err)
	for rows.Next() {
		count++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 3, count)
	_, err = db.Begin()
	require.Error(t, err, "no transactions on the pipeline")
}

func TestClosedPipelineRefuses(t *testing.T) {
	t.Parallel()
	p, db := start(t, 1)
	require.NoError(t, db.QueryRow(`SELECT 1`).Err())
	p.Close()
	require.Error(t, db.QueryRow(`SELECT 1`).Err())
}

// A PostgreSQL that cannot be reached is the same 503 as through the pool.
func TestUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig("postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	p := pipeline.New(cfg, pipeline.Options{Conns: 1})
	t.Cleanup(p.Close)
	_, err = p.DB().Exec(`SELECT 1`)
	require.Error(t, err)
	require.True(t, database.Unavailable(err), "%v", err)
}

// A caller whose context ends first stops waiting; the others are not
// disturbed.
func TestCallerContext(t *testing.T) {
	t.Parallel()
	_, db := start(t, 1)
	observer, err := pgx.Connect(context.Background(), dbtestURL(t, db))
	require.NoError(t, err)
	t.Cleanup(func() { _ = observer.Close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	left := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(ctx, `INSERT INTO t (k) SELECT 'late' FROM pg_sleep(0.5)`)
		left <- err
	}()
	// The caller stops waiting once the server runs its statement (not
	// after a fixed time: on a busy machine the lane's first connection
	// alone can take longer, and a statement not sent yet is not sent).
	require.Eventually(t, func() bool {
		var n int
		err := observer.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'INSERT INTO t (k) SELECT ''late''%' AND state = 'active'`).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-left, context.Canceled)
	// Its statement was sent, so it ran: a caller that stops waiting does
	// not know the outcome, as with a statement whose connection broke.
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM t WHERE k = 'late'`).Scan(&n), "the lane is fine after its caller left")
	require.Equal(t, 1, n)
}

// Every caller is answered only once its statement has committed: what
// it was told, any other connection sees.
func TestAnsweredOnlyOnceCommitted(t *testing.T) {
	t.Parallel()
	p, db := start(t, 1)
	other, err := sql.Open("pgx", dbtestURL(t, db))
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	const n = 16
	crowd(t, db, n, func(i int) {
		k := fmt.Sprint("k", i)
		if _, err := db.Exec(`INSERT INTO t (k) VALUES ($1)`, k); err != nil {
			t.Error(err)
			return
		}
		var seen int
		if err := other.QueryRow(`SELECT count(*) FROM t WHERE k = $1`, k).Scan(&seen); err != nil || seen != 1 {
			t.Errorf("%s answered but not visible: %d %v", k, seen, err)
		}
	})
	require.Less(t, p.Stats().Trips, p.Stats().Statements)
}

// A statement waiting for a row lock holds neither its batch nor its
// lane: it gives up within the short lock timeout, everyone else is
// answered at once, and the waiting one runs again on an ordinary
// connection, with the ordinary lock_timeout, until the lock is released.
func TestALockWaitHoldsNoOneElse(t *testing.T) {
	t.Parallel()
	url := dbtest.PostgresURL(t)
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg.RuntimeParams["lock_timeout"] = "20s"
	ctx := context.Background()
	locker, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = locker.Close(ctx) })
	_, err = locker.Exec(ctx, `CREATE TABLE t (k text PRIMARY KEY, n int NOT NULL DEFAULT 0); INSERT INTO t VALUES ('hot', 0)`)
	require.NoError(t, err)
	p := pipeline.New(cfg, pipeline.Options{Conns: 1})
	t.Cleanup(p.Close)
	db := p.DB()

	tx, err := locker.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM t WHERE k = 'hot' FOR UPDATE`)
	require.NoError(t, err)

	hot := make(chan error, 1)
	others := make(chan error, 8)
	crowd(t, db, 9, func(i int) {
		if i == 0 {
			go func() {
				res, err := db.Exec(`UPDATE t SET n = n + 1 WHERE k = 'hot'`)
				if err == nil {
					if n, _ := res.RowsAffected(); n != 1 {
						err = fmt.Errorf("rows affected %d, want 1", n)
					}
				}
				hot <- err
			}()
			return
		}
		_, err := db.Exec(`INSERT INTO t (k) VALUES ($1)`, fmt.Sprint("k", i))
		others <- err
	})
	// crowd returned: the eight inserts were answered while the lock is
	// still held (a batch waiting on it would still be waiting).
	for range 8 {
		require.NoError(t, <-others)
	}
	select {
	case err := <-hot:
		t.Fatalf("the update finished while the row was locked: %v", err)
	default:
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-hot, "it waited, alone, for the lock")
	var n int
	require.NoError(t, db.QueryRow(`SELECT n FROM t WHERE k = 'hot'`).Scan(&n))
	require.Equal(t, 1, n, "applied once")
}

// A batch whose connection breaks is answered with the error, not retried
// (whether it committed is unknown), and the lane reconnects for the next.
// A connection PostgreSQL closed while it sat idle is found out before a
// batch is sent on it.
func TestBrokenConnections(t *testing.T) {
	t.Parallel()
	_, db := start(t, 1)
	var errs []error
	var mu sync.Mutex
	crowd(t, db, 4, func(i int) {
		q := `SELECT 1`
		if i == 0 {
			q = `SELECT pg_terminate_backend(pg_backend_pid())`
		}
		_, err := db.Exec(q)
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	require.Contains(t, fmt.Sprint(errs), "terminating connection")
	require.NoError(t, db.QueryRow(`SELECT 1`).Err(), "a new connection for the next statement")

	kill, err := sql.Open("pgx", dbtestURL(t, db))
	require.NoError(t, err)
	t.Cleanup(func() { _ = kill.Close() })
	terminate := func() {
		var pid int
		require.NoError(t, db.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid))
		require.NoError(t, kill.QueryRow(`SELECT pg_terminate_backend($1, 5000)`, pid).Err())
	}

	// Closed by the server a moment ago (a restart): the batch meets the
	// server's FATAL before anything of it ran, and goes again on a new
	// connection.
	terminate()
	crowd(t, db, 4, func(i int) {
		if _, err := db.Exec(`INSERT INTO t (k) VALUES ($1)`, fmt.Sprint("after-restart-", i)); err != nil {
			t.Error(err)
		}
	})
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM t WHERE k LIKE 'after-restart-%'`).Scan(&n))
	require.Equal(t, 4, n)

	// Closed while the lane sat idle: found out by a ping first.
	terminate()
	time.Sleep(1200 * time.Millisecond) // longer than a lane waits before it checks
	require.NoError(t, db.QueryRow(`SELECT 1`).Err(), "the lane found its connection closed before sending")
}

// What the pipeline cannot hand over faithfully it refuses: arrays, and a
// transaction left open (the next statements would never commit).
func TestRefusesWhatItCannotCarry(t *testing.T) {
	t.Parallel()
	_, db := start(t, 1)
	var s string
	err := db.QueryRow(`SELECT ARRAY['a', 'b']`).Scan(&s)
	require.ErrorContains(t, err, "not supported")
	_, err = db.Exec(`BEGIN`)
	require.ErrorContains(t, err, "transaction open")
	_, err = db.Exec(`INSERT INTO t (k) VALUES ('after')`)
	require.NoError(t, err)
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM t WHERE k = 'after'`).Scan(&n))
	require.Equal(t, 1, n, "committed: the open transaction did not survive")
}

// Session sends a GORM statement through the pipeline — never one of a
// transaction, which has its own connection.
func TestSession(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresWith(t, database.Options{PipelineConns: 1})
	p := pipeline.Of(db)
	require.NotNil(t, p)
	var n int
	require.NoError(t, pipeline.Session(db, context.Background()).Raw(`SELECT 7`).Scan(&n).Error)
	require.Equal(t, 7, n)
	require.EqualValues(t, 1, p.Stats().Statements)
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
		return pipeline.Session(tx, context.Background()).Exec(`SELECT 1`).Error
	}))
	require.EqualValues(t, 1, p.Stats().Statements, "a transaction's statement stays on its connection")
	require.NoError(t, db.Raw(`SELECT 1`).Scan(&n).Error)
	require.EqualValues(t, 1, p.Stats().Statements, "the pool is not the pipeline")

	off := dbtest.PostgresWith(t, database.Options{PipelineConns: -1})
	require.Nil(t, pipeline.Of(off))
	require.NoError(t, pipeline.Session(off, context.Background()).Exec(`SELECT 1`).Error, "no pipeline: the pool")
}

// A GORM session's context reaches the pipeline past database/sql, which
// is given one that never ends (no goroutine per query): a caller still
// stops waiting when its own ends, and one whose context has ended sends
// nothing.
func TestSessionCallerContext(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresWith(t, database.Options{PipelineConns: 1})
	p := pipeline.Of(db)
	require.NotNil(t, p)

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 { // the lane is idle: a select between two ready cases would pick either
		err := pipeline.Session(db, ended).Exec(`SELECT 1`).Error
		require.ErrorIs(t, err, context.Canceled)
	}
	// One lane, in order: once this is answered, anything sent before it was run.
	require.NoError(t, pipeline.Session(db, context.Background()).Exec(`SELECT 1`).Error)
	require.EqualValues(t, 1, p.Stats().Statements, "an ended context sends nothing")

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var n int
	err := pipeline.Session(db, ctx).Raw(`SELECT 1 FROM pg_sleep(0.3)`).Scan(&n).Error
	require.ErrorIs(t, err, context.DeadlineExceeded)

	type key struct{}
	valued := context.WithValue(context.Background(), key{}, "v")
	require.NoError(t, pipeline.Session(db, valued).Raw(`SELECT 7`).Scan(&n).Error)
	require.Equal(t, 7, n)
}

// A caller whose arguments pgx cannot encode fails alone: the batch was
// never sent, and its other statements go one by one.
func TestAnArgumentThatCannotBeSentFailsAlone(t *testing.T) {
	t.Parallel()
	_, db := start(t, 1)
	const n = 6
	errs := make([]error, n)
	crowd(t, db, n, func(i int) {
		if i == 0 {
			_, errs[i] = db.Exec(`INSERT INTO t (k, n) VALUES ('big', $1::int4)`, int64(1)<<40)
			return
		}
		_, errs[i] = db.Exec(`INSERT INTO t (k, n) VALUES ($1, 1)`, fmt.Sprint("k", i))
	})
	require.Error(t, errs[0])
	for i := 1; i < n; i++ {
		require.NoError(t, errs[i], "statement %d", i)
	}
	var count int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM t`).Scan(&count))
	require.Equal(t, n-1, count)
}

// A lane replaces a connection older than MaxLifetime before its next
// statement, as the pool does.
func TestConnectionsAreReplacedWhenOld(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig(dbtest.PostgresURL(t))
	require.NoError(t, err)
	// A lifetime a loaded machine's stall between two queries cannot
	// outlast.
	p := pipeline.New(cfg, pipeline.Options{Conns: 1, MaxLifetime: 2 * time.Second})
	t.Cleanup(p.Close)
	pid := func() (n int) {
		require.NoError(t, p.DB().QueryRow(`SELECT pg_backend_pid()`).Scan(&n))
		return n
	}
	first := pid()
	require.Equal(t, first, pid(), "young: kept")
	time.Sleep(2500 * time.Millisecond)
	require.NotEqual(t, first, pid(), "old: replaced")
}

// A caller that stops waiting has its error — the outcome unknown — at
// once, and its statement is not run after that: not sent if it was still
// queued, nor run again alone after its batch was rolled back, when the
// memory its arguments point to may be the caller's again (a request's
// buffers go to the next request). And the caller is never held for a
// statement the server is running.
func TestAStatementWhoseCallerLeftIsNotRun(t *testing.T) {
	t.Parallel()
	url := dbtest.PostgresURL(t)
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	ctx := context.Background()
	locker, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = locker.Close(ctx) })
	_, err = locker.Exec(ctx, `CREATE TABLE t (k text PRIMARY KEY, b bytea); INSERT INTO t VALUES ('hot', NULL)`)
	require.NoError(t, err)
	p := pipeline.New(cfg, pipeline.Options{Conns: 1, BatchLockTimeout: 500 * time.Millisecond})
	t.Cleanup(p.Close)
	db := p.DB()

	leave := func(key string, within time.Duration) {
		cctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		_, err := db.ExecContext(cctx, `INSERT INTO t (k, b) VALUES ($1, $2)`, key, []byte("tenant A's request"))
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	ran := func(key string) bool {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM t WHERE k = $1`, key).Scan(&n))
		return n > 0
	}

	// Queued behind a busy connection, and gone before it is free.
	go func() { _, _ = db.Exec(`SELECT pg_sleep(0.4)`) }()
	time.Sleep(100 * time.Millisecond)
	leave("queued", 100*time.Millisecond)

	// In a batch the server refuses (a lock it will not wait for in
	// company), and gone before the statements go again alone.
	tx, err := locker.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM t WHERE k = 'hot' FOR UPDATE`)
	require.NoError(t, err)
	go func() { _, _ = db.Exec(`SELECT pg_sleep(0.4)`) }()
	time.Sleep(100 * time.Millisecond)
	hot := make(chan error, 1)
	go func() { _, err := db.Exec(`UPDATE t SET b = 'x' WHERE k = 'hot'`); hot <- err }()
	time.Sleep(20 * time.Millisecond)
	leave("rolled-back", 500*time.Millisecond)
	time.Sleep(time.Second)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-hot)
	require.False(t, ran("queued"), "sent after its caller left")
	require.False(t, ran("rolled-back"), "run again after its caller left")

	// Alone on the connection, the server running it: the caller has its
	// error when its context ends, not when the statement does.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = db.ExecContext(cctx, `SELECT pg_sleep(2)`)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), time.Second, "the caller was held for the statement")
}

// valuer is an argument whose encoding takes as long as the test says:
// Value runs when pgx encodes it, in a lane.
type valuer struct {
	reading, release chan struct{}
	once             *sync.Once // Value may run again: a batch rolled back runs its statements again alone
}

func newValuer() valuer {
	return valuer{make(chan struct{}), make(chan struct{}), new(sync.Once)}
}

func (v valuer) Value() (driver.Value, error) {
	v.once.Do(func() { close(v.reading) })
	<-v.release
	return "read", nil
}

// A caller that stops waiting while a lane encodes its arguments has its
// error only once they are encoded: the lane never reads a caller's
// arguments after do returned, so the caller may reuse them at once.
// Alone on the connection and in a batch.
func TestALeavingCallerWaitsOutTheEncodingOfItsArguments(t *testing.T) {
	t.Parallel()
	_, db := start(t, 1)
	send := func(ctx context.Context, v valuer) <-chan error {
		ended := make(chan error, 1)
		go func() {
			_, err := db.ExecContext(ctx, `INSERT INTO t (k) VALUES ($1)`, v)
			ended <- err
		}()
		return ended
	}
	leave := func(name string, v valuer, cancel context.CancelFunc, ended <-chan error) {
		t.Helper()
		<-v.reading
		cancel()
		select {
		case err := <-ended:
			close(v.release) // the lane goes on, and the test ends
			t.Fatalf("%s: the caller had its answer (%v) while its argument was being read", name, err)
		case <-time.After(200 * time.Millisecond):
		}
		close(v.release)
		// Told the outcome is unknown — or, where the statement's own
		// answer came as the caller left (on a busy machine the lane can
		// be first, and a batch rolled back runs it again alone), that
		// answer: done, or the server's refusal of the key 'read' taken.
		if err := <-ended; err != nil && !errors.Is(err, context.Canceled) {
			var pg *pgconn.PgError
			require.ErrorAs(t, err, &pg, name)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	alone := newValuer()
	leave("alone", alone, cancel, send(ctx, alone))

	// The lane is busy encoding first's argument while second and third
	// queue; they go together next, and second's caller leaves during
	// that batch's encoding.
	first := newValuer()
	firstEnded := send(context.Background(), first)
	<-first.reading
	ctx2, cancel2 := context.WithCancel(context.Background())
	second := newValuer()
	secondEnded := send(ctx2, second)
	third := make(chan error, 1)
	go func() { _, err := db.Exec(`INSERT INTO t (k) VALUES ('third')`); third <- err }()
	time.Sleep(50 * time.Millisecond) // both wait for the lane
	close(first.release)
	require.Error(t, <-firstEnded) // the same key 'read' as alone's
	leave("in a batch", second, cancel2, secondEnded)
	require.NoError(t, <-third)
}
