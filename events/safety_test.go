package events

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
)

func TestPublicAddress(t *testing.T) {
	t.Parallel()
	for addr, public := range map[string]bool{
		"93.184.216.34":      true,
		"2606:2800:220:1::1": true,
		"127.0.0.1":          false,
		"127.5.5.5":          false,
		"::1":                false,
		"10.1.2.3":           false,
		"172.16.0.1":         false,
		"192.168.1.1":        false,
		"169.254.169.254":    false, // the cloud metadata address
		"fe80::1":            false,
		"fc00::1":            false,
		"0.0.0.0":            false,
		"::":                 false,
		"100.64.0.1":         false,
		"224.0.0.1":          false,
		"::ffff:127.0.0.1":   false, // v4-mapped loopback
		"::ffff:10.0.0.1":    false,
		"64:ff9b::a9fe:a9fe": false, // NAT64 to the metadata address
		"64:ff9b::5db8:d822": true,  // NAT64 to a public one
		"2002:a00:5::1":      false, // 6to4 of 10.0.0.5
		"::7f00:1":           false, // v4-compatible loopback
		"192.0.0.192":        false, // Oracle Cloud metadata
		"198.18.0.1":         false,
		"240.0.0.1":          false,
		"0.1.2.3":            false,
		"fec0::1":            false,
		"2001:db8::1":        false,
	} {
		require.Equal(t, public, publicAddress(netip.MustParseAddr(addr)), addr)
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	type tc struct {
		url             string
		dev, production bool
	}
	for _, c := range []tc{
		{"https://shop.example.com/hooks", true, true},
		{"http://shop.example.com/hooks", true, false},
		{"http://127.0.0.1:9000/hooks", true, false},
		{"https://127.0.0.1/hooks", true, false},
		{"https://localhost/hooks", true, false},
		{"https://api.localhost/hooks", true, false},
		{"https://169.254.169.254/latest/meta-data", true, false},
		{"https://[::1]/hooks", true, false},
		{"https://10.0.0.8/hooks", true, false},
		{"https://93.184.216.34/hooks", true, true},
		{"ftp://shop.example.com", false, false},
		{"https://user:pw@shop.example.com", false, false},
		{"/relative", false, false},
		{"https://shop.example.com/#frag", false, false},
		{"https://" + strings.Repeat("a", 2050) + ".com", false, false},
		{"http://localhost:99999/x", false, false},
		{"https://shop.example.com:0/hooks", false, false},
		{"https://shop.example.com:65535/hooks", true, true},
		{"https://shop.example.com:8443/hooks", true, true},
	} {
		require.Equal(t, c.dev, checkURL(c.url, false) == nil, "development: "+c.url)
		require.Equal(t, c.production, checkURL(c.url, true) == nil, "production: "+c.url)
	}
	// Each refusal says what is wrong with the URL, not another rule.
	for url, why := range map[string]string{
		"https://shop.example.com/#frag":   "#fragment",
		"https://shop.example.com/#":       "#fragment",
		"https://user:pw@shop.example.com": "credentials",
		"ftp://shop.example.com":           "absolute http(s) URL",
	} {
		err := checkURL(url, false)
		require.Error(t, err, url)
		require.Contains(t, err.Error(), why, url)
	}
}

// TestProductionDialsOnlyPublicAddresses: the check runs on the address
// dialled, after resolution, so a name resolving to loopback (localhost
// here; a rebinding DNS name in an attack) is refused — and development
// reaches it.
func TestProductionDialsOnlyPublicAddresses(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	for _, u := range []string{srv.URL, "http://localhost:" + port} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
		_, err := safeClient(true).Do(req)
		cancel()
		require.ErrorIs(t, err, errForbiddenAddress, u)
		require.Equal(t, "the endpoint resolves to no address deliveries may reach", deliveryError(err, true))

		req, _ = http.NewRequest(http.MethodPost, u, nil)
		resp, err := safeClient(false).Do(req)
		require.NoError(t, err, u)
		resp.Body.Close()
	}
}

func TestRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	var hits int
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits++ }))
	defer target.Close()
	srv := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	resp, err := safeClient(false).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode, "a redirect is a non-2xx answer, retried")
	require.Zero(t, hits)
}

func TestDeliveryErrorNamesTheKind(t *testing.T) {
	t.Parallel()
	require.Equal(t, "timeout after 10s", deliveryError(&net.OpError{Op: "dial", Err: timeoutErr{}}, true))
	dns := &net.DNSError{Err: "no such host", Name: "billing.internal", IsNotFound: true}
	require.Equal(t, "the endpoint resolves to no address deliveries may reach", deliveryError(dns, true))
	require.Contains(t, deliveryError(dns, false), "no such host", "development says what went wrong")
	long := deliveryError(errors.New(strings.Repeat("x", 500)), false)
	require.Len(t, long, 200, "bounded")
	// A token in the endpoint's query is not copied into the deliveries
	// log or the queue's record of the job.
	refused := &url.Error{Op: "Post", URL: "http://127.0.0.1:9/hook?token=MERCHANTURLTOKEN",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}}
	got := deliveryError(refused, false)
	require.NotContains(t, got, "MERCHANTURLTOKEN")
	require.Contains(t, got, "connection refused")
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestCursorRoundTrips(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 10, 0, 0, 123456000, time.UTC)
	c, ok := parseCursor(cursorOf(at, "evt_0f1e2d3c4b5a69788796a5b4c3d2e1f0"))
	require.True(t, ok)
	require.Equal(t, at, c.CreatedAt)
	require.Equal(t, "evt_0f1e2d3c4b5a69788796a5b4c3d2e1f0", c.ID)
}

// FuzzParseCursor: a cursor is untrusted input; any string is either
// refused or parsed into a cursor that names a well-formed id (the
// handler's second check), and nothing panics.
func FuzzParseCursor(f *testing.F) {
	f.Add(cursorOf(time.Now(), "evt_0f1e2d3c4b5a69788796a5b4c3d2e1f0"))
	f.Add("")
	f.Add("bm9wZQ")
	f.Add("MTIzLmV2dF8\x00")
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := parseCursor(s)
		if !ok {
			return
		}
		if len(s) > 128 {
			t.Fatalf("accepted a %d-byte cursor", len(s))
		}
		if wellFormed("evt_", c.ID) && !utf8.ValidString(c.ID) {
			t.Fatalf("well-formed id %q is not UTF-8", c.ID)
		}
	})
}

func TestPurgeKeepsThirtyDays(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		require.NoError(t, db.Exec(`INSERT INTO tenants (id, name, status, default_provider, created_at, updated_at)
VALUES ('m1', 'M', 'active', 'simulator', ?, ?)`, time.Now().UTC(), time.Now().UTC()).Error)
		// An endpoint, so events wait for the relay (bornHandedOver).
		require.NoError(t, db.Exec(`INSERT INTO webhook_endpoints (merchant_id, id, url, secret, created_at, updated_at)
VALUES ('m1', 'we_1', 'https://example.com/hook', ?, ?, ?)`, []byte("sealed"), time.Now().UTC(), time.Now().UTC()).Error)
		em := NewEmitter(nil)
		emit := func(obj string) {
			require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
				return em.Emit(ctx, tx, Params{MerchantID: "m1", Type: PaymentSucceeded, ObjectID: obj, Object: map[string]any{"id": obj}})
			}))
		}
		emit("pay_old")
		emit("pay_old_unsent")
		require.NoError(t, db.Exec(`UPDATE events SET enqueued_at = created_at WHERE object_id = 'pay_old'`).Error)
		dbtest.Age(t, db, Retention+time.Hour, "events", "created_at", "enqueued_at")
		emit("pay_new")
		for i, age := range []time.Duration{Retention + time.Hour, Retention + 2*time.Hour, Retention + 3*time.Hour, time.Hour} {
			require.NoError(t, db.Exec(`INSERT INTO webhook_deliveries (merchant_id, id, endpoint_id, event_id, attempt, at, outcome)
VALUES ('m1', ?, 'we_1', 'evt_1', 1, ?, 'delivered')`, fmt.Sprintf("whd_%d", i), time.Now().UTC().Add(-age)).Error)
		}
		n, err := NewStore(db).purge(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		var left []string
		require.NoError(t, db.Table("events").Order("object_id").Pluck("object_id", &left).Error)
		require.Equal(t, []string{"pay_new", "pay_old_unsent"}, left, "a recent event stays, and so does one not yet handed to the queue")
		var kept []string
		require.NoError(t, db.Table("webhook_deliveries").Pluck("id", &kept).Error)
		require.Equal(t, []string{"whd_3"}, kept, "old deliveries go, batch after batch")
	})
}
