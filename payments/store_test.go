package payments

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
)

// InsertNew's statement is written out; every field of a Payment must
// survive it on both engines, and a second payment for the same key must
// not be written.
func TestInsertNewStoresEveryField(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		s := NewStore(db)
		at := time.Date(2026, 12, 3, 10, 11, 12, 123456000, time.UTC)
		p := Payment{
			ID: "pay_every", MerchantID: "ten_every", IdempotencyKey: "key-every",
			Amount: 123456, Currency: "GHS", Status: StatusRequiresReview, Provider: "paystack",
			ProviderReference: "op-every", ProviderTransactionID: "txn_every",
			FailureCode: "code", FailureMessage: "message",
			Email: "ada@example.com", PaymentMethod: "AUTH_every", Description: "every field",
			Metadata: `{"order":"42"}`, Attempts: 3, RequestHash: "h-every",
			CreatedAt: at, UpdatedAt: at.Add(time.Second),
		}
		inserted, err := s.InsertNew(ctx, nil, &p)
		require.NoError(t, err)
		require.True(t, inserted)

		time.Sleep(2 * time.Millisecond) // SQLite's clock moves in milliseconds
		got, err := s.GetByKey(ctx, nil, "ten_every", "key-every")
		require.NoError(t, err)
		got.CreatedAt, got.UpdatedAt = got.CreatedAt.UTC(), got.UpdatedAt.UTC()
		require.Greater(t, got.AgeSeconds, 0.0, "GetByKey reads the age by the database's clock")
		got.AgeSeconds = 0
		require.Equal(t, p, got)
		_, err = s.GetByTransactionID(ctx, "ten_every", "paystack", "txn_every")
		require.ErrorIs(t, err, ErrNotFound, "found by its transaction id only once a refund of it records that")
		require.NoError(t, s.recordTransaction(ctx, db, "ten_every", "pay_every"))
		require.NoError(t, s.recordTransaction(ctx, db, "ten_every", "pay_every"), "recorded again: nothing changes")
		byTxn, err := s.GetByTransactionID(ctx, "ten_every", "paystack", "txn_every")
		require.NoError(t, err)
		require.Equal(t, "pay_every", byTxn.ID)

		again := p
		again.ID, again.Amount = "pay_other", 1
		inserted, err = s.InsertNew(ctx, nil, &again)
		require.NoError(t, err)
		require.False(t, inserted, "the key already has its payment")
		got, err = s.GetByKey(ctx, nil, "ten_every", "key-every")
		require.NoError(t, err)
		require.Equal(t, "pay_every", got.ID)
	})
}
