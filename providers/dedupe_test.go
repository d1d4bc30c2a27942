package providers_test

import (
	"testing"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/flutterwave"
	"github.com/oncepay/gateway/providers/paystack"
	"github.com/oncepay/gateway/providers/simulator"
	"github.com/oncepay/gateway/providers/stripe"
)

// Which providers make one refund of a reference however often it is
// sent (shared/providers.md): the gateway re-sends refunds at once only
// to those (payments.refundReleaseAfter).
func TestWhichProvidersDedupeRefunds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       providers.Provider
		dedupes bool
	}{
		{"stripe", (*stripe.Provider)(nil), true},
		{"simulator", (*simulator.Simulator)(nil), true},
		{"paystack", (*paystack.Provider)(nil), false},
		{"flutterwave", (*flutterwave.Provider)(nil), false},
	} {
		if got := providers.DedupesRefunds(tc.p); got != tc.dedupes {
			t.Errorf("%s: DedupesRefunds = %v, want %v", tc.name, got, tc.dedupes)
		}
	}
}

// Which providers make one charge of a reference however often it is sent:
// the gateway re-sends a charge whose outcome is unknown only to those;
// any other is asked first (payments.Service.Create).
func TestWhichProvidersDedupeCharges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       providers.Provider
		dedupes bool
	}{
		{"stripe", (*stripe.Provider)(nil), true},
		{"simulator", (*simulator.Simulator)(nil), true},
		{"paystack", (*paystack.Provider)(nil), true},
		{"flutterwave", (*flutterwave.Provider)(nil), false},
	} {
		if got := providers.DedupesCharges(tc.p); got != tc.dedupes {
			t.Errorf("%s: DedupesCharges = %v, want %v", tc.name, got, tc.dedupes)
		}
	}
}
