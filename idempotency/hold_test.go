package idempotency_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
)

func openPG(t *testing.T, url string) *gorm.DB {
	t.Helper()
	db, err := database.Open(url, database.Options{MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(db) })
	return db
}

// A held claim is invisible until persisted: a concurrent claimer waits on
// it, and a release (rollback) leaves nothing behind, not even a row.
func TestHeldClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	params := idempotency.ClaimParams{MerchantID: "m1", RequestHash: "h", Lease: lease, Hold: true}

	t.Run("ReleaseIsARollback", func(t *testing.T) {
		t.Parallel()
		s := idempotency.NewStore(dbtest.Postgres(t))
		p := params
		p.Key = "released"
		c, rec, err := s.Claim(ctx, p)
		require.NoError(t, err)
		require.Nil(t, rec)
		require.True(t, c.Held())
		require.NoError(t, s.Release(ctx, c))
		_, err = s.Get(ctx, "m1", "released")
		require.ErrorIs(t, err, idempotency.ErrNotFound)
	})

	t.Run("PersistCommitsTheOwnersWritesWithTheClaim", func(t *testing.T) {
		t.Parallel()
		db := dbtest.Postgres(t)
		s := idempotency.NewStore(db)
		p := params
		p.Key = "persisted"
		c, _, err := s.Claim(ctx, p)
		require.NoError(t, err)
		require.NoError(t, s.Persist(ctx, c, func(tx *gorm.DB) error {
			return tx.Exec("CREATE TABLE owner_rows (k TEXT); INSERT INTO owner_rows VALUES ('x')").Error
		}))
		require.False(t, c.Held())
		rec, err := s.Get(ctx, "m1", "persisted")
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusInProgress, rec.Status)
		var n int64
		require.NoError(t, db.Table("owner_rows").Count(&n).Error)
		require.Equal(t, int64(1), n)
	})

	t.Run("AWaiterGivesUpAsBusyAfterLockTimeout", func(t *testing.T) {
		t.Parallel()
		url := dbtest.PostgresURL(t) + "&lock_timeout=100ms"
		s := idempotency.NewStore(openPG(t, url))
		p := params
		p.Key = "busy"
		owner, _, err := s.Claim(ctx, p)
		require.NoError(t, err)
		require.True(t, owner.Held())

		_, _, err = s.Claim(ctx, p)
		require.ErrorIs(t, err, idempotency.ErrBusy, "the key is in use by an uncommitted claim")

		require.NoError(t, s.Persist(ctx, owner, nil))
		_, rec, err := s.Claim(ctx, p)
		require.NoError(t, err)
		require.NotNil(t, rec, "once persisted, the claim is an ordinary in-progress key")
	})
}

// A retry takes a lapsed key over only while the key still belongs to its
// own request: released and re-claimed by another body, it is not its key.
func TestTakeOverRequestChecksTheFingerprint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := idempotency.NewStore(dbtest.Postgres(t))
	_, _, err := s.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: "k", RequestHash: "body-b", Lease: -1})
	require.NoError(t, err)
	_, ok, err := s.TakeOver(ctx, idempotency.TakeOverParams{MerchantID: "m1", Key: "k", RequestHash: "body-a", Lease: lease})
	require.NoError(t, err)
	require.False(t, ok, "another request's key")
	c, ok, err := s.TakeOver(ctx, idempotency.TakeOverParams{MerchantID: "m1", Key: "k", RequestHash: "body-b", Lease: lease})
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, c.TakenOver)
}
