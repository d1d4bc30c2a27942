package tenants

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/providers"
)

// The caches keep their keys past the request that made them, so a key
// must own its bytes: given a zero-copy view of a request's buffer (as
// Fiber's route parameters are), the entry must still be found under the
// tenant it was made for after the buffer is written over, and never
// under the tenant whose id the buffer then holds.
func TestCacheKeysOwnTheirBytes(t *testing.T) {
	t.Parallel()
	c := newTTLCache[string](time.Minute, time.Now)
	buf := []byte("ten_AAAA")
	view := unsafe.String(&buf[0], len(buf)) // what c.Params gives
	_, _, epoch := c.get(view, "paystack")
	c.put(view, "paystack", "A's account", epoch)
	copy(buf, "ten_BBBB") // the next request on the connection
	got, ok, _ := c.get("ten_AAAA", "paystack")
	require.True(t, ok)
	require.Equal(t, "A's account", got)
	_, ok, _ = c.get("ten_BBBB", "paystack")
	require.False(t, ok, "tenant B must never find tenant A's entry")
}

// End to end, as the provider webhook route asks for a tenant's provider
// account: two tenants' requests one after the other on one keep-alive
// connection, each on a fresh cache (fresh map hash seeds), and each is
// given its own account every time. Before the keys owned their bytes,
// tenant B got A's account within a few hundred tries.
func TestProviderAccountsOfTwoTenantsOnOneConnection(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLite(t)
	cfg := testConfig(newClock(), &syncBuffer{})
	cfg.StatusCacheTTL = 800 * time.Millisecond
	setup, err := NewService(db, testRegistry(), cfg)
	require.NoError(t, err)
	ctx := context.Background()
	tenant := func(name, key string) string {
		tn, _, err := setup.Create(ctx, CreateParams{Name: name, DefaultProvider: "paystack",
			Providers: map[string]providers.Secrets{"paystack": {"secret_key": key}}})
		require.NoError(t, err)
		return tn.ID
	}
	a, b := tenant("A", "sk_A"), tenant("B", "sk_B")

	var svc *Service
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Post("/v1/webhooks/:provider/:tenant_id", func(c *fiber.Ctx) error {
		p, err := svc.Provider(c.UserContext(), c.Params("tenant_id"), c.Params("provider"))
		if err != nil {
			return err
		}
		return c.SendString(p.(fakeProvider).secrets["secret_key"])
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
	post := func(tenant string) string {
		res, err := client.Post("http://"+ln.Addr().String()+"/v1/webhooks/paystack/"+tenant, "application/json", nil)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return string(body)
	}
	for i := range 1000 {
		svc, err = NewService(db, testRegistry(), cfg)
		require.NoError(t, err)
		require.Equal(t, "sk_A", post(a), "try %d", i)
		require.Equal(t, "sk_B", post(b), "try %d: tenant B was given tenant A's account", i)
	}
}

// A cache entry lives StatusCacheTTL of this process's time, whatever the
// service's clock (the database-corrected one) does meanwhile: that clock
// steps when its offset is measured again, and an entry timed by it
// outlived a step back by the whole step. Here another instance changes
// the tenant's provider secret (only its own cache forgets), the clock of
// this instance steps back an hour, and the change must still be seen
// once the TTL has passed.
func TestCacheEntriesLiveTheirTTLThroughAClockStep(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLite(t)
	clk := newClock()
	cfg := testConfig(clk, &syncBuffer{})
	cfg.StatusCacheTTL = 300 * time.Millisecond
	here, err := NewService(db, testRegistry(), cfg)
	require.NoError(t, err)
	there, err := NewService(db, testRegistry(), cfg)
	require.NoError(t, err)
	ctx := context.Background()
	tn, _, err := here.Create(ctx, CreateParams{Name: "A", DefaultProvider: "paystack",
		Providers: map[string]providers.Secrets{"paystack": {"secret_key": "sk_old"}}})
	require.NoError(t, err)
	secret := func() string {
		p, err := here.Provider(ctx, tn.ID, "paystack")
		require.NoError(t, err)
		return p.(fakeProvider).secrets["secret_key"]
	}
	require.Equal(t, "sk_old", secret()) // cached here
	_, err = there.Update(ctx, tn.ID, UpdateParams{Providers: map[string]providers.Secrets{"paystack": {"secret_key": "sk_new"}}})
	require.NoError(t, err)
	clk.Advance(-time.Hour)
	require.Eventually(t, func() bool { return secret() == "sk_new" }, 5*time.Second, 50*time.Millisecond,
		"the old secret outlived StatusCacheTTL")
}
