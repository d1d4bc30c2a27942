package payments

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/providers"
)

// TestFinish covers the three ends of finish on both engines: the one
// statement on PostgreSQL (the transaction on SQLite) when the payment is
// open, the ledger's answer when someone settled the payment first, and
// nothing written when the claim lost its key.
func TestFinish(t *testing.T) {
	t.Parallel()
	declined := providers.Result{Outcome: providers.OutcomeFailed, FailureCode: "insufficient_funds", FailureMessage: "Not enough money."}
	succeeded := providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: "txn_1"}
	cases := []struct {
		name string
		// before changes the ledger or the key after the payment opened.
		before     func(t *testing.T, s *Service, c idempotency.Claim, p *Payment)
		result     providers.Result
		wantStatus int    // HTTP status of the answer; 409 means the claim was lost
		wantLedger Status // the payment's state afterwards
		wantTxn    string
		// wantEvent is the event finish wrote with its transition, if any:
		// none when the transition was not finish's (a rolled-back or
		// unapplied completion emits nothing).
		wantEvent string
	}{
		{name: "OpenSucceeds", result: succeeded, wantStatus: http.StatusCreated, wantLedger: StatusSucceeded, wantTxn: "txn_1",
			wantEvent: "payment.succeeded"},
		{name: "OpenDeclines", result: declined, wantStatus: http.StatusPaymentRequired, wantLedger: StatusFailed,
			wantEvent: "payment.failed"},
		{
			name: "SettledFirstAnswersTheLedger",
			before: func(t *testing.T, s *Service, _ idempotency.Claim, p *Payment) {
				ok, err := s.store.Finish(context.Background(), nil, p.MerchantID, p.ID,
					finishParams{Status: StatusSucceeded, TransactionID: "txn_first", At: s.now()})
				require.NoError(t, err)
				require.True(t, ok)
			},
			result: declined, wantStatus: http.StatusCreated, wantLedger: StatusSucceeded, wantTxn: "txn_first",
		},
		{
			name: "LostClaimWritesNothing",
			before: func(t *testing.T, s *Service, c idempotency.Claim, _ *Payment) {
				require.NoError(t, s.db.Model(&idempotency.Record{}).
					Where("merchant_id = ? AND key = ?", c.MerchantID, c.Key).
					Update("lock_token", "someone-else").Error)
			},
			result: succeeded, wantStatus: http.StatusConflict, wantLedger: StatusProcessing,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
				ctx := context.Background()
				keys := idempotency.NewStore(db)
				s := NewService(db, keys, nil, Config{})
				c, rec, err := keys.Claim(ctx, idempotency.ClaimParams{MerchantID: "ten_1", Key: "k", RequestHash: "h", Lease: time.Minute, Hold: true})
				require.NoError(t, err)
				require.Nil(t, rec)
				p, redrive, err := s.open(ctx, c, "ten_1", input{Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: "card", Provider: "simulator", Metadata: "{}"})
				require.NoError(t, err)
				require.False(t, redrive)
				if tc.before != nil {
					tc.before(t, s, c, &p)
				}

				answer, err := s.finish(ctx, c, &p, tc.result)
				var emitted []string
				require.NoError(t, db.Table("events").Order("created_at").Pluck("type", &emitted).Error)
				if tc.wantEvent == "" {
					require.Empty(t, emitted)
				} else {
					require.Equal(t, []string{tc.wantEvent}, emitted)
				}
				ledger, gerr := s.store.Get(ctx, "ten_1", p.ID)
				require.NoError(t, gerr)
				require.Equal(t, tc.wantLedger, ledger.Status)
				require.Equal(t, tc.wantTxn, ledger.ProviderTransactionID)
				// The completion writes no lookup row for the provider's
				// transaction id (a refund event naming only that): a
				// refund's creation does, and then the id the ledger kept
				// finds the payment, and no other id, merchant or provider.
				for _, txn := range []string{"txn_1", "txn_first"} {
					_, ferr := s.store.GetByTransactionID(ctx, "ten_1", "simulator", txn)
					require.ErrorIs(t, ferr, ErrNotFound, txn)
				}
				require.NoError(t, s.store.recordTransaction(ctx, db, "ten_1", p.ID))
				for _, txn := range []string{"txn_1", "txn_first"} {
					found, ferr := s.store.GetByTransactionID(ctx, "ten_1", "simulator", txn)
					if txn != tc.wantTxn {
						require.ErrorIs(t, ferr, ErrNotFound, txn)
						continue
					}
					require.NoError(t, ferr)
					require.Equal(t, p.ID, found.ID)
					_, ferr = s.store.GetByTransactionID(ctx, "ten_other", "simulator", txn)
					require.ErrorIs(t, ferr, ErrNotFound, "another merchant's")
					_, ferr = s.store.GetByTransactionID(ctx, "ten_1", "paystack", txn)
					require.ErrorIs(t, ferr, ErrNotFound, "another provider's")
				}
				key, kerr := keys.Get(ctx, "ten_1", "k")
				require.NoError(t, kerr)
				if tc.wantStatus == http.StatusConflict {
					var pr *problem.Problem
					require.ErrorAs(t, err, &pr)
					require.Equal(t, http.StatusConflict, pr.Status)
					require.Equal(t, idempotency.StatusInProgress, key.Status, "the new owner answers")
					return
				}
				require.NoError(t, err)
				require.Equal(t, tc.wantStatus, answer.Status)
				require.Equal(t, Render(&ledger), answer, "the answer is the ledger's payment")
				require.Equal(t, idempotency.StatusDone, key.Status)
				require.Equal(t, answer, key.Response(), "the stored answer is the one sent")
			})
		})
	}
}
