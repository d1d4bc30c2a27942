package paystack_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack"
	"github.com/oncepay/gateway/providers/providertest"
)

func TestDuplicateThenFailedVerifyIsUnknown(t *testing.T) {
	t.Parallel()
	providertest.RunDuplicateThenFailedVerify(t, providertest.DuplicateVerify{
		New: func(t *testing.T, base string) providers.Provider {
			p, err := paystack.New(paystack.Config{BaseURL: base, Timeout: 2 * time.Second})(providers.Secrets{"secret_key": "sk_test_x"})
			require.NoError(t, err)
			return p
		},
		ChargePath: "/transaction/charge_authorization",
		Duplicate:  `{"status":false,"message":"Duplicate Transaction Reference"}`,
		Error:      `{"status":false,"message":"try again later"}`,
		Method:     "AUTH_x",
	})
}
