// Package providertest is the conformance suite every Provider passes: the
// adapters against their fakes, and the in-process simulator. It checks the
// contract of package providers, not any wire format: a repeated Charge
// never charges twice, a lost answer is ErrUnknown and the retry finds the
// first charge, Lookup never creates, and declines are Results.
//
// Use it from an adapter's tests:
//
//	func TestConformance(t *testing.T) {
//		fake := paystacktest.New(t)
//		providertest.Run(t, providertest.Harness{New: ..., SuccessMethod: paystacktest.TokenSuccess, ...})
//	}
package providertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
)

// Harness describes one provider under test. All fields but MissingOutcome,
// Currency and Amount are required.
type Harness struct {
	// New returns a Provider bound to the backend that DropNextResponse and
	// Charges observe. It may be called several times in one Run.
	New func(t *testing.T) providers.Provider
	// Payment methods whose charges succeed, are declined, or stay pending.
	SuccessMethod, DeclineMethod, PendingMethod string
	// DropNextResponse makes the next Charge be stored but its answer lost
	// (the Charge's error must wrap ErrUnknown).
	DropNextResponse func()
	// Charges reports how many charges the backend made for the reference.
	Charges func(reference string) int
	// Currency of the test charges; "NGN" when empty.
	Currency string
	// Amount in minor units; 5000 when zero.
	Amount int64
	// MissingOutcome is what Lookup reports for a reference never charged:
	// OutcomeNotFound (the default) where the provider can say so, or
	// OutcomePending where its lookup lags (Stripe search).
	MissingOutcome providers.Outcome
}

var seq atomic.Int64

// Run runs the suite. Subtests are sequential, because DropNextResponse is
// a property of the shared backend; each uses fresh references.
func Run(t *testing.T, h Harness) {
	t.Helper()
	require.NotNil(t, h.New, "Harness.New")
	require.NotNil(t, h.DropNextResponse, "Harness.DropNextResponse")
	require.NotNil(t, h.Charges, "Harness.Charges")
	if h.Currency == "" {
		h.Currency = "NGN"
	}
	if h.Amount == 0 {
		h.Amount = 5000
	}
	if h.MissingOutcome == "" {
		h.MissingOutcome = providers.OutcomeNotFound
	}
	ctx := context.Background()
	req := func(t *testing.T, method string) providers.ChargeRequest {
		return providers.ChargeRequest{
			Reference:     providers.Reference("merchant_conformance", fmt.Sprintf("%s-%d", t.Name(), seq.Add(1))),
			Amount:        h.Amount,
			Currency:      h.Currency,
			Email:         "customer@example.com",
			PaymentMethod: method,
			Description:   "conformance",
		}
	}

	t.Run("SuccessIsSucceededAndLookedUp", func(t *testing.T) {
		p, r := h.New(t), req(t, h.SuccessMethod)
		res, err := p.Charge(ctx, r)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
		require.Equal(t, 1, h.Charges(r.Reference))
		got, err := p.Lookup(ctx, r.Reference)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeSucceeded, got.Outcome)
	})

	t.Run("DeclineIsAResultNotAnError", func(t *testing.T) {
		p, r := h.New(t), req(t, h.DeclineMethod)
		res, err := p.Charge(ctx, r)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeFailed, res.Outcome)
		require.NotEmpty(t, res.FailureCode)
		require.NotEmpty(t, res.FailureMessage)
		got, err := p.Lookup(ctx, r.Reference)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeFailed, got.Outcome)
	})

	t.Run("PendingIsNotFinal", func(t *testing.T) {
		p, r := h.New(t), req(t, h.PendingMethod)
		res, err := p.Charge(ctx, r)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomePending, res.Outcome)
		got, err := p.Lookup(ctx, r.Reference)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomePending, got.Outcome)
	})

	for _, method := range []struct{ name, pm string }{{"Success", h.SuccessMethod}, {"Decline", h.DeclineMethod}} {
		t.Run("RepeatedChargeReturnsFirstOutcome"+method.name, func(t *testing.T) {
			p, r := h.New(t), req(t, method.pm)
			first, err := p.Charge(ctx, r)
			require.NoError(t, err)
			// A second Provider, as after a takeover by another instance.
			again, err := h.New(t).Charge(ctx, r)
			require.NoError(t, err)
			require.Equal(t, first.Outcome, again.Outcome)
			require.Equal(t, first.TransactionID, again.TransactionID)
			require.Equal(t, first.FailureCode, again.FailureCode)
			require.Equal(t, 1, h.Charges(r.Reference))
		})
	}

	t.Run("LostAnswerIsUnknownAndRetryFindsTheCharge", func(t *testing.T) {
		p, r := h.New(t), req(t, h.SuccessMethod)
		h.DropNextResponse()
		_, err := p.Charge(ctx, r)
		require.ErrorIs(t, err, providers.ErrUnknown)
		require.NotErrorIs(t, err, providers.ErrNotCharged)
		require.Equal(t, 1, h.Charges(r.Reference), "the charge was made before the answer was lost")
		res, err := p.Charge(ctx, r)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
		require.Equal(t, 1, h.Charges(r.Reference), "the retry must not charge again")
	})

	t.Run("LookupNeverCreates", func(t *testing.T) {
		p, r := h.New(t), req(t, h.SuccessMethod)
		got, err := p.Lookup(ctx, r.Reference)
		require.NoError(t, err)
		require.Equal(t, h.MissingOutcome, got.Outcome)
		require.Equal(t, 0, h.Charges(r.Reference))
	})

	t.Run("DistinctReferencesAreDistinctCharges", func(t *testing.T) {
		p := h.New(t)
		a, b := req(t, h.SuccessMethod), req(t, h.SuccessMethod)
		ra, err := p.Charge(ctx, a)
		require.NoError(t, err)
		rb, err := p.Charge(ctx, b)
		require.NoError(t, err)
		require.Equal(t, 1, h.Charges(a.Reference))
		require.Equal(t, 1, h.Charges(b.Reference))
		if ra.TransactionID != "" {
			require.NotEqual(t, ra.TransactionID, rb.TransactionID)
		}
	})

	t.Run("ConcurrentChargesChargeOnce", func(t *testing.T) {
		p, r := h.New(t), req(t, h.SuccessMethod)
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		results := make([]providers.Result, n)
		for i := range n {
			wg.Go(func() { results[i], errs[i] = p.Charge(ctx, r) })
		}
		wg.Wait()
		succeeded := 0
		for i := range n {
			if errs[i] != nil {
				// A provider may say "the first one is still running"
				// (Stripe's 409): that must be ErrUnknown, never a release.
				require.ErrorIs(t, errs[i], providers.ErrUnknown)
				continue
			}
			require.Equal(t, providers.OutcomeSucceeded, results[i].Outcome)
			succeeded++
		}
		require.Positive(t, succeeded)
		require.Equal(t, 1, h.Charges(r.Reference))
	})
}

// RequireClass asserts that err wraps class and not the other class, so a
// test can say "this is ErrNotCharged" and mean it.
func RequireClass(t testing.TB, err, class error) {
	t.Helper()
	require.ErrorIs(t, err, class)
	for _, other := range []error{providers.ErrNotCharged, providers.ErrUnknown} {
		if other != class {
			require.False(t, errors.Is(err, other), "%v also wraps %v", err, other)
		}
	}
}
