package app_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/pipeline"
)

// DATABASE_PIPELINE_CONNS=0 sends every statement on its own pooled
// connection: payments work the same, and there is no pipeline to report.
func TestPipelineOff(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("DATABASE_PIPELINE_CONNS", "0"))
	require.Nil(t, pipeline.Of(g.App.DB()))
	m := g.Onboard(nil)
	pay := map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"}
	require.Equal(t, http.StatusCreated, g.Pay(m, "off-1", pay).StatusCode)
	replay := g.Pay(m, "off-1", pay)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	s := scrapeURL(t, g.URL+"/metrics")
	require.NotContains(t, s, "oncepay_db_pipeline_statements_total")

	on := apptest.Start(t)
	require.NotNil(t, pipeline.Of(on.App.DB()), "on by default")
}
