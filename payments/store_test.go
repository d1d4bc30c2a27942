package payments

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database"
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

// A provider's event that asks for a look while a sweeper's lookup of the
// same payment is in flight (its lease holding recheck_at) is newer news
// than that lookup: the lookup finding nothing must not end the recheck,
// or a late charge whose event was refused and never sent again stays
// unseen. And copies of an event only ever bring a look sooner.
func TestALookAskedForDuringARecheckOutlivesIt(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		s := NewStore(db)
		past := time.Now().UTC().Add(-time.Hour)
		released := func(id string, recheck *time.Time) { releasedFor(t, s, db, "ten_look", id, recheck) }
		recheckAt := func(id string) *time.Time {
			var p Payment
			require.NoError(t, db.Where("merchant_id = ? AND id = ?", "ten_look", id).Take(&p).Error)
			return p.RecheckAt
		}
		take := func(id string) Payment {
			p := takeOne(t, s, 30*time.Second)
			require.Equal(t, id, p.ID)
			return p
		}

		// The bookkeeping never moves updated_at, when the payment last
		// changed (a watched resolution's week counts from it).
		released("pay_kept", &past)
		updatedAt := func(id string) time.Time {
			var p Payment
			require.NoError(t, db.Where("merchant_id = ? AND id = ?", "ten_look", id).Take(&p).Error)
			return p.UpdatedAt.UTC()
		}
		before := updatedAt("pay_kept")
		kept := take("pay_kept")
		require.NoError(t, s.LookAgainBy(ctx, "ten_look", "pay_kept", StatusFailed, 1, 30*time.Second))
		ok, err := s.RecheckLater(ctx, kept, time.Hour)
		require.NoError(t, err)
		require.False(t, ok, "news came during the take")
		require.NoError(t, db.Model(&Payment{}).Where("id = ?", "pay_kept").UpdateColumn("recheck_at", past).Error)
		ok, err = s.RecheckLater(ctx, take("pay_kept"), time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, before, updatedAt("pay_kept"))
		require.NoError(t, db.Model(&Payment{}).Where("id = ?", "pay_kept").UpdateColumn("recheck_at", nil).Error)

		// Undisturbed, the lookup that found nothing ends the recheck.
		released("pay_quiet", &past)
		ok, err = s.RecheckLater(ctx, take("pay_quiet"), 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Nil(t, recheckAt("pay_quiet"))

		// An event asks for a look while the lookup is in flight, and
		// copies of it follow.
		released("pay_raced", &past)
		taken := take("pay_raced")
		lease := recheckAt("pay_raced")
		for range 3 {
			require.NoError(t, s.LookAgainBy(ctx, "ten_look", "pay_raced", StatusFailed, 1, 30*time.Second))
		}
		require.Equal(t, lease, recheckAt("pay_raced"), "due within after already: left as it is")
		var news int64
		require.NoError(t, db.Table("payment_recheck_news").Where("merchant_id = ?", "ten_look").Count(&news).Error)
		require.EqualValues(t, 1, news, "the news recorded once, whatever the copies")
		ok, err = s.RecheckLater(ctx, taken, 0)
		require.NoError(t, err)
		require.False(t, ok, "the lookup was made before the event's news")
		require.Equal(t, lease, recheckAt("pay_raced"), "looked at again when the lease ends")
		// Taken again (the lease ended): that lookup comes after the news,
		// and may end the recheck.
		require.NoError(t, db.Model(&Payment{}).Where("id = ?", "pay_raced").Update("recheck_at", past).Error)
		ok, err = s.RecheckLater(ctx, take("pay_raced"), 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Nil(t, recheckAt("pay_raced"))

		// Copies never put a look off; a far one is brought to within after.
		soon := time.Now().UTC().Add(5 * time.Second)
		released("pay_soon", &soon)
		require.NoError(t, s.LookAgainBy(ctx, "ten_look", "pay_soon", StatusFailed, 1, 30*time.Second))
		require.False(t, recheckAt("pay_soon").After(soon))
		far := time.Now().UTC().Add(time.Hour)
		released("pay_far", &far)
		require.NoError(t, s.LookAgainBy(ctx, "ten_look", "pay_far", StatusFailed, 1, 30*time.Second))
		require.True(t, recheckAt("pay_far").Before(time.Now().Add(time.Minute)))
		released("pay_none", nil)
		require.NoError(t, s.LookAgainBy(ctx, "ten_look", "pay_none", StatusFailed, 1, 30*time.Second))
		require.NotNil(t, recheckAt("pay_none"))
	})
}

// A refund recheck's outcome is written while the recheck is still the
// one DueRefundRechecks took, compared as the instant it is: PostgreSQL
// writes a timestamp's text in the session's TimeZone and DateStyle, and
// a connection set otherwise (a role's or database's setting, a pooler)
// must still recognise the value, or the recheck would never end.
func TestARefundRecheckIsRecognisedInAnotherTimeZone(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresWith(t, database.Options{MaxOpenConns: 1})
	ctx := context.Background()
	s := NewStore(db)
	require.NoError(t, db.Exec("SET TIME ZONE 'UTC'").Error)
	require.NoError(t, db.Exec("SET DateStyle = 'SQL, DMY'").Error)
	r := Refund{MerchantID: "ten_tz", ID: "re_tz", PaymentID: "pay_tz", IdempotencyKey: "k", Amount: 100, Currency: "NGN",
		Status: RefundFailed, Metadata: "{}", Provider: "paystack", ProviderReference: "ref", FailureCode: FailureNotProcessed, Attempts: 1}
	require.NoError(t, s.insertRefund(ctx, nil, &r))
	require.NoError(t, s.scheduleRefundRecheck(ctx, nil, r.MerchantID, r.ID, -time.Minute))
	due, err := s.DueRefundRechecks(ctx, 10, 30*time.Second)
	require.NoError(t, err)
	require.Len(t, due, 1)
	require.NotEmpty(t, due[0].recheckTaken)

	require.NoError(t, db.Exec("SET TIME ZONE 'Africa/Lagos'").Error)
	require.NoError(t, db.Exec("SET DateStyle = 'ISO, MDY'").Error)
	require.NoError(t, s.refundRecheckLater(ctx, r.MerchantID, r.ID, r.Attempts, 0, due[0].recheckTaken))
	var left int64
	require.NoError(t, db.Table("refund_rechecks").Where("refund_id = ?", r.ID).Count(&left).Error)
	require.Zero(t, left, "the recheck the sweeper took, ended")
}

// A sweeper's "nothing found" ends only its own take of the recheck: once
// news brought the recheck forward and another sweeper took it, the first
// one's older lookup must not end the second's (a lease longer than the
// news's 30 s, IDEMPOTENCY_LEASE=60s).
func TestAnOlderTakeDoesNotEndANewerOne(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		s := NewStore(db)
		past := time.Now().UTC().Add(-time.Hour)
		releasedFor(t, s, db, "ten_old", "pay_old", &past)
		take := func() Payment { return takeOne(t, s, time.Minute) }
		a := take()
		require.NoError(t, s.LookAgainBy(ctx, "ten_old", "pay_old", StatusFailed, 1, 30*time.Second))
		require.NoError(t, db.Model(&Payment{}).Where("id = ?", "pay_old").Update("recheck_at", past).Error) // 30 s pass
		b := take()
		ok, err := s.RecheckLater(ctx, a, 0)
		require.NoError(t, err)
		require.False(t, ok, "the first take's lookup predates the news and the second take")
		ok, err = s.RecheckLater(ctx, b, 10*time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "the second take's recheck is still there")
	})
}

// News and a sweeper's "nothing found" at the same moment: the news is
// recorded under the payment's row lock, so the sweeper's lookLater either
// sees it (and leaves the recheck) or ends the recheck first — and then
// the news schedules a look of its own. Never both missed.
func TestNewsRacingARechecksEndIsNeverLost(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		s := NewStore(db)
		past := time.Now().UTC().Add(-time.Hour)
		releasedFor(t, s, db, "ten_race", "pay_race", &past)
		taken := takeOne(t, s, 30*time.Second)
		var once sync.Once
		ended := make(chan error, 1)
		require.NoError(t, db.Callback().Raw().Before("gorm:raw").Register("news_race", func(tx *gorm.DB) {
			if strings.Contains(tx.Statement.SQL.String(), "INSERT INTO payment_recheck_news") {
				once.Do(func() {
					// The sweeper's end, while the news is being recorded.
					go func() { _, err := s.RecheckLater(ctx, taken, 0); ended <- err }()
					time.Sleep(100 * time.Millisecond)
				})
			}
		}))
		require.NoError(t, s.LookAgainBy(ctx, "ten_race", "pay_race", StatusFailed, 1, 30*time.Second))
		require.NoError(t, <-ended)
		var p Payment
		require.NoError(t, db.Where("id = ?", "pay_race").Take(&p).Error)
		require.NotNil(t, p.RecheckAt, "the event asked for a look: one is scheduled")
	})
}

// releasedFor writes a payment released as never charged, its recheck at
// recheck.
func releasedFor(t *testing.T, s *Store, db *gorm.DB, merchant, id string, recheck *time.Time) {
	t.Helper()
	past := time.Now().UTC().Add(-time.Hour)
	p := Payment{
		ID: id, MerchantID: merchant, IdempotencyKey: "key-" + id,
		Amount: 500, Currency: "NGN", Status: StatusFailed, Provider: "paystack",
		ProviderReference: "ref-" + id, FailureCode: FailureNotProcessed,
		Metadata: "{}", Attempts: 1, RequestHash: "h", CreatedAt: past, UpdatedAt: past,
	}
	inserted, err := s.InsertNew(context.Background(), nil, &p)
	require.NoError(t, err)
	require.True(t, inserted)
	require.NoError(t, db.Model(&Payment{}).Where("id = ?", id).Update("recheck_at", recheck).Error)
}

// takeOne has a sweeper take the one recheck due, with lease.
func takeOne(t *testing.T, s *Store, lease time.Duration) Payment {
	t.Helper()
	due, err := s.DueRechecks(context.Background(), 10, lease)
	require.NoError(t, err)
	require.Len(t, due, 1)
	return due[0]
}
