package scheduler

import (
	"context"
	"time"
)

// Purger deletes done keys older than the key TTL.
type Purger struct {
	cfg Config
}

// NewPurger returns a purger; only Keys and the purge settings of cfg are
// used.
func NewPurger(cfg Config) *Purger {
	cfg.defaults()
	return &Purger{cfg: cfg}
}

// RunOnce deletes the done keys completed more than KeyTTL ago (by the
// database's clock), PurgeBatch rows per statement, until none are left or
// ctx ends. A key in progress is never deleted (its outcome is not known
// yet), and payments are never touched: the ledger is kept forever, with
// each request's fingerprint, so a purged key is still answered right.
func (p *Purger) RunOnce(ctx context.Context) (c Counts, err error) {
	start := time.Now()
	defer func() { report(ctx, &p.cfg, JobPurge, c, time.Since(start), err) }()
	c.Deleted, err = p.cfg.Keys.PurgeDone(ctx, p.cfg.KeyTTL, p.cfg.PurgeBatch)
	return c, err
}
