package payments

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
)

// What an operator may decide against each answer of the provider.
func TestContradicts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		outcome     providers.Outcome
		providerID  string
		succeeded   bool // the operator's decision
		abandonable bool // a payment in review; never a refund
		refused     bool
	}{
		{"SucceededAgreed", providers.OutcomeSucceeded, "tx_1", true, true, false},
		{"SucceededFailedIt", providers.OutcomeSucceeded, "tx_1", false, true, true},
		{"FailedAgreed", providers.OutcomeFailed, "tx_1", false, true, false},
		{"FailedSucceededIt", providers.OutcomeFailed, "tx_1", true, true, true},
		{"InFlightFailedItBeforeReview", providers.OutcomePending, "tx_1", false, false, true},
		{"InFlightFailedItInReview", providers.OutcomePending, "tx_1", false, true, false}, // abandoned, say
		{"RefundInFlightFailedIt", providers.OutcomePending, "rf_1", false, false, true},   // in review or not
		{"InFlightSucceededIt", providers.OutcomePending, "tx_1", true, true, true},
		{"NothingFoundYetFailedIt", providers.OutcomePending, "", false, false, false}, // Stripe's search before it indexed
		{"NothingFoundYetSucceededIt", providers.OutcomePending, "", true, true, true},
		{"NotFoundFailedIt", providers.OutcomeNotFound, "", false, false, false},
		{"NotFoundSucceededIt", providers.OutcomeNotFound, "", true, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.refused, contradicts(tt.outcome, tt.providerID, tt.succeeded, tt.abandonable))
		})
	}
}
