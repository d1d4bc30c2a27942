package client

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzParseRetryAfter: Retry-After comes from the server, or from any
// proxy on the way. Whatever it holds, the wait is between 0 and
// maxRetryAfter; delta-seconds wait that many seconds, capped (a huge
// number is the cap, never a wrapped-around duration); a date waits at
// most until then.
func FuzzParseRetryAfter(f *testing.F) {
	for _, seed := range []string{
		"", "0", "1", " 30 ", "300", "301", "-5", "+7", "1.5", "3600",
		"Wed, 21 Oct 2015 07:28:00 GMT", time.Now().Add(time.Minute).UTC().Format(http.TimeFormat),
		"Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "soon", "\x00",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		before := time.Now()
		d := parseRetryAfter(v)
		if d < 0 || d > maxRetryAfter {
			t.Fatalf("Retry-After %q waits %v", v, d)
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case err == nil && n <= 0:
			require.Zero(t, d, "Retry-After %q", v)
		case err == nil && int64(n) >= int64(maxRetryAfter/time.Second):
			require.Equal(t, maxRetryAfter, d, "Retry-After %q", v)
		case err == nil:
			require.Equal(t, time.Duration(n)*time.Second, d, "Retry-After %q", v)
		default:
			if at, err := http.ParseTime(strings.TrimSpace(v)); err == nil {
				require.LessOrEqual(t, d, max(at.Sub(before), 0), "Retry-After %q", v)
			} else {
				require.Zero(t, d, "unreadable Retry-After %q", v)
			}
		}
	})
}

// FuzzDecodePayment: a payment in the gateway's answer is read as it is
// sent; whatever the body, decodePayment never panics, an error names the
// status, and a payment it reads is stable: marshalled again (as a caller
// storing or forwarding it would) it reads back the same.
func FuzzDecodePayment(f *testing.F) {
	for _, seed := range []string{
		`{"id":"pay_0193e4a27b4c7d2e9f1a2b3c4d5e6f70","object":"payment","amount":5000,"currency":"NGN","status":"succeeded",` +
			`"provider":"paystack","provider_reference":"op-1","provider_transaction_id":"4099260516","email":"ada@example.com",` +
			`"metadata":{"order_id":"1001"},"idempotency_key":"order-1001","attempts":1,"created_at":"2026-12-02T10:00:00.123456Z","updated_at":"2026-12-02T10:00:01Z"}`,
		`{"id":"pay_1","status":"failed","failure_code":"insufficient_funds","failure_message":"The card has insufficient funds.","created_at":"2026-12-02T15:00:00+05:00"}`,
		`{"amount":1e3}`, `{"amount":"5000"}`, `{"created_at":"2026-12-02"}`, `{"created_at":"9999-12-31T23:59:59-23:59"}`,
		`{"metadata":{"k":null},"email":"\u0000\ud800"}`, "{\"id\":\"\xff\"}", `{"attempts":1e400}`, `null`, `[]`, ``,
	} {
		f.Add(200, []byte(seed))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		p, err := decodePayment(&answer{status: status, body: body})
		if err != nil {
			require.Nil(t, p)
			require.Contains(t, err.Error(), "status "+strconv.Itoa(status))
			return
		}
		b, err := json.Marshal(p)
		require.NoError(t, err, "%+v cannot be marshalled again", p)
		again, err := decodePayment(&answer{status: status, body: b})
		require.NoError(t, err)
		require.True(t, p.CreatedAt.Equal(again.CreatedAt) && p.UpdatedAt.Equal(again.UpdatedAt))
		p.CreatedAt, p.UpdatedAt, again.CreatedAt, again.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		require.Equal(t, p, again)
	})
}
