package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

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

// A held claim writes nothing until the owner's first write: a release
// leaves nothing behind, not even a row, and of two held claims of one key
// the first to persist owns it.
func TestHeldClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	params := idempotency.ClaimParams{MerchantID: "m1", RequestHash: "h", Lease: lease, Hold: true}

	t.Run("ReleaseWritesNothing", func(t *testing.T) {
		t.Parallel()
		s := idempotency.NewStore(dbtest.Postgres(t))
		p := params
		p.Key = "released"
		c, rec, err := s.Claim(ctx, p)
		require.NoError(t, err)
		require.Nil(t, rec)
		require.True(t, c.Held())
		_, err = s.Get(ctx, "m1", "released")
		require.ErrorIs(t, err, idempotency.ErrNotFound, "a held claim is not in the database yet")
		require.NoError(t, s.Release(ctx, c))
		require.False(t, c.Held())
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

	t.Run("AFailedFirstWriteLeavesNoClaim", func(t *testing.T) {
		t.Parallel()
		s := idempotency.NewStore(dbtest.Postgres(t))
		p := params
		p.Key = "failed"
		c, _, err := s.Claim(ctx, p)
		require.NoError(t, err)
		require.Error(t, s.Persist(ctx, c, func(tx *gorm.DB) error { return tx.Exec("SELECT 1/0").Error }))
		_, err = s.Get(ctx, "m1", "failed")
		require.ErrorIs(t, err, idempotency.ErrNotFound, "the claim rolled back with the owner's write")
	})

	t.Run("TheFirstToPersistOwnsTheKey", func(t *testing.T) {
		t.Parallel()
		db := dbtest.Postgres(t)
		s := idempotency.NewStore(db)
		p := params
		p.Key = "raced"
		first, _, err := s.Claim(ctx, p)
		require.NoError(t, err)
		second, _, err := s.Claim(ctx, p)
		require.NoError(t, err, "both found the key free")
		require.NoError(t, s.Persist(ctx, first, nil))
		ran := false
		err = s.Persist(ctx, second, func(*gorm.DB) error { ran = true; return nil })
		require.ErrorIs(t, err, idempotency.ErrLostClaim)
		require.False(t, ran, "the loser's writes never run")
		rec, err := s.Get(ctx, "m1", "raced")
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusInProgress, rec.Status)
		require.NoError(t, s.Complete(ctx, nil, first, idempotency.Response{Status: 201, Body: []byte("{}")}), "the winner owns it")
		require.ErrorIs(t, s.Complete(ctx, nil, second, idempotency.Response{Status: 201, Body: []byte("{}")}), idempotency.ErrLostClaim)
	})

	t.Run("AClaimWithoutHoldCommitsAtOnce", func(t *testing.T) {
		t.Parallel()
		s := idempotency.NewStore(dbtest.Postgres(t))
		p := params
		p.Key, p.Hold = "eager", false
		c, rec, err := s.Claim(ctx, p)
		require.NoError(t, err)
		require.Nil(t, rec)
		require.False(t, c.Held())
		_, rec, err = s.Claim(ctx, p)
		require.NoError(t, err)
		require.NotNil(t, rec, "the second claimer finds the first's key")
	})
}

// PersistWith claims a key and writes the owner's first row in one
// statement; it writes nothing when the key is taken, and only the claim
// when the owner's row exists (the owner then reads it, through Persist).
func TestPersistWith(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Postgres(t)
	require.NoError(t, db.Exec("CREATE TABLE owner_rows (k TEXT PRIMARY KEY, at TIMESTAMPTZ NOT NULL)").Error)
	s := idempotency.NewStore(db)
	claim := func(key string) idempotency.Claim {
		c, _, err := s.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: key, RequestHash: "h", Lease: lease, Hold: true})
		require.NoError(t, err)
		require.True(t, c.Held())
		return c
	}
	insert := func(row string) clause.Expr {
		return clause.Expr{SQL: "INSERT INTO owner_rows (k, at) SELECT CAST(? AS text), statement_timestamp() FROM claim ON CONFLICT DO NOTHING RETURNING k", Vars: []any{row}}
	}
	keyStored := func(key string) bool {
		_, err := s.Get(ctx, "m1", key)
		if errors.Is(err, idempotency.ErrNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	rowCount := func(row string) int64 {
		var n int64
		require.NoError(t, db.Table("owner_rows").Where("k = ?", row).Count(&n).Error)
		return n
	}

	// A new key and a new row: both, at once.
	c := claim("new")
	var got any
	ok, err := s.PersistWith(ctx, c, insert("new"), &got)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "new", got)
	require.False(t, c.Held(), "durable")
	require.True(t, keyStored("new"))
	require.EqualValues(t, 1, rowCount("new"))

	// The key is taken: nothing written.
	c = claim("new")
	_, err = s.PersistWith(ctx, c, insert("other"), &got)
	require.ErrorIs(t, err, idempotency.ErrLostClaim)
	require.False(t, c.Held())
	require.Zero(t, rowCount("other"), "no owner row without the claim")

	// The owner's row exists (a released key, retried): the claim is made
	// and durable, the row left for the owner to read.
	require.NoError(t, db.Exec("INSERT INTO owner_rows VALUES ('released', now())").Error)
	c = claim("released")
	ok, err = s.PersistWith(ctx, c, insert("released"), &got)
	require.NoError(t, err)
	require.False(t, ok)
	require.Nil(t, got)
	require.False(t, c.Held())
	require.True(t, keyStored("released"))
	require.NoError(t, s.Persist(ctx, c, func(tx *gorm.DB) error { return nil }), "the owner goes on on its durable claim")

	// Not held: Persist's job.
	_, err = s.PersistWith(ctx, c, insert("x"), &got)
	require.ErrorIs(t, err, errors.ErrUnsupported)
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

// Persist on a claim that committed before (a takeover, or a claim whose
// owner row existed) runs fn only while the claim still owns the key: a
// request that stalled past its lease, whose key the sweeper took over
// (and may have released), writes nothing.
func TestPersistOfADurableClaimChecksOwnership(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		s := idempotency.NewStore(db)
		_, _, err := s.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: "k", RequestHash: "h", Lease: -time.Minute})
		require.NoError(t, err)
		stalled, ok, err := s.TakeOver(ctx, idempotency.TakeOverParams{MerchantID: "m1", Key: "k", RequestHash: "h", Lease: -time.Minute})
		require.NoError(t, err)
		require.True(t, ok)
		ran := 0
		fn := func(tx *gorm.DB) error { ran++; return nil }
		require.NoError(t, s.Persist(ctx, stalled, fn), "its own key")
		require.Equal(t, 1, ran)

		// Its lease lapsed; the sweeper takes the key over.
		sweeper, ok, err := s.TakeOver(ctx, idempotency.TakeOverParams{MerchantID: "m1", Key: "k", Lease: lease})
		require.NoError(t, err)
		require.True(t, ok)
		require.ErrorIs(t, s.Persist(ctx, stalled, fn), idempotency.ErrLostClaim)
		require.Equal(t, 1, ran, "fn did not run")
		// And releases it.
		require.NoError(t, s.Release(ctx, sweeper))
		require.ErrorIs(t, s.Persist(ctx, stalled, fn), idempotency.ErrLostClaim)
		require.Equal(t, 1, ran, "fn did not run")
	})
}
