package audit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/audit"
	"github.com/oncepay/gateway/app/database/dbtest"
)

// One object's events are read by their index (migration 19), newest
// first, not by a scan of the whole log.
func TestEventsOfOneTargetUseTheirIndex(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	require.NoError(t, db.Exec(`INSERT INTO audit_events (id, at, actor, action, target_type, target_id, tenant_id)
SELECT 'aud_' || i, now() - i * interval '1 second', 'admin', 'payment.resolved', 'payment', 'pay_' || i, 'ten_' || (i % 7)
FROM generate_series(1, 20000) i`).Error)
	require.NoError(t, db.Exec("ANALYZE audit_events").Error)
	var plan []string
	require.NoError(t, db.Raw(`EXPLAIN SELECT * FROM audit_events WHERE target_id = 'pay_42' ORDER BY at DESC, id DESC LIMIT 51`).Scan(&plan).Error)
	require.Contains(t, strings.Join(plan, "\n"), "audit_events_target_idx")

	events, more, err := audit.NewStore(db).List(context.Background(), audit.Filter{TargetID: "pay_42"})
	require.NoError(t, err)
	require.False(t, more)
	require.Len(t, events, 1)
	require.Equal(t, "pay_42", events[0].TargetID)
}
