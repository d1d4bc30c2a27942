package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
)

// A provider that refuses (503 provider_unavailable, nothing charged, the
// key released) is a documented answer: its access line is a warning, not
// an error an on-call engineer would be paged for.
func TestDependencyAnswersAreNotErrors(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	r := g.Pay(m, "down-1", map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_unavailable"})
	require.Equal(t, http.StatusServiceUnavailable, r.StatusCode, "%s", r.Body)
	var seen bool
	for _, line := range strings.Split(g.Logs.String(), "\n") {
		require.NotContains(t, line, `"level":"ERROR"`, "an error-level log line: %s", line)
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "request" && l["status"] == float64(503) {
			seen = true
			require.Equal(t, "WARN", l["level"], line)
		}
	}
	require.True(t, seen, "the 503's access line")
}
