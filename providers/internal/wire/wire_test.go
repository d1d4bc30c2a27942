package wire

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
)

func TestNeverSent(t *testing.T) {
	t.Parallel()
	require.True(t, NeverSent(&net.OpError{Op: "dial", Err: errors.New("connection refused")}))
	require.True(t, NeverSent(&net.DNSError{Err: "no such host", Name: "x"}))
	require.False(t, NeverSent(&net.OpError{Op: "read", Err: errors.New("connection reset")}))
	require.False(t, NeverSent(errors.New("EOF")))
}

// A header net/http would refuse to send (a secret pasted with a newline)
// is a request that never left: not charged, and the secret never in the
// error. A good one is sent.
func TestUnsendableHeaderIsNeverSent(t *testing.T) {
	t.Parallel()
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits++ }))
	defer srv.Close()
	for _, secret := range []string{"sk_test_abc\n", "sk_test_\x00abc", "sk_\rtest", "sk\x7f"} {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		_, err = Do(context.Background(), srv.Client(), "test", req)
		require.ErrorIs(t, err, providers.ErrNotCharged, "%q", secret)
		require.NotContains(t, err.Error(), "sk_", "the secret is not in the error")
	}
	require.Zero(t, hits)
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk_test_abc\tdef")
	_, err = Do(context.Background(), srv.Client(), "test", req)
	require.NoError(t, err)
	require.Equal(t, 1, hits)
}

func TestStatusClass(t *testing.T) {
	t.Parallel()
	for status, class := range map[int]error{
		http.StatusBadRequest: providers.ErrNotCharged, http.StatusUnauthorized: providers.ErrNotCharged,
		http.StatusTooManyRequests: providers.ErrNotCharged, http.StatusConflict: providers.ErrUnknown,
		http.StatusRequestTimeout: providers.ErrUnknown, http.StatusInternalServerError: providers.ErrUnknown,
		http.StatusServiceUnavailable: providers.ErrUnknown, http.StatusFound: providers.ErrUnknown,
	} {
		require.ErrorIs(t, StatusClass(status), class, status)
	}
}

func TestDeclineCode(t *testing.T) {
	t.Parallel()
	require.Equal(t, "insufficient_funds", DeclineCode("Insufficient Funds"))
	require.Equal(t, "card_declined", DeclineCode("Declined"))
	require.Equal(t, "card_declined", DeclineCode(""))
	require.NotEmpty(t, DeclineMessage("whatever"))
}

func TestRefusalCode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		text, code string
		known      bool
	}{
		{"Transaction has been fully reversed", RefundExceedsCharge, true},
		{"Insufficient balance to fulfill this refund. Please top up.", RefundInsufficientBalance, true},
		{"Your balance is not enough to fulfill this request", RefundInsufficientBalance, true},
		{"Refund amount ($25.00) is greater than unrefunded amount on charge ($21.45)", RefundExceedsCharge, true},
		{"Refund amount cannot be more than the unrefunded amount of the transaction", RefundExceedsCharge, true},
		{"Charge ch_1 has already been refunded.", RefundExceedsCharge, true},
		{"This PaymentIntent does not have a successful charge to refund.", RefundNotRefundable, true},
		{"Transaction was not successful and cannot be refunded", RefundNotRefundable, true},
		{"Cannot refund less than USD 1", RefundAmountTooSmall, true},
		{"Invalid key", "", false},
		{"Amount must be greater than 0", "", false},
		{"", "", false},
	} {
		code, known := RefusalCode(tt.text)
		require.Equal(t, tt.known, known, tt.text)
		require.Equal(t, tt.code, code, tt.text)
	}
	r := RefundFailed("re_1", RefundExceedsCharge)
	require.Equal(t, providers.OutcomeFailed, r.Outcome)
	require.Equal(t, "re_1", r.RefundID)
	require.NotEmpty(t, r.FailureMessage)
	require.NotEmpty(t, RefundFailed("", "whatever").FailureMessage)
}

// What a provider echoes back of our request is masked before it reaches
// an error (and the logs): the customer's email, payment methods, keys.
func TestMessageMasksWhatProvidersEcho(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Invalid email address: ada.lovelace@example", "Invalid email address: [email]"},
		{"No such PaymentMethod: 'pm_1PqRsTuVwXyZ'", "No such PaymentMethod: '[token]'"},
		{"Invalid API Key provided: sk_test_4eC39HqLyjWDarjtT1zdp7dc", "Invalid API Key provided: [token]"},
		{"Authorization code AUTH_72btv547 is invalid", "Authorization code [token] is invalid"},
		{"Invalid secret key FLWSECK_TEST-abcdef123-X", "Invalid secret key [token]"},
		{"Customer <ada@example.com> not found", "Customer <[email]> not found"},
		// Plain text stays as it was.
		{"Your card was declined.", "Your card was declined."},
		{"Duplicate Transaction Reference", "Duplicate Transaction Reference"},
		{"Transaction reference not found", "Transaction reference not found"},
		{"sk is not a token, nor is pm_ alone", "sk is not a token, nor is pm_ alone"},
		{"card_declined: Your card was declined", "card_declined: Your card was declined"},
		{"Invalid value for card-number", "Invalid value for card-number"},
	} {
		if got := Message(tc.in); got != tc.want {
			t.Errorf("Message(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
