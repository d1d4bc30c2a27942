package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app"
	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/config"
	"github.com/oncepay/gateway/events"
)

// TestRotateMasterKey is the rotation README's "Rotating MASTER_KEY"
// describes, run with the built binary on both engines: start with key A;
// restart with MASTER_KEY=B and MASTER_KEY_PREVIOUS=A; run `gateway
// reseal`; restart with B alone. Throughout, a stored answer that shows a
// secret replays byte for byte, the merchant's client secret still gets a
// token, and webhooks are signed with the endpoint's secret the merchant
// was shown. With the previous key retired before the reseal, they would
// not be.
func TestRotateMasterKey(t *testing.T) {
	t.Parallel()
	bin := apptest.Binary(t)
	keyA := "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	keyB := strings.Repeat("b7", 32)
	for _, engine := range []string{"postgres", "sqlite"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			env := engineEnv(t, engine)
			env["MASTER_KEY"] = keyA
			p := apptest.StartProcess(t, bin, env)

			var mu sync.Mutex
			var got []*http.Request
			var bodies [][]byte
			receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				got, bodies = append(got, r), append(bodies, b)
				mu.Unlock()
			}))
			t.Cleanup(receiver.Close)

			m := p.Onboard(map[string]any{"providers": map[string]any{"paystack": map[string]any{"secret_key": "sk_test_rotation"}}})
			createHook := func() apptest.Response {
				return p.Do("POST", "/v1/webhook_endpoints", []byte(`{"url":"`+receiver.URL+`"}`),
					"Authorization", "Bearer "+m.Token, "Idempotency-Key", "rotation-hook", "Content-Type", "application/json")
			}
			hook := createHook()
			require.Equal(t, http.StatusCreated, hook.StatusCode, string(hook.Body))
			secret := hook.JSON(t)["secret"].(string)
			require.NotEmpty(t, secret)

			// signed waits for the delivery of the payment made with key
			// and checks it is signed with the secret the merchant holds.
			signed := func(key string) {
				t.Helper()
				r := p.Pay(m, key, map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"})
				require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
				id := r.JSON(t)["id"].(string)
				require.Eventually(t, func() bool {
					mu.Lock()
					defer mu.Unlock()
					for i, req := range got {
						if !strings.Contains(string(bodies[i]), id) {
							continue
						}
						ts, _ := strconv.ParseInt(req.Header.Get("webhook-timestamp"), 10, 64)
						want, err := events.Sign(secret, req.Header.Get("webhook-id"), ts, bodies[i])
						require.NoError(t, err)
						require.Contains(t, strings.Fields(req.Header.Get("webhook-signature")), want)
						return true
					}
					return false
				}, 30*time.Second, 50*time.Millisecond, "no signed delivery of %s", id)
			}
			// still checks what a merchant relies on under the keys the
			// gateway runs with now.
			still := func(payKey string) {
				t.Helper()
				again := createHook()
				require.Equal(t, http.StatusCreated, again.StatusCode, string(again.Body))
				require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
				require.Equal(t, hook.Body, again.Body, "the sealed answer replays byte for byte")
				m.Token = p.Token(m.ClientID, m.ClientSecret)
				signed(payKey)
			}
			signed("rotation-pay-a")

			if engine == "postgres" {
				// README's step 1, then step 2 as a rolling deploy: for a
				// while one instance already seals under B while another
				// still runs with A, and each reads what the other wrote.
				p.Stop()
				p.Restart(map[string]string{"MASTER_KEY": keyA, "MASTER_KEY_PREVIOUS": keyB})
				still("rotation-pay-step1")
				env2 := maps.Clone(p.Env)
				env2["MASTER_KEY"], env2["MASTER_KEY_PREVIOUS"] = keyB, keyA
				delete(env2, "GATEWAY_ADDR")
				p2 := apptest.StartProcess(t, bin, env2)
				auth := func(m apptest.Merchant) []string {
					return []string{"Authorization", "Bearer " + m.Token, "Content-Type", "application/json"}
				}
				m2 := p2.Onboard(nil) // its client secret hashed, its answer sealed, under B
				hook2 := p2.Do("POST", "/v1/webhook_endpoints", []byte(`{"url":"`+receiver.URL+`/2"}`),
					append(auth(m2), "Idempotency-Key", "rotation-hook-2")...)
				require.Equal(t, http.StatusCreated, hook2.StatusCode, string(hook2.Body))
				m2.Token = p.Token(m2.ClientID, m2.ClientSecret) // on the instance still sealing under A
				again := p.Do("POST", "/v1/webhook_endpoints", []byte(`{"url":"`+receiver.URL+`/2"}`),
					append(auth(m2), "Idempotency-Key", "rotation-hook-2")...)
				require.Equal(t, hook2.Body, again.Body, "an answer sealed under B replays where A seals")
				m2.Token = p2.Token(m2.ClientID, m2.ClientSecret)
				p2.Stop()
				require.NotContains(t, p2.Output(), "level=ERROR")
			}

			// Stopped gracefully, as a deploy does: a killed instance's
			// River leadership (which relays events) lapses only after its
			// lease, which would only slow the test down.
			p.Stop()
			p.Restart(map[string]string{"MASTER_KEY": keyB, "MASTER_KEY_PREVIOUS": keyA})
			still("rotation-pay-during")

			reseal := func() string {
				t.Helper()
				cmd := exec.Command(bin, "reseal")
				cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
				for k, v := range p.Env {
					cmd.Env = append(cmd.Env, k+"="+v)
				}
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, string(out))
				return string(out)
			}
			out := reseal()
			require.Contains(t, out, "provider_accounts=1 webhook_endpoints=1")
			require.Contains(t, out, "stale_client_secret_hashes=0", "the token request during the rotation rehashed it")
			require.Contains(t, out, "MASTER_KEY_PREVIOUS can be removed")
			require.NotContains(t, out, "sk_test_rotation")
			require.NotContains(t, out, secret)
			out = reseal()
			require.Contains(t, out, "provider_accounts=0 webhook_endpoints=0 stored_answers=0", "a second pass has nothing to move")

			p.Stop()
			p.Restart(map[string]string{"MASTER_KEY": keyB, "MASTER_KEY_PREVIOUS": ""})
			still("rotation-pay-after")
			out = reseal()
			require.Contains(t, out, "provider_accounts=0 webhook_endpoints=0 stored_answers=0", "everything opens under B alone")
			require.NotContains(t, p.Output(), "level=ERROR")

			// Each run is an operator's action, in the audit log.
			r := p.Do("GET", "/admin/v1/audit-events?action=master_key.resealed", nil, "Authorization", "Bearer "+apptest.AdminKey)
			require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
			runs := r.JSON(t)["data"].([]any)
			require.Len(t, runs, 3)
			first := runs[2].(map[string]any) // newest first
			require.Equal(t, "operator:command", first["actor"])
			require.EqualValues(t, 1, first["after"].(map[string]any)["provider_accounts"])
			require.EqualValues(t, 1, first["after"].(map[string]any)["webhook_endpoints"])
			require.NotContains(t, string(r.Body), "sk_test_rotation")
		})
	}
}

// engineEnv is a gateway's environment on engine: a fresh PostgreSQL
// schema, or SQLite in a data directory of its own.
func engineEnv(t *testing.T, engine string) map[string]string {
	t.Helper()
	dbURL := ""
	if engine == "postgres" {
		dbURL = dbtest.PostgresURL(t)
	}
	return apptest.BaseEnv(dbURL, t.TempDir())
}

// A reseal that fails part way has already committed its first steps: the
// operator's run is in the audit log all the same, saying how far it got.
func TestAnInterruptedResealIsAudited(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"postgres", "sqlite"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			env := engineEnv(t, engine)
			env["MASTER_KEY"] = strings.Repeat("b7", 32)
			env["MASTER_KEY_PREVIOUS"] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
			cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			require.NoError(t, err)
			db, err := database.Open(cfg.DatabaseURL(), database.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { database.Close(db) })
			_, err = database.Migrate(db)
			require.NoError(t, err)
			// The second step cannot run: its table is gone.
			require.NoError(t, db.Exec("DROP TABLE webhook_endpoints").Error)

			_, err = app.Reseal(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			require.Error(t, err)
			var rows []struct {
				Action string
				After  string
			}
			require.NoError(t, db.Raw("SELECT action, CAST(after AS TEXT) AS after FROM audit_events").Scan(&rows).Error)
			require.Len(t, rows, 1, "the failed run is audited")
			require.Equal(t, "master_key.resealed", rows[0].Action)
			var after map[string]any
			require.NoError(t, json.Unmarshal([]byte(rows[0].After), &after))
			require.Equal(t, false, after["completed"])
			require.Equal(t, "webhook_endpoints", after["failed_step"])
		})
	}
}
