package providertest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
)

// RefundBackend is one provider under test for the refund cases, with the
// controls of its backend they use. Refunds, LoseNextRefund,
// PendNextRefund and SettleRefund are required.
type RefundBackend struct {
	Provider providers.Provider
	// Refunds reports how many refunds the backend made under our refund
	// reference.
	Refunds func(reference string) int
	// LoseNextRefund arranges that the Refund of req is made and its answer
	// lost (a fake's DropNextResponse; the simulator's sim_timeout reason).
	LoseNextRefund func(req *providers.RefundRequest)
	// PendNextRefund arranges that the refund of req stays pending until
	// SettleRefund.
	PendNextRefund func(req *providers.RefundRequest)
	// SettleRefund finishes a pending refund (by our refund reference). An
	// error wrapping errors.ErrUnsupported skips a case the backend cannot
	// settle to (the simulator's pending refunds only succeed).
	SettleRefund func(reference string, outcome providers.Outcome) error
	// RejectNextRefund, when set, arranges that the Refund of req is refused
	// before anything is made: its error wraps ErrNotCharged.
	RejectNextRefund func(req *providers.RefundRequest)
	// FailNext, when set, answers the backend's next request with status.
	FailNext func(status int)
	// FailNextCreate, when set, answers the backend's next request that
	// could make a refund (its POST) with status, letting through the
	// look-ups the adapter makes before it. Leave it nil for an adapter
	// whose Refund sends nothing before that request (FailNext is used).
	FailNextCreate func(status int)
	// HangNextRefund, when set with Impatient, makes the next refund be
	// made and its answer held until the client gives up; Impatient is
	// Provider with a short HTTP timeout.
	HangNextRefund func()
	Impatient      providers.Provider
}

// RefundHarness describes a provider for RunRefunds.
type RefundHarness struct {
	// New returns a backend for one case. The cases run in parallel, so
	// what one case arranges (a lost answer, a pending refund) must not
	// reach another: a fresh fake per call, or faults carried by the
	// request itself as the simulator's are.
	New func(t *testing.T) RefundBackend
	// Payment methods whose charges succeed and are declined.
	SuccessMethod, DeclineMethod string
	// Currency of the test charges ("NGN" when empty) and their amount in
	// minor units (5000 when zero; it must be at least 5).
	Currency string
	Amount   int64
	// RefundAnswersPending says the provider answers every new refund
	// pending, even one it then processes at once (Paystack queues every
	// refund): Refund is then pending and LookupRefund sees it succeed.
	RefundAnswersPending bool
}

// RunRefunds runs the refund cases of the contract, in parallel: a refund
// succeeds and is looked up by our reference; a repeated Refund with the
// same reference returns the first refund and refunds once; a lost answer
// is ErrUnknown and LookupRefund (and a retry) finds the refund; an unknown
// reference is OutcomeNotFound; more than was charged, in one refund or in
// all, is a final failed result, not an error; a pending refund settles; a
// declined charge is not refundable.
func RunRefunds(t *testing.T, h RefundHarness) {
	t.Helper()
	require.NotNil(t, h.New, "RefundHarness.New")
	if h.Currency == "" {
		h.Currency = "NGN"
	}
	if h.Amount == 0 {
		h.Amount = 5000
	}
	ctx := context.Background()
	backend := func(t *testing.T) RefundBackend {
		b := h.New(t)
		require.NotNil(t, b.Provider, "RefundBackend.Provider")
		require.NotNil(t, b.Refunds, "RefundBackend.Refunds")
		require.NotNil(t, b.LoseNextRefund, "RefundBackend.LoseNextRefund")
		require.NotNil(t, b.PendNextRefund, "RefundBackend.PendNextRefund")
		require.NotNil(t, b.SettleRefund, "RefundBackend.SettleRefund")
		return b
	}
	charge := func(t *testing.T, b RefundBackend, method string) (providers.ChargeRequest, providers.Result) {
		t.Helper()
		r := providers.ChargeRequest{
			Reference:     providers.Reference("merchant_conformance", fmt.Sprintf("%s-charge-%d", t.Name(), seq.Add(1))),
			Amount:        h.Amount,
			Currency:      h.Currency,
			Email:         "customer@example.com",
			PaymentMethod: method,
			Description:   "conformance",
		}
		res, err := b.Provider.Charge(ctx, r)
		require.NoError(t, err)
		return r, res
	}
	// refund is the gateway's request: our refund reference, the charge by
	// its reference and the transaction id its Charge answered.
	refund := func(t *testing.T, c providers.ChargeRequest, res providers.Result, amount int64) providers.RefundRequest {
		return providers.RefundRequest{
			Reference:       providers.RefundReference("merchant_conformance", fmt.Sprintf("%s-refund-%d", t.Name(), seq.Add(1))),
			ChargeReference: c.Reference,
			TransactionID:   res.TransactionID,
			Amount:          amount,
			Currency:        c.Currency,
			Reason:          "requested_by_customer",
		}
	}
	lookup := func(r providers.RefundRequest) providers.RefundLookup {
		return providers.RefundLookup{Reference: r.Reference, ChargeReference: r.ChargeReference, TransactionID: r.TransactionID}
	}
	answered := providers.OutcomeSucceeded
	if h.RefundAnswersPending {
		answered = providers.OutcomePending
	}
	// succeeded refunds r on p and checks the answer and a lookup.
	succeeded := func(t *testing.T, b RefundBackend, r providers.RefundRequest) providers.RefundResult {
		t.Helper()
		res, err := b.Provider.Refund(ctx, r)
		require.NoError(t, err)
		require.Equal(t, answered, res.Outcome, "%+v", res)
		require.NotEmpty(t, res.RefundID)
		got, err := b.Provider.LookupRefund(ctx, lookup(r))
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeSucceeded, got.Outcome, "%+v", got)
		require.Equal(t, res.RefundID, got.RefundID)
		require.Equal(t, 1, b.Refunds(r.Reference))
		return res
	}
	// refused checks that r is refused with code: a final result, not an
	// error, and nothing refunded that a lookup could report as money back.
	refused := func(t *testing.T, b RefundBackend, r providers.RefundRequest, code string) {
		t.Helper()
		res, err := b.Provider.Refund(ctx, r)
		require.NoError(t, err, "a refusal is a result, not an error")
		require.Equal(t, providers.OutcomeFailed, res.Outcome, "%+v", res)
		require.Equal(t, code, res.FailureCode)
		require.NotEmpty(t, res.FailureMessage)
		got, err := b.Provider.LookupRefund(ctx, lookup(r))
		require.NoError(t, err)
		require.Contains(t, []providers.Outcome{providers.OutcomeFailed, providers.OutcomeNotFound}, got.Outcome,
			"a refused refund is failed or was never made")
	}

	type refundCase struct {
		name string
		run  func(t *testing.T, b RefundBackend)
	}
	cases := []refundCase{
		{"RefundSucceedsAndIsLookedUp", func(t *testing.T, b RefundBackend) {
			c, res := charge(t, b, h.SuccessMethod)
			succeeded(t, b, refund(t, c, res, h.Amount))
		}},
		{"RefundFindsTheChargeByItsReference", func(t *testing.T, b RefundBackend) {
			c, res := charge(t, b, h.SuccessMethod)
			r := refund(t, c, res, h.Amount)
			r.TransactionID = ""
			succeeded(t, b, r)
		}},
		{"RepeatedRefundReturnsTheFirstAndRefundsOnce", func(t *testing.T, b RefundBackend) {
			c, res := charge(t, b, h.SuccessMethod)
			// The whole charge, so that a second refund could only be
			// refused: a repeat must find the first, not be refused.
			r := refund(t, c, res, h.Amount)
			first := succeeded(t, b, r)
			for _, again := range []providers.RefundRequest{r, func() providers.RefundRequest { r := r; r.TransactionID = ""; return r }()} {
				got, err := b.Provider.Refund(ctx, again)
				require.NoError(t, err)
				require.Equal(t, providers.OutcomeSucceeded, got.Outcome, "%+v", got)
				require.Equal(t, first.RefundID, got.RefundID)
				require.Equal(t, 1, b.Refunds(r.Reference))
			}
		}},
		{"LostAnswerIsUnknownAndLookupFindsIt", func(t *testing.T, b RefundBackend) {
			c, res := charge(t, b, h.SuccessMethod)
			r := refund(t, c, res, h.Amount)
			b.LoseNextRefund(&r)
			_, err := b.Provider.Refund(ctx, r)
			RequireClass(t, err, providers.ErrUnknown)
			require.Equal(t, 1, b.Refunds(r.Reference), "the refund was made before its answer was lost")
			got, err := b.Provider.LookupRefund(ctx, lookup(r))
			require.NoError(t, err)
			require.Equal(t, providers.OutcomeSucceeded, got.Outcome, "%+v", got)
			require.NotEmpty(t, got.RefundID)
			byID, err := b.Provider.LookupRefund(ctx, providers.RefundLookup{Reference: r.Reference, ChargeReference: r.ChargeReference, RefundID: got.RefundID})
			require.NoError(t, err)
			require.Equal(t, got, byID)
			again, err := b.Provider.Refund(ctx, r)
			require.NoError(t, err)
			require.Equal(t, got.RefundID, again.RefundID)
			require.Equal(t, 1, b.Refunds(r.Reference), "the retry must not refund again")
		}},
		{"LookupOfUnknownReferenceIsNotFound", func(t *testing.T, b RefundBackend) {
			c, res := charge(t, b, h.SuccessMethod)
			r := refund(t, c, res, h.Amount)
			for _, l := range []providers.RefundLookup{lookup(r), {Reference: r.Reference, ChargeReference: r.ChargeReference}} {
				got, err := b.Provider.LookupRefund(ctx, l)
				require.NoError(t, err)
				require.Equal(t, providers.OutcomeNotFound, got.Outcome)
			}
			require.Equal(t, 0, b.Refunds(r.Reference))
		}},
		{"PartialRefundsUpToTheChargeThenRefused", func(t *testing.T, b RefundBackend) {
			c, res := charge(t, b, h.SuccessMethod)
			succeeded(t, b, refund(t, c, res, h.Amount-h.Amount/2))
			succeeded(t, b, refund(t, c, res, h.Amount/2))
			refused(t, b, refund(t, c, res, 1), "exceeds_charge")
		}},
		{"MoreThanChargedIsAFailedResult", func(t *testing.T, b RefundBackend) {
			c, res := charge(t, b, h.SuccessMethod)
			refused(t, b, refund(t, c, res, h.Amount+1), "exceeds_charge")
			// Nothing was refunded: the whole charge is still there.
			succeeded(t, b, refund(t, c, res, h.Amount))
		}},
		{"MoreThanLeftIsAFailedResult", func(t *testing.T, b RefundBackend) {
			c, res := charge(t, b, h.SuccessMethod)
			succeeded(t, b, refund(t, c, res, h.Amount-1))
			refused(t, b, refund(t, c, res, 2), "exceeds_charge")
		}},
		{"RefundOfADeclinedChargeFails", func(t *testing.T, b RefundBackend) {
			c, res := charge(t, b, h.DeclineMethod)
			require.Equal(t, providers.OutcomeFailed, res.Outcome)
			refused(t, b, refund(t, c, res, h.Amount), "not_refundable")
		}},
	}
	for _, outcome := range []providers.Outcome{providers.OutcomeSucceeded, providers.OutcomeFailed} {
		cases = append(cases, refundCase{"PendingThenSettled" + map[providers.Outcome]string{providers.OutcomeSucceeded: "Succeeded", providers.OutcomeFailed: "Failed"}[outcome],
			func(t *testing.T, b RefundBackend) {
				c, res := charge(t, b, h.SuccessMethod)
				r := refund(t, c, res, h.Amount)
				b.PendNextRefund(&r)
				first, err := b.Provider.Refund(ctx, r)
				require.NoError(t, err)
				require.Equal(t, providers.OutcomePending, first.Outcome)
				got, err := b.Provider.LookupRefund(ctx, lookup(r))
				require.NoError(t, err)
				require.Equal(t, providers.OutcomePending, got.Outcome)
				// A pending refund holds its amount: nothing is left.
				refused(t, b, refund(t, c, res, 1), "exceeds_charge")

				err = b.SettleRefund(r.Reference, outcome)
				if errors.Is(err, errors.ErrUnsupported) {
					t.Skipf("the backend cannot settle a refund to %s", outcome)
				}
				require.NoError(t, err)
				got, err = b.Provider.LookupRefund(ctx, lookup(r))
				require.NoError(t, err)
				require.Equal(t, outcome, got.Outcome)
				require.Equal(t, first.RefundID, got.RefundID)
				if outcome == providers.OutcomeFailed {
					require.NotEmpty(t, got.FailureCode)
					require.NotEmpty(t, got.FailureMessage)
					// A failed refund gave nothing back: the whole charge
					// can still be refunded.
					succeeded(t, b, refund(t, c, res, h.Amount))
				}
				require.Equal(t, 1, b.Refunds(r.Reference))
			}})
	}
	cases = append(cases, refundCase{"RefusedBeforeRefundingIsNotCharged", func(t *testing.T, b RefundBackend) {
		if b.RejectNextRefund == nil {
			t.Skip("the backend cannot refuse a refund before making it")
		}
		c, res := charge(t, b, h.SuccessMethod)
		r := refund(t, c, res, h.Amount)
		b.RejectNextRefund(&r)
		_, err := b.Provider.Refund(ctx, r)
		RequireClass(t, err, providers.ErrNotCharged)
		require.Equal(t, 0, b.Refunds(r.Reference))
	}}, refundCase{"TimeoutAfterRefundingIsUnknownAndTheRetryRefundsOnce", func(t *testing.T, b RefundBackend) {
		if b.HangNextRefund == nil || b.Impatient == nil {
			t.Skip("the backend cannot hold a refund's answer")
		}
		c, res := charge(t, b, h.SuccessMethod)
		r := refund(t, c, res, h.Amount)
		b.HangNextRefund()
		_, err := b.Impatient.Refund(ctx, r)
		RequireClass(t, err, providers.ErrUnknown)
		require.Equal(t, 1, b.Refunds(r.Reference))
		again, err := b.Provider.Refund(ctx, r)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeSucceeded, again.Outcome, "%+v", again)
		require.Equal(t, 1, b.Refunds(r.Reference))
	}}, refundCase{"ServerErrorIsUnknown", func(t *testing.T, b RefundBackend) {
		if b.FailNext == nil {
			t.Skip("the backend cannot fail a request")
		}
		c, res := charge(t, b, h.SuccessMethod)
		r := refund(t, c, res, h.Amount)
		failCreate := b.FailNextCreate
		if failCreate == nil {
			failCreate = b.FailNext
		}
		for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable} {
			failCreate(status)
			_, err := b.Provider.Refund(ctx, r)
			RequireClass(t, err, providers.ErrUnknown)
			b.FailNext(status)
			_, err = b.Provider.LookupRefund(ctx, lookup(r))
			RequireClass(t, err, providers.ErrUnknown)
		}
		require.Equal(t, 0, b.Refunds(r.Reference))
		succeeded(t, b, r)
	}}, refundCase{"ServerErrorBeforeTheCreateIsNotCharged", func(t *testing.T, b RefundBackend) {
		// An adapter that looks its refund up before creating it (Paystack,
		// Flutterwave): a failed look-up means nothing was sent that could
		// refund, which the gateway may answer at once.
		if b.FailNextCreate == nil {
			t.Skip("the adapter sends nothing before its create")
		}
		c, res := charge(t, b, h.SuccessMethod)
		r := refund(t, c, res, h.Amount)
		for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable} {
			b.FailNext(status)
			_, err := b.Provider.Refund(ctx, r)
			RequireClass(t, err, providers.ErrNotCharged)
		}
		require.Equal(t, 0, b.Refunds(r.Reference))
		succeeded(t, b, r)
	}})

	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, backend(t))
		})
	}
}
