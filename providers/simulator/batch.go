package simulator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// maxBatch bounds the rows of one batched INSERT.
const maxBatch = 64

// batchTimeout bounds one batched INSERT: it runs for many charges, under
// none of their contexts.
const batchTimeout = 10 * time.Second

// batcher writes the charge rows of concurrent charges in one statement
// on PostgreSQL: while one batch is being written, the charges that come
// queue, and go together in the next. An idle simulator writes each row at
// once, alone; a busy one makes one round trip and one commit per batch
// instead of one per charge. Each charge still learns whether its row was
// new (the statement RETURNs the references it inserted), so the dedupe by
// reference is the same as one INSERT per charge.
//
// The batch commits without waiting for the WAL flush (set_config(…, true)
// lasts until its transaction ends). The rows stand for the provider's
// storage, not the gateway's, and nothing is lost by it: WAL is flushed in
// order, so the gateway's next synchronous commit — a payment's
// completion, before any answer that depends on the charge — makes them
// durable too, and a crash before that loses them together with everything
// after, as if the provider never charged (which the sweeper then finds,
// as for any charge that did not land). The gateway's PostgreSQL thus
// waits for two flushes per simulated payment, as with a real provider.
type batcher struct {
	db *gorm.DB

	mu       sync.Mutex
	queue    []*pendingRow
	flushing bool
}

type pendingRow struct {
	c        charge
	inserted bool
	err      error
	done     chan struct{}
}

// insert writes c's row and reports whether it was new; ctx only bounds
// the wait, like a request on a network: when it ends first, the row may
// still be written.
func (b *batcher) insert(ctx context.Context, c charge) (inserted bool, err error) {
	p := &pendingRow{c: c, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	if !b.flushing {
		b.flushing = true
		go b.flush()
	}
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.inserted, p.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// flush writes batches until the queue is empty.
func (b *batcher) flush() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxBatch)
		if n == 0 {
			b.flushing = false
			b.mu.Unlock()
			return
		}
		batch := b.queue[:n:n]
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.write(batch)
	}
}

// insertBatch is the batch's INSERT: one statement for any number of rows
// (one array per column), so pgx prepares it once per connection and binds
// eight values per batch rather than eight per row.
const insertBatch = `WITH async AS (SELECT set_config('synchronous_commit', 'off', true))
INSERT INTO simulator_charges
  (reference, transaction_id, amount, currency, payment_method, status, settle_at, created_at)
SELECT v.* FROM async, unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[],
  $7::timestamptz[], $8::timestamptz[])
  AS v(reference, transaction_id, amount, currency, payment_method, status, settle_at, created_at)
ON CONFLICT DO NOTHING RETURNING reference`

// columns are one batch's rows as the arrays of insertBatch.
type columns struct {
	refs, txns, currencies, methods, statuses []string
	amounts                                   []int64
	settles                                   []*time.Time
	created                                   []time.Time
}

func (c *columns) add(ch charge) {
	c.refs = append(c.refs, ch.Reference)
	c.txns = append(c.txns, ch.TransactionID)
	c.amounts = append(c.amounts, ch.Amount)
	c.currencies = append(c.currencies, ch.Currency)
	c.methods = append(c.methods, ch.PaymentMethod)
	c.statuses = append(c.statuses, ch.Status)
	c.settles = append(c.settles, ch.SettleAt)
	c.created = append(c.created, ch.CreatedAt)
}

// write inserts one batch. A reference twice in it (two charges for one
// payment at once) is written once, by the first: the others find it, as
// a second INSERT would have.
func (b *batcher) write(batch []*pendingRow) {
	first := make(map[string]*pendingRow, len(batch))
	var cols columns
	for _, p := range batch {
		if _, dup := first[p.c.Reference]; dup {
			continue
		}
		first[p.c.Reference] = p
		cols.add(p.c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	err := b.insertRows(ctx, &cols, first)
	if err != nil {
		err = fmt.Errorf("simulator: write charges: %w", err)
	}
	for _, p := range batch {
		p.err = err
		close(p.done)
	}
}

// insertRows runs a batch's INSERT on a pooled connection's pgx.Conn and
// marks the rows it inserted. Not through GORM, which would expand each
// array into a list, and which with database/sql cost as much CPU as
// the statement's own encoding and round trip.
func (b *batcher) insertRows(ctx context.Context, cols *columns, first map[string]*pendingRow) error {
	pool, err := b.db.DB()
	if err != nil {
		return err
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("simulator: batching needs a pgx connection, not %T", dc)
		}
		rows, err := sc.Conn().Query(ctx, insertBatch, cols.refs, cols.txns, cols.amounts,
			cols.currencies, cols.methods, cols.statuses, cols.settles, cols.created)
		if err != nil {
			return err
		}
		defer rows.Close()
		var ref string
		for rows.Next() {
			if err := rows.Scan(&ref); err != nil {
				return err
			}
			if p := first[ref]; p != nil {
				p.inserted = true
			}
		}
		return rows.Err()
	})
}
