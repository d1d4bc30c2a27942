package database

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
)

// probe is the readiness check's own connection to PostgreSQL, outside the
// pool. Under load every pooled connection can be busy for longer than the
// check waits: an instance whose database answers would report it
// unreachable, and — the load being the same everywhere — every instance at
// once would be taken out of the load balancer, turning a busy hour into
// an outage. The probe asks the database itself.
type probe struct {
	cfg  *pgx.ConnConfig
	turn chan struct{} // one ping at a time; a waiter gives up with its context
	conn *pgx.Conn     // held by whoever holds turn
}

// probes holds the probe of each PostgreSQL pool Open made.
var probes sync.Map // *sql.DB → *probe

func newProbe(cfg *pgx.ConnConfig) *probe {
	return &probe{cfg: cfg.Copy(), turn: make(chan struct{}, 1)}
}

func (p *probe) ping(ctx context.Context) error {
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.turn }()
	held := p.conn != nil && !p.conn.IsClosed()
	err := p.once(ctx)
	if err != nil && held && ctx.Err() == nil {
		// The server may have ended a connection held since the last
		// check (a failover, idle_session_timeout, a NAT's idle cut):
		// that says nothing of the database. One new connection decides.
		err = p.once(ctx)
	}
	return err
}

// once pings over the probe's connection, made first if it has none; a
// connection that fails is closed.
func (p *probe) once(ctx context.Context) error {
	if p.conn == nil || p.conn.IsClosed() {
		conn, err := pgx.ConnectConfig(ctx, p.cfg)
		if err != nil {
			return err
		}
		p.conn = conn
	}
	if err := p.conn.Ping(ctx); err != nil {
		p.close()
		return err
	}
	return nil
}

func (p *probe) close() {
	if p.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.conn.Close(ctx)
	p.conn = nil
}

// Ping checks that the database answers: on PostgreSQL over the probe's
// own connection (a pool that is merely busy is not a database that is
// down), on SQLite over the pool.
func Ping(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	if p, ok := probes.Load(sqlDB); ok {
		return p.(*probe).ping(ctx)
	}
	return sqlDB.PingContext(ctx)
}

// closeProbe closes sqlDB's probe, if it has one, once no ping holds it.
func closeProbe(sqlDB *sql.DB) {
	v, ok := probes.LoadAndDelete(sqlDB)
	if !ok {
		return
	}
	p := v.(*probe)
	p.turn <- struct{}{}
	p.close()
}
