package scheduler_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/scheduler"
)

// TestAppSchedulerSweepsOnDemand drives the wired scheduler of a running
// app: a charge whose answer was lost (sim_timeout) leaves the key in
// progress; once it is stale, a sweep triggered through App.Scheduler
// settles it, logs one line with its counts, and the retry replays.
func TestAppSchedulerSweepsOnDemand(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	first := g.Pay(m, "lost-answer", payBody("sim_timeout"))
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))

	sw := g.App.Scheduler.Sweeper()
	c, err := sw.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, scheduler.Counts{}, c, "not stale yet")

	db := g.App.DB()
	require.NoError(t, db.Exec("UPDATE idempotency_keys SET attempted_at = ? WHERE merchant_id = ? AND key = ?",
		time.Now().UTC().Add(-time.Hour), m.ID, "lost-answer").Error)
	c, err = sw.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, scheduler.Counts{Resolved: 1}, c)
	require.Contains(t, g.Logs.String(), `"msg":"scheduler: sweep run"`)
	require.True(t, strings.Contains(g.Logs.String(), `"resolved":1`), g.Logs.String())

	rec, ok := getKey(t, db, m.ID, "lost-answer")
	require.True(t, ok)
	again := g.Pay(m, "lost-answer", payBody("sim_timeout"))
	require.Equal(t, rec.StatusCode, again.StatusCode)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(rec.Body), string(again.Body))
	n, err := g.App.Sim.Charges(context.Background(), providers.Reference(m.ID, "lost-answer"))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the sweeper looked up, never charged")
}
