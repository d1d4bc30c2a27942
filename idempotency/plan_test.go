package idempotency_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
)

// TestWritesFindTheKeyByPrimaryKey guards the hot path's plans on a young
// table, before autovacuum has gathered any statistics — every new
// deployment, and every benchmark. An index led by status once made the
// planner find the key a completion updates by scanning every in-progress
// entry (dead ones included) instead of using the primary key; the bench
// saw each completion read ~24 index entries and the rate drop with it.
func TestWritesFindTheKeyByPrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Postgres(t)

	// Capture the UPDATEs and DELETEs the store sends, exactly as sent.
	type stmt struct {
		sql  string
		vars []any
	}
	var mu sync.Mutex
	var updates []stmt
	capture := func(d *gorm.DB) {
		mu.Lock()
		defer mu.Unlock()
		updates = append(updates, stmt{d.Statement.SQL.String(), append([]any(nil), d.Statement.Vars...)})
	}
	require.NoError(t, db.Callback().Update().After("gorm:update").Register("test:capture", capture))
	require.NoError(t, db.Callback().Delete().After("gorm:delete").Register("test:capture", capture))

	s, _ := newStore(t, db)
	for i := range 100 { // a table with some history, never analyzed
		c := claim(t, s, "m_plan", fmt.Sprintf("old-%d", i))
		require.NoError(t, s.Complete(ctx, nil, c, idempotency.Response{Status: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{}`)}))
	}
	c := claim(t, s, "m_plan", "k-complete")
	require.NoError(t, s.Complete(ctx, nil, c, idempotency.Response{Status: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{}`)}))
	c = claim(t, s, "m_plan", "k-release")
	require.NoError(t, s.Release(ctx, c))

	sqlDB, err := db.DB()
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, updates)
	for _, u := range updates {
		rows, err := sqlDB.QueryContext(ctx, "EXPLAIN "+u.sql, u.vars...)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		rows.Close()
		require.Contains(t, strings.Join(plan, "\n"), "idempotency_keys_pkey", "%s\n%s", u.sql, strings.Join(plan, "\n"))
	}
}
