package config_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/config"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

const (
	jwt32  = "0123456789abcdef0123456789abcdef"
	master = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
)

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.LoadFrom(env(map[string]string{"DATA_DIR": t.TempDir()}))
	require.NoError(t, err)
	require.Equal(t, ":8080", c.Addr)
	require.Equal(t, config.Development, c.Env)
	require.Equal(t, 20*time.Second, c.Provider.Timeout)
	require.Equal(t, 30*time.Second, c.Payments.Lease)
	require.Equal(t, 2*time.Minute, c.Schedule.SweepInterval)
	require.Equal(t, 5*time.Minute, c.Schedule.SweepStaleAfter)
	require.Equal(t, 24*time.Hour, c.Schedule.ReviewAfter)
	require.Equal(t, "0 3 * * *", c.Schedule.PurgeSchedule)
	require.Equal(t, 72*time.Hour, c.Schedule.KeyTTL)
	require.False(t, c.Database.Postgres())
	require.Equal(t, filepath.Join(c.DataDir, "gateway.db"), c.DatabaseURL())
	require.Equal(t, "text", c.Log.Format)
	host, _ := os.Hostname()
	require.Equal(t, host, c.Instance, "INSTANCE_ID defaults to the hostname")
	require.Empty(t, c.Limits.RedisURL, "no Redis: limits in memory")
	require.True(t, c.Database.MigrateOnStart, "make run and existing deploys migrate at start")
	require.Equal(t, "oncepay:", c.Limits.RedisKeyPrefix)
	require.Equal(t, []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour,
		5 * time.Hour, 10 * time.Hour, 10 * time.Hour}, c.Webhooks.RetrySchedule)
}

func TestDevelopmentSecretsAreGeneratedOnceAndReused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := config.LoadFrom(env(map[string]string{"DATA_DIR": dir}))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"ADMIN_API_KEY", "JWT_SECRET", "MASTER_KEY"}, first.Secrets.Generated)
	require.True(t, first.Secrets.GeneratedNow)
	require.Len(t, first.Secrets.MasterKey, 32)
	require.GreaterOrEqual(t, len(first.Secrets.JWTSecret), 32)

	st, err := os.Stat(first.Secrets.GeneratedFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	second, err := config.LoadFrom(env(map[string]string{"DATA_DIR": dir}))
	require.NoError(t, err)
	require.Equal(t, first.Secrets.AdminAPIKey, second.Secrets.AdminAPIKey)
	require.Equal(t, first.Secrets.JWTSecret, second.Secrets.JWTSecret)
	require.Equal(t, first.Secrets.MasterKey, second.Secrets.MasterKey)
	require.False(t, second.Secrets.GeneratedNow, "a restart reuses the kept secrets and makes none")

	// A secret given in the environment wins and is not reported as generated.
	third, err := config.LoadFrom(env(map[string]string{"DATA_DIR": dir, "ADMIN_API_KEY": "given-admin-key-123"}))
	require.NoError(t, err)
	require.Equal(t, config.Secret("given-admin-key-123"), third.Secrets.AdminAPIKey)
	require.NotContains(t, third.Secrets.Generated, "ADMIN_API_KEY")
}

// prodDB is a production DATABASE_URL: production refuses the embedded store.
const prodDB = "postgres://gateway@db.internal:5432/gateway"

// production is a production environment that starts, plus extra (each
// call a map of its own to change).
func production(extra ...string) map[string]string {
	m := map[string]string{"GATEWAY_ENV": "production", "ADMIN_API_KEY": "prod-admin-key-0123456789",
		"JWT_SECRET": jwt32, "MASTER_KEY": master, "DATABASE_URL": prodDB}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func TestProductionRefusesMissingSecrets(t *testing.T) {
	t.Parallel()
	_, err := config.LoadFrom(env(map[string]string{"GATEWAY_ENV": "production", "DATA_DIR": t.TempDir()}))
	require.Error(t, err)
	for _, name := range []string{"ADMIN_API_KEY", "JWT_SECRET", "MASTER_KEY", "DATABASE_URL"} {
		require.Contains(t, err.Error(), name)
	}
	c, err := config.LoadFrom(env(production()))
	require.NoError(t, err)
	require.Empty(t, c.Secrets.Generated)
	require.Equal(t, "json", c.Log.Format)
	require.False(t, c.Provider.Simulator, "the simulator charges without moving money: off in production unless asked for")
}

func TestTheSimulatorIsOnOnlyWhereWanted(t *testing.T) {
	t.Parallel()
	prod, staging := production(), production("SIMULATOR_ENABLED", "true")
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"development", map[string]string{"DATA_DIR": t.TempDir()}, true},
		{"development, off", map[string]string{"DATA_DIR": t.TempDir(), "SIMULATOR_ENABLED": "false"}, false},
		{"production", prod, false},
		{"production, asked for (a staging load test)", staging, true},
	} {
		c, err := config.LoadFrom(env(tc.env))
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, c.Provider.Simulator, tc.name)
	}
	_, err := config.LoadFrom(env(map[string]string{"DATA_DIR": t.TempDir(), "SIMULATOR_ENABLED": "sometimes"}))
	require.ErrorContains(t, err, "SIMULATOR_ENABLED")
}

// /metrics names tenants and their volumes: on the API's port only in
// development; in production only on a METRICS_ADDR of its own.
func TestMetricsAreOnTheAPIPortOnlyInDevelopment(t *testing.T) {
	t.Parallel()
	prod, ownAddr := production(), production("METRICS_ADDR", "127.0.0.1:9090")
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"development", map[string]string{"DATA_DIR": t.TempDir()}, true},
		{"development, off", map[string]string{"DATA_DIR": t.TempDir(), "METRICS_ENABLED": "false"}, false},
		{"development, own address", map[string]string{"DATA_DIR": t.TempDir(), "METRICS_ADDR": "127.0.0.1:9090"}, false},
		{"production", prod, false},
		{"production, own address", ownAddr, false},
	} {
		c, err := config.LoadFrom(env(tc.env))
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, c.MetricsOnAPIPort(), tc.name)
	}
}

func TestInvalidValuesNameTheirVariable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"BadEnv", map[string]string{"GATEWAY_ENV": "staging"}, "GATEWAY_ENV"},
		{"ShortJWT", map[string]string{"JWT_SECRET": "short"}, "JWT_SECRET must be at least 32 bytes"},
		{"BadMasterKey", map[string]string{"MASTER_KEY": "nothex"}, "MASTER_KEY must be 32 bytes"},
		{"BadPreviousMasterKey", map[string]string{"MASTER_KEY": master, "MASTER_KEY_PREVIOUS": "abc"}, "MASTER_KEY_PREVIOUS must be 32 bytes"},
		{"PreviousIsCurrent", map[string]string{"MASTER_KEY": master, "MASTER_KEY_PREVIOUS": master}, "MASTER_KEY_PREVIOUS is MASTER_KEY itself"},
		{"PreviousWithoutCurrent", map[string]string{"MASTER_KEY_PREVIOUS": master}, "MASTER_KEY_PREVIOUS needs MASTER_KEY set too"},
		{"ShortPreviousAdminKey", map[string]string{"ADMIN_API_KEY": "admin-key-0123456789", "ADMIN_API_KEY_PREVIOUS": "short"}, "ADMIN_API_KEY_PREVIOUS must be at least 16 characters"},
		{"PreviousAdminWithoutCurrent", map[string]string{"ADMIN_API_KEY_PREVIOUS": "admin-key-0123456789"}, "ADMIN_API_KEY_PREVIOUS needs ADMIN_API_KEY set too"},
		{"PreviousAdminIsCurrent", map[string]string{"ADMIN_API_KEY": "admin-key-0123456789", "ADMIN_API_KEY_PREVIOUS": "admin-key-0123456789"}, "ADMIN_API_KEY_PREVIOUS is ADMIN_API_KEY itself"},
		{"LeaseNotAboveTimeout", map[string]string{"IDEMPOTENCY_LEASE": "10s", "PROVIDER_TIMEOUT": "10s"}, "IDEMPOTENCY_LEASE"},
		{"BadDuration", map[string]string{"SWEEP_INTERVAL": "often"}, "SWEEP_INTERVAL must be a duration"},
		{"NegativeDuration", map[string]string{"KEY_TTL": "-1h"}, "KEY_TTL"},
		{"SweepIntervalTyped1ns", map[string]string{"SWEEP_INTERVAL": "1ns"}, "SWEEP_INTERVAL must be between 100ms and 24h0m0s, got 1ns"},
		{"ProviderTimeoutTiny", map[string]string{"PROVIDER_TIMEOUT": "1ns"}, "PROVIDER_TIMEOUT must be between"},
		{"KeyTTLTiny", map[string]string{"KEY_TTL": "1ns"}, "KEY_TTL must be between"},
		{"ShutdownTimeoutHuge", map[string]string{"SHUTDOWN_TIMEOUT": "100000h"}, "SHUTDOWN_TIMEOUT must be between"},
		{"ShutdownDelayHuge", map[string]string{"SHUTDOWN_DELAY": "2m"}, "SHUTDOWN_DELAY must be between"},
		{"ShutdownDelayNegative", map[string]string{"SHUTDOWN_DELAY": "-1s"}, "SHUTDOWN_DELAY"},
		{"SimulatorLatencyHuge", map[string]string{"SIMULATOR_LATENCY": "100000h"}, "SIMULATOR_LATENCY must be between"},
		{"SimulatorSettleAfterZero", map[string]string{"SIMULATOR_SETTLE_AFTER": "0s"}, "SIMULATOR_SETTLE_AFTER must be a positive duration"},
		{"SimulatorSettleAfterHuge", map[string]string{"SIMULATOR_SETTLE_AFTER": "48h"}, "SIMULATOR_SETTLE_AFTER must be between"},
		{"TokenTTLShort", map[string]string{"TOKEN_TTL": "30s"}, "TOKEN_TTL must be between 1m0s and 24h0m0s"},
		{"TokenTTLLong", map[string]string{"TOKEN_TTL": "25h"}, "TOKEN_TTL must be between"},
		{"PreviousJWTIsCurrent", map[string]string{"JWT_SECRET": jwt32, "JWT_SECRET_PREVIOUS": jwt32}, "JWT_SECRET_PREVIOUS is JWT_SECRET itself"},
		{"PreviousJWTWithoutCurrent", map[string]string{"JWT_SECRET_PREVIOUS": jwt32}, "JWT_SECRET_PREVIOUS needs JWT_SECRET set too"},
		{"MetricsOnTheAPIPort", map[string]string{"GATEWAY_ADDR": ":8080", "METRICS_ADDR": ":8080"}, "METRICS_ADDR is GATEWAY_ADDR itself"},
		{"BurstZero", map[string]string{"RATE_LIMIT_BURST": "0"}, "RATE_LIMIT_BURST"},
		{"BadCron", map[string]string{"PURGE_SCHEDULE": "nightly"}, "PURGE_SCHEDULE"},
		{"CronEverySecond", map[string]string{"PURGE_SCHEDULE": "@every 1s"}, "PURGE_SCHEDULE must be a 5-field cron line in UTC"},
		{"CronWithTimeZone", map[string]string{"PURGE_SCHEDULE": "CRON_TZ=Africa/Lagos 0 3 * * *"}, "PURGE_SCHEDULE must be a 5-field cron line in UTC"},
		{"CronBadField", map[string]string{"PURGE_SCHEDULE": "0 25 * * *"}, "PURGE_SCHEDULE is not a 5-field cron expression"},
		{"MySQLURL", map[string]string{"DATABASE_URL": "mysql://x"}, "DATABASE_URL must be a postgres"},
		{"BadBaseURL", map[string]string{"PAYSTACK_BASE_URL": "ftp:/x"}, "PAYSTACK_BASE_URL"},
		{"BadBool", map[string]string{"METRICS_ENABLED": "maybe"}, "METRICS_ENABLED"},
		{"BadMigrateOnStart", map[string]string{"MIGRATE_ON_START": "later"}, "MIGRATE_ON_START must be true or false"},
		{"BadInt", map[string]string{"SWEEP_BATCH": "0"}, "SWEEP_BATCH"},
		{"BadConcurrency", map[string]string{"SWEEP_CONCURRENCY": "0"}, "SWEEP_CONCURRENCY"},
		{"NaNRate", map[string]string{"SWEEP_PROVIDER_RATE": "NaN"}, "SWEEP_PROVIDER_RATE must be a number"},
		{"NegativeRate", map[string]string{"SWEEP_PROVIDER_RATE": "-5"}, "SWEEP_PROVIDER_RATE"},
		{"BadLogLevel", map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{"BadAddr", map[string]string{"GATEWAY_ADDR": "nonsense"}, "GATEWAY_ADDR"},
		{"BadPort", map[string]string{"GATEWAY_ADDR": ":80800"}, "GATEWAY_ADDR"},
		{"BadMetricsAddr", map[string]string{"METRICS_ADDR": "9090"}, "METRICS_ADDR"},
		{"NoSuchService", map[string]string{"GATEWAY_ADDR": ":no-such-service"}, "GATEWAY_ADDR"},
		{"BadRedisURL", map[string]string{"REDIS_URL": "http://u:hunter2@redis"}, "REDIS_URL must be a redis://"},
		{"BadInstanceID", map[string]string{"INSTANCE_ID": "gw 1"}, "INSTANCE_ID"},
		{"BadRedisPrefix", map[string]string{"REDIS_KEY_PREFIX": "a b"}, "REDIS_KEY_PREFIX"},
		{"BadRetrySchedule", map[string]string{"WEBHOOK_RETRY_SCHEDULE": "5s,soon"}, "WEBHOOK_RETRY_SCHEDULE must be comma-separated"},
		{"ZeroRetry", map[string]string{"WEBHOOK_RETRY_SCHEDULE": "5s,0s"}, "WEBHOOK_RETRY_SCHEDULE"},
		{"LongRetry", map[string]string{"WEBHOOK_RETRY_SCHEDULE": strings.Repeat("1s,", 20) + "1s"}, "at most 20"},
		{"SkewInProduction", map[string]string{"GATEWAY_ENV": "production", "ADMIN_API_KEY": "prod-admin-key-0123456789",
			"JWT_SECRET": jwt32, "MASTER_KEY": master, "CLOCK_SKEW": "90s"}, "CLOCK_SKEW is a test setting; production refuses it"},
		{"ShortReplayTTL", map[string]string{"REPLAY_CACHE_TTL": "50ns"}, "REPLAY_CACHE_TTL must be at least 1s"},
		{"NoSyncInProduction", map[string]string{"GATEWAY_ENV": "production", "ADMIN_API_KEY": "prod-admin-key-0123456789",
			"JWT_SECRET": jwt32, "MASTER_KEY": master, "CLOCK_SYNC": "false"}, "CLOCK_SYNC is a test setting"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.env["DATA_DIR"] = t.TempDir()
			_, err := config.LoadFrom(env(tc.env))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// MIGRATE_ON_START=false is for production's two roles (README, "Two
// database roles"), but any environment may use it.
func TestMigrateOnStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"unset", map[string]string{}, true},
		{"off", map[string]string{"MIGRATE_ON_START": "false"}, false},
		{"on", map[string]string{"MIGRATE_ON_START": "true"}, true},
		{"production, off", map[string]string{"GATEWAY_ENV": "production", "ADMIN_API_KEY": "prod-admin-key-0123456789",
			"JWT_SECRET": jwt32, "MASTER_KEY": master, "DATABASE_URL": "postgres://gateway@db/oncepay",
			"MIGRATE_ON_START": "false"}, false},
	} {
		tc.env["DATA_DIR"] = t.TempDir()
		c, err := config.LoadFrom(env(tc.env))
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, c.Database.MigrateOnStart, tc.name)
	}
}

// Every setting the gateway reads is documented in README.md (most in
// its Configuration table, the providers' URLs under Providers).
func TestEverySettingIsDocumented(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("config.go")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	names := regexp.MustCompile(`r\.[a-zA-Z]+\("([A-Z][A-Z0-9_]+)"`).FindAllStringSubmatch(string(src), -1)
	require.Greater(t, len(names), 40)
	for _, n := range names {
		require.Truef(t, bytes.Contains(readme, []byte("`"+n[1]+"`")), "README.md does not name %s", n[1])
	}
	require.True(t, bytes.Contains(readme, []byte("\n| `MIGRATE_ON_START` | `true` |")), "MIGRATE_ON_START in the Configuration table")
}

func TestSecretsNeverPrint(t *testing.T) {
	t.Parallel()
	c, err := config.LoadFrom(env(map[string]string{"DATA_DIR": t.TempDir(), "DATABASE_URL": "postgres://u:hunter2pass@db/x",
		"REDIS_URL": "redis://:hunter2redis@cache:6379/0", "MASTER_KEY": master, "MASTER_KEY_PREVIOUS": strings.Repeat("ab", 32),
		"ADMIN_API_KEY": "hunter2-current-admin", "ADMIN_API_KEY_PREVIOUS": "hunter2-previous-admin"}))
	require.NoError(t, err)
	require.Len(t, c.Secrets.MasterKeyPrevious, 32)
	require.Equal(t, "redis://:hunter2redis@cache:6379/0", c.Limits.RedisURL.Reveal())
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "config", c, "secrets", c.Secrets)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "config", c, "secrets", c.Secrets)
	asJSON, err := json.Marshal(c)
	require.NoError(t, err)
	out := fmt.Sprintf("%v %+v %#v", c, c, c) + logged.String() + string(asJSON)
	for _, k := range []config.Key{c.Secrets.MasterKey, c.Secrets.MasterKeyPrevious} {
		require.NotContains(t, out, base64.StdEncoding.EncodeToString(k))
		require.NotContains(t, out, hex.EncodeToString(k))
	}
	require.NotContains(t, out, fmt.Sprint([]byte(c.Secrets.MasterKey)))
	require.NotContains(t, out, fmt.Sprint([]byte(c.Secrets.MasterKeyPrevious)))
	require.NotContains(t, out, strings.Repeat("ab", 32))
	for _, s := range []string{c.Secrets.AdminAPIKey.Reveal(), c.Secrets.JWTSecret.Reveal(), "hunter2pass", "hunter2redis", "hunter2-previous-admin"} {
		require.False(t, strings.Contains(out, s), "secret printed")
	}
}

func TestAdmitClaimsFollowsThePool(t *testing.T) {
	c, err := config.LoadFrom(env(map[string]string{"DATA_DIR": t.TempDir(), "DATABASE_MAX_CONNS": "10"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Database.AdmitClaims != config.DefaultAdmitFactor*10 {
		t.Fatalf("DATABASE_ADMIT_CLAIMS default = %d, want %d", c.Database.AdmitClaims, config.DefaultAdmitFactor*10)
	}
	c, err = config.LoadFrom(env(map[string]string{"DATA_DIR": t.TempDir(), "DATABASE_ADMIT_CLAIMS": "0"}))
	if err != nil || c.Database.AdmitClaims != 0 {
		t.Fatalf("DATABASE_ADMIT_CLAIMS=0: %d, %v (0 is no door)", c.Database.AdmitClaims, err)
	}
	if _, err := config.LoadFrom(env(map[string]string{"DATA_DIR": t.TempDir(), "DATABASE_ADMIT_CLAIMS": "-1"})); err == nil {
		t.Fatal("DATABASE_ADMIT_CLAIMS=-1 accepted")
	}
}

// setting is one value of a variable in a table test: what it reads as,
// or (ok false) that it stops the start with an error naming the variable.
type setting[T comparable] struct {
	value string // "": unset
	want  T
	ok    bool
}

// checkSettings loads each value of name alone and compares what get
// reads of it.
func checkSettings[T comparable](t *testing.T, name string, get func(config.Config) T, cases []setting[T]) {
	t.Helper()
	for _, tc := range cases {
		e := map[string]string{"DATA_DIR": t.TempDir()}
		if tc.value != "" {
			e[name] = tc.value
		}
		c, err := config.LoadFrom(env(e))
		if !tc.ok {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%q: %v, want an error naming it", name, tc.value, err)
			}
			continue
		}
		if err != nil || get(c) != tc.want {
			t.Errorf("%s=%q: %v, %v; want %v", name, tc.value, get(c), err, tc.want)
		}
	}
}

func TestPipelineConns(t *testing.T) {
	t.Parallel()
	checkSettings(t, "DATABASE_PIPELINE_CONNS", func(c config.Config) int { return c.Database.PipelineConns }, []setting[int]{
		{"", config.DefaultPipelineConns, true},
		{"0", 0, true}, // off
		{"4", 4, true},
		{"64", 64, true},
		{"-1", 0, false},
		{"65", 0, false},
		{"two", 0, false},
	})
}

// GOGC is the operator's (the runtime reads it itself); a value the runtime
// would silently ignore stops the start.
func TestGOGC(t *testing.T) {
	t.Parallel()
	checkSettings(t, "GOGC", func(c config.Config) string { return c.GC.GOGC }, []setting[string]{
		{"", "", true}, // unset: app/gctune chooses
		{"off", "off", true},
		{"0", "0", true},
		{"400", "400", true},
		{"-1", "-1", true}, // off, to the runtime
		{"OFF", "", false},
		{"4OO", "", false},
		{"100%", "", false},
		{" 400", "", false},       // the runtime does not trim
		{"3000000000", "", false}, // nor read past 32 bits
	})
}

// AUTOMEMLIMIT is the share of memory the heap is given, or off.
func TestMemoryRatio(t *testing.T) {
	t.Parallel()
	checkSettings(t, "AUTOMEMLIMIT", func(c config.Config) float64 { return c.GC.MemoryRatio }, []setting[float64]{
		{"", config.DefaultMemoryRatio, true},
		{"off", 0, true},
		{"0.5", 0.5, true},
		{"1", 1, true},
		{"0", 0, false},
		{"1.5", 0, false},
		{"-0.1", 0, false},
		{"NaN", 0, false},
		{"90%", 0, false},
	})
}

// CLOCK_SKEW shifts a development instance's clock (the chaos run's skewed
// instance); production refuses it (TestInvalidValuesNameTheirVariable).
func TestClockSkewShiftsADevelopmentInstance(t *testing.T) {
	t.Parallel()
	c, err := config.LoadFrom(env(map[string]string{"DATA_DIR": t.TempDir(), "CLOCK_SKEW": "-90s"}))
	require.NoError(t, err)
	require.Equal(t, -90*time.Second, c.ClockSkew)
	require.WithinDuration(t, time.Now().Add(-90*time.Second), c.Now(), 5*time.Second)
}

// In production a provider's base URL is https (its secret key goes in
// every request), but to this machine (a local proxy, a fake).
func TestProductionProviderURLsAreHTTPS(t *testing.T) {
	t.Parallel()
	prod := production()
	for url, ok := range map[string]bool{
		"https://api.paystack.co": true, "http://127.0.0.1:9999": true, "http://localhost:9999": true,
		"http://api.paystack.co": false, "http://10.0.0.5": false,
	} {
		e := maps.Clone(prod)
		e["PAYSTACK_BASE_URL"] = url
		_, err := config.LoadFrom(env(e))
		if ok {
			require.NoError(t, err, url)
		} else {
			require.ErrorContains(t, err, "PAYSTACK_BASE_URL must be https in production", url)
		}
	}
	dev := map[string]string{"DATA_DIR": t.TempDir(), "PAYSTACK_BASE_URL": "http://api.paystack.co"}
	_, err := config.LoadFrom(env(dev))
	require.NoError(t, err, "development takes what it is given")
}
