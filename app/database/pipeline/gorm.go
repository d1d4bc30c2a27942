package pipeline

import (
	"context"

	"gorm.io/gorm"
)

const pluginName = "oncepay:pipeline"

// plugin keeps a Pipeline in a gorm.DB's shared configuration, where every
// session made from that DB finds it.
type plugin struct {
	p    *Pipeline
	pool gorm.ConnPool
}

func (*plugin) Name() string              { return pluginName }
func (*plugin) Initialize(*gorm.DB) error { return nil }

// Use makes p the pipeline of db and of every session made from it.
func Use(db *gorm.DB, p *Pipeline) error {
	return db.Use(&plugin{p: p, pool: p.DB()})
}

// Of returns db's pipeline, or nil.
func Of(db *gorm.DB) *Pipeline {
	if pl, ok := db.Config.Plugins[pluginName].(*plugin); ok {
		return pl.p
	}
	return nil
}

// Session returns db with ctx, its statements sent through db's pipeline
// (in one copy of db's statement: this is on every new payment's path);
// db.WithContext(ctx) when db has none, or is a transaction (whose
// statements must go on its own connection).
func Session(db *gorm.DB, ctx context.Context) *gorm.DB {
	pl, ok := db.Config.Plugins[pluginName].(*plugin)
	if !ok {
		return db.WithContext(ctx)
	}
	if _, tx := db.Statement.ConnPool.(gorm.TxCommitter); tx {
		return db.WithContext(ctx)
	}
	// A session with a context has its own copy of the statement, so
	// setting its pool leaves db's alone. NewDB: the statement it is given
	// next (its Raw) starts afresh with this pool and context instead of
	// copying db's statement a second time — only a single statement is
	// sent here, never one built on db's conditions.
	s := db.Session(&gorm.Session{Context: detach(ctx), NewDB: true})
	s.Statement.ConnPool = pl.pool
	return s
}

// callerKey holds, in the context database/sql is given, the caller's own.
type callerKey struct{}

// detach is ctx without its end, carrying ctx itself for the pipeline's
// driver (conn), which waits on it. database/sql starts a goroutine and a
// cancellable context for every query whose context can end, to close its
// rows when it does; the pipeline's rows are read in full before the
// driver returns, so there is nothing for them to close, and on a new
// payment's two statements that machinery cost 3% of the gateway's CPU
// (bench/README.md). Getting a connection from p's database/sql pool never
// waits (it has no limit, and its connections are handles), so nothing
// there needs ctx's end either.
func detach(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithValue(context.WithoutCancel(ctx), callerKey{}, ctx)
}

// caller is the context detach was given, or ctx.
func caller(ctx context.Context) context.Context {
	if c, ok := ctx.Value(callerKey{}).(context.Context); ok {
		return c
	}
	return ctx
}

// Wrap puts wrap(pool) in place of db's pipeline pool, for tests that
// count what reaches PostgreSQL. It reports whether db has a pipeline.
func Wrap(db *gorm.DB, wrap func(gorm.ConnPool) gorm.ConnPool) bool {
	pl, ok := db.Config.Plugins[pluginName].(*plugin)
	if ok {
		pl.pool = wrap(pl.pool)
	}
	return ok
}
