// Package pipeline sends the hot path's single statements to PostgreSQL
// in shared round trips: statements that arrive while a connection is busy
// wait for it, and go together in one pipelined batch (one write, one
// commit) when it is free.
//
// Why: on a small machine a new payment's cost is dominated not by the
// work its two statements ask of PostgreSQL but by the round trips around
// them — two context switches and a wake-up on each side per statement, and
// a commit each (bench/README.md, "Round trips shared"). Grouping the
// statements of concurrent requests is PostgreSQL's group commit done one
// step earlier: a lone statement still goes at once, alone, so nothing
// waits that did not have to.
//
// A batch runs in one implicit transaction (pgx.Batch): its statements
// commit together, and a statement that fails rolls back the others. So a
// batch that failed in the server (a *pgconn.PgError: nothing of it is
// committed) is run again one statement at a time, each with its own
// commit, and every caller gets the answer its statement gets alone. A
// batch whose connection broke is reported to every caller as that error:
// whether it committed is unknown, exactly as for one statement whose
// connection broke.
//
// Only statements that stand alone belong here (the claim and ledger row
// of a new payment, its completion): each must be correct whether it
// commits alone or with others, which holds for statements that touch
// only their own request's rows. Explicit transactions use the ordinary
// pool.
package pipeline

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// timeout bounds one batch (or, after a failed batch, each of its
// statements run alone). Every statement also has the connection's
// lock_timeout; this is the bound for a server that stops answering.
const timeout = 30 * time.Second

// Options size a Pipeline. Zero values take the defaults.
type Options struct {
	// Conns is the number of PostgreSQL connections the pipeline keeps
	// (default 2): statements go at once while one is free.
	Conns int
	// MaxBatch bounds the statements of one round trip (default 32).
	MaxBatch int
}

// Pipeline groups statements onto a few connections.
type Pipeline struct {
	cfg      *pgx.ConnConfig
	max      int
	queue    chan *call
	stop     chan struct{}
	wg       sync.WaitGroup
	stopOnce sync.Once

	mu    sync.Mutex
	stats Stats
}

// Stats count what a pipeline sent: statements, the round trips they
// took, and batches that failed in the server and were run again one by one.
type Stats struct {
	Statements, Trips, Retried int64
}

// call is one statement waiting for its answer.
type call struct {
	sql  string
	args []any
	res  result
	done chan struct{}
}

// result is a statement's whole answer, read before the batch committed
// and handed over only after.
type result struct {
	cols []string
	rows [][]driver.Value
	tag  pgconn.CommandTag
	err  error
}

// New starts a pipeline over connections made from cfg (dialled when first
// needed, and again after one breaks).
func New(cfg *pgx.ConnConfig, o Options) *Pipeline {
	if o.Conns <= 0 {
		o.Conns = 2
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 32
	}
	p := &Pipeline{cfg: cfg, max: o.MaxBatch, queue: make(chan *call), stop: make(chan struct{})}
	for range o.Conns {
		p.wg.Add(1)
		go p.lane()
	}
	return p
}

// Close stops the pipeline once the statements already sent are answered;
// statements sent after it get an error.
func (p *Pipeline) Close() {
	p.stopOnce.Do(func() { close(p.stop) })
	p.wg.Wait()
}

// Stats returns the counts so far.
func (p *Pipeline) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

var errClosed = errors.New("pipeline: closed")

// do sends one statement and waits for its answer. When ctx ends first
// the statement may still run (and commit): ctx's error then means, as
// for a statement whose connection was cancelled, that the outcome is
// unknown.
func (p *Pipeline) do(ctx context.Context, query string, args []any) result {
	c := &call{sql: query, args: args, done: make(chan struct{})}
	select {
	case p.queue <- c:
	case <-p.stop:
		return result{err: errClosed}
	case <-ctx.Done():
		return result{err: ctx.Err()}
	}
	select {
	case <-c.done:
		return c.res
	case <-ctx.Done():
		return result{err: ctx.Err()}
	}
}

// lane owns one connection: it takes the statement that is waiting, every
// other one waiting with it (up to MaxBatch), and sends them together.
func (p *Pipeline) lane() {
	defer p.wg.Done()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(ctx)
			cancel()
		}
	}()
	batch := make([]*call, 0, p.max)
	for {
		batch = batch[:0]
		select {
		case c := <-p.queue:
			batch = append(batch, c)
		case <-p.stop:
			return
		}
	more:
		for len(batch) < p.max {
			select {
			case c := <-p.queue:
				batch = append(batch, c)
			default:
				break more
			}
		}
		if conn == nil || conn.IsClosed() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			var err error
			conn, err = pgx.ConnectConfig(ctx, p.cfg)
			cancel()
			if err != nil {
				conn = nil
				answer(batch, fmt.Errorf("pipeline: connect: %w", err))
				continue
			}
		}
		p.run(conn, batch)
	}
}

func answer(batch []*call, err error) {
	for _, c := range batch {
		c.res = result{err: err}
		close(c.done)
	}
}

// run sends batch on conn and answers every call in it.
func (p *Pipeline) run(conn *pgx.Conn, batch []*call) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if len(batch) == 1 {
		p.count(1, 1, 0)
		batch[0].res = query(ctx, conn, batch[0])
		close(batch[0].done)
		return
	}
	var b pgx.Batch
	for _, c := range batch {
		b.Queue(c.sql, c.args...)
	}
	br := conn.SendBatch(ctx, &b)
	failed := false
	for _, c := range batch {
		rows, err := br.Query()
		c.res = collect(conn, rows, err)
		failed = failed || c.res.err != nil
	}
	err := br.Close()
	p.count(int64(len(batch)), 1, 0)
	switch {
	case err == nil && !failed:
		for _, c := range batch {
			close(c.done)
		}
	case conn.IsClosed():
		// The connection broke (or the batch timed out, which closes
		// it): the batch may or may not have committed.
		if err == nil {
			err = errors.New("connection closed")
		}
		answer(batch, fmt.Errorf("pipeline: %w", err))
	default:
		// A statement failed — in the server, or in pgx before it was
		// sent — so the batch never reached its commit and nothing of it
		// happened: each statement runs again alone and gets the answer
		// it would have had without company.
		p.count(0, int64(len(batch)), 1)
		for _, c := range batch {
			c.res = query(ctx, conn, c)
			close(c.done)
		}
	}
}

func (p *Pipeline) count(statements, trips, retried int64) {
	p.mu.Lock()
	p.stats.Statements += statements
	p.stats.Trips += trips
	p.stats.Retried += retried
	p.mu.Unlock()
}

// query runs one statement alone, in its own implicit transaction.
func query(ctx context.Context, conn *pgx.Conn, c *call) result {
	rows, err := conn.Query(ctx, c.sql, c.args...)
	return collect(conn, rows, err)
}

// collect reads rows to the end, as database/sql values.
func collect(conn *pgx.Conn, rows pgx.Rows, err error) result {
	if err != nil {
		return result{err: err}
	}
	defer rows.Close()
	fields := rows.FieldDescriptions()
	var r result
	r.cols = make([]string, len(fields))
	for i, f := range fields {
		r.cols[i] = f.Name
	}
	m := conn.TypeMap()
	for rows.Next() {
		raw := rows.RawValues()
		row := make([]driver.Value, len(fields))
		for i, f := range fields {
			if raw[i] == nil {
				continue
			}
			t, ok := m.TypeForOID(f.DataTypeOID)
			if !ok {
				// An unregistered type (an extension's): its text, as
				// pgx's database/sql driver gives it.
				row[i] = string(raw[i])
				continue
			}
			v, err := t.Codec.DecodeDatabaseSQLValue(m, f.DataTypeOID, f.Format, raw[i])
			if err != nil {
				rows.Close()
				return result{err: err}
			}
			row[i] = v
		}
		r.rows = append(r.rows, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return result{err: err}
	}
	r.tag = rows.CommandTag()
	return r
}

// DB returns a database/sql handle whose every statement goes through p.
// It has no transactions (BeginTx fails) and no prepared statements: pgx
// prepares and caches each statement on each connection anyway.
func (p *Pipeline) DB() *sql.DB {
	db := sql.OpenDB(connector{p})
	// The connections database/sql holds are handles to p, not to
	// PostgreSQL: as many as there are callers waiting.
	db.SetMaxIdleConns(64)
	return db
}
