package providers_test

import (
	"testing"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/flutterwave"
	"github.com/oncepay/gateway/providers/paystack"
	"github.com/oncepay/gateway/providers/simulator"
	"github.com/oncepay/gateway/providers/stripe"
)

// Which providers make one refund, and one charge, of a reference
// however often it is sent (shared/providers.md): the gateway re-sends a
// refund at once only to those (payments.refundReleaseAfter), and a charge
// whose outcome is unknown only to those (payments.Service.Create); any
// other is asked first.
func TestWhichProvidersDedupe(t *testing.T) {
	for _, tc := range []struct {
		name             string
		p                providers.Provider
		refunds, charges bool
	}{
		{"stripe", (*stripe.Provider)(nil), true, true},
		{"simulator", (*simulator.Simulator)(nil), true, true},
		{"paystack", (*paystack.Provider)(nil), false, true},
		{"flutterwave", (*flutterwave.Provider)(nil), false, false},
	} {
		if got := providers.DedupesRefunds(tc.p); got != tc.refunds {
			t.Errorf("%s: DedupesRefunds = %v, want %v", tc.name, got, tc.refunds)
		}
		if got := providers.DedupesCharges(tc.p); got != tc.charges {
			t.Errorf("%s: DedupesCharges = %v, want %v", tc.name, got, tc.charges)
		}
	}
}
