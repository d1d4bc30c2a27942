package events

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/secretbox"
)

// BenchmarkTransitionEnqueue measures the choice events.go explains: a
// transition writes its event row in its own statement (the completion's
// data-modifying CTE: one round trip, one commit), and a relay hands the
// rows to River later; against inserting the River job in the
// transition's own transaction (InsertManyTx), which needs a transaction
// around the statement: BEGIN, the event, River's insert, COMMIT. Both on
// PostgreSQL, a merchant with one live endpoint, 8 goroutines; report
// ns/op side by side (bench/README.md has the figures).
//
//	go test -run '^$' -bench TransitionEnqueue -benchtime 3s ./events/
func BenchmarkTransitionEnqueue(b *testing.B) {
	db := dbtest.Postgres(b)
	ctx := context.Background()
	box, err := secretbox.New(bytes.Repeat([]byte{7}, 32), "bench")
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(ctx, Config{DB: db, Box: box, Schedule: []time.Duration{time.Hour},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	if err := db.Exec(`INSERT INTO tenants (id, name, status, default_provider, created_at, updated_at)
VALUES ('m1', 'M', 'active', 'simulator', ?, ?)`, now, now).Error; err != nil {
		b.Fatal(err)
	}
	if err := db.Exec(`INSERT INTO webhook_endpoints (merchant_id, id, url, secret, created_at, updated_at)
VALUES ('m1', 'we_1', 'https://example.com/hook', ?, ?, ?)`, []byte("sealed"), now, now).Error; err != nil {
		b.Fatal(err)
	}
	em := NewEmitter(nil)
	var n atomic.Int64
	params := func() Params {
		obj := fmt.Sprintf("pay_%d", n.Add(1))
		return Params{MerchantID: "m1", Type: PaymentSucceeded, ObjectID: obj,
			Object: map[string]any{"id": obj, "object": "payment", "amount": 5000, "currency": "NGN", "status": "succeeded"}}
	}
	b.Run("outbox row in the transition's statement", func(b *testing.B) {
		b.SetParallelism(4) // × GOMAXPROCS goroutines
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := em.Emit(ctx, db, params()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("River job in the transition's transaction", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p := params()
				err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					if err := em.Emit(ctx, tx, p); err != nil {
						return err
					}
					_, err := s.insertJobs(ctx, tx, []riverParams{s.job("m1", "evt_"+p.ObjectID, "we_1")})
					return err
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
