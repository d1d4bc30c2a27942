package wire

import (
	"errors"
	"net"
	"net/http"
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
