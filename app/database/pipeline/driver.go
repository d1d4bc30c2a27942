package pipeline

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
)

// connector hands database/sql connections that are handles to a
// Pipeline: a statement on any of them joins the pipeline's queue.
type connector struct{ p *Pipeline }

func (c connector) Connect(context.Context) (driver.Conn, error) { return conn(c), nil }
func (c connector) Driver() driver.Driver                        { return pipelineDriver{} }

type pipelineDriver struct{}

func (pipelineDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("pipeline: open through Pipeline.DB")
}

var (
	errNoTx      = errors.New("pipeline: no transactions here: use the ordinary pool")
	errNoPrepare = errors.New("pipeline: no prepared statements here")
)

type conn struct{ p *Pipeline }

var (
	_ driver.QueryerContext    = conn{}
	_ driver.ExecerContext     = conn{}
	_ driver.NamedValueChecker = conn{}
	_ driver.ConnBeginTx       = conn{}
)

func (conn) Prepare(string) (driver.Stmt, error) { return nil, errNoPrepare }
func (conn) Close() error                        { return nil }
func (conn) Begin() (driver.Tx, error)           { return nil, errNoTx }
func (conn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) {
	return nil, errNoTx
}

// CheckNamedValue takes every argument as it is: pgx encodes it (Valuers
// included), as its own database/sql driver does.
func (conn) CheckNamedValue(*driver.NamedValue) error { return nil }

func (c conn) QueryContext(ctx context.Context, query string, named []driver.NamedValue) (driver.Rows, error) {
	r := c.p.do(caller(ctx), query, values(named), false)
	if r.err != nil {
		return nil, r.err
	}
	return &rows{r: r}, nil
}

func (c conn) ExecContext(ctx context.Context, query string, named []driver.NamedValue) (driver.Result, error) {
	r := c.p.do(caller(ctx), query, values(named), true)
	if r.err != nil {
		return nil, r.err
	}
	return driver.RowsAffected(r.affected), nil
}

func values(named []driver.NamedValue) []any {
	args := make([]any, len(named))
	for i, n := range named {
		args[i] = n.Value
	}
	return args
}

// rows are a statement's answer, read in full before it committed.
type rows struct {
	r    result
	next int
}

func (r *rows) Columns() []string { return r.r.cols }
func (r *rows) Close() error      { return nil }
func (r *rows) Next(dest []driver.Value) error {
	if r.next >= len(r.r.rows) {
		return io.EOF
	}
	copy(dest, r.r.rows[r.next])
	r.next++
	return nil
}
