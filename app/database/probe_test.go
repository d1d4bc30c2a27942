package database_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
)

// The readiness probe's connection, ended by the server between two checks
// (a failover, idle_session_timeout), does not make the next check say the
// database is unreachable: one new connection decides. A closed pool is
// still not ready.
func TestProbeOutlivesItsConnection(t *testing.T) {
	t.Parallel()
	app := fmt.Sprintf("probe-test-%d", time.Now().UnixNano())
	url := dbtest.PostgresURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	db, err := database.Open(url+sep+"application_name="+app, database.Options{MaxOpenConns: 2, PipelineConns: -1})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, database.Ping(ctx, db))

	// The probe's backend: this test's application, its last statement pgx's ping.
	var pid int
	require.NoError(t, db.Raw(`SELECT pid FROM pg_stat_activity WHERE application_name = ? AND query = '-- ping'`, app).Scan(&pid).Error)
	require.NotZero(t, pid)
	require.NoError(t, db.Exec(`SELECT pg_terminate_backend(?, 5000)`, pid).Error)
	require.NoError(t, database.Ping(ctx, db), "a new connection, not a 503")

	require.NoError(t, database.Close(db))
	require.Error(t, database.Ping(ctx, db), "closed: not ready")
}
