package app

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
)

// An outage fails every request: "database unavailable" is an ERROR once
// a minute (with a count of the rest), naming the request's own path, not
// one ERROR per request burying every other line.
func TestADatabaseOutageIsOneErrorAMinute(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	f := fiber.New(fiber.Config{ErrorHandler: errorHandler(slog.New(slog.NewJSONHandler(&logs, nil)))})
	f.Use(requestID())
	f.Get("/v1/payments/:id", func(*fiber.Ctx) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "connection refused", IsTemporary: true}}
	})
	for range 3 {
		resp, err := f.Test(httptest.NewRequest("GET", "/v1/payments/pay_1", nil), -1)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	}
	require.Equal(t, 1, strings.Count(logs.String(), `"msg":"database unavailable"`), logs.String())
	require.Contains(t, logs.String(), `"path":"/v1/payments/pay_1"`)
}
