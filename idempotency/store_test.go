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

	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
)

// ager makes time pass for a test's keys: the store compares every time
// with the database's clock, so tests move the keys' times into the past
// instead of moving a clock forward.
type ager struct {
	t  testing.TB
	db *gorm.DB
}

// Advance ages every key of the test's database by d.
func (a ager) Advance(d time.Duration) {
	a.t.Helper()
	if d == 0 {
		return
	}
	dbtest.Age(a.t, a.db, d, "idempotency_keys", "locked_until", "created_at", "attempted_at", "looked_up_at", "completed_at")
}

// Now is the database's current time.
func (a ager) Now() time.Time {
	a.t.Helper()
	now, err := dbclock.Read(a.db)
	require.NoError(a.t, err)
	return now
}

const lease = 30 * time.Second

func newStore(t testing.TB, db *gorm.DB) (*idempotency.Store, ager) {
	return idempotency.NewStore(db), ager{t: t, db: db}
}

// takeOver is a settler's takeover (no request, no poll limit).
func takeOver(s *idempotency.Store, merchant, key string) (idempotency.Claim, bool, error) {
	return s.TakeOver(context.Background(), idempotency.TakeOverParams{MerchantID: merchant, Key: key, Lease: lease})
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
			s, _ := newStore(t, db)
			first := claim(t, s, "m1", "k")
			require.False(t, first.TakenOver)
			c, rec, err := s.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: "k", RequestHash: "other", Lease: lease})
			require.NoError(t, err)
			require.Empty(t, c.Token)
			require.NotNil(t, rec)
			require.Equal(t, idempotency.StatusInProgress, rec.Status)
			require.Equal(t, "h", rec.RequestHash)
			require.Equal(t, first.Token, rec.LockToken)
			require.False(t, rec.Lapsed, "the first claim's lease is live")
			require.NotNil(t, rec.AttemptedAt)
		})
	})

	t.Run("OtherMerchantSameKeyIsIndependent", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, _ := newStore(t, db)
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
			s, _ := newStore(t, db)
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
			s, clk := newStore(t, db)
			old := claim(t, s, "m1", "k")
			_, ok, err := takeOver(s, "m1", "k")
			require.NoError(t, err)
			require.False(t, ok, "lease still live")
			clk.Advance(lease)
			c, ok, err := takeOver(s, "m1", "k")
			require.NoError(t, err)
			require.True(t, ok)
			require.True(t, c.TakenOver)
			require.NotEqual(t, old.Token, c.Token)
			_, ok, err = takeOver(s, "m1", "k")
			require.NoError(t, err)
			require.False(t, ok, "the new owner's lease is live")
			_, ok, err = takeOver(s, "m2", "k")
			require.NoError(t, err)
			require.False(t, ok, "another merchant's key is not ours")
		})
	})

	t.Run("StaleTokenCannotCompleteAfterTakeOver", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, clk := newStore(t, db)
			old := claim(t, s, "m1", "k")
			clk.Advance(lease + time.Second)
			c, ok, err := takeOver(s, "m1", "k")
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
			s, _ := newStore(t, db)
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
			s, _ := newStore(t, db)
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
			s, _ := newStore(t, db)
			c := claim(t, s, "m1", "k")
			require.NoError(t, s.SetResource(ctx, nil, c, "pay_1"))
			require.NoError(t, s.LeaveInProgress(ctx, c))
			rec, err := s.Get(ctx, "m1", "k")
			require.NoError(t, err)
			require.Equal(t, idempotency.StatusInProgress, rec.Status)
			require.Equal(t, "pay_1", rec.ResourceID)
			// No waiting out the lease: the next retry takes over at once.
			n, ok, err := takeOver(s, "m1", "k")
			require.NoError(t, err)
			require.True(t, ok)
			require.True(t, n.TakenOver)
		})
	})

	t.Run("StaleListsLapsedOldKeysOldestFirst", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, clk := newStore(t, db)
			oldest := claim(t, s, "m2", "a")
			time.Sleep(2 * time.Millisecond) // SQLite's clock steps by milliseconds: keep the order strict
			claim(t, s, "m1", "b")
			done := claim(t, s, "m1", "done")
			require.NoError(t, s.Complete(ctx, nil, done, resp))
			retried := claim(t, s, "m1", "retried")
			require.NoError(t, s.LeaveInProgress(ctx, retried))
			claim(t, s, "m4", "settled")
			clk.Advance(3 * time.Hour)
			// A retry's takeover reports the last attempt's age; once it
			// re-sends the charge (MarkAttempt) the attempt is fresh
			// again, however old the key.
			c, ok, err := s.TakeOver(ctx, idempotency.TakeOverParams{MerchantID: "m1", Key: "retried", RequestHash: "h", Lease: lease})
			require.NoError(t, err)
			require.True(t, ok)
			require.Greater(t, c.SinceAttempt, 2*time.Hour)
			require.NoError(t, s.MarkAttempt(ctx, nil, c))
			require.NoError(t, s.LeaveInProgress(ctx, c))
			// A settler's takeover only looks up: the attempt stays old.
			c, ok, err = takeOver(s, "m4", "settled")
			require.NoError(t, err)
			require.True(t, ok)
			require.Greater(t, c.SinceAttempt, 2*time.Hour)
			require.NoError(t, s.LeaveInProgress(ctx, c))
			young := claim(t, s, "m1", "young") // lapsed, but attempted just now
			require.NoError(t, s.LeaveInProgress(ctx, young))
			claim(t, s, "m3", "leased") // lease live, also young
			// SQLite's clock has millisecond steps: let one pass, so the
			// leases just ended are strictly before the sweep's start.
			time.Sleep(5 * time.Millisecond)
			p := idempotency.StaleParams{StaleAfter: 90 * time.Minute, LapsedBefore: clk.Now(), Limit: 10}
			var got []idempotency.Record
			require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
				var err error
				got, err = s.Stale(ctx, tx, p)
				return err
			}))
			keys := []string{}
			for _, r := range got {
				keys = append(keys, r.MerchantID+"/"+r.Key)
			}
			require.Equal(t, []string{"m2/" + oldest.Key, "m1/b", "m4/settled"}, keys, "oldest attempt first; the retried and young keys are not stale")
			p.Limit = 1
			got, err = s.Stale(ctx, nil, p)
			require.NoError(t, err)
			require.Len(t, got, 1)
		})
	})

	t.Run("PurgeDoneDeletesOnlyOldDoneKeysInBatches", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
			s, clk := newStore(t, db)
			for i := range 7 {
				c := claim(t, s, fmt.Sprintf("m%d", i%3), fmt.Sprintf("old-%d", i))
				require.NoError(t, s.Complete(ctx, nil, c, resp))
			}
			stuck := claim(t, s, "m1", "stuck") // old but never finished
			clk.Advance(2 * time.Hour)
			young := claim(t, s, "m1", "young")
			require.NoError(t, s.Complete(ctx, nil, young, resp))
			n, err := s.PurgeDone(ctx, time.Hour, 3) // batches of 3, 3, 1
			require.NoError(t, err)
			require.EqualValues(t, 7, n)
			var left []idempotency.Record
			require.NoError(t, db.Order("key").Find(&left).Error)
			require.Len(t, left, 2)
			require.Equal(t, stuck.Key, left[0].Key)
			require.Equal(t, idempotency.StatusInProgress, left[0].Status)
			require.Equal(t, "young", left[1].Key)
			clk.Advance(48 * time.Hour)
			n, err = s.PurgeDone(ctx, time.Hour, 3)
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
		s, clk := newStore(t, db)
		claim(t, s, "m1", "k")
		clk.Advance(lease + time.Second)
		require.EqualValues(t, 1, winners(t, 20, func() (bool, error) {
			_, ok, err := takeOver(s, "m1", "k")
			return ok, err
		}))
	})

	t.Run("ClaimHasOneWinnerOf20", func(t *testing.T) {
		t.Parallel()
		db := dbtest.Postgres(t)
		s, _ := newStore(t, db)
		require.EqualValues(t, 1, winners(t, 20, func() (bool, error) {
			_, rec, err := s.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: "k", RequestHash: "h", Lease: lease})
			return rec == nil, err
		}))
	})

	t.Run("StaleSkipLockedGivesDisjointSets", func(t *testing.T) {
		t.Parallel()
		db := dbtest.Postgres(t)
		s, clk := newStore(t, db)
		for i := range 5 {
			claim(t, s, fmt.Sprintf("m%d", i%2), fmt.Sprintf("k%d", i))
		}
		clk.Advance(time.Hour)
		p := idempotency.StaleParams{StaleAfter: time.Minute, LapsedBefore: clk.Now(), Limit: 3}
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
		p.Limit = 10
		third, err := s.Stale(ctx, tx2, p)
		require.NoError(t, err)
		require.Len(t, third, 5, "tx2 already holds its 2 and now gets tx1's 3 back")
	})
}
