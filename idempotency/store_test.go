package idempotency_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
)

// fakeClock is a test clock that moves only when told, plus one microsecond
// per reading so that successive instants are strictly ordered.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Microsecond)
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const lease = 30 * time.Second

func newStore(db *gorm.DB) (*idempotency.Store, *fakeClock) {
	clk := newClock()
	return idempotency.NewStore(db).WithClock(clk.Now), clk
}

func claim(t *testing.T, s *idempotency.Store, merchant, key string) idempotency.Claim {
	t.Helper()
	c, rec, err := s.Claim(context.Background(), idempotency.ClaimParams{MerchantID: merchant, Key: key, RequestHash: "h", Lease: lease})
	require.NoError(t, err)
	require.Nil(t, rec, "expected to own %s/%s", merchant, key)
	require.NotEmpty(t, c.Token)
	return c
}

func TestStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	resp := idempotency.Response{
		Status:     201,
		Header:     map[string]string{"Content-Type": "application/json", "Location": "/v1/payments/pay_1"},
		Body:       []byte("{\"id\":\"pay_1\"}\n\x00\xff"),
		ResourceID: "pay_1",
	}

	t.Run("SecondClaimGetsTheRecord", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, _ := newStore(db)
			first := claim(t, s, "m1", "k")
			require.False(t, first.TakenOver)
			c, rec, err := s.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: "k", RequestHash: "other", Lease: lease})
			require.NoError(t, err)
			require.Empty(t, c.Token)
			require.NotNil(t, rec)
			require.Equal(t, idempotency.StatusInProgress, rec.Status)
			require.Equal(t, "h", rec.RequestHash)
			require.Equal(t, first.Token, rec.LockToken)
			require.True(t, rec.LockedUntil.Equal(first.LockedUntil), "%v != %v", rec.LockedUntil, first.LockedUntil)
		})
	})

	t.Run("OtherMerchantSameKeyIsIndependent", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, _ := newStore(db)
			a := claim(t, s, "m1", "k")
			b := claim(t, s, "m2", "k")
			require.NotEqual(t, a.Token, b.Token)
			require.NoError(t, s.Complete(ctx, nil, a, resp))
			rec, err := s.Get(ctx, "m2", "k")
			require.NoError(t, err)
			require.Equal(t, idempotency.StatusInProgress, rec.Status)
			_, err = s.Get(ctx, "m3", "k")
			require.ErrorIs(t, err, idempotency.ErrNotFound)
		})
	})

	t.Run("CompleteStoresTheExactAnswer", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, _ := newStore(db)
			c := claim(t, s, "m1", "k")
			require.NoError(t, s.Complete(ctx, nil, c, resp))
			rec, err := s.Get(ctx, "m1", "k")
			require.NoError(t, err)
			require.Equal(t, idempotency.StatusDone, rec.Status)
			require.NotNil(t, rec.CompletedAt)
			require.Equal(t, resp, rec.Response())
			var raw string
			require.NoError(t, db.Raw("SELECT response_headers FROM idempotency_keys WHERE merchant_id = ? AND key = ?", "m1", "k").Scan(&raw).Error)
			require.JSONEq(t, `{"Content-Type":"application/json","Location":"/v1/payments/pay_1"}`, raw, "a JSON object of name -> value")
			// Done is terminal: the claim cannot be used again.
			require.ErrorIs(t, s.Complete(ctx, nil, c, resp), idempotency.ErrLostClaim)
			require.ErrorIs(t, s.Release(ctx, c), idempotency.ErrLostClaim)
		})
	})

	t.Run("TakeOverOnlyAfterLeaseLapses", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, clk := newStore(db)
			old := claim(t, s, "m1", "k")
			_, ok, err := s.TakeOver(ctx, "m1", "k", lease)
			require.NoError(t, err)
			require.False(t, ok, "lease still live")
			clk.Advance(lease)
			c, ok, err := s.TakeOver(ctx, "m1", "k", lease)
			require.NoError(t, err)
			require.True(t, ok)
			require.True(t, c.TakenOver)
			require.NotEqual(t, old.Token, c.Token)
			_, ok, err = s.TakeOver(ctx, "m1", "k", lease)
			require.NoError(t, err)
			require.False(t, ok, "the new owner's lease is live")
			_, ok, err = s.TakeOver(ctx, "m2", "k", lease)
			require.NoError(t, err)
			require.False(t, ok, "another merchant's key is not ours")
		})
	})

	t.Run("StaleTokenCannotCompleteAfterTakeOver", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, clk := newStore(db)
			old := claim(t, s, "m1", "k")
			clk.Advance(lease + time.Second)
			c, ok, err := s.TakeOver(ctx, "m1", "k", lease)
			require.NoError(t, err)
			require.True(t, ok)
			before, err := s.Get(ctx, "m1", "k")
			require.NoError(t, err)
			require.ErrorIs(t, s.Complete(ctx, nil, old, resp), idempotency.ErrLostClaim)
			require.ErrorIs(t, s.Release(ctx, old), idempotency.ErrLostClaim)
			require.ErrorIs(t, s.LeaveInProgress(ctx, old), idempotency.ErrLostClaim)
			require.ErrorIs(t, s.SetResource(ctx, nil, old, "pay_x"), idempotency.ErrLostClaim)
			after, err := s.Get(ctx, "m1", "k")
			require.NoError(t, err)
			require.Equal(t, before, after, "nothing changed")
			require.NoError(t, s.Complete(ctx, nil, c, resp))
		})
	})

	t.Run("CompleteInRolledBackTxLeavesKeyInProgress", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, _ := newStore(db)
			c := claim(t, s, "m1", "k")
			err := db.Transaction(func(tx *gorm.DB) error {
				require.NoError(t, s.Complete(ctx, tx, c, resp))
				return fmt.Errorf("the payment's update failed")
			})
			require.Error(t, err)
			rec, err := s.Get(ctx, "m1", "k")
			require.NoError(t, err)
			require.Equal(t, idempotency.StatusInProgress, rec.Status)
			require.Empty(t, rec.Body)
			require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
				return s.Complete(ctx, tx, c, resp)
			}))
			rec, err = s.Get(ctx, "m1", "k")
			require.NoError(t, err)
			require.Equal(t, idempotency.StatusDone, rec.Status)
		})
	})

	t.Run("ReleaseLetsTheKeyBeClaimedAgain", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, _ := newStore(db)
			c := claim(t, s, "m1", "k")
			require.NoError(t, s.Release(ctx, c))
			_, err := s.Get(ctx, "m1", "k")
			require.ErrorIs(t, err, idempotency.ErrNotFound)
			require.ErrorIs(t, s.Release(ctx, c), idempotency.ErrLostClaim)
			again := claim(t, s, "m1", "k")
			require.NotEqual(t, c.Token, again.Token)
		})
	})

	t.Run("LeaveInProgressEndsTheLeaseNow", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, _ := newStore(db)
			c := claim(t, s, "m1", "k")
			require.NoError(t, s.SetResource(ctx, nil, c, "pay_1"))
			require.NoError(t, s.LeaveInProgress(ctx, c))
			rec, err := s.Get(ctx, "m1", "k")
			require.NoError(t, err)
			require.Equal(t, idempotency.StatusInProgress, rec.Status)
			require.Equal(t, "pay_1", rec.ResourceID)
			// No waiting out the lease: the next retry takes over at once.
			n, ok, err := s.TakeOver(ctx, "m1", "k", lease)
			require.NoError(t, err)
			require.True(t, ok)
			require.True(t, n.TakenOver)
		})
	})

	t.Run("StaleListsLapsedOldKeysOldestFirst", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, clk := newStore(db)
			oldest := claim(t, s, "m2", "a")
			claim(t, s, "m1", "b")
			done := claim(t, s, "m1", "done")
			require.NoError(t, s.Complete(ctx, nil, done, resp))
			clk.Advance(time.Minute)
			cutoff := clk.Now()
			claim(t, s, "m1", "young") // created after the cutoff
			clk.Advance(lease + time.Second)
			claim(t, s, "m3", "leased") // lease live, also young
			var got []idempotency.Record
			require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
				var err error
				got, err = s.Stale(ctx, tx, idempotency.StaleParams{OlderThan: cutoff, Limit: 10})
				return err
			}))
			require.Len(t, got, 2)
			require.Equal(t, oldest.Key, got[0].Key)
			require.Equal(t, "m2", got[0].MerchantID)
			require.Equal(t, "b", got[1].Key)
			got, err := s.Stale(ctx, nil, idempotency.StaleParams{OlderThan: cutoff, Limit: 1})
			require.NoError(t, err)
			require.Len(t, got, 1)
		})
	})

	t.Run("PurgeDoneDeletesOnlyOldDoneKeysInBatches", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, clk := newStore(db)
			for i := range 7 {
				c := claim(t, s, fmt.Sprintf("m%d", i%3), fmt.Sprintf("old-%d", i))
				require.NoError(t, s.Complete(ctx, nil, c, resp))
			}
			stuck := claim(t, s, "m1", "stuck") // old but never finished
			clk.Advance(time.Hour)
			cutoff := clk.Now()
			young := claim(t, s, "m1", "young")
			require.NoError(t, s.Complete(ctx, nil, young, resp))
			n, err := s.PurgeDone(ctx, cutoff, 3) // batches of 3, 3, 1
			require.NoError(t, err)
			require.EqualValues(t, 7, n)
			var left []idempotency.Record
			require.NoError(t, db.Order("key").Find(&left).Error)
			require.Len(t, left, 2)
			require.Equal(t, stuck.Key, left[0].Key)
			require.Equal(t, idempotency.StatusInProgress, left[0].Status)
			require.Equal(t, "young", left[1].Key)
			n, err = s.PurgeDone(ctx, clk.Now().Add(24*time.Hour), 3)
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "the in-progress key survives any cutoff")
		})
	})
}

// winners runs try on n goroutines released at once and counts the wins.
func winners(t *testing.T, n int, try func() (bool, error)) int32 {
	t.Helper()
	var wins atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			ok, err := try()
			if err != nil {
				t.Error(err)
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	return wins.Load()
}

// Races need several connections, so they run on PostgreSQL only (SQLite
// is a single-writer development store).
func TestStorePostgresRaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("TakeOverHasOneWinnerOf20", func(t *testing.T) {
		t.Parallel()
		db := dbtest.Postgres(t)
		s, clk := newStore(db)
		claim(t, s, "m1", "k")
		clk.Advance(lease + time.Second)
		require.EqualValues(t, 1, winners(t, 20, func() (bool, error) {
			_, ok, err := s.TakeOver(ctx, "m1", "k", lease)
			return ok, err
		}))
	})

	t.Run("ClaimHasOneWinnerOf20", func(t *testing.T) {
		t.Parallel()
		db := dbtest.Postgres(t)
		s, _ := newStore(db)
		require.EqualValues(t, 1, winners(t, 20, func() (bool, error) {
			_, rec, err := s.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: "k", RequestHash: "h", Lease: lease})
			return rec == nil, err
		}))
	})

	t.Run("StaleSkipLockedGivesDisjointSets", func(t *testing.T) {
		t.Parallel()
		db := dbtest.Postgres(t)
		s, clk := newStore(db)
		for i := range 5 {
			claim(t, s, fmt.Sprintf("m%d", i%2), fmt.Sprintf("k%d", i))
		}
		clk.Advance(time.Hour)
		p := idempotency.StaleParams{OlderThan: clk.Now(), Limit: 3}
		tx1 := db.Begin()
		defer tx1.Rollback()
		tx2 := db.Begin()
		defer tx2.Rollback()
		first, err := s.Stale(ctx, tx1, p)
		require.NoError(t, err)
		require.Len(t, first, 3)
		second, err := s.Stale(ctx, tx2, p) // does not wait for tx1
		require.NoError(t, err)
		require.Len(t, second, 2)
		seen := map[string]bool{}
		for _, r := range append(first, second...) {
			id := r.MerchantID + "/" + r.Key
			require.False(t, seen[id], "%s handed to both sweepers", id)
			seen[id] = true
		}
		require.Len(t, seen, 5)
		require.NoError(t, tx1.Rollback().Error)
		third, err := s.Stale(ctx, tx2, idempotency.StaleParams{OlderThan: clk.Now(), Limit: 10})
		require.NoError(t, err)
		require.Len(t, third, 5, "tx2 already holds its 2 and now gets tx1's 3 back")
	})
}
