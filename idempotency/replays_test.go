package idempotency_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
)

// TestReplaysAnswerFromMemory: once this instance has read a done key, a
// retry of the same request is answered from memory — the same status,
// headers and bytes, marked replayed — with no statement sent; another
// request under the key is still 422, and another merchant's key of the
// same name is its own.
func TestReplaysAnswerFromMemory(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		replays := idempotency.NewReplays(100, time.Minute, 72*time.Hour)
		require.NotNil(t, replays)
		h := newHarness(t, db, idempotency.NewStore(db), modeGuard, func(c *idempotency.Config) { c.Replays = replays })
		req := request{merchant: "m1", method: "POST", path: "/v1/things", body: "complete", keys: []string{"k1"}}
		first := h.do(t, req)
		require.Equal(t, http.StatusCreated, first.status)
		require.Zero(t, replays.Len(), "the owner's answer is kept only once read back")

		second := h.do(t, req) // read from the database, and kept
		require.Equal(t, first.body, second.body)
		require.Equal(t, 1, replays.Len())

		var statements atomic.Int32
		count := func(*gorm.DB) { statements.Add(1) }
		for _, cb := range []interface {
			Register(string, func(*gorm.DB)) error
		}{db.Callback().Query().Before("*"), db.Callback().Raw().Before("*"), db.Callback().Row().Before("*"),
			db.Callback().Create().Before("*"), db.Callback().Update().Before("*"), db.Callback().Delete().Before("*")} {
			require.NoError(t, cb.Register("test:count", count))
		}
		third := h.do(t, req)
		require.Equal(t, http.StatusCreated, third.status)
		require.Equal(t, first.body, third.body, "byte for byte")
		require.Equal(t, first.header.Get("Location"), third.header.Get("Location"))
		require.Equal(t, first.header.Get("Content-Type"), third.header.Get("Content-Type"))
		require.Equal(t, "true", third.header.Get(idempotency.HeaderReplayed))
		mismatch := h.do(t, request{merchant: "m1", method: "POST", path: "/v1/things", body: "complete other", keys: []string{"k1"}})
		require.Equal(t, http.StatusUnprocessableEntity, mismatch.status)
		require.Equal(t, "idempotency_key_mismatch", mismatch.code(t))
		require.Zero(t, statements.Load(), "answered from memory")
		require.Equal(t, []string{idempotency.OutcomeClaimed, idempotency.OutcomeReplayed, idempotency.OutcomeReplayed,
			idempotency.OutcomeMismatch}, h.takeOutcomes())

		theirs := h.do(t, request{merchant: "m2", method: "POST", path: "/v1/things", body: "complete", keys: []string{"k1"}})
		require.Equal(t, http.StatusCreated, theirs.status)
		require.Empty(t, theirs.header.Get(idempotency.HeaderReplayed), "another merchant's key is its own")
		require.NotEqual(t, first.body, theirs.body)
		require.Equal(t, int32(2), h.runs.Load())
	})
}

// TestReplaysKeepOnlyWhatCannotChange: nothing is kept of a key in
// progress, of an answer that shows a secret, or of a key near its purge
// (by the database's clock); and nothing at all when KEY_TTL is too short
// to keep an answer clear of its purge.
func TestReplaysKeepOnlyWhatCannotChange(t *testing.T) {
	t.Parallel()
	require.Nil(t, idempotency.NewReplays(0, time.Minute, 72*time.Hour))
	require.Nil(t, idempotency.NewReplays(100, 0, 72*time.Hour))
	require.Nil(t, idempotency.NewReplays(100, time.Minute, 5*time.Minute), "KEY_TTL shorter than the TTL and the margin")

	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		s := idempotency.NewStore(db)
		done := func(key string) {
			c, _, err := s.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: key, RequestHash: "h", Lease: lease})
			require.NoError(t, err)
			require.NoError(t, s.Complete(ctx, nil, c, idempotency.Response{Status: 201,
				Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{}`)}))
		}
		done("fresh")
		done("old")
		// old was completed five minutes before its purge (KEY_TTL 72h).
		require.NoError(t, db.Exec("UPDATE idempotency_keys SET completed_at = ? WHERE key = 'old'",
			dbclock.Shift(db, "completed_at", -(71*time.Hour+55*time.Minute))).Error)
		_, _, err := s.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: "open", RequestHash: "h", Lease: lease})
		require.NoError(t, err)

		for key, kept := range map[string]bool{"fresh": true, "old": false, "open": false} {
			rec, err := s.Get(ctx, "m1", key)
			require.NoError(t, err)
			r := idempotency.NewReplays(10, time.Minute, 72*time.Hour)
			idempotency.AddReplay(r, rec)
			require.Equal(t, kept, r.Len() == 1, key)
		}
		rec, err := s.Get(ctx, "m1", "fresh")
		require.NoError(t, err)
		require.NotNil(t, rec.DoneAge)
		require.Less(t, *rec.DoneAge, 60.0, "completed just now, by the database's clock")
		sealed := *rec
		sealed.Sealed = true
		r := idempotency.NewReplays(10, time.Minute, 72*time.Hour)
		idempotency.AddReplay(r, &sealed)
		require.Zero(t, r.Len(), "an answer that shows a secret stays sealed in the database")
		large := *rec
		large.Body = make([]byte, 8<<10+1)
		idempotency.AddReplay(r, &large)
		require.Zero(t, r.Len(), "a large answer is left to the database")

		// Kept for the TTL, not a moment longer.
		short := idempotency.NewReplays(10, time.Second, 72*time.Hour)
		idempotency.AddReplay(short, rec)
		_, ok := idempotency.GetReplay(short, "m1", "fresh")
		require.True(t, ok)
		time.Sleep(1100 * time.Millisecond)
		_, ok = idempotency.GetReplay(short, "m1", "fresh")
		require.False(t, ok, "past its TTL")
		require.Zero(t, short.Len())
	})
}
