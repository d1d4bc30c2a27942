package app_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
)

// gzipBomb is size zero bytes, gzipped once per layer: a few kilobytes on
// the wire.
func gzipBomb(t *testing.T, size int, layers int) []byte {
	t.Helper()
	data := bytes.Repeat([]byte{'0'}, size)
	for range layers {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		_, err := w.Write(data)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		data = buf.Bytes()
	}
	return data
}

// rawExchange sends request bytes as they are (header bytes an HTTP
// client would refuse to send) and reads the answer.
func rawExchange(t *testing.T, g *apptest.Gateway, request string) apptest.Response {
	t.Helper()
	r, err := tryRawExchange(g, request)
	require.NoError(t, err)
	return r
}

func tryRawExchange(g *apptest.Gateway, request string) (apptest.Response, error) {
	u, err := url.Parse(g.URL)
	if err != nil {
		return apptest.Response{}, err
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		return apptest.Response{}, err
	}
	defer conn.Close()
	if _, err = io.WriteString(conn, strings.ReplaceAll(request, "HOST", u.Host)); err != nil {
		return apptest.Response{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return apptest.Response{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apptest.Response{Response: resp, Body: b}, nil
}

// oversizedExchange sends a request the server refuses before reading it
// all: it answers and closes with the rest unread, and the kernel's reset
// can overtake the answer on a loaded machine. A few tries must read it.
func oversizedExchange(t *testing.T, g *apptest.Gateway, request string) apptest.Response {
	t.Helper()
	var err error
	for range 5 {
		var r apptest.Response
		if r, err = tryRawExchange(g, request); err == nil {
			return r
		}
	}
	require.NoError(t, err, "no answer in 5 tries")
	return apptest.Response{}
}

// TestHostileInput: bodies, headers, encodings, ids and cursors as an
// attacker writes them, over the real app on PostgreSQL. Every row is a
// 4xx problem+json with a stable code; nothing is a 500, nothing logs at
// error level, nothing is charged.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	bearer := "Bearer " + m.Token
	admin := "Bearer " + apptest.AdminKey
	pay := func(fields string) []byte {
		return []byte(`{"amount":5000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success"` + fields + `}`)
	}
	cursor := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	basic := func(id, secret string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(id+":"+secret))
	}
	valid := string(pay(""))
	bomb := gzipBomb(t, 64<<20, 2)
	require.Less(t, len(bomb), 64<<10, "the bomb is small on the wire")

	type row struct {
		name    string
		method  string
		path    string
		body    []byte
		headers []string
		raw     string // a raw request instead (HOST is replaced)
		// oversized: raw is refused before it is read (oversizedExchange).
		oversized bool
		status    int
		code      string
		oauth     string // RFC 6749's error member, on the token route
	}
	key := func(k string) []string {
		return []string{"Authorization", bearer, "Idempotency-Key", k, "Content-Type", "application/json"}
	}
	rows := []row{
		// Bodies.
		{name: "NULInDescription", method: "POST", path: "/v1/payments", body: pay(`,"description":"a\u0000b"`), headers: key("h1"), status: 400, code: "invalid_request"},
		{name: "NULInMetadataKey", method: "POST", path: "/v1/payments", body: pay(`,"metadata":{"a\u0000":"b"}`), headers: key("h2"), status: 400, code: "invalid_request"},
		{name: "NULInEmail", method: "POST", path: "/v1/payments", body: []byte(`{"amount":5000,"currency":"NGN","email":"ada\u0000@example.com","payment_method":"sim_success"}`), headers: key("h3"), status: 400, code: "invalid_request"},
		{name: "NULInCurrency", method: "POST", path: "/v1/payments", body: []byte(`{"amount":5000,"currency":"NG\u0000","email":"ada@example.com","payment_method":"sim_success"}`), headers: key("h4"), status: 400, code: "invalid_request"},
		{name: "InvalidUTF8InDescription", method: "POST", path: "/v1/payments", body: pay(",\"description\":\"caf\xe9\""), headers: key("h5"), status: 400, code: "invalid_request"},
		{name: "EscapeInMetadataKey", method: "POST", path: "/v1/payments", body: pay(`,"metadata":{"\u001b":"x"}`), headers: key("h17"), status: 400, code: "invalid_request"},
		{name: "EscapeInMetadataValue", method: "POST", path: "/v1/payments", body: pay(`,"metadata":{"k":"\u001b[31mred"}`), headers: key("h18"), status: 400, code: "invalid_request"},
		{name: "LineBreakInMetadataValue", method: "POST", path: "/v1/payments", body: pay(`,"metadata":{"k":"a\nb"}`), headers: key("h19"), status: 400, code: "invalid_request"},
		{name: "EscapeInDescription", method: "POST", path: "/v1/payments", body: pay(`,"description":"\u001b[31mred"`), headers: key("h20"), status: 400, code: "invalid_request"},
		{name: "NullMetadataValue", method: "POST", path: "/v1/payments", body: pay(`,"metadata":{"k":null}`), headers: key("h16"), status: 400, code: "invalid_request"},
		{name: "InvalidUTF8InMetadata", method: "POST", path: "/v1/payments", body: pay(",\"metadata\":{\"k\":\"\xff\xfe\"}"), headers: key("h6"), status: 400, code: "invalid_request"},
		{name: "DuplicateAmount", method: "POST", path: "/v1/payments", body: pay(`,"amount":70000`), headers: key("h7"), status: 400, code: "invalid_request"},
		{name: "CaseFoldedAmount", method: "POST", path: "/v1/payments", body: pay(`,"AMOUNT":70000`), headers: key("h8"), status: 400, code: "invalid_request"},
		{name: "HugeNumber", method: "POST", path: "/v1/payments", body: []byte(`{"amount":1e400,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success"}`), headers: key("h9"), status: 400, code: "invalid_request"},
		{name: "DeepNesting", method: "POST", path: "/v1/payments", body: pay(`,"metadata":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000)), headers: key("h10"), status: 400, code: "invalid_request"},
		{name: "LoneSurrogate", method: "POST", path: "/v1/payments", body: pay(`,"description":"\ud800"`), headers: key("h11"), status: 400, code: "invalid_request"},
		{name: "NotJSON", method: "POST", path: "/v1/payments", body: []byte("\x00\x01\x02"), headers: key("h12"), status: 400, code: "invalid_request"},
		{name: "AdminNULInName", method: "POST", path: "/admin/v1/tenants", body: []byte(`{"name":"a\u0000","default_provider":"simulator"}`), headers: []string{"Authorization", admin, "Content-Type", "application/json"}, status: 400, code: "invalid_request"},
		// A NUL in a provider secret (which the simulator keeps as it
		// is) must not hide a second spelling of the name from the
		// strict check, or encoding/json would apply the last one.
		{name: "AdminCaseFoldedNameAfterANUL", method: "POST", path: "/admin/v1/tenants", body: []byte(`{"providers":{"simulator":{"k":"\u0000"}},"name":"Ada","NAME":"Evil","default_provider":"simulator"}`), headers: []string{"Authorization", admin, "Content-Type", "application/json"}, status: 400, code: "invalid_request"},
		{name: "AdminDuplicateNameAfterANUL", method: "POST", path: "/admin/v1/tenants", body: []byte(`{"providers":{"simulator":{"k":"\u0000"}},"name":"Ada","name":"Evil","default_provider":"simulator"}`), headers: []string{"Authorization", admin, "Content-Type", "application/json"}, status: 400, code: "invalid_request"},
		{name: "AdminDuplicateStatus", method: "PATCH", path: "/admin/v1/tenants/" + m.ID, body: []byte(`{"status":"active","status":"suspended"}`), headers: []string{"Authorization", admin, "Content-Type", "application/json"}, status: 400, code: "invalid_request"},

		// Encodings: refused before anything inflates them, on every route.
		{name: "GzipBombPayment", method: "POST", path: "/v1/payments", body: bomb, headers: append(key("h13"), "Content-Encoding", "gzip, gzip"), status: 415, code: "unsupported_content_encoding"},
		{name: "GzipBombWebhookUnauthenticated", method: "POST", path: "/v1/webhooks/paystack/" + m.ID, body: bomb, headers: []string{"Content-Encoding", "gzip", "Content-Type", "application/json"}, status: 415, code: "unsupported_content_encoding"},
		{name: "GzipBombToken", method: "POST", path: "/v1/auth/token", body: bomb, headers: []string{"Content-Encoding", "gzip", "Content-Type", "application/x-www-form-urlencoded"}, status: 415, code: "unsupported_content_encoding"},
		{name: "DeflateAdmin", method: "POST", path: "/admin/v1/tenants", body: bomb, headers: []string{"Authorization", admin, "Content-Encoding", "deflate"}, status: 415, code: "unsupported_content_encoding"},
		{name: "BrotliSecondHeader", raw: "POST /v1/payments HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nIdempotency-Key: h14\r\nContent-Encoding: identity\r\nContent-Encoding: br\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", status: 415, code: "unsupported_content_encoding"},

		// Ids and cursors.
		{name: "PathIDNUL", method: "GET", path: "/v1/payments/pay_%00", headers: []string{"Authorization", bearer}, status: 404, code: "payment_not_found"},
		{name: "PathIDInvalidUTF8", method: "GET", path: "/v1/payments/%FF%FE", headers: []string{"Authorization", bearer}, status: 404, code: "payment_not_found"},
		{name: "PathIDLong", method: "GET", path: "/v1/payments/pay_" + strings.Repeat("a", 2000), headers: []string{"Authorization", bearer}, status: 404, code: "payment_not_found"},
		// A request smuggled inside another's body past a proxy that read
		// the length the other way.
		{name: "ContentLengthTwiceDiffering", raw: "POST /v1/payments HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nIdempotency-Key: h40\r\nContent-Type: application/json\r\nContent-Length: 2\r\ncontent-length: " + strconv.Itoa(len(valid)) + "\r\nConnection: close\r\n\r\n" + valid, status: 400, code: "invalid_request"},
		{name: "ContentLengthTwiceSecondLarger", raw: "GET /healthz HTTP/1.1\r\nHost: HOST\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n", status: 400, code: "invalid_request"},
		{name: "ContentLengthTwiceSame", raw: "POST /v1/payments HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nIdempotency-Key: h42\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", status: 400, code: "invalid_request"},
		{name: "NULInAnotherHeader", raw: "GET /v1/payments HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nX-Anything: a\x00b\r\nConnection: close\r\n\r\n", status: 400, code: "invalid_request"},
		{name: "NULInTheTarget", raw: "GET /v1/payments/\xff\x00 HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nConnection: close\r\n\r\n", status: 400, code: "invalid_request"},
		{name: "ContentLengthAndChunked", raw: "POST /v1/payments HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nIdempotency-Key: h41\r\nContent-Type: application/json\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + strconv.FormatInt(int64(len(valid)), 16) + "\r\n" + valid + "\r\n0\r\n\r\n", status: 400, code: "invalid_request"},
		{name: "PathHuge", raw: "GET /v1/payments/pay_" + strings.Repeat("a", 10000) + " HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nConnection: close\r\n\r\n", oversized: true, status: 431, code: "headers_too_large"},
		{name: "CursorNUL", method: "GET", path: "/v1/payments?cursor=%00", headers: []string{"Authorization", bearer}, status: 400, code: "invalid_request"},
		{name: "CursorWithNULID", method: "GET", path: "/v1/payments?cursor=" + cursor("2026-12-03T10:00:00Z|pay_\x00"), headers: []string{"Authorization", bearer}, status: 400, code: "invalid_request"},
		{name: "CursorWithInvalidUTF8ID", method: "GET", path: "/v1/payments?cursor=" + cursor("2026-12-03T10:00:00Z|\xff"), headers: []string{"Authorization", bearer}, status: 400, code: "invalid_request"},
		{name: "StatusNUL", method: "GET", path: "/v1/payments?status=%00", headers: []string{"Authorization", bearer}, status: 400, code: "invalid_request"},
		{name: "LimitNUL", method: "GET", path: "/v1/payments?limit=%00", headers: []string{"Authorization", bearer}, status: 400, code: "invalid_request"},
		{name: "AdminTenantIDNUL", method: "GET", path: "/admin/v1/tenants/ten_%00", headers: []string{"Authorization", admin}, status: 404, code: "tenant_not_found"},
		{name: "AdminTenantIDInvalidUTF8", method: "PATCH", path: "/admin/v1/tenants/%FF", body: []byte(`{"status":"suspended"}`), headers: []string{"Authorization", admin, "Content-Type", "application/json"}, status: 404, code: "tenant_not_found"},
		{name: "AdminRotateNUL", method: "POST", path: "/admin/v1/tenants/%00/credentials", headers: []string{"Authorization", admin}, status: 404, code: "tenant_not_found"},
		{name: "AdminCursorNUL", method: "GET", path: "/admin/v1/tenants?cursor=" + cursor("1.ten_\x00"), headers: []string{"Authorization", admin}, status: 400, code: "invalid_request"},
		{name: "AdminCursorInvalidUTF8", method: "GET", path: "/admin/v1/tenants?cursor=" + cursor("1.ten_\xff"), headers: []string{"Authorization", admin}, status: 400, code: "invalid_request"},

		// A query on a request that writes: no write route reads one, and
		// the fingerprint does not hash it (h43 is used again below).
		{name: "QueryOnAPayment", method: "POST", path: "/v1/payments?amount=1", body: pay(""), headers: key("h43"), status: 400, code: "invalid_request"},
		{name: "QueryOnARotation", method: "POST", path: "/admin/v1/tenants/" + m.ID + "/credentials?dry_run=1", headers: []string{"Authorization", admin}, status: 400, code: "invalid_request"},
		{name: "QueryOnAWebhookIsTheMerchants", method: "POST", path: "/v1/webhooks/paystack/" + m.ID + "?from=dashboard", body: []byte(`{}`), headers: []string{"Content-Type", "application/json"}, status: 401, code: "invalid_signature"},
		{name: "QueryOnAWebhookAsCasedAtTheProvider", method: "POST", path: "/V1/Webhooks/paystack/" + m.ID + "?from=dashboard", body: []byte(`{}`), headers: []string{"Content-Type", "application/json"}, status: 401, code: "invalid_signature"},
		{name: "QueryOnTheTokenRoute", method: "POST", path: "/v1/auth/token?grant_type=client_credentials", body: []byte("grant_type=client_credentials"), headers: []string{"Content-Type", "application/x-www-form-urlencoded", "Authorization", basic(m.ClientID, m.ClientSecret)}, status: 400, code: "invalid_request", oauth: "invalid_request"},
		{name: "AuthorizationTwiceOnTheTokenRoute", raw: "POST /v1/auth/token HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + basic(m.ClientID, m.ClientSecret) + "\r\nAuthorization: Basic b3RoZXI6eA==\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 29\r\nConnection: close\r\n\r\ngrant_type=client_credentials", status: 400, code: "invalid_request", oauth: "invalid_request"},
		{name: "AuthorizationTwice", raw: "GET /v1/payments HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nAuthorization: Bearer other\r\nConnection: close\r\n\r\n", status: 400, code: "invalid_request"},

		// Webhooks: no authentication but the signature, and one answer
		// for whatever cannot be verified (no tenant id oracle).
		{name: "WebhookUnknownTenant", method: "POST", path: "/v1/webhooks/paystack/ten_000000000000000000000000", body: []byte(`{"event":"charge.success"}`), headers: []string{"Content-Type", "application/json"}, status: 401, code: "invalid_signature"},
		{name: "WebhookTenantNUL", method: "POST", path: "/v1/webhooks/paystack/%00", body: []byte(`{}`), headers: []string{"Content-Type", "application/json"}, status: 401, code: "invalid_signature"},
		{name: "WebhookTenantInvalidUTF8", method: "POST", path: "/v1/webhooks/stripe/ten_%FF", body: []byte(`{}`), status: 401, code: "invalid_signature"},
		{name: "WebhookProviderNUL", method: "POST", path: "/v1/webhooks/%00/" + m.ID, body: []byte(`{}`), status: 401, code: "invalid_signature"},
		{name: "WebhookUnsignedNULBody", method: "POST", path: "/v1/webhooks/paystack/" + m.ID, body: []byte("{\"event\":\"\x00\"}"), status: 401, code: "invalid_signature"},

		// Credentials and headers.
		{name: "BasicClientIDNUL", method: "POST", path: "/v1/auth/token", body: []byte("grant_type=client_credentials"), headers: []string{"Content-Type", "application/x-www-form-urlencoded", "Authorization", basic("cli_\x00", "x")}, status: 401, code: "invalid_client"},
		{name: "BasicClientIDInvalidUTF8", method: "POST", path: "/v1/auth/token", body: []byte("grant_type=client_credentials"), headers: []string{"Content-Type", "application/x-www-form-urlencoded", "Authorization", basic("cli_\xff\xfe", "\xff")}, status: 401, code: "invalid_client"},
		{name: "BasicRawNUL", raw: "POST /v1/auth/token HTTP/1.1\r\nHost: HOST\r\nAuthorization: Basic \x00\x00\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 29\r\nConnection: close\r\n\r\ngrant_type=client_credentials", status: 400, code: "invalid_request"},
		{name: "BasicClientIDHuge", method: "POST", path: "/v1/auth/token", body: []byte("grant_type=client_credentials"), headers: []string{"Content-Type", "application/x-www-form-urlencoded", "Authorization", basic(strings.Repeat("c", 700), "x")}, status: 401, code: "invalid_client"},
		{name: "GrantTypeNUL", method: "POST", path: "/v1/auth/token", body: []byte("grant_type=%00"), headers: []string{"Content-Type", "application/x-www-form-urlencoded", "Authorization", basic(m.ClientID, m.ClientSecret)}, status: 400, code: "unsupported_grant_type"},
		{name: "BearerGarbage", raw: "GET /v1/payments HTTP/1.1\r\nHost: HOST\r\nAuthorization: Bearer \xff\xfe.\x01.\x02\r\nConnection: close\r\n\r\n", status: 400, code: "invalid_request"},
		{name: "BearerNUL", raw: "GET /v1/payments HTTP/1.1\r\nHost: HOST\r\nAuthorization: Bearer a\x00b\r\nConnection: close\r\n\r\n", status: 400, code: "invalid_request"},
		{name: "IdempotencyKeyControlByte", raw: "POST /v1/payments HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nIdempotency-Key: a\x01b\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", status: 400, code: "invalid_request"},
		{name: "IdempotencyKeyHighBytes", raw: "POST /v1/payments HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nIdempotency-Key: caf\xc3\xa9\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", status: 400, code: "idempotency_key_invalid"},
		{name: "IdempotencyKeyTwice", raw: "POST /v1/payments HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", status: 400, code: "idempotency_key_invalid"},
		{name: "IdempotencyKeyHuge", method: "POST", path: "/v1/payments", body: pay(""), headers: key(strings.Repeat("k", 600)), status: 400, code: "idempotency_key_invalid"},

		// Refused by the HTTP server itself, before any middleware: still
		// a problem with a request id, and nothing of the request quoted.
		{name: "MultipartBody", method: "POST", path: "/v1/payments", body: []byte("x"), headers: []string{"Authorization", bearer, "Idempotency-Key", "h15", "Content-Type", "multipart/form-data; boundary=x"}, status: 415, code: "unsupported_media_type"},
		{name: "MultipartBodyUnauthenticated", method: "POST", path: "/v1/auth/token", body: []byte("--x\r\nbroken"), headers: []string{"Content-Type", "multipart/form-data; boundary=x"}, status: 400, code: "invalid_request"},
		{name: "NotHTTP", raw: "secret-ish\r\n\r\n", status: 400, code: "invalid_request"},
		{name: "BadContentLength", raw: "POST /v1/payments?secret-ish HTTP/1.1\r\nHost: HOST\r\nAuthorization: " + bearer + "\r\nContent-Length: abc\r\n\r\n", status: 400, code: "invalid_request"},
		{name: "AuditCursorYear10000", method: "GET", path: "/admin/v1/audit-events?cursor=" + cursor("253402300800000000.aud_x"), headers: []string{"Authorization", admin}, status: 400, code: "invalid_request"},
		{name: "TenantsCursorYear10000", method: "GET", path: "/admin/v1/tenants?cursor=" + cursor("253402300800000000.ten_x"), headers: []string{"Authorization", admin}, status: 400, code: "invalid_request"},
		{name: "UnknownMethod", raw: "\x00\x01GET\x00 /v1/payments?secret-ish HTTP/1.1\r\nHost: HOST\r\n\r\n", status: 400, code: "invalid_request"},
		{name: "UnknownMethodWord", raw: "BREW /v1/payments HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n", status: 501, code: "method_not_implemented"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var got apptest.Response
			switch {
			case r.oversized:
				got = oversizedExchange(t, g, r.raw)
			case r.raw != "":
				got = rawExchange(t, g, r.raw)
			default:
				got = g.Do(r.method, r.path, r.body, r.headers...)
			}
			require.Equal(t, r.status, got.StatusCode, "%s", got.Body)
			require.Equal(t, "application/problem+json", got.Header.Get("Content-Type"))
			var p map[string]any
			require.NoError(t, json.Unmarshal(got.Body, &p), "%s", got.Body)
			require.Equal(t, r.code, p["code"], "%s", got.Body)
			if r.oauth != "" {
				require.Equal(t, r.oauth, p["error"], "%s", got.Body)
			}
			require.NotEmpty(t, p["request_id"], "%s", got.Body)
			require.Equal(t, p["request_id"], got.Header.Get("X-Request-Id"))
			require.NotContains(t, string(got.Body), "secret-ish", "nothing of the request is quoted")
			require.NotContains(t, string(got.Body), "multipart:", "nor the parser's own words")
		})
	}
	t.Run("NothingWasChargedOrLoggedAsAnError", func(t *testing.T) {
		var n int64
		require.NoError(t, g.App.DB().Table("payments").Count(&n).Error)
		require.Zero(t, n)
		for _, line := range strings.Split(g.Logs.String(), "\n") {
			require.NotContains(t, line, `"level":"ERROR"`, fmt.Sprintf("an error-level log line: %s", line))
			// Validation's own 400, not the database's refusal (a WARN).
			require.NotContains(t, line, "the database refused a value", line)
		}
		require.NotContains(t, g.Logs.String(), m.Token, "no token is logged, even from a request the server could not read")
		require.NotContains(t, g.Logs.String(), "secret-ish", "nor any of such a request's bytes")
		require.NotContains(t, g.Logs.String(), strings.TrimPrefix(admin, "Bearer "))
	})
	t.Run("ARefusedQueryTookNothing", func(t *testing.T) {
		// Its key was never claimed, and the rotation never ran.
		paid := g.Do("POST", "/v1/payments", pay(""), key("h43")...)
		require.Equal(t, 201, paid.StatusCode, "%s", paid.Body)
		require.Empty(t, paid.Header.Get("Idempotent-Replayed"))
		require.NotEmpty(t, g.Token(m.ClientID, m.ClientSecret), "the credentials were not rotated")
	})
}

// A refused ambiguous request also ends its connection: the server read
// the body one way, and what it left on a kept-alive connection would be
// parsed and served as the next request — the smuggled one.
func TestASmuggledRequestIsNeverServed(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	u, err := url.Parse(g.URL)
	require.NoError(t, err)
	smuggled := "GET /healthz HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n"
	for name, head := range map[string]string{
		"TwoLengths":       "Content-Length: " + strconv.Itoa(2+len(smuggled)) + "\r\nContent-Length: 2\r\n",
		"LengthAndChunked": "Content-Length: " + strconv.Itoa(2+len(smuggled)) + "\r\nTransfer-Encoding: chunked\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", u.Host)
			require.NoError(t, err)
			defer conn.Close()
			body := "{}"
			if name == "LengthAndChunked" {
				body = "2\r\n{}\r\n0\r\n\r\n"
			}
			_, err = io.WriteString(conn, "POST /v1/payments HTTP/1.1\r\nHost: "+u.Host+"\r\nContent-Type: application/json\r\n"+head+"\r\n"+body+smuggled)
			require.NoError(t, err)
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
			rd := bufio.NewReader(conn)
			first, err := http.ReadResponse(rd, nil)
			require.NoError(t, err)
			_, _ = io.ReadAll(first.Body)
			require.Equal(t, http.StatusBadRequest, first.StatusCode)
			require.True(t, first.Close, "the connection ends with the refusal")
			second, err := http.ReadResponse(rd, nil)
			require.Error(t, err, "nothing more is served on it: %v", second)
		})
	}
}
