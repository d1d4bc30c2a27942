package providers_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
)

func TestCleanResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		in      providers.Result
		want    providers.Result
		dropped []string
	}{
		{"kept as it is",
			providers.Result{Outcome: providers.OutcomeFailed, TransactionID: "pi_3Oncepay1", FailureCode: "insufficient_funds", FailureMessage: "The card has insufficient funds.", Currency: "USD"},
			providers.Result{Outcome: providers.OutcomeFailed, TransactionID: "pi_3Oncepay1", FailureCode: "insufficient_funds", FailureMessage: "The card has insufficient funds.", Currency: "USD"}, nil},
		{"a NUL in the id",
			providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: "pi_\x00", Amount: 5, Currency: "USD"},
			providers.Result{Outcome: providers.OutcomeSucceeded, Amount: 5, Currency: "USD"}, []string{"transaction_id"}},
		{"a space in the id",
			providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: "pi 1"},
			providers.Result{Outcome: providers.OutcomeSucceeded}, []string{"transaction_id"}},
		{"an id too long",
			providers.Result{Outcome: providers.OutcomePending, TransactionID: strings.Repeat("a", 256)},
			providers.Result{Outcome: providers.OutcomePending}, []string{"transaction_id"}},
		{"a code not ours",
			providers.Result{Outcome: providers.OutcomeFailed, FailureCode: "Generic-Decline", FailureMessage: "x"},
			providers.Result{Outcome: providers.OutcomeFailed, FailureCode: "card_declined", FailureMessage: "The card was declined."}, []string{"failure_code"}},
		{"a message with a control character",
			providers.Result{Outcome: providers.OutcomeFailed, FailureCode: "card_declined", FailureMessage: "a\nb"},
			providers.Result{Outcome: providers.OutcomeFailed, FailureCode: "card_declined", FailureMessage: "The card was declined."}, []string{"failure_message"}},
		{"a currency with a NUL matches nothing",
			providers.Result{Outcome: providers.OutcomeSucceeded, Currency: "US\x00"},
			providers.Result{Outcome: providers.OutcomeSucceeded}, nil},
		{"a success's message that cannot be kept is no decline's",
			providers.Result{Outcome: providers.OutcomeSucceeded, FailureMessage: "x\x00"},
			providers.Result{Outcome: providers.OutcomeSucceeded}, []string{"failure_message"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, dropped := tc.in.Clean()
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.dropped, dropped)
		})
	}
	r, dropped := providers.RefundResult{Outcome: providers.OutcomeFailed, RefundID: "re_\xff", FailureCode: "x\x00"}.Clean()
	require.Equal(t, providers.RefundResult{Outcome: providers.OutcomeFailed, FailureCode: "declined", FailureMessage: "The refund was declined."}, r)
	require.Equal(t, []string{"refund_id", "failure_code"}, dropped)
}

// storable is what every string of a cleaned answer must be: text
// PostgreSQL keeps, one line, bounded.
func storable(t *testing.T, what, s string, limit int) {
	t.Helper()
	if len(s) > limit || !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		t.Fatalf("%s %q cannot be kept", what, s)
	}
}

func FuzzClean(f *testing.F) {
	f.Add("pi_3Oncepay1", "insufficient_funds", "The card has insufficient funds.", "USD")
	f.Add("pi_\x00", "generic\x00decline", "a\nb", "\xff")
	f.Fuzz(func(t *testing.T, id, code, msg, currency string) {
		r, _ := providers.Result{Outcome: providers.OutcomeFailed, TransactionID: id, FailureCode: code,
			FailureMessage: msg, Currency: currency}.Clean()
		storable(t, "transaction id", r.TransactionID, 255)
		storable(t, "failure code", r.FailureCode, 64)
		storable(t, "failure message", r.FailureMessage, 500)
		storable(t, "currency", r.Currency, 255)
		rr, _ := providers.RefundResult{Outcome: providers.OutcomeFailed, RefundID: id, FailureCode: code, FailureMessage: msg}.Clean()
		storable(t, "refund id", rr.RefundID, 255)
		storable(t, "failure code", rr.FailureCode, 64)
		storable(t, "failure message", rr.FailureMessage, 500)
	})
}
