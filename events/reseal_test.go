package events

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/secretbox"
)

// TestResealEndpointSecrets: after MASTER_KEY moved from K1 to K2, a pass
// with only K2 (MASTER_KEY_PREVIOUS unset) writes nothing, not even an old
// secret it cannot open (it still signs, with K1 as the previous key); a
// pass with K1 as the previous key moves the secret and the old secret to
// K2; a secret that opens under neither key is named and left.
func TestResealEndpointSecrets(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := t.Context()
		k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
		box := func(master []byte, previous ...[]byte) *secretbox.Box {
			b, err := secretbox.New(master, "test", previous...)
			require.NoError(t, err)
			return b
		}
		before, during, after := box(k1), box(k2, k1), box(k2)
		now := time.Now().UTC()
		require.NoError(t, db.Exec(`INSERT INTO tenants (id, name, status, default_provider, created_at, updated_at)
VALUES ('m1', 'M', 'active', 'simulator', ?, ?)`, now, now).Error)
		insert := func(id string, secret []byte) {
			require.NoError(t, db.Exec(`INSERT INTO webhook_endpoints (merchant_id, id, url, secret, created_at, updated_at)
VALUES ('m1', ?, 'https://example.com/hook', ?, ?, ?)`, id, secret, now, now).Error)
		}
		insert("we_1", before.Seal(secretAAD("m1", "we_1"), []byte("whsec_1")))
		insert("we_2", []byte("\x01not a sealed secret at all"))
		insert("we_3", during.Seal(secretAAD("m1", "we_3"), []byte("whsec_3")))
		st := NewStore(db)
		// we_1's secret rotated by an instance already on K2: the old
		// one, sealed under K1, signs beside the new one for a day.
		require.NoError(t, st.rotateSecret(ctx, nil, "m1", "we_1", during.Seal(secretAAD("m1", "we_1"), []byte("whsec_1b")), now.Add(time.Hour), now))
		read := func(id string) Endpoint {
			ep, err := st.endpoint(ctx, nil, "m1", id)
			require.NoError(t, err)
			return ep
		}
		rotated := read("we_1")

		n, unreadable, err := st.Reseal(ctx, after)
		require.NoError(t, err)
		require.Zero(t, n, "with K2 alone there is nothing it can move")
		require.Equal(t, []string{"m1/we_2"}, unreadable, "we_1's secret opens under K2; its old one is not named")
		require.Equal(t, rotated, read("we_1"), "an old secret it cannot open is left as it is")

		n, unreadable, err = st.Reseal(ctx, during)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, []string{"m1/we_2"}, unreadable)
		ep := read("we_1")
		for blob, want := range map[string]string{string(ep.Secret): "whsec_1b", string(ep.OldSecret): "whsec_1"} {
			got, err := after.Open(secretAAD("m1", "we_1"), []byte(blob))
			require.NoError(t, err, "opens under K2 alone")
			require.Equal(t, want, string(got))
		}
		got, err := after.Open(secretAAD("m1", "we_3"), read("we_3").Secret)
		require.NoError(t, err)
		require.Equal(t, "whsec_3", string(got))

		n, _, err = st.Reseal(ctx, during)
		require.NoError(t, err)
		require.Zero(t, n, "a second pass writes nothing")
	})
}

// TestRotateSecretKeepsAConcurrentChange: a rotation makes the secret the
// row has when its UPDATE runs the old one, not the one it read before: a
// re-seal (or another rotation) committed in between is not undone.
func TestRotateSecretKeepsAConcurrentChange(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	ctx := context.Background()
	now := time.Now().UTC()
	require.NoError(t, db.Exec(`INSERT INTO tenants (id, name, status, default_provider, created_at, updated_at)
VALUES ('m1', 'M', 'active', 'simulator', ?, ?)`, now, now).Error)
	require.NoError(t, db.Exec(`INSERT INTO webhook_endpoints (merchant_id, id, url, secret, created_at, updated_at)
VALUES ('m1', 'we_1', 'https://example.com/hook', 'S1', ?, ?)`, now, now).Error)
	st := NewStore(db)

	other := db.Begin() // the re-seal, holding the row
	require.NoError(t, other.Exec(`UPDATE webhook_endpoints SET secret = 'S1-resealed' WHERE merchant_id = 'm1' AND id = 'we_1'`).Error)
	done := make(chan error, 1)
	go func() {
		done <- db.Transaction(func(tx *gorm.DB) error {
			ep, err := st.endpoint(ctx, tx, "m1", "we_1")
			if err != nil {
				return err
			}
			if string(ep.Secret) != "S1" {
				t.Errorf("the rotation read %q; the test wants it to read before the re-seal commits", ep.Secret)
			}
			return st.rotateSecret(ctx, tx, "m1", "we_1", []byte("S2"), now.Add(time.Hour), now)
		})
	}()
	require.Eventually(t, func() bool {
		var waiting int64
		db.Raw(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE "webhook_endpoints"%'`).Scan(&waiting)
		return waiting == 1
	}, 10*time.Second, 10*time.Millisecond, "the rotation's UPDATE waits for the row")
	require.NoError(t, other.Commit().Error)
	require.NoError(t, <-done)
	ep, err := st.endpoint(ctx, nil, "m1", "we_1")
	require.NoError(t, err)
	require.Equal(t, "S2", string(ep.Secret))
	require.Equal(t, "S1-resealed", string(ep.OldSecret), "the re-seal is kept")
}
