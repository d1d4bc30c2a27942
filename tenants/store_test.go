package tenants

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/providers"
)

// TestStoreOnBothEngines drives every store function through the service on
// PostgreSQL and SQLite.
func TestStoreOnBothEngines(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		c := newClock()
		logs := &syncBuffer{}
		svc, err := NewService(db, testRegistry(), testConfig(c, logs))
		require.NoError(t, err)
		ctx := t.Context()

		t.Run("CreateGetAndSeal", func(t *testing.T) {
			tn, creds, err := svc.Create(ctx, CreateParams{Name: "Ada", DefaultProvider: "paystack",
				Providers: map[string]providers.Secrets{"paystack": {"secret_key": "sk_test_plain"}}})
			require.NoError(t, err)
			got, err := svc.Get(ctx, tn.ID)
			require.NoError(t, err)
			require.Equal(t, tn, got)
			require.Equal(t, []string{"paystack", "simulator"}, got.Providers)

			row, err := getAccount(db, tn.ID, "paystack")
			require.NoError(t, err)
			require.False(t, bytes.Contains(row.Secrets, []byte("sk_test_plain")))
			p, err := svc.Provider(ctx, tn.ID, "paystack")
			require.NoError(t, err)
			require.Equal(t, "sk_test_plain", p.(fakeProvider).secrets["secret_key"])

			tok, err := svc.IssueToken(ctx, creds.ClientID, creds.ClientSecret)
			require.NoError(t, err)
			me, err := svc.Authenticate(ctx, tok.AccessToken)
			require.NoError(t, err)
			require.Equal(t, tn.ID, me.ID)
		})

		t.Run("GetMissingIsNotFound", func(t *testing.T) {
			_, err := svc.Get(ctx, "ten_missing")
			require.ErrorIs(t, err, ErrNotFound)
		})

		t.Run("UpdateUpsertsAndDeletesAccounts", func(t *testing.T) {
			tn, _, err := svc.Create(ctx, CreateParams{Name: "Bob", DefaultProvider: "simulator",
				Providers: map[string]providers.Secrets{"paystack": {"secret_key": "one"}}})
			require.NoError(t, err)
			c.Advance(time.Second)
			up, err := svc.Update(ctx, tn.ID, UpdateParams{Providers: map[string]providers.Secrets{"paystack": {"secret_key": "two"}}})
			require.NoError(t, err)
			require.True(t, up.UpdatedAt.After(tn.UpdatedAt))
			p, err := svc.Provider(ctx, tn.ID, "paystack")
			require.NoError(t, err)
			require.Equal(t, "two", p.(fakeProvider).secrets["secret_key"])
			suspended := StatusSuspended
			up, err = svc.Update(ctx, tn.ID, UpdateParams{Status: &suspended, Providers: map[string]providers.Secrets{"paystack": nil}})
			require.NoError(t, err)
			require.Equal(t, StatusSuspended, up.Status)
			require.Equal(t, []string{"simulator"}, up.Providers)
			_, err = svc.Provider(ctx, tn.ID, "paystack")
			require.ErrorIs(t, err, ErrProviderNotConfigured)
			_, err = svc.Update(ctx, "ten_missing", UpdateParams{Status: &suspended})
			require.ErrorIs(t, err, ErrNotFound)
		})

		t.Run("RotateRevokes", func(t *testing.T) {
			tn, creds, err := svc.Create(ctx, CreateParams{Name: "Cy", DefaultProvider: "simulator"})
			require.NoError(t, err)
			next, err := svc.RotateCredentials(ctx, tn.ID)
			require.NoError(t, err)
			_, err = svc.IssueToken(ctx, creds.ClientID, creds.ClientSecret)
			require.ErrorIs(t, err, ErrInvalidClient)
			_, err = svc.IssueToken(ctx, next.ClientID, next.ClientSecret)
			require.NoError(t, err)
			old, err := getCredential(db, creds.ClientID)
			require.NoError(t, err)
			require.NotNil(t, old.RevokedAt)
			_, err = svc.RotateCredentials(ctx, "ten_missing")
			require.ErrorIs(t, err, ErrNotFound)
		})

		t.Run("KeysetPaging", func(t *testing.T) {
			// A fresh service on the same DB counts everything created above too.
			var want []string
			for i := range 7 {
				tn, _, err := svc.Create(ctx, CreateParams{Name: fmt.Sprintf("P%d", i), DefaultProvider: "simulator"})
				require.NoError(t, err)
				want = append(want, tn.ID)
				if i%2 == 0 {
					c.Advance(time.Microsecond)
				}
			}
			var all []string
			cursor := ""
			for range 20 {
				page, err := svc.List(ctx, ListParams{Limit: 3, Cursor: cursor})
				require.NoError(t, err)
				for _, tn := range page.Tenants {
					all = append(all, tn.ID)
				}
				if page.NextCursor == "" {
					break
				}
				cursor = page.NextCursor
			}
			require.Subset(t, all, want)
			seen := map[string]bool{}
			for _, id := range all {
				require.False(t, seen[id], "duplicate %s", id)
				seen[id] = true
			}
			page, err := svc.List(ctx, ListParams{Limit: MaxPageSize})
			require.NoError(t, err)
			require.Len(t, page.Tenants, len(all))
			require.Empty(t, page.NextCursor)
		})
	})
}

func TestSealing(t *testing.T) {
	t.Parallel()
	k, err := newKeyring(testMasterKey, nil)
	require.NoError(t, err)
	blob, err := k.seal("ten_a", "paystack", providers.Secrets{"secret_key": "sk_x"})
	require.NoError(t, err)

	t.Run("RoundTrips", func(t *testing.T) {
		s, err := k.open("ten_a", "paystack", blob)
		require.NoError(t, err)
		require.Equal(t, "sk_x", s["secret_key"])
	})
	t.Run("FreshNonceEachTime", func(t *testing.T) {
		again, err := k.seal("ten_a", "paystack", providers.Secrets{"secret_key": "sk_x"})
		require.NoError(t, err)
		require.NotEqual(t, blob, again)
	})
	t.Run("BoundToTenantAndProvider", func(t *testing.T) {
		_, err := k.open("ten_b", "paystack", blob)
		require.ErrorIs(t, err, errSealed)
		_, err = k.open("ten_a", "stripe", blob)
		require.ErrorIs(t, err, errSealed)
	})
	t.Run("TamperDetected", func(t *testing.T) {
		for i := range blob {
			bad := bytes.Clone(blob)
			bad[i] ^= 1
			_, err := k.open("ten_a", "paystack", bad)
			require.ErrorIs(t, err, errSealed, "byte %d", i)
		}
		_, err := k.open("ten_a", "paystack", blob[:10])
		require.ErrorIs(t, err, errSealed)
	})
	t.Run("OtherMasterKeyFails", func(t *testing.T) {
		k2, err := newKeyring(bytes.Repeat([]byte{7}, 32), nil)
		require.NoError(t, err)
		_, err = k2.open("ten_a", "paystack", blob)
		require.ErrorIs(t, err, errSealed)
	})
	t.Run("MasterKeyMustBe32Bytes", func(t *testing.T) {
		_, err := newKeyring(make([]byte, 16), nil)
		require.Error(t, err)
		_, err = newKeyring(testMasterKey, make([]byte, 16))
		require.Error(t, err)
	})
}

// TestKeyRotation is MASTER_KEY's rotation as the keyring sees it: what
// the old key sealed or hashed (including rows written before rotation
// existed) still opens and verifies with it as the previous key, and
// everything new uses only the current key.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	newKey := bytes.Repeat([]byte{7}, 32)
	before, err := newKeyring(testMasterKey, nil)
	require.NoError(t, err)
	during, err := newKeyring(newKey, testMasterKey)
	require.NoError(t, err)
	after, err := newKeyring(newKey, nil)
	require.NoError(t, err)

	// Written by the code before this keyring (d68bd11) under testMasterKey,
	// with a fixed nonce: the stored format did not change.
	legacyBlob, _ := hex.DecodeString("0166697865642d6e6f6e636521c05c48fc4d8e77d69b3d38d5b240027768f9413533328371d75003794a6889cd6116dc4adf")
	legacyHash, _ := hex.DecodeString("2f7024f96f871423499f8933c28546270fd68c97acd9b6000480171260e6878f") // of "sk_legacy"

	t.Run("SealedSecrets", func(t *testing.T) {
		for name, k := range map[string]*keyring{"before": before, "during": during} {
			s, err := k.open("ten_a", "paystack", legacyBlob)
			require.NoError(t, err, name)
			require.Equal(t, "sk_x", s["secret_key"], name)
		}
		_, err := after.open("ten_a", "paystack", legacyBlob)
		require.ErrorIs(t, err, errSealed)
		fresh, err := during.seal("ten_a", "paystack", providers.Secrets{"secret_key": "sk_y"})
		require.NoError(t, err)
		s, err := after.open("ten_a", "paystack", fresh)
		require.NoError(t, err)
		require.Equal(t, "sk_y", s["secret_key"])
		_, err = before.open("ten_a", "paystack", fresh)
		require.ErrorIs(t, err, errSealed, "sealed under the current key only")
	})

	oldHash, oldID := before.hashSecret("sk_old")
	newHash, newID := during.hashSecret("sk_new")
	require.Equal(t, before.currentKey(), oldID)
	require.Equal(t, during.currentKey(), newID)
	require.NotEqual(t, oldID, newID)
	require.Len(t, newHash, 32, "the bare HMAC, as every version stores it")
	cases := []struct {
		name   string
		k      *keyring
		secret string
		stored []byte
		key    string // the id of the key it matches under; "" when it does not
	}{
		{"legacy hash, same key", before, "sk_legacy", legacyHash, oldID},
		{"legacy hash, previous key", during, "sk_legacy", legacyHash, oldID},
		{"legacy hash, key retired", after, "sk_legacy", legacyHash, ""},
		{"legacy hash, wrong secret", during, "sk_other", legacyHash, ""},
		{"old key's hash, previous key", during, "sk_old", oldHash, oldID},
		{"old key's hash, key retired", after, "sk_old", oldHash, ""},
		{"new hash, current key", during, "sk_new", newHash, newID},
		{"new hash, after", after, "sk_new", newHash, newID},
		{"new hash, old key alone", before, "sk_new", newHash, ""},
		{"new hash, wrong secret", during, "sk_other", newHash, ""},
		{"empty", during, "sk_new", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok, key := c.k.secretMatches(c.secret, c.stored)
			require.Equal(t, c.key != "", ok, "ok")
			require.Equal(t, c.key, key)
		})
	}
}

func TestNewServiceValidatesConfig(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLite(t)
	cases := map[string]func(*Config){
		"ShortMasterKey":   func(c *Config) { c.MasterKey = c.MasterKey[:31] },
		"ShortAdminKey":    func(c *Config) { c.AdminAPIKey = "short" },
		"ShortAdminPrev":   func(c *Config) { c.AdminPrevious = "short" },
		"ShortJWTSecret":   func(c *Config) { c.JWTSecret = []byte("short") },
		"ShortJWTPrevious": func(c *Config) { c.JWTPrevious = []byte("short") },
		"CacheTTLTooLong":  func(c *Config) { c.StatusCacheTTL = 3 * time.Second },
		"NegativeCacheTTL": func(c *Config) { c.StatusCacheTTL = -time.Second },
		"TokenTTLTooShort": func(c *Config) { c.TokenTTL = time.Second },
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(newClock(), &syncBuffer{})
			mod(&cfg)
			_, err := NewService(db, testRegistry(), cfg)
			require.Error(t, err)
		})
	}
	t.Run("DefaultsFillIn", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(newClock(), &syncBuffer{})
		cfg.Issuer, cfg.Audience, cfg.TokenTTL, cfg.Logger, cfg.Now = "", "", 0, nil, nil
		svc, err := NewService(db, testRegistry(), cfg)
		require.NoError(t, err)
		require.Equal(t, "oncepay", svc.cfg.Issuer)
		require.Equal(t, "oncepay-merchant-api", svc.cfg.Audience)
		require.Equal(t, 15*time.Minute, svc.cfg.TokenTTL)
	})
}

func TestTypesRedactSecrets(t *testing.T) {
	t.Parallel()
	const s = "sk_super_secret_value"
	values := map[string]any{
		"Credentials":           Credentials{TenantID: "ten_a", ClientID: "cli_a", ClientSecret: s},
		"CreateParams":          CreateParams{Name: "n", Providers: map[string]providers.Secrets{"paystack": {"secret_key": s}}},
		"UpdateParams":          UpdateParams{Providers: map[string]providers.Secrets{"paystack": {"secret_key": s}}},
		"Token":                 Token{AccessToken: s, TokenType: "Bearer"},
		"Config":                Config{MasterKey: []byte(s), AdminAPIKey: s, JWTSecret: []byte(s), JWTPrevious: []byte(s)},
		"CreateTenantRequest":   CreateTenantRequest{Providers: map[string]map[string]string{"paystack": {"secret_key": s}}},
		"UpdateTenantRequest":   UpdateTenantRequest{Providers: map[string]map[string]string{"paystack": {"secret_key": s}}},
		"CreatedTenantResponse": CreatedTenantResponse{ClientSecret: s},
		"CredentialsResponse":   CredentialsResponse{ClientSecret: s},
		"TokenResponse":         TokenResponse{AccessToken: s},
	}
	for name, v := range values {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
				require.NotContains(t, fmt.Sprintf(verb, v), s, verb)
				require.NotContains(t, fmt.Sprintf(verb, &v), s, verb)
			}
			var buf bytes.Buffer
			slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "v", v)
			slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "v", v)
			require.NotContains(t, buf.String(), s)
		})
	}
}
