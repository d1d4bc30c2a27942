package query_test

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/app/query"
)

func app() *fiber.App {
	f := fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
		if p, ok := problem.As(err); ok {
			return problem.Write(c, p)
		}
		return err
	}})
	f.Get("/", func(c *fiber.Ctx) error {
		if err := query.Known(c, "status", "limit", "metadata["); err != nil {
			return err
		}
		return c.SendString("ok")
	})
	return f
}

func TestKnown(t *testing.T) {
	f := app()
	for _, tc := range []struct {
		query string
		field string // "" when taken
	}{
		{"", ""},
		{"status=failed&limit=5", ""},
		{"metadata[order_id]=1001&metadata[x]=", ""},
		{"status=a&status=b", "status"},
		{"metadata[x]=1&metadata[x]=2", "metadata[x]"},
		{"limit=1&status=a&limit=2", "limit"},
		{"statuss=failed", "statuss"},
		{"idempotency_key=k", "idempotency_key"},
		{"limit=5&Status=failed", "Status"},
		{"metadata=1", "metadata"},
		{"metadata[x", "metadata[x"},
		{"metadataX]=1", "metadataX]"},
		{"%00=1", "query"},
		{url.QueryEscape("a b") + "=1", "query"},
	} {
		resp, err := f.Test(httptest.NewRequest("GET", "/?"+tc.query, nil))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if tc.field == "" {
			if resp.StatusCode != 200 {
				t.Errorf("%q: %d %s", tc.query, resp.StatusCode, body)
			}
			continue
		}
		var p struct {
			Code   string `json:"code"`
			Errors []struct {
				Field string `json:"field"`
			} `json:"errors"`
		}
		if resp.StatusCode != 400 || json.Unmarshal(body, &p) != nil || p.Code != "invalid_request" ||
			len(p.Errors) != 1 || p.Errors[0].Field != tc.field {
			t.Errorf("%q: %d %s, want 400 naming %q", tc.query, resp.StatusCode, body, tc.field)
		}
	}
}

// The refusal lists the parameters as a caller writes them (metadata[key],
// not the prefix the route matches on).
func TestKnownNamesWhatTheRouteTakes(t *testing.T) {
	resp, err := app().Test(httptest.NewRequest("GET", "/?statuss=failed", nil))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "metadata[key]") || strings.Contains(string(body), "metadata[,") {
		t.Errorf("the reason should name metadata[key]: %s", body)
	}
}

// FuzzKnown: whatever the query string, the check answers 200 or a 400
// problem, and never echoes more than a printable name of 64 bytes.
func FuzzKnown(f *testing.F) {
	for _, s := range []string{"status=1", "metadata[a]=b", "x=1", "%00", "a&b&&c=", "metadata[=1"} {
		f.Add(s)
	}
	a := app()
	f.Fuzz(func(t *testing.T, q string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.URL.RawQuery = q
		resp, err := a.Test(req)
		if err != nil {
			return // not a request the client could send
		}
		if resp.StatusCode != 200 && resp.StatusCode != 400 {
			t.Fatalf("%q: %d", q, resp.StatusCode)
		}
		if resp.StatusCode == 400 {
			var p struct {
				Errors []struct {
					Field string `json:"field"`
				} `json:"errors"`
			}
			body, _ := io.ReadAll(resp.Body)
			if json.Unmarshal(body, &p) != nil || len(p.Errors) != 1 || len(p.Errors[0].Field) > 64 {
				t.Fatalf("%q: %s", q, body)
			}
		}
	})
}
