package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
)

// widgets stands in for a resource table (payments): CompleteWith must
// write it and complete the key together, or neither.
func widgets(t *testing.T, db *gorm.DB, states ...string) {
	t.Helper()
	require.NoError(t, db.Exec("CREATE TABLE widgets (id TEXT PRIMARY KEY, state TEXT NOT NULL)").Error)
	for i, s := range states {
		require.NoError(t, db.Exec("INSERT INTO widgets VALUES (?, ?)", []string{"w1", "w2"}[i], s).Error)
	}
}

// finishWidget moves an open widget to done while the claim owns its key.
func finishWidget(id string) clause.Expr {
	return clause.Expr{SQL: "UPDATE widgets SET state = 'done' WHERE id = ? AND state = 'open' AND EXISTS (SELECT 1 FROM claim) RETURNING 1", Vars: []any{id}}
}

func widgetState(t *testing.T, db *gorm.DB, id string) string {
	t.Helper()
	var s string
	require.NoError(t, db.Raw("SELECT state FROM widgets WHERE id = ?", id).Scan(&s).Error)
	return s
}

func TestCompleteWith(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	resp := idempotency.Response{
		Status:     201,
		Header:     map[string]string{"Content-Type": "application/json", "Location": "/v1/widgets/w1"},
		Body:       []byte("{\"id\":\"w1\"}\n\x00\xff"),
		ResourceID: "w1",
	}
	cases := []struct {
		name string
		// before prepares the key and returns the claim to complete with.
		before      func(t *testing.T, s *idempotency.Store, clk ager) idempotency.Claim
		widget      string // w1's state before
		wantErr     error
		wantApplied bool
		wantWidget  string
		wantKey     idempotency.Status
	}{
		{
			name: "OwnedAndOpenWritesBoth",
			before: func(t *testing.T, s *idempotency.Store, _ ager) idempotency.Claim {
				return claim(t, s, "m1", "k")
			},
			widget: "open", wantApplied: true, wantWidget: "done", wantKey: idempotency.StatusDone,
		},
		{
			name: "ResourceAlreadyFinalWritesNeither",
			before: func(t *testing.T, s *idempotency.Store, _ ager) idempotency.Claim {
				return claim(t, s, "m1", "k")
			},
			widget: "settled", wantApplied: false, wantWidget: "settled", wantKey: idempotency.StatusInProgress,
		},
		{
			name: "TakenOverWritesNeither",
			before: func(t *testing.T, s *idempotency.Store, clk ager) idempotency.Claim {
				old := claim(t, s, "m1", "k")
				clk.Advance(lease + time.Second)
				_, ok, err := takeOver(s, "m1", "k")
				require.NoError(t, err)
				require.True(t, ok)
				return old
			},
			widget: "open", wantErr: idempotency.ErrLostClaim, wantWidget: "open", wantKey: idempotency.StatusInProgress,
		},
		{
			name: "AlreadyCompletedWritesNeither",
			before: func(t *testing.T, s *idempotency.Store, _ ager) idempotency.Claim {
				c := claim(t, s, "m1", "k")
				require.NoError(t, s.Complete(ctx, nil, c, resp))
				return c
			},
			widget: "open", wantErr: idempotency.ErrLostClaim, wantWidget: "open", wantKey: idempotency.StatusDone,
		},
		{
			name: "AnotherMerchantsKeyIsNotOurs",
			before: func(t *testing.T, s *idempotency.Store, _ ager) idempotency.Claim {
				c := claim(t, s, "m1", "k")
				c.MerchantID = "m2"
				return c
			},
			widget: "open", wantErr: idempotency.ErrLostClaim, wantWidget: "open", wantKey: idempotency.StatusInProgress,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.Postgres(t)
			widgets(t, db, tc.widget)
			s, clk := newStore(t, db)
			c := tc.before(t, s, clk)
			applied, err := s.CompleteWith(ctx, c, resp, finishWidget("w1"))
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantApplied, applied)
			require.Equal(t, tc.wantWidget, widgetState(t, db, "w1"))
			rec, err := s.Get(ctx, "m1", "k")
			require.NoError(t, err)
			require.Equal(t, tc.wantKey, rec.Status)
			if applied {
				require.Equal(t, resp, rec.Response(), "the exact answer is stored")
				require.NotNil(t, rec.CompletedAt)
			}
		})
	}
}

// A takeover that commits while CompleteWith waits for the key's row must
// win: the statement re-reads the locked row, sees another token, and
// writes nothing — never the resource without the key.
func TestCompleteWithLosesToConcurrentTakeOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Postgres(t)
	widgets(t, db, "open")
	s, _ := newStore(t, db)
	c := claim(t, s, "m1", "k")

	tx := db.Begin()
	defer tx.Rollback()
	require.NoError(t, tx.Exec("UPDATE idempotency_keys SET lock_token = 'taken' WHERE merchant_id = 'm1' AND key = 'k'").Error)
	done := make(chan error, 1)
	go func() {
		_, err := s.CompleteWith(ctx, c, idempotency.Response{Status: 201, Body: []byte("{}")}, finishWidget("w1"))
		done <- err
	}()
	// Give the statement a moment to queue behind the row lock. Whether it
	// got there or not, the outcome must be the same: the key is lost.
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, tx.Commit().Error)
	require.ErrorIs(t, <-done, idempotency.ErrLostClaim)
	require.Equal(t, "open", widgetState(t, db, "w1"))
	rec, err := s.Get(ctx, "m1", "k")
	require.NoError(t, err)
	require.Equal(t, idempotency.StatusInProgress, rec.Status)
	require.Equal(t, "taken", rec.LockToken)
}

func TestCompleteWithIsPostgresOnly(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLite(t)
	s, _ := newStore(t, db)
	c := claim(t, s, "m1", "k")
	_, err := s.CompleteWith(context.Background(), c, idempotency.Response{Status: 201}, clause.Expr{SQL: "SELECT 1"})
	require.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
	rec, err := s.Get(context.Background(), "m1", "k")
	require.NoError(t, err)
	require.Equal(t, idempotency.StatusInProgress, rec.Status, "nothing written")
}
