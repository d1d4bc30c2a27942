package simulator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/rawsql"
)

// maxBatch bounds the rows of one batched INSERT (and so the distinct
// statements pgx prepares for it).
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

// write inserts one batch. A reference twice in it (two charges for one
// payment at once) is written once, by the first: the others find it, as
// a second INSERT would have.
func (b *batcher) write(batch []*pendingRow) {
	var sql strings.Builder
	sql.WriteString(`WITH async AS (SELECT set_config('synchronous_commit', 'off', true))
INSERT INTO simulator_charges
  (reference, transaction_id, amount, currency, payment_method, status, settle_at, created_at)
SELECT v.* FROM async, (VALUES `)
	first := make(map[string]*pendingRow, len(batch))
	args := make([]any, 0, 8*len(batch))
	for _, p := range batch {
		if _, dup := first[p.c.Reference]; dup {
			continue
		}
		if len(first) > 0 {
			sql.WriteString(", ")
		}
		first[p.c.Reference] = p
		sql.WriteString("(?, ?, CAST(? AS bigint), ?, ?, ?, CAST(? AS timestamptz), CAST(? AS timestamptz))")
		c := p.c
		args = append(args, c.Reference, c.TransactionID, c.Amount, c.Currency, c.PaymentMethod, c.Status, c.SettleAt, c.CreatedAt)
	}
	sql.WriteString(`) AS v(reference, transaction_id, amount, currency, payment_method, status, settle_at, created_at)
ON CONFLICT DO NOTHING RETURNING reference`)
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	err := b.insertRows(ctx, sql.String(), args, first)
	if err != nil {
		err = fmt.Errorf("simulator: write charges: %w", err)
	}
	for _, p := range batch {
		p.err = err
		close(p.done)
	}
}

// insertRows runs a batch's INSERT and marks the rows it inserted. Rows, not
// Scan: GORM's Scan renders the statement as text with every value
// inlined (a regexp over the batch) for a logger that is silent.
func (b *batcher) insertRows(ctx context.Context, sql string, args []any, first map[string]*pendingRow) error {
	rows, err := rawsql.Raw(b.db.WithContext(ctx), sql, args...).Rows()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var ref string
		if err := rows.Scan(&ref); err != nil {
			return err
		}
		if p := first[ref]; p != nil {
			p.inserted = true
		}
	}
	return rows.Err()
}
