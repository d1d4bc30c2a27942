package wire

import (
	"strings"

	"github.com/oncepay/gateway/providers"
)

// The failure codes of a refund, shared by every adapter and by the
// simulator (which spells them the same way), so that the gateway and a
// merchant see one vocabulary whichever provider refused.
const (
	RefundDeclined            = "declined"             // the provider refused or the refund failed
	RefundNoCharge            = "no_charge"            // the provider has no such charge
	RefundNotRefundable       = "not_refundable"       // the charge did not succeed
	RefundExceedsCharge       = "exceeds_charge"       // more than is left of the charge (or nothing is)
	RefundInsufficientBalance = "insufficient_balance" // the merchant's balance cannot cover it
	RefundAmountTooSmall      = "amount_too_small"     // below the provider's minimum refund
)

// refundMessages are the merchant-facing texts for the refund codes: ours,
// never the provider's.
var refundMessages = map[string]string{
	RefundDeclined:            "The refund was declined.",
	RefundNoCharge:            "There is no charge with that reference.",
	RefundNotRefundable:       "The charge did not succeed; there is nothing to refund.",
	RefundExceedsCharge:       "The refund exceeds what is left of the charge.",
	RefundInsufficientBalance: "The balance at the provider is too low to fund the refund.",
	RefundAmountTooSmall:      "The refund is below the provider's minimum amount.",
}

// RefundFailed builds the final result of a refused or failed refund.
func RefundFailed(refundID, code string) providers.RefundResult {
	msg, ok := refundMessages[code]
	if !ok {
		msg = refundMessages[RefundDeclined]
	}
	return providers.RefundResult{Outcome: providers.OutcomeFailed, RefundID: refundID, FailureCode: code, FailureMessage: msg}
}

// refusals map words of a provider's refusal of a refund (lower case) to
// our codes; the first match wins. Each rule holds all its words. The
// texts are the documented ones where there are any (Paystack's error
// catalogue: "Transaction has been fully reversed", "Insufficient balance
// to fulfill this refund", "Cannot refund less than USD 1"; Stripe's
// "Refund amount (...) is greater than unrefunded amount on charge"), and
// otherwise the plain words such a refusal uses.
var refusals = []struct {
	words []string
	code  string
}{
	{[]string{"insufficient balance"}, RefundInsufficientBalance},
	{[]string{"balance is not enough"}, RefundInsufficientBalance},
	{[]string{"balance_insufficient"}, RefundInsufficientBalance},
	{[]string{"fully reversed"}, RefundExceedsCharge},
	{[]string{"fully refunded"}, RefundExceedsCharge},
	{[]string{"already been refunded"}, RefundExceedsCharge},
	{[]string{"refund", "greater than"}, RefundExceedsCharge},
	{[]string{"refund", "more than"}, RefundExceedsCharge},
	{[]string{"refund", "exceed"}, RefundExceedsCharge},
	{[]string{"not successful"}, RefundNotRefundable},
	{[]string{"unsuccessful"}, RefundNotRefundable},
	{[]string{"does not have a successful charge"}, RefundNotRefundable},
	{[]string{"not refundable"}, RefundNotRefundable},
	{[]string{"refund", "less than"}, RefundAmountTooSmall},
}

// RefusalCode reads a provider's refusal of a refund create (its error
// message) and reports our failure code, and whether it is a refusal we
// know: a known refusal is a final failed result, anything else is left to
// the status rules (StatusClass).
func RefusalCode(text string) (string, bool) {
	t := strings.ToLower(text)
outer:
	for _, r := range refusals {
		for _, w := range r.words {
			if !strings.Contains(t, w) {
				continue outer
			}
		}
		return r.code, true
	}
	return "", false
}
