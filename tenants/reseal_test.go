package tenants

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/providers"
)

// TestRotateMasterKey walks a MASTER_KEY rotation through the service on
// both engines: tenants made under the old key keep working with it as the
// previous key, a token request rehashes its client's secret, Reseal moves
// every provider account to the new key and counts the credentials still
// hashed under the old one, and once it reports none, the old key can go.
func TestRotateMasterKey(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := t.Context()
		newKey := bytes.Repeat([]byte{7}, 32)
		service := func(master, previous []byte) (*Service, *syncBuffer) {
			logs := &syncBuffer{}
			cfg := testConfig(newClock(), logs)
			cfg.MasterKey, cfg.MasterPrevious = master, previous
			svc, err := NewService(db, testRegistry(), cfg)
			require.NoError(t, err)
			return svc, logs
		}
		before, _ := service(testMasterKey, nil)
		a, credsA, err := before.Create(ctx, CreateParams{Name: "A", DefaultProvider: "paystack",
			Providers: map[string]providers.Secrets{"paystack": {"secret_key": "sk_a"}}})
		require.NoError(t, err)
		b, credsB, err := before.Create(ctx, CreateParams{Name: "B", DefaultProvider: "paystack",
			Providers: map[string]providers.Secrets{"paystack": {"secret_key": "sk_b"}, "stripe": {"secret_key": "sk_b2", "webhook_secret": "whsec_b"}}})
		require.NoError(t, err)
		revoked, _, err := before.Create(ctx, CreateParams{Name: "R", DefaultProvider: "simulator"})
		require.NoError(t, err)
		_, err = before.RotateCredentials(ctx, revoked.ID) // its first credential is revoked, its second live
		require.NoError(t, err)

		// A credential from before key ids were recorded: its key is
		// recorded at its next token, and its hash (the bare HMAC older
		// versions verify) is left as it is.
		require.NoError(t, db.Where("client_id = ?", credsA.ClientID).Delete(&credentialKeyRow{}).Error)
		require.Equal(t, 1, mustReseal(t, before).StaleHashes, "A's unknown key counts, B's and R's do not")
		legacy, err := getCredential(db, credsA.ClientID)
		require.NoError(t, err)
		_, err = before.IssueToken(ctx, credsA.ClientID, credsA.ClientSecret)
		require.NoError(t, err)
		recorded, err := getCredential(db, credsA.ClientID)
		require.NoError(t, err)
		require.Equal(t, before.keys.currentKey(), mustKey(t, db, credsA.ClientID))
		require.Equal(t, legacy.SecretHash, recorded.SecretHash)
		require.Equal(t, 0, mustReseal(t, before).StaleHashes)

		retired, _ := service(newKey, nil)
		_, err = retired.Provider(ctx, a.ID, "paystack")
		require.Error(t, err, "the new key alone cannot open what the old one sealed")

		during, logs := service(newKey, testMasterKey)
		p, err := during.Provider(ctx, a.ID, "paystack")
		require.NoError(t, err)
		require.Equal(t, "sk_a", p.(fakeProvider).secrets["secret_key"])

		_, err = during.IssueToken(ctx, credsA.ClientID, credsA.ClientSecret)
		require.NoError(t, err)
		require.Contains(t, logs.String(), "client secret rehashed under the current MASTER_KEY")
		row, err := getCredential(db, credsA.ClientID)
		require.NoError(t, err)
		require.Equal(t, during.keys.currentKey(), mustKey(t, db, credsA.ClientID))
		ok, key := during.keys.secretMatches(credsA.ClientSecret, row.SecretHash)
		require.True(t, ok)
		require.Equal(t, during.keys.currentKey(), key, "rehashed under the new key")
		_, err = during.IssueToken(ctx, credsA.ClientID, "sk_wrong")
		require.ErrorIs(t, err, ErrInvalidClient)

		rep, err := during.Reseal(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, rep.Accounts)
		require.Empty(t, rep.Unreadable)
		require.Equal(t, 2, rep.StaleHashes, "B's credential and R's live one; not A's (rehashed) nor R's revoked one")

		again, err := during.Reseal(ctx)
		require.NoError(t, err)
		require.Equal(t, 0, again.Accounts, "a second pass writes nothing")
		require.Equal(t, 2, again.StaleHashes)

		_, err = during.IssueToken(ctx, credsB.ClientID, credsB.ClientSecret)
		require.NoError(t, err)
		require.Equal(t, 1, mustReseal(t, during).StaleHashes)

		after, _ := service(newKey, nil)
		for _, c := range []struct{ id, provider, secret string }{{a.ID, "paystack", "sk_a"}, {b.ID, "paystack", "sk_b"}, {b.ID, "stripe", "sk_b2"}} {
			p, err := after.Provider(ctx, c.id, c.provider)
			require.NoError(t, err)
			require.Equal(t, c.secret, p.(fakeProvider).secrets["secret_key"])
		}
		for _, c := range []Credentials{credsA, credsB} {
			_, err := after.IssueToken(ctx, c.ClientID, c.ClientSecret)
			require.NoError(t, err)
		}

		// A row that opens under neither key is named and left alone.
		require.NoError(t, db.Model(&accountRow{}).Where("tenant_id = ? AND provider = ?", a.ID, "paystack").
			UpdateColumn("secrets", []byte("\x01garbage-garbage-garbage-garbage")).Error)
		rep, err = after.Reseal(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{a.ID + "/paystack"}, rep.Unreadable)
	})
}

func mustReseal(t *testing.T, s *Service) ResealReport {
	t.Helper()
	rep, err := s.Reseal(t.Context())
	require.NoError(t, err)
	return rep
}

func mustKey(t *testing.T, db *gorm.DB, clientID string) string {
	t.Helper()
	k, err := credentialKey(db, clientID)
	require.NoError(t, err)
	return k
}
