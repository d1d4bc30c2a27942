package payments

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/oncepay/gateway/providers"
)

// FuzzDecodeCursor: a cursor is untrusted input (the client may send any
// string back). Any string is refused or decodes to a cursor that is
// stable: its encoding decodes to the same cursor and encodes to itself,
// so a page boundary never drifts however the client spelt it (another
// offset, base64 with stray trailing bits). The time is UTC within the
// years 0001-9999 (reqtime), and what pageParams lets through names a
// well-formed id.
func FuzzDecodeCursor(f *testing.F) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	f.Add(encodeCursor(Cursor{CreatedAt: at, ID: "pay_0193e4a27b4c7d2e9f1a2b3c4d5e6f70"}))
	f.Add(encodeCursor(Cursor{CreatedAt: at, ID: "re_0193e4a27b4c7d2e9f1a2b3c4d5e6f70"}))
	f.Add("MjAyNi0xMi0wMlQxMDowMDowMFp8cGF5XzAx") // the documented example
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("2026-12-02T15:00:00+05:00|pay_x")))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("9999-12-31T23:59:59-23:59|pay_x")))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("2026-12-02T10:00:00Z|pay_\x00\xff|x")))
	f.Add(base64.StdEncoding.EncodeToString([]byte("2026-12-02T10:00:00Z|pay_x")))
	f.Add("")
	f.Add("%%%")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s)
		if err != nil {
			return
		}
		require.NotEmpty(t, c.ID)
		require.Equal(t, time.UTC, c.CreatedAt.Location())
		if y := c.CreatedAt.Year(); y < 1 || y > 9999 {
			t.Fatalf("%q decodes to the year %d", s, y)
		}
		enc := encodeCursor(c)
		again, err := decodeCursor(enc)
		require.NoError(t, err, "%q decodes to %+v, whose encoding %q does not decode", s, c, enc)
		require.True(t, c.CreatedAt.Equal(again.CreatedAt), "%q: %v then %v", s, c.CreatedAt, again.CreatedAt)
		require.Equal(t, c.ID, again.ID)
		require.Equal(t, enc, encodeCursor(again), "the encoding of a cursor is a fixed point")
		if wellFormed("pay_", c.ID) && !utf8.ValidString(c.ID) {
			t.Fatalf("well-formed id %q is not UTF-8", c.ID)
		}
	})
}

// createSeeds are request bodies: what a merchant sends, and what a
// hostile or careless client does (a float, a string amount, lower-case
// or unknown currency, a display-name email, NUL escapes, duplicate and
// case-folded names, null metadata values, a line break in a value).
var createSeeds = []string{
	`{"amount":5000,"currency":"NGN","email":"ada@example.com","payment_method":"sim_success","description":"Order #1001","metadata":{"order_id":"1001"}}`,
	`{"amount":1,"currency":" usd ","email":" ada@example.com ","payment_method":"pm_card_visa","provider":"stripe"}`,
	`{"amount":1000000000000,"currency":"KWD","email":"a@b.co","payment_method":"AUTH_x","metadata":{}}`,
	`{"amount":1000000000001,"currency":"NGN","email":"a@b.co","payment_method":"x"}`,
	`{"amount":50.5,"currency":"NGN","email":"a@b.co","payment_method":"x"}`,
	`{"amount":"5000","currency":"NGN","email":"a@b.co","payment_method":"x"}`,
	`{"amount":5e3,"currency":"ngn","email":"Ada <ada@example.com>","payment_method":"x"}`,
	`{"amount":-1,"currency":"XXX","email":"@","payment_method":""}`,
	`{"amount":5000,"AMOUNT":70000,"currency":"NGN","email":"a@b.co","payment_method":"x"}`,
	`{"amount":5000,"amount":70000,"currency":"NGN","email":"a@b.co","payment_method":"x"}`,
	`{"amount":5000,"currency":"NGN","email":"a@b.co","payment_method":"x\u0000","description":"a\nb"}`,
	`{"amount":5000,"currency":"NGN","email":"\"a b\"@b.co","payment_method":"x","metadata":{"k":null}}`,
	`{"amount":5000,"currency":"NGN","email":"a@b.co","payment_method":"x","metadata":{"":"v","k":"\u001b[31m"}}`,
	`{"amount":5000,"currency":"uſd","email":"ådå@exämple.com","payment_method":"x","description":"\u2028\u202e"}`,
	`{"amount":5000,"currency":"NGN","email":"a@b.co","payment_method":"x","metadata":{"order id":"\ud83d\ude00"}}`,
	`{"amount":5000,"currency":"NGN","email":"a@b.co","payment_method":"x"} {}`,
	`[]`, `null`, ``, `{`,
}

// FuzzParseCreate: a create body is untrusted input. Every body is refused
// with a 400 invalid_request, or yields an input within the documented
// limits: amount 1 to 10^12, currency an ISO 4217 code in upper case,
// email a plain address the list's email filter can search for, payment
// method printable ASCII, description and metadata printable text within
// their bounds, metadata stored as a JSON object that passes the check
// again. And it is stable: the input written back as a body parses to the
// same input (what is stored, fingerprinted and sent to the provider is
// what the validator saw).
func FuzzParseCreate(f *testing.F) {
	for _, s := range createSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, p := parseCreate(body)
		if p != nil {
			require.Equal(t, fiber.StatusBadRequest, p.Status)
			require.Equal(t, "invalid_request", p.Code)
			require.NotEmpty(t, p.Errors)
			return
		}
		if in.Amount <= 0 || in.Amount > maxAmount {
			t.Fatalf("accepted amount %d", in.Amount)
		}
		if _, ok := providers.Exponent(in.Currency); !ok || !upperASCII(in.Currency) {
			t.Fatalf("accepted currency %q", in.Currency)
		}
		if in.Email == "" || !printableText(in.Email, 254) {
			t.Fatalf("accepted email %q, which the list's email filter refuses", in.Email)
		}
		if strings.IndexFunc(in.Email, unicode.IsControl) >= 0 {
			// As for a description or metadata: a control character
			// (a C1 CSI is a terminal escape) ends up in dashboards and logs.
			t.Fatalf("accepted email %q with a control character", in.Email)
		}
		if in.PaymentMethod == "" || len(in.PaymentMethod) > maxMethod || !printable(in.PaymentMethod) {
			t.Fatalf("accepted payment method %q", in.PaymentMethod)
		}
		if len(in.Provider) > 64 || in.Provider != strings.TrimSpace(in.Provider) {
			t.Fatalf("accepted provider %q", in.Provider)
		}
		if !utf8.ValidString(in.Description) || utf8.RuneCountInString(in.Description) > maxDescription ||
			strings.IndexFunc(in.Description, unicode.IsControl) >= 0 {
			t.Fatalf("accepted description %q", in.Description)
		}
		md := storedMetadata(t, in.Metadata)

		again, p := parseCreate(mustJSON(t, map[string]any{
			"amount": in.Amount, "currency": in.Currency, "email": in.Email, "payment_method": in.PaymentMethod,
			"provider": in.Provider, "description": in.Description, "metadata": md,
		}))
		require.Nil(t, p, "the accepted input %+v, written back, is refused", in)
		require.Equal(t, in, again)
	})
}

// FuzzParseRefund: a refund body is refused with a 400, or yields an
// amount that is 0 (all that is left) or 1 to 10^12, a reason of at most
// 200 characters of printable text with no surrounding space, and
// metadata as for a payment; written back, it parses to the same input.
func FuzzParseRefund(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"amount":3000,"reason":"requested_by_customer","metadata":{"ticket":"T-1"}}`,
		`{"amount":null,"reason":"  duplicate  "}`, `{"amount":0}`, `{"amount":-5}`, `{"amount":30.0}`,
		`{"amount":"3000"}`, `{"amount":1000000000001}`, `{"reason":"a\u0000b"}`, `{"reason":"a\tb"}`,
		`{"reason":"` + strings.Repeat("é", 201) + `"}`, `{"metadata":{"k":null}}`, `{"Reason":"x"}`,
		`{"amount":1,"amount":2}`, `{"reason":"\u0085"}`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, p := parseRefund(body)
		if p != nil {
			require.Equal(t, fiber.StatusBadRequest, p.Status)
			require.NotEmpty(t, p.Errors)
			return
		}
		if in.Amount < 0 || in.Amount > maxAmount {
			t.Fatalf("accepted amount %d", in.Amount)
		}
		if !utf8.ValidString(in.Reason) || utf8.RuneCountInString(in.Reason) > maxReason ||
			strings.IndexFunc(in.Reason, unicode.IsControl) >= 0 || in.Reason != strings.TrimSpace(in.Reason) {
			t.Fatalf("accepted reason %q", in.Reason)
		}
		md := storedMetadata(t, in.Metadata)
		req := map[string]any{"reason": in.Reason, "metadata": md}
		if in.Amount != 0 {
			req["amount"] = in.Amount
		}
		again, p := parseRefund(mustJSON(t, req))
		require.Nil(t, p, "the accepted input %+v, written back, is refused", in)
		require.Equal(t, in, again)
	})
}

// storedMetadata checks metadata as stored: a JSON object of at most 50
// keys and string values of printable text (no control characters, as
// documented) that passes checkMetadata again.
func storedMetadata(t *testing.T, stored string) map[string]*string {
	t.Helper()
	var md map[string]*string
	require.NoError(t, json.Unmarshal([]byte(stored), &md), "stored metadata %q", stored)
	require.NotNil(t, md, "stored metadata %q is not an object", stored)
	require.Empty(t, checkMetadata(md), "stored metadata %q", stored)
	require.Equal(t, stored, encodeMetadata(md), "stored metadata is in one spelling")
	for k, v := range md {
		// Documented: "all printable text (no control characters)".
		if strings.IndexFunc(k, unicode.IsControl) >= 0 || strings.IndexFunc(*v, unicode.IsControl) >= 0 {
			t.Fatalf("accepted metadata %q: %q with a control character", k, *v)
		}
	}
	return md
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func upperASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return s != ""
}

// FuzzMetadataFilter: the list's metadata[key]=value filters come from the
// query string. Whatever the query, the filter never panics and accepts
// at most 5 pairs whose keys are [A-Za-z0-9_.-] and values printable
// text, each one a payment's metadata can hold (checkMetadata: a filter
// the create would refuse matches nothing and only costs a query). And a
// single pair, as a client encodes it, is accepted exactly when the key
// and value are within those rules, and read back as sent.
func FuzzMetadataFilter(f *testing.F) {
	f.Add("metadata[order_id]=1001&status=succeeded", "order_id", "1001")
	f.Add("metadata%5Border_id%5D=1001&metadata[a]=1&metadata[b]=2&metadata[c]=3&metadata[d]=4&metadata[e]=5", "a.b-c_D", "x y")
	f.Add("metadata[a=b]=1", "a=b", "1")
	f.Add("metadata[]=1&metadata[x", "", "\x00")
	f.Add("metadata[a]=%00&metadata[b]=%ff&metadata[c]=%E2%80%AE", "k", "\xff")
	f.Add("metadata[a]=1&metadata[a]=2", "ключ", "значение")
	f.Add("metadata[a]]=1&metadata[[a]=1&metadata[a]extra=1", "a]", strings.Repeat("v", 501))
	app := fiber.New()
	filter := func(query string) (map[string]string, error) {
		var fctx fasthttp.RequestCtx
		fctx.Request.SetRequestURI("/v1/payments?" + query)
		c := app.AcquireCtx(&fctx)
		defer app.ReleaseCtx(c)
		return metadataFilter(c)
	}
	f.Fuzz(func(t *testing.T, query, key, value string) {
		md, err := filter(query)
		if err == nil {
			require.LessOrEqual(t, len(md), 5)
			held := map[string]*string{}
			for k, v := range md {
				if !plainToken(k, maxMetaKey) || strings.Contains(k, "=") || !printableText(v, maxMetaValue) {
					t.Fatalf("%q: accepted filter %q=%q", query, k, v)
				}
				held[k] = &v
			}
			require.Empty(t, checkMetadata(held), "%q: a filter no payment's metadata can hold", query)
		}

		md, err = filter(url.Values{"metadata[" + key + "]": {value}}.Encode())
		if !plainToken(key, maxMetaKey) || strings.Contains(key, "=") || !printableText(value, maxMetaValue) {
			require.Error(t, err, "metadata[%q]=%q", key, value)
			return
		}
		require.NoError(t, err, "metadata[%q]=%q", key, value)
		require.Equal(t, map[string]string{key: value}, md)
	})
}
