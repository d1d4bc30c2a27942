package idempotency_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/secretbox"
	"github.com/oncepay/gateway/idempotency"
)

// An answer that shows a secret is stored sealed, bound to its key, and
// replayed as sent; a store that cannot seal refuses to store it in the
// clear, and one that cannot open it says so instead of answering.
func TestSealedAnswers(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		box, err := secretbox.New(bytes.Repeat([]byte{1}, 32), "test/answers")
		require.NoError(t, err)
		s := idempotency.NewStore(db).SealWith(box)
		body := []byte(`{"id":"we_1","secret":"whsec_c2VjcmV0LXNpZ25pbmcta2V5LWJ5dGVz"}`)
		answer := idempotency.Response{Status: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: body, Sealed: true}
		for _, key := range []string{"k1", "k2"} {
			c, _, err := s.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: key, RequestHash: "h", Lease: lease})
			require.NoError(t, err)
			require.NoError(t, s.Complete(ctx, nil, c, answer))
		}

		rec, err := s.Get(ctx, "m1", "k1")
		require.NoError(t, err)
		require.Equal(t, body, rec.Body, "replayed byte for byte")
		var stored []byte
		require.NoError(t, db.Raw("SELECT response FROM idempotency_keys WHERE key = 'k1'").Row().Scan(&stored))
		require.NotContains(t, string(stored), "whsec_")
		require.NotContains(t, string(stored), "we_1")

		// Bound to its row: k1's blob under k2 does not open.
		require.NoError(t, db.Exec("UPDATE idempotency_keys SET response = ? WHERE key = 'k2'", stored).Error)
		_, err = s.Get(ctx, "m1", "k2")
		require.ErrorIs(t, err, secretbox.ErrOpen)
		require.ErrorIs(t, err, idempotency.ErrUnreadable)

		plain := idempotency.NewStore(db)
		_, err = plain.Get(ctx, "m1", "k1")
		require.ErrorIs(t, err, idempotency.ErrUnreadable, "no box: no answer, rather than the sealed bytes")
		c, _, err := plain.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: "k3", RequestHash: "h", Lease: lease})
		require.NoError(t, err)
		require.Error(t, plain.Complete(ctx, nil, c, answer), "never stored in the clear")
	})
}

// A retry whose key holds a sealed answer this gateway cannot open (its
// MASTER_KEY is not the one that sealed it) is a 500, not a 503 inviting
// retries that cannot help, and shows nothing of the stored answer.
func TestGuardAnswersAnUnreadableSealedAnswerWith500(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	ctx := context.Background()
	sealedBy := func(b byte) *idempotency.Store {
		box, err := secretbox.New(bytes.Repeat([]byte{b}, 32), "test/answers")
		require.NoError(t, err)
		return idempotency.NewStore(db).SealWith(box)
	}
	before := sealedBy(1)
	c, _, err := before.Claim(ctx, idempotency.ClaimParams{MerchantID: "m1", Key: "k1", RequestHash: "h", Lease: lease})
	require.NoError(t, err)
	require.NoError(t, before.Complete(ctx, nil, c, idempotency.Response{Status: 201, Body: []byte(`{"secret":"whsec_x"}`), Sealed: true}))

	h := newHarness(t, db, sealedBy(2), modeGuard)
	r := h.do(t, request{body: "complete", keys: key("k1")})
	require.Equal(t, http.StatusInternalServerError, r.status)
	require.Equal(t, "internal", r.code(t))
	require.Empty(t, r.header.Get("Retry-After"))
	require.NotContains(t, string(r.body), "whsec_")
	require.Zero(t, h.runs.Load())
}
