package flutterwave_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/flutterwave"
	"github.com/oncepay/gateway/providers/providertest"
)

func TestDuplicateThenFailedVerifyIsUnknown(t *testing.T) {
	t.Parallel()
	providertest.RunDuplicateThenFailedVerify(t, providertest.DuplicateVerify{
		New: func(t *testing.T, base string) providers.Provider {
			p, err := flutterwave.New(flutterwave.Config{BaseURL: base, Timeout: 2 * time.Second})(providers.Secrets{
				"secret_key": "FLWSECK_TEST-x", "secret_hash": "h"})
			require.NoError(t, err)
			return p
		},
		ChargePath: "/tokenized-charges",
		Duplicate:  `{"status":"error","message":"Duplicate tx_ref","data":null}`,
		Error:      `{"status":"error","message":"try again later","data":null}`,
		Method:     "flw-t1nf-x",
	})
}
