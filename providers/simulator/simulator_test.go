package simulator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/providertest"
	"github.com/oncepay/gateway/providers/simulator"
)

func charge(t *testing.T, p providers.Provider, ref, token string) (providers.Result, error) {
	t.Helper()
	return p.Charge(context.Background(), providers.ChargeRequest{
		Reference: ref, Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: token,
	})
}

func TestOutcomesByToken(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		sim := simulator.New(db, simulator.Config{})
		cases := []struct {
			token   string
			outcome providers.Outcome
			code    string
			err     error
		}{
			{simulator.TokenSuccess, providers.OutcomeSucceeded, "", nil},
			{simulator.TokenDecline, providers.OutcomeFailed, "card_declined", nil},
			{simulator.TokenInsufficient, providers.OutcomeFailed, "insufficient_funds", nil},
			{simulator.TokenPending, providers.OutcomePending, "", nil},
			{"tok_unknown", providers.OutcomeFailed, "invalid_payment_method", nil},
			{simulator.TokenTimeout, "", "", providers.ErrUnknown},
			{simulator.TokenUnavailable, "", "", providers.ErrNotCharged},
		}
		for _, tc := range cases {
			ref := providers.Reference("ten_1", tc.token)
			res, err := charge(t, sim, ref, tc.token)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err, tc.token)
				continue
			}
			require.NoError(t, err, tc.token)
			require.Equal(t, tc.outcome, res.Outcome, tc.token)
			require.Equal(t, tc.code, res.FailureCode, tc.token)
		}
	})
}

func TestRepeatedChargeReturnsFirstOutcomeAndChargesOnce(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		sim := simulator.New(db, simulator.Config{})
		ctx := context.Background()
		ref := providers.Reference("ten_1", "k1")

		// The first answer is lost after the charge...
		_, err := charge(t, sim, ref, simulator.TokenTimeout)
		require.ErrorIs(t, err, providers.ErrUnknown)
		// ...the retry with the same reference finds it instead of charging again.
		res, err := charge(t, sim, ref, simulator.TokenTimeout)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
		n, err := sim.Charges(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		// A restart (a new simulator on the same database) still knows it.
		res2, err := simulator.New(db, simulator.Config{}).Lookup(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, res.TransactionID, res2.TransactionID)
	})
}

func TestUnavailableNeverCharges(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		sim := simulator.New(db, simulator.Config{})
		ref := providers.Reference("ten_1", "down")
		_, err := charge(t, sim, ref, simulator.TokenUnavailable)
		require.ErrorIs(t, err, providers.ErrNotCharged)
		res, err := sim.Lookup(context.Background(), ref)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeNotFound, res.Outcome)
	})
}

func TestPendingSettlesLater(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := func() time.Time { return now }
		sim := simulator.New(db, simulator.Config{SettleAfter: time.Minute, Now: clock})
		ref := providers.Reference("ten_1", "slow")
		res, err := charge(t, sim, ref, simulator.TokenPending)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomePending, res.Outcome)

		res, err = sim.Lookup(context.Background(), ref)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomePending, res.Outcome)

		now = now.Add(2 * time.Minute)
		res, err = sim.Lookup(context.Background(), ref)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeSucceeded, res.Outcome)

		// sim_stuck never settles: the review queue's rehearsal.
		stuck := providers.Reference("ten_1", "stuck")
		res, err = charge(t, sim, stuck, simulator.TokenStuck)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomePending, res.Outcome)
		now = now.Add(365 * 24 * time.Hour)
		res, err = sim.Lookup(context.Background(), stuck)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomePending, res.Outcome)
	})
}

func TestNoWebhooks(t *testing.T) {
	t.Parallel()
	_, err := simulator.New(nil, simulator.Config{}).VerifyWebhook(nil, []byte(`{}`))
	require.ErrorIs(t, err, providers.ErrNoWebhooks)
}

// clock is a simulator's clock that a test moves on.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }
func reason(r string) func(*providers.RefundRequest) {
	return func(req *providers.RefundRequest) { req.Reason = r }
}

func TestRefundConformance(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		providertest.RunRefunds(t, providertest.RefundHarness{
			New: func(t *testing.T) providertest.RefundBackend {
				// One simulator (and clock) per case on the shared
				// database: its faults are carried by the refund's reason.
				c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
				sim := simulator.New(db, simulator.Config{SettleAfter: time.Minute, Now: c.Now})
				return providertest.RefundBackend{
					Provider: sim,
					Refunds: func(ref string) int {
						n, err := sim.Refunds(context.Background(), ref)
						require.NoError(t, err)
						return n
					},
					LoseNextRefund:   reason(simulator.RefundTimeout),
					PendNextRefund:   reason(simulator.RefundPending),
					RejectNextRefund: reason(simulator.RefundUnavailable),
					SettleRefund: func(_ string, outcome providers.Outcome) error {
						if outcome != providers.OutcomeSucceeded {
							return fmt.Errorf("simulator: pending refunds only succeed: %w", errors.ErrUnsupported)
						}
						c.Add(2 * time.Minute)
						return nil
					},
				}
			},
			SuccessMethod: simulator.TokenSuccess,
			DeclineMethod: simulator.TokenDecline,
		})
	})
}

// Concurrent charges share batched INSERTs on PostgreSQL: every reference
// is still charged once, and every charge of a reference — the first and
// those at the same moment, in its batch or a later one — answers with the
// first charge's transaction.
func TestConcurrentChargesAreEachChargedOnce(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		sim := simulator.New(db, simulator.Config{})
		const refs, each = 40, 3
		results := make([][]providers.Result, refs)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range refs {
			results[i] = make([]providers.Result, each)
			for j := range each {
				wg.Go(func() {
					res, err := charge(t, sim, providers.Reference("ten_c", fmt.Sprintf("k%d", i)), simulator.TokenSuccess)
					mu.Lock()
					defer mu.Unlock()
					require.NoError(t, err)
					results[i][j] = res
				})
			}
		}
		wg.Wait()
		ids := map[string]bool{}
		for i := range refs {
			n, err := sim.Charges(context.Background(), providers.Reference("ten_c", fmt.Sprintf("k%d", i)))
			require.NoError(t, err)
			require.Equal(t, 1, n, "reference %d", i)
			for j := range each {
				require.Equal(t, providers.OutcomeSucceeded, results[i][j].Outcome)
				require.Equal(t, results[i][0].TransactionID, results[i][j].TransactionID, "reference %d", i)
			}
			ids[results[i][0].TransactionID] = true
		}
		require.Len(t, ids, refs, "one transaction per reference")
	})
}
