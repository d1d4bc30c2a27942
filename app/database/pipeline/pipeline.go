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
// A statement that must wait for a row lock does not hold its company:
// the pipeline's connections give up on a lock after BatchLockTimeout, and
// such a statement is run again on an ordinary connection, where it waits
// as long as it would have anyway.
//
// Only statements that stand alone belong here (the claim and ledger row
// of a new payment, its completion): each must be correct whether it
// commits alone or with others, which holds for statements that touch
// only their own request's rows; and none may change its transaction's
// settings (a set_config(…, true) would apply to the whole batch: the
// simulator's asynchronous-commit batches stay on the pool). Explicit
// transactions use the ordinary pool.
package pipeline

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
)

// timeout bounds one batch (or, after a failed batch, each of its
// statements run alone). Every statement also has a lock_timeout; this is
// the bound for a server that stops answering.
const timeout = 30 * time.Second

// idleCheck is how long a lane's connection may sit unused before it is
// pinged ahead of its next batch (PostgreSQL may have restarted since).
const idleCheck = time.Second

// Options size a Pipeline. Zero values take the defaults.
type Options struct {
	// Conns is the number of PostgreSQL connections the pipeline keeps
	// (default 2): statements go at once while one is free.
	Conns int
	// MaxBatch bounds the statements of one round trip (default 32).
	MaxBatch int
	// BatchLockTimeout is the longest a statement waits for a row lock
	// on the pipeline's connections (default 100ms): a waiting statement
	// would hold its whole batch's commit and its lane, so it gives up
	// early, its batch is rolled back and run again statement by
	// statement, and the one that must wait does so on an ordinary
	// connection with the config's own lock_timeout.
	BatchLockTimeout time.Duration
	// MaxLifetime is how long a lane keeps one connection (default 30m,
	// the pool's ConnMaxLifetime): server-side caches do not grow without
	// end, and a pooler or failover in front of PostgreSQL gets to move it.
	MaxLifetime time.Duration
	// Patient is where a statement that must wait for a row lock runs
	// instead (the gateway's ordinary pool, with its lock_timeout). When
	// nil the pipeline keeps a small pool of its own, made from cfg.
	Patient *sql.DB
}

// Pipeline groups statements onto a few connections.
type Pipeline struct {
	cfg     *pgx.ConnConfig
	patient *sql.DB // for statements that must wait for a lock (see answerAlone)
	// ownPatient: patient is the pipeline's own, closed with it.
	ownPatient bool
	max        int
	lifetime   time.Duration // Options.MaxLifetime
	queue      chan *call
	stop       chan struct{}
	wg         sync.WaitGroup
	stopOnce   sync.Once
	db         *sql.DB

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
	// reading is held by a lane while it reads args (pgx encodes them
	// only after it has described a statement new to the connection, a
	// round trip) and by a caller that stops waiting while it sets left:
	// do never returns while a lane reads its arguments, so a caller may
	// reuse them (or a Valuer's state) as soon as it has its answer, and
	// a lane never reads them after. A leaving caller thus waits out an
	// encoding under way — microseconds, or that round trip — and no more.
	reading sync.Mutex
	// left is set by a caller that stops waiting (do returned its
	// error): a statement not sent by then is answered instead of run,
	// and one whose batch was rolled back is not run again (claim).
	left bool
	exec bool // from ExecContext: no rows wanted
	res  result
	done chan struct{}
}

// result is a statement's whole answer, read before the batch committed
// and handed over only after.
type result struct {
	cols []string
	rows [][]driver.Value
	// affected is the rows the statement inserted, updated or deleted
	affected int64
	err      error
	read     bool // err is of a value, after the statement ran (see collect)
	// patient: the statement gave up waiting for a lock under the
	// pipeline's short timeout; its caller runs it again (see answerAlone).
	patient bool
	// completed: the server had reported the statement done (its command
	// tag) before err, which then came at or after its commit.
	completed bool
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
	if o.BatchLockTimeout <= 0 {
		o.BatchLockTimeout = 100 * time.Millisecond
	}
	if o.MaxLifetime <= 0 {
		o.MaxLifetime = 30 * time.Minute
	}
	lanes := cfg.Copy()
	lanes.RuntimeParams["lock_timeout"] = fmt.Sprintf("%dms", o.BatchLockTimeout.Milliseconds())
	patient, own := o.Patient, o.Patient == nil
	if own {
		patient = stdlib.OpenDB(*cfg)
		patient.SetMaxOpenConns(o.Conns)
		patient.SetMaxIdleConns(1)
	}
	p := &Pipeline{cfg: lanes, patient: patient, ownPatient: own, max: o.MaxBatch, lifetime: o.MaxLifetime,
		queue: make(chan *call), stop: make(chan struct{})}
	p.db = sql.OpenDB(connector{p})
	// The connections database/sql holds are handles to p, not to
	// PostgreSQL: as many as there are callers waiting.
	p.db.SetMaxIdleConns(64)
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
	_ = p.db.Close()
	if p.ownPatient {
		_ = p.patient.Close()
	}
}

// Stats returns the counts so far.
func (p *Pipeline) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// errClosed is sql.ErrConnDone's kind of error: the gateway is stopping.
var errClosed = fmt.Errorf("pipeline: closed: %w", sql.ErrConnDone)

// do sends one statement and waits for its answer. When ctx ends first
// the statement may still run (and commit): ctx's error then means, as
// for a statement whose connection was cancelled, that the outcome is
// unknown.
func (p *Pipeline) do(ctx context.Context, query string, args []any, exec bool) result {
	// A select between two ready cases picks either: an ended ctx must
	// never send its statement.
	if err := ctx.Err(); err != nil {
		return result{err: err}
	}
	c := &call{sql: query, args: args, exec: exec, done: make(chan struct{})}
	select {
	case p.queue <- c:
	case <-p.stop:
		return result{err: errClosed}
	case <-ctx.Done():
		return result{err: ctx.Err()}
	}
	select {
	case <-c.done:
		if c.res.patient {
			return p.patiently(ctx, c)
		}
		return c.res
	case <-ctx.Done():
		c.reading.Lock()
		c.left = true
		c.reading.Unlock()
		// Answered meanwhile (or as ctx ended: select picks either of
		// two ready cases): the outcome is known, and is the answer.
		select {
		case <-c.done:
			if !c.res.patient && c.res.err != errLeft {
				return c.res
			}
		default:
		}
		return result{err: ctx.Err()}
	}
}

// lane owns one connection: it takes the statement that is waiting, every
// other one waiting with it (up to MaxBatch), and sends them together.
func (p *Pipeline) lane() {
	defer p.wg.Done()
	var conn *pgx.Conn
	var used, born time.Time
	defer func() {
		if conn != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(ctx)
			cancel()
		}
	}()
	// fresh replaces the lane's connection after one broke under a
	// statement that ran alone (each), for the statements after it.
	fresh := func() (*pgx.Conn, error) {
		var err error
		conn, born, err = p.ready(conn, time.Time{}, born)
		return conn, err
	}
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
		var err error
		if conn, born, err = p.ready(conn, used, born); err != nil {
			answer(batch, err)
			continue
		}
		// Claimed here, where batch is the lane's: claim leaves out (and
		// answers) the calls whose callers left, and every use of batch
		// after run — the resend, each, answer — must see only the rest.
		if batch = claim(batch); len(batch) == 0 {
			continue
		}
		switch p.run(conn, batch, true, fresh) {
		case resend:
			// PostgreSQL had closed the connection before running any of
			// it (a restart): nothing of the batch happened, so it goes
			// once more on a new connection.
			if conn, born, err = p.ready(conn, time.Time{}, born); err != nil {
				answer(batch, err)
				break
			}
			if batch = claim(batch); len(batch) > 0 {
				p.run(conn, batch, false, fresh)
			}
		case separately:
			// pgx refused the batch before sending it (a statement it
			// could not prepare, or arguments it could not encode), and
			// closed the connection: nothing of it ran, so each statement
			// goes alone on a new one.
			if conn, born, err = p.ready(conn, time.Time{}, born); err != nil {
				answer(batch, err)
				break
			}
			p.each(conn, batch, fresh)
		}
		used = time.Now()
	}
}

// ready returns conn if it is usable, or a new connection and when it was
// made. One idle for a while is pinged first: a restart of PostgreSQL
// closes it from the other end, and the batch sent on it would fail for no
// fault of its statements. One older than MaxLifetime is replaced, as the
// pool replaces its own.
func (p *Pipeline) ready(conn *pgx.Conn, used, born time.Time) (*pgx.Conn, time.Time, error) {
	now := time.Now()
	if conn != nil && !conn.IsClosed() && now.Sub(born) <= p.lifetime && now.Sub(used) <= idleCheck {
		// The common case, once per batch: no timer to start and stop.
		return conn, born, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if conn != nil && !conn.IsClosed() && now.Sub(born) > p.lifetime {
		_ = conn.Close(ctx)
	}
	if conn != nil && !conn.IsClosed() && now.Sub(used) > idleCheck {
		if err := conn.Ping(ctx); err != nil {
			_ = conn.Close(ctx)
		}
	}
	if conn != nil && !conn.IsClosed() {
		return conn, born, nil
	}
	conn, err := pgx.ConnectConfig(ctx, p.cfg)
	if err != nil {
		// A *pgconn.ConnectError: its callers answer 503, as for the pool.
		return nil, time.Time{}, fmt.Errorf("pipeline: %w", err)
	}
	return conn, time.Now(), nil
}

// claim takes the reading lock of every call in batch whose caller still
// waits, and answers, and leaves out, the others (call.left). Before each
// send, the first and any again after a rollback: the caller was told the
// outcome is unknown, and not running the statement keeps that true —
// where reading arguments the caller may have reused since would write
// another request's bytes under this one's statement.
func claim(batch []*call) []*call {
	kept := batch[:0]
	for _, c := range batch {
		if c.claim() {
			kept = append(kept, c)
		}
	}
	return kept
}

// claim takes c's reading lock and reports true, or answers c when its
// caller has left.
func (c *call) claim() bool {
	c.reading.Lock()
	if !c.left {
		return true
	}
	c.reading.Unlock()
	c.res = result{err: errLeft}
	close(c.done)
	return false
}

// release gives back the reading locks of batch: pgx has encoded every
// argument into its buffer.
func release(batch []*call) {
	for _, c := range batch {
		c.reading.Unlock()
	}
}

// errLeft answers a call nobody waits for any more.
var errLeft = errors.New("pipeline: the caller stopped waiting; not sent")

func answer(batch []*call, err error) {
	for _, c := range batch {
		c.res = result{err: err}
		close(c.done)
	}
}

// next is what a lane does after run.
type next int

const (
	done       next = iota // every call is answered
	resend                 // none is: send the batch again on a new connection
	separately             // none is: send each statement alone on a new connection
)

// run sends batch, every call of it claimed, on conn and answers every
// call in it — except when mayResend is set and nothing of the batch ran
// (see next). fresh gives the lane a new connection (see each).
func (p *Pipeline) run(conn *pgx.Conn, batch []*call, mayResend bool, fresh func() (*pgx.Conn, error)) next {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if mayResend {
		p.count(int64(len(batch)), 1, 0)
	} else {
		p.count(0, 1, 0)
	}
	if len(batch) == 1 {
		c := batch[0]
		c.res = single(ctx, conn, c)
		if mayResend && endedFirst(c.res.err) && !c.res.completed {
			return resend
		}
		p.answerAlone(c, conn)
		return done
	}
	var b pgx.Batch
	for _, c := range batch {
		b.Queue(c.sql, c.args...)
	}
	br := conn.SendBatch(ctx, &b)
	release(batch)
	var sent error // the first error of a statement, as the server or pgx gave it
	ran := 0       // statements answered before it
	for _, c := range batch {
		rows, err := br.Query()
		if err == nil {
			// A column that cannot be read is this caller's error alone,
			// handed over once the batch has committed (its statement did
			// run), as a scan error is after an autocommit statement.
			c.res = collect(conn, rows)
			if c.res.err != nil && !c.res.read {
				err = c.res.err
			}
		}
		if err != nil {
			sent = cmp.Or(sent, err)
		} else if sent == nil {
			ran++
		}
	}
	sent = cmp.Or(br.Close(), sent)
	var unsent pgx.ErrPreprocessingBatch
	switch {
	case sent == nil && idle(conn):
		for _, c := range batch {
			close(c.done)
		}
	case refused(conn, sent):
		// The server refused a statement (a lock it would not wait for
		// in company, a constraint, a deadlock) and rolled the batch
		// back: nothing of it happened, so each statement runs again
		// alone and gets the answer it would have had without company.
		p.count(0, 0, 1)
		p.each(conn, batch, fresh)
	case mayResend && ran == 0 && endedFirst(sent):
		return resend
	case mayResend && errors.As(sent, &unsent):
		return separately
	default:
		// The connection broke, pgx failed, or a statement left a
		// transaction open: whether the batch committed is unknown (or it
		// must not), so every caller gets the error, as for one statement
		// whose connection broke. The connection is not used again.
		if sent == nil {
			sent = errors.New("a statement left a transaction open")
		}
		_ = conn.Close(ctx)
		answer(batch, fmt.Errorf("pipeline: %w", sent))
	}
	return done
}

// each runs every statement of batch alone, in order, and answers it.
// Where the connection breaks under one (a restart, a terminated backend),
// that one's outcome is unknown and its caller is told so; the statements
// after it were never sent, and go on a new connection from fresh instead
// of failing on the closed one. One the server ended the connection on
// before running it (endedFirst) goes once more, as a batch of one does in
// the lane.
func (p *Pipeline) each(conn *pgx.Conn, batch []*call, fresh func() (*pgx.Conn, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p.count(0, int64(len(batch)), 0)
	for i, c := range batch {
		if conn.IsClosed() {
			var err error
			if conn, err = fresh(); err != nil {
				answer(batch[i:], err)
				return
			}
		}
		// Rolled back, or never sent: a caller who left meanwhile is
		// answered, not run again.
		if !c.claim() {
			continue
		}
		c.res = single(ctx, conn, c)
		if endedFirst(c.res.err) && !c.res.completed {
			if again, err := fresh(); err == nil {
				conn = again
				if !c.claim() {
					continue
				}
				c.res = single(ctx, conn, c)
			}
		}
		p.answerAlone(c, conn)
	}
}

// endedFirst reports whether err is the server ending the connection
// (a FATAL: a restart, an administrator's terminate) as the first answer to
// what was sent. The server commits at the end of what was sent (the Sync)
// and sends answers in order, so nothing of it had committed.
func endedFirst(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Severity == "FATAL" || pg.Severity == "PANIC")
}

// answerAlone answers c, which ran alone, in its own implicit
// transaction. A statement that gave up waiting for a row lock (the short
// timeout of the pipeline's connections) is handed back to its caller to
// run on a connection of its own, with the ordinary lock_timeout (see
// do): it waits as it would have without the pipeline, and the lane goes
// on.
func (p *Pipeline) answerAlone(c *call, conn *pgx.Conn) {
	if lockTimedOut(c.res.err) && idle(conn) {
		c.res = result{patient: true}
	}
	close(c.done)
}

// patiently runs c on the pipeline's own small pool of ordinary
// connections (made from the config it was given, lock_timeout and all).
func (p *Pipeline) patiently(ctx context.Context, c *call) result {
	p.count(0, 1, 0)
	if c.exec {
		res, err := p.patient.ExecContext(ctx, c.sql, c.args...)
		if err != nil {
			return result{err: err}
		}
		n, err := res.RowsAffected()
		return result{affected: n, err: err}
	}
	rows, err := p.patient.QueryContext(ctx, c.sql, c.args...)
	if err != nil {
		return result{err: err}
	}
	defer rows.Close()
	var r result
	if r.cols, err = rows.Columns(); err != nil {
		return result{err: err}
	}
	for rows.Next() {
		row := make([]driver.Value, len(r.cols))
		ptrs := make([]any, len(row))
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return result{err: err}
		}
		r.rows = append(r.rows, row)
	}
	if err := cmp.Or(rows.Err(), rows.Close()); err != nil {
		return result{err: err}
	}
	return r
}

// single runs c, claimed, alone on conn. As a batch of one: pgx's Query
// encodes, sends and then waits for the statement's first answer in one
// call, where SendBatch returns once it is sent, so c is released (its
// caller free to leave) while the server runs it.
func single(ctx context.Context, conn *pgx.Conn, c *call) (r result) {
	var b pgx.Batch
	b.Queue(c.sql, c.args...)
	br := conn.SendBatch(ctx, &b)
	c.reading.Unlock()
	rows, err := br.Query()
	if err == nil {
		r = collect(conn, rows)
		err = r.err
		if r.read {
			err = nil
		}
	}
	err = cmp.Or(br.Close(), err)
	if err == nil && !idle(conn) {
		err = errors.New("pipeline: a statement left a transaction open")
		_ = conn.Close(ctx)
	}
	if err != nil {
		return result{err: err, completed: r.completed}
	}
	return r
}

// lockTimedOut reports PostgreSQL's lock_not_available (55P03).
func lockTimedOut(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "55P03"
}

// idle reports whether conn is outside any transaction, as every
// statement of a pipeline must leave it.
func idle(conn *pgx.Conn) bool {
	return !conn.IsClosed() && conn.PgConn().TxStatus() == 'I'
}

// refused reports whether err is the server's refusal of a statement on a
// connection that goes on: then the batch was rolled back and nothing of
// it committed.
func refused(conn *pgx.Conn, err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Severity != "FATAL" && pg.Severity != "PANIC" && idle(conn)
}

func (p *Pipeline) count(statements, trips, retried int64) {
	p.mu.Lock()
	p.stats.Statements += statements
	p.stats.Trips += trips
	p.stats.Retried += retried
	p.mu.Unlock()
}

// collect reads rows to the end, as database/sql values. read is set
// when the statement ran to its end and only a value could not be
// converted.
func collect(conn *pgx.Conn, rows pgx.Rows) result {
	defer rows.Close()
	fields := rows.FieldDescriptions()
	var r result
	r.cols = make([]string, len(fields))
	for i, f := range fields {
		r.cols[i] = f.Name
	}
	m := conn.TypeMap()
	var bad error
	for rows.Next() {
		raw := rows.RawValues()
		row := make([]driver.Value, len(fields))
		for i, f := range fields {
			if raw[i] == nil || bad != nil {
				continue
			}
			v, err := value(m, f, raw[i])
			if err != nil {
				bad = fmt.Errorf("pipeline: column %q: %w", f.Name, err)
				continue
			}
			row[i] = v
		}
		r.rows = append(r.rows, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return result{err: err, completed: rows.CommandTag().String() != ""}
	}
	r.affected = rows.CommandTag().RowsAffected()
	if bad != nil {
		return result{err: bad, read: true}
	}
	return r
}

// value converts one column's value as pgx's own database/sql driver
// would, for the scalar types (numbers, text, bytea, booleans, times,
// uuid, json). Anything else (arrays, composites, ranges) is refused
// rather than handed over in its binary form.
func value(m *pgtype.Map, f pgconn.FieldDescription, raw []byte) (driver.Value, error) {
	t, ok := m.TypeForOID(f.DataTypeOID)
	if !ok {
		if f.Format == pgtype.TextFormatCode {
			return string(raw), nil
		}
		return nil, fmt.Errorf("type %d is not supported here", f.DataTypeOID)
	}
	v, err := t.Codec.DecodeDatabaseSQLValue(m, f.DataTypeOID, f.Format, raw)
	if err != nil {
		return nil, err
	}
	if _, isBytes := v.([]byte); isBytes && f.Format == pgtype.BinaryFormatCode && f.DataTypeOID != pgtype.ByteaOID {
		return nil, fmt.Errorf("type %s is not supported here", t.Name)
	}
	return v, nil
}

// DB returns the database/sql handle whose every statement goes through
// p. It has no transactions (BeginTx fails) and no prepared statements:
// pgx prepares and caches each statement on each connection anyway.
func (p *Pipeline) DB() *sql.DB { return p.db }
