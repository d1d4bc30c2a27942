// Package providertest is the conformance suite every Provider passes: the
// adapters against their fakes, and the in-process simulator. It checks the
// contract of package providers, not any wire format: a repeated Charge
// never charges twice, a lost answer is ErrUnknown and the retry finds the
// first charge, Lookup never creates, and declines are Results. RunRefunds
// (refund.go) checks the refund half the same way: a repeated Refund never
// refunds twice, a lost answer is found by LookupRefund, refusals are
// Results.
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
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
)

// Harness describes one provider under test. New, the three methods,
// DropNextResponse and Charges are required; the rest is optional, and a
// group of checks runs only when the fields it needs are set (the adapters
// against their fakes set them all).
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

	// InsufficientFundsMethod is a payment method declined for lack of
	// funds (FailureCode insufficient_funds); DeclineCode is the
	// FailureCode of DeclineMethod. With both set, every outcome is
	// checked with its code, transaction id and charge count.
	InsufficientFundsMethod, DeclineCode string

	// NewWith returns a Provider like New's but with another base URL,
	// secret key or HTTP timeout (zero: the default). With URL and
	// SecretKey (the backend's and the key it accepts), FailNext and
	// HangNextResponse, the error classes are checked: a bad key, a refused
	// connection, a 5xx and a timeout after the charge was stored.
	NewWith func(t *testing.T, url, key string, timeout time.Duration) providers.Provider
	// URL and SecretKey are the backend's base URL and the key it accepts.
	URL, SecretKey string
	// FailNext makes the backend answer the next request with status.
	FailNext func(status int)
	// HangNextResponse makes the next Charge be stored but its answer held
	// until the client gives up.
	HangNextResponse func()
	// Rejected are charge requests (by name) the backend must refuse before
	// charging: each Charge's error wraps ErrNotCharged and the backend
	// made no charge for its reference.
	Rejected map[string]providers.ChargeRequest

	// Settle finishes a pending charge on the backend; with it set, Lookup
	// must see the settled outcome.
	Settle func(reference string, outcome providers.Outcome) error

	// DuplicateIsLookedUp says the provider rejects a reused reference and
	// Charge looks the first charge up (Paystack, Flutterwave), rather than
	// replaying an identical request (Stripe). Then a repeat with another
	// payment method returns the first charge's Result, and one with
	// another amount wraps ErrReferenceConflict too. Either way a repeat
	// with another amount is ErrUnknown and charges nothing.
	DuplicateIsLookedUp bool
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
		requireSameCharge(t, r, got)
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
		requireSameCharge(t, r, got)
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

	t.Run("RepeatWithOtherAmountIsUnknownNotRelease", func(t *testing.T) {
		p, r := h.New(t), req(t, h.SuccessMethod)
		_, err := p.Charge(ctx, r)
		require.NoError(t, err)
		other := r
		other.Amount++
		_, err = p.Charge(ctx, other)
		RequireClass(t, err, providers.ErrUnknown)
		if h.DuplicateIsLookedUp {
			require.ErrorIs(t, err, providers.ErrReferenceConflict)
		}
		require.Equal(t, 1, h.Charges(r.Reference))
	})

	if h.DuplicateIsLookedUp {
		for _, order := range []struct{ name, first, then string }{
			{"DeclineThenSuccess", h.DeclineMethod, h.SuccessMethod},
			{"SuccessThenDecline", h.SuccessMethod, h.DeclineMethod},
		} {
			t.Run("RepeatWithOtherMethodReturnsFirstResult"+order.name, func(t *testing.T) {
				p, r := h.New(t), req(t, order.first)
				first, err := p.Charge(ctx, r)
				require.NoError(t, err)
				r.PaymentMethod = order.then
				again, err := p.Charge(ctx, r)
				require.NoError(t, err)
				require.Equal(t, first, again)
				require.Equal(t, 1, h.Charges(r.Reference))
			})
		}
	}

	if h.InsufficientFundsMethod != "" && h.DeclineCode != "" {
		t.Run("OutcomesAreMapped", func(t *testing.T) {
			p := h.New(t)
			for _, tt := range []struct {
				name, method string
				outcome      providers.Outcome
				code         string
			}{
				{"SuccessIsSucceeded", h.SuccessMethod, providers.OutcomeSucceeded, ""},
				{"DeclineIsFailedWithDeclineCode", h.DeclineMethod, providers.OutcomeFailed, h.DeclineCode},
				{"InsufficientFundsIsMapped", h.InsufficientFundsMethod, providers.OutcomeFailed, "insufficient_funds"},
				{"PendingIsPending", h.PendingMethod, providers.OutcomePending, ""},
			} {
				t.Run(tt.name, func(t *testing.T) {
					r := req(t, tt.method)
					res, err := p.Charge(ctx, r)
					require.NoError(t, err)
					require.Equal(t, tt.outcome, res.Outcome)
					require.Equal(t, tt.code, res.FailureCode)
					require.NotEmpty(t, res.TransactionID)
					require.Equal(t, 1, h.Charges(r.Reference))
				})
			}
		})
	}

	if h.Settle != nil {
		for name, outcome := range map[string]providers.Outcome{"Succeeded": providers.OutcomeSucceeded, "Failed": providers.OutcomeFailed} {
			t.Run("SettledPendingIsSeen"+name, func(t *testing.T) {
				p, r := h.New(t), req(t, h.PendingMethod)
				res, err := p.Charge(ctx, r)
				require.NoError(t, err)
				require.Equal(t, providers.OutcomePending, res.Outcome)
				require.NoError(t, h.Settle(r.Reference, outcome))
				got, err := p.Lookup(ctx, r.Reference)
				require.NoError(t, err)
				require.Equal(t, outcome, got.Outcome)
			})
		}
	}

	for name, bad := range h.Rejected {
		t.Run("Rejected"+name+"IsNotCharged", func(t *testing.T) {
			_, err := h.New(t).Charge(ctx, bad)
			RequireClass(t, err, providers.ErrNotCharged)
			if h.SecretKey != "" {
				require.NotContains(t, err.Error(), h.SecretKey)
			}
			require.Equal(t, 0, h.Charges(bad.Reference))
		})
	}

	if h.NewWith != nil && h.URL != "" && h.SecretKey != "" && h.FailNext != nil && h.HangNextResponse != nil {
		runErrors(t, h, req)
	}
}

// requireSameCharge: a lookup reports the charge's amount (minor units)
// and currency (upper case) as they were asked for, which the gateway
// compares with the payment's before it settles the payment by it.
func requireSameCharge(t *testing.T, r providers.ChargeRequest, got providers.Result) {
	t.Helper()
	require.Equal(t, r.Amount, got.Amount, "the lookup's amount, in minor units")
	require.Equal(t, r.Currency, got.Currency, "the lookup's currency")
}

// runErrors checks the error classes of Charge and Lookup against the
// backend's faults. Each case is sequential: a fault is a property of the
// shared backend.
func runErrors(t *testing.T, h Harness, req func(*testing.T, string) providers.ChargeRequest) {
	ctx := context.Background()
	refused := refusedURL(t)
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T) providers.Provider
		class error
	}{
		{"BadKeyIsNotCharged", func(t *testing.T) providers.Provider { return h.NewWith(t, h.URL, h.SecretKey+"_wrong", 0) }, providers.ErrNotCharged},
		{"ConnectionRefusedIsNotCharged", func(t *testing.T) providers.Provider { return h.NewWith(t, refused, h.SecretKey, 0) }, providers.ErrNotCharged},
		{"ServerError500IsUnknown", failing(h, http.StatusInternalServerError), providers.ErrUnknown},
		{"BadGateway502IsUnknown", failing(h, http.StatusBadGateway), providers.ErrUnknown},
		{"GatewayTimeout503IsUnknown", failing(h, http.StatusServiceUnavailable), providers.ErrUnknown},
	} {
		t.Run("Charge"+tt.name, func(t *testing.T) {
			r := req(t, h.SuccessMethod)
			_, err := tt.setup(t).Charge(ctx, r)
			RequireClass(t, err, tt.class)
			require.NotContains(t, err.Error(), h.SecretKey)
			require.Equal(t, 0, h.Charges(r.Reference))
		})
		t.Run("Lookup"+tt.name, func(t *testing.T) {
			_, err := tt.setup(t).Lookup(ctx, "x")
			RequireClass(t, err, tt.class)
			require.NotContains(t, err.Error(), h.SecretKey)
		})
	}

	type method struct {
		name, pm string
		outcome  providers.Outcome
		code     string // checked when not empty
	}
	methods := []method{
		{"Success", h.SuccessMethod, providers.OutcomeSucceeded, ""},
		{"Decline", h.DeclineMethod, providers.OutcomeFailed, h.DeclineCode},
	}
	if h.InsufficientFundsMethod != "" {
		methods = append(methods, method{"InsufficientFunds", h.InsufficientFundsMethod, providers.OutcomeFailed, "insufficient_funds"})
	}
	for _, m := range methods {
		t.Run("TimeoutAfterStoreIsUnknownAndRetryChargesOnce"+m.name, func(t *testing.T) {
			r := req(t, m.pm)
			h.HangNextResponse()
			// A short timeout only so the test does not wait 20s; nothing
			// asserts on time.
			_, err := h.NewWith(t, h.URL, h.SecretKey, 100*time.Millisecond).Charge(ctx, r)
			RequireClass(t, err, providers.ErrUnknown)
			require.Equal(t, 1, h.Charges(r.Reference))

			res, err := h.NewWith(t, h.URL, h.SecretKey, 0).Charge(ctx, r)
			require.NoError(t, err)
			require.Equal(t, m.outcome, res.Outcome)
			if m.code != "" {
				require.Equal(t, m.code, res.FailureCode)
			}
			require.Equal(t, 1, h.Charges(r.Reference))
		})
	}
}

// failing returns a setup that makes the backend fail the next request with
// status and gives a working Provider.
func failing(h Harness, status int) func(t *testing.T) providers.Provider {
	return func(t *testing.T) providers.Provider {
		p := h.NewWith(t, h.URL, h.SecretKey, 0)
		h.FailNext(status)
		return p
	}
}

// refusedURL is the address of a listener that has been closed: dialing it
// is refused, like a provider that is down before anything is sent.
func refusedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
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

// WebhookCase is one delivery for RunWebhookCases: Provider verifies Header
// and Body and must fail with Err, or succeed when Err is nil.
type WebhookCase struct {
	Name     string
	Provider providers.Provider
	Header   http.Header
	Body     []byte
	Err      error
}

// RunWebhookCases runs each case in parallel: an error case must wrap its
// Err, and every other must verify and read as want.
func RunWebhookCases(t *testing.T, want providers.Event, cases []WebhookCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			ev, err := tt.Provider.VerifyWebhook(tt.Header, tt.Body)
			if tt.Err != nil {
				require.ErrorIs(t, err, tt.Err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, want, ev)
		})
	}
}
