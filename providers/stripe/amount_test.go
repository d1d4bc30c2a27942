package stripe_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/providertest"
	"github.com/oncepay/gateway/providers/stripe"
	"github.com/oncepay/gateway/providers/stripe/stripetest"
)

// zeroDecimal are Stripe's zero-decimal currencies (docs.stripe.com/currencies).
var zeroDecimal = []string{"BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF"}

var threeDecimal = []string{"BHD", "JOD", "KWD", "OMR", "TND"}

func TestAmountConversion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		iso      int64
		currency string
		api      int64 // Stripe's units; 0 when refused
	}{
		{"USDAsISO", 2000, "USD", 2000},
		{"NGNAsISO", 5, "NGN", 5},
		{"MGAIsZeroDecimalAtStripe", 10000, "MGA", 100},
		{"MGAOneAriary", 100, "MGA", 1},
		{"MGAFractionRefused", 10050, "MGA", 0},
		{"MGAOneIraimbilanjaRefused", 1, "MGA", 0},
		{"ISKKeepsTwoDecimalsAtStripe", 500, "ISK", 50000},
		{"ISKOneKróna", 1, "ISK", 100},
		{"ISKTooLargeOnceScaled", math.MaxInt64/100 + 1, "ISK", 0},
		{"ISKLargestThatFits", math.MaxInt64 / 100, "ISK", math.MaxInt64 / 100 * 100},
		{"HUFTwoDecimalsForCharges", 12345, "HUF", 12345},
		{"TWDTwoDecimalsForCharges", 12345, "TWD", 12345},
		{"ZeroRefused", 0, "USD", 0},
		{"NegativeRefused", -100, "USD", 0},
		{"MaxInt64USD", math.MaxInt64, "USD", math.MaxInt64},
	}
	for _, c := range zeroDecimal {
		if c != "MGA" { // ISO exponent 0 too: unchanged
			tests = append(tests, struct {
				name     string
				iso      int64
				currency string
				api      int64
			}{c + "Unchanged", 501, c, 501})
		}
	}
	for _, c := range threeDecimal {
		tests = append(tests,
			struct {
				name     string
				iso      int64
				currency string
				api      int64
			}{c + "EndingIn0", 5120, c, 5120},
			struct {
				name     string
				iso      int64
				currency string
				api      int64
			}{c + "NotEndingIn0Refused", 5124, c, 0},
		)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := stripe.APIAmount(tt.iso, tt.currency)
			if tt.api == 0 {
				require.ErrorIs(t, err, providers.ErrAmount)
				var ae *providers.AmountError
				require.ErrorAs(t, err, &ae)
				require.NotEmpty(t, ae.Rule)
				require.Equal(t, tt.currency, ae.Currency)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.api, got, "ISO -> Stripe")
			back, err := stripe.ISOAmount(tt.api, tt.currency)
			require.NoError(t, err)
			require.Equal(t, tt.iso, back, "Stripe -> ISO")
		})
	}
}

func TestISOAmountRefusesWhatNoISOAmountConvertsTo(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		api      int64
		currency string
	}{
		{50050, "ISK"}, // a fraction of a króna
		{1, "ISK"},
		{math.MaxInt64/100 + 1, "MGA"}, // does not fit once scaled
	} {
		_, err := stripe.ISOAmount(tt.api, tt.currency)
		require.ErrorIs(t, err, providers.ErrAmount, "%d %s", tt.api, tt.currency)
	}
}

// FuzzAmountRoundTrip: whatever APIAmount takes, Stripe would take too, and
// ISOAmount gives back exactly; whatever it refuses is ErrAmount.
func FuzzAmountRoundTrip(f *testing.F) {
	for _, c := range append(append([]string{"USD", "NGN", "ISK", "HUF", "TWD", "CLF", "zzz"}, zeroDecimal...), threeDecimal...) {
		for _, a := range []int64{1, 10, 100, 500, 5124, 10000, 10050, -1, 0, math.MaxInt64, math.MaxInt64 / 100} {
			f.Add(a, c)
		}
	}
	f.Fuzz(func(t *testing.T, iso int64, currency string) {
		api, err := stripe.APIAmount(iso, currency)
		if err != nil {
			require.ErrorIs(t, err, providers.ErrAmount)
			return
		}
		require.Positive(t, api)
		switch currency {
		case "ISK":
			require.Zero(t, api%100, "Stripe takes ISK only in multiples of 100")
		case "BHD", "JOD", "KWD", "OMR", "TND":
			require.Zero(t, api%10, "Stripe takes three-decimal amounts only ending in 0")
		}
		back, err := stripe.ISOAmount(api, currency)
		require.NoError(t, err)
		require.Equal(t, iso, back)
	})
}

// TestAmountsAreSentInStripesUnits: what reaches Stripe is the amount in
// its units, what comes back is the ISO amount again, and an amount Stripe
// cannot take is refused before anything is sent.
func TestAmountsAreSentInStripesUnits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		currency        string
		charge, refund  int64 // ISO minor units
		sent, refundAPI int64 // Stripe's
	}{
		{"MGA", 10000, 5000, 100, 50},   // 100.00 MGA, 50.00 refunded
		{"ISK", 500, 200, 50000, 20000}, // 500 krónur, 200 refunded
		{"KWD", 5120, 1230, 5120, 1230},
		{"USD", 2000, 1500, 2000, 1500},
	} {
		t.Run(tt.currency, func(t *testing.T) {
			t.Parallel()
			fake := stripetest.New(t)
			p := realClock(t, fake.URL)
			ref := providers.Reference("m1", "amount-"+tt.currency)
			c := providers.ChargeRequest{Reference: ref, Amount: tt.charge, Currency: tt.currency, PaymentMethod: stripetest.TokenSuccess}
			res, err := p.Charge(ctx, c)
			require.NoError(t, err)
			require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
			amount, currency := fake.ChargedAmount(ref)
			require.Equal(t, tt.sent, amount, "the amount Stripe was sent")
			require.Equal(t, strings.ToLower(tt.currency), currency)
			require.Equal(t, tt.charge, res.Amount, "the charge's answer, in ISO minor units")
			require.Equal(t, tt.currency, res.Currency)

			got, err := p.Lookup(ctx, ref)
			require.NoError(t, err)
			require.Equal(t, tt.charge, got.Amount, "the lookup's amount, in ISO minor units")
			require.Equal(t, tt.currency, got.Currency)

			rr := providers.RefundRequest{Reference: providers.RefundReference("m1", "amount-"+tt.currency), ChargeReference: ref,
				TransactionID: res.TransactionID, Amount: tt.refund, Currency: tt.currency}
			refund, err := p.Refund(ctx, rr)
			require.NoError(t, err)
			require.Equal(t, providers.OutcomeSucceeded, refund.Outcome)
			require.Equal(t, tt.refundAPI, fake.RefundedAmount(rr.Reference), "the amount Stripe was asked to refund")
		})
	}
}

func TestAmountsStripeCannotTakeAreNotSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := stripetest.New(t)
	p := realClock(t, fake.URL)
	for _, c := range []providers.ChargeRequest{
		{Reference: "op-mga", Amount: 10050, Currency: "MGA", PaymentMethod: stripetest.TokenSuccess},
		{Reference: "op-kwd", Amount: 5124, Currency: "KWD", PaymentMethod: stripetest.TokenSuccess},
	} {
		_, err := p.Charge(ctx, c)
		providertest.RequireClass(t, err, providers.ErrNotCharged)
		require.ErrorIs(t, err, providers.ErrAmount, c.Currency)
	}
	require.Zero(t, fake.TotalCharges())

	ref := providers.Reference("m1", "refund-refused")
	res, err := p.Charge(ctx, providers.ChargeRequest{Reference: ref, Amount: 10000, Currency: "MGA", PaymentMethod: stripetest.TokenSuccess})
	require.NoError(t, err)
	for _, byID := range []string{res.TransactionID, ""} { // refused before the look-up too
		_, err = p.Refund(ctx, providers.RefundRequest{Reference: "or-mga", ChargeReference: ref, TransactionID: byID, Amount: 5050, Currency: "MGA"})
		providertest.RequireClass(t, err, providers.ErrNotCharged)
		var ae *providers.AmountError
		require.ErrorAs(t, err, &ae)
		require.Contains(t, ae.Rule, "multiple of 100")
	}
	require.Zero(t, fake.TotalRefunds())
}

// TestFakeIsAsStrictAsStripe: the fake refuses what Stripe refuses, with
// Stripe's error shape, for intents and refunds, and stores nothing.
func TestFakeIsAsStrictAsStripe(t *testing.T) {
	t.Parallel()
	fake := stripetest.New(t)
	intent := func(amount int64, currency, key string) answer {
		return send(t, fake.URL+"/v1/payment_intents", url.Values{
			"amount": {strconv.FormatInt(amount, 10)}, "currency": {currency}, "payment_method": {stripetest.TokenSuccess},
			"confirm": {"true"}, "automatic_payment_methods[enabled]": {"true"},
			"automatic_payment_methods[allow_redirects]": {"never"}, "metadata[" + stripe.MetadataKey + "]": {key},
		}.Encode(), key)
	}
	refund := func(pi string, amount int64, key string) answer {
		return send(t, fake.URL+"/v1/refunds", url.Values{"payment_intent": {pi}, "amount": {strconv.FormatInt(amount, 10)},
			"metadata[" + stripe.MetadataKey + "]": {key}}.Encode(), key)
	}
	for _, tt := range []struct {
		currency   string
		bad, good  int64
		code       string
		badRefund  int64
		goodRefund int64
	}{
		{"isk", 50050, 50000, "invalid_charge_amount_no_decimal_compatible", 150, 100},
		{"kwd", 5124, 5120, "invalid_charge_amount", 1001, 1000},
		{"bhd", 5125, 5120, "invalid_charge_amount", 1001, 1000},
	} {
		refused := intent(tt.bad, tt.currency, "bad-"+tt.currency)
		requireStripeRefusal(t, refused, tt.code)
		require.Zero(t, fake.Charges("bad-"+tt.currency))

		ok := intent(tt.good, tt.currency, "good-"+tt.currency)
		require.Equal(t, http.StatusOK, ok.status, string(ok.body))
		var created struct{ ID string }
		require.NoError(t, json.Unmarshal(ok.body, &created))
		requireStripeRefusal(t, refund(created.ID, tt.badRefund, "bad-refund-"+tt.currency), tt.code)
		require.Zero(t, fake.Refunds("bad-refund-"+tt.currency))
		// A refused validation is not stored: the key is free for the right amount.
		again := refund(created.ID, tt.goodRefund, "bad-refund-"+tt.currency)
		require.Equal(t, http.StatusOK, again.status, string(again.body))
	}
}

type answer struct {
	status int
	body   []byte
}

// send posts a form to the fake as the adapter would, and reads the answer.
func send(t *testing.T, u, form, key string) answer {
	t.Helper()
	hreq, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form))
	require.NoError(t, err)
	hreq.Header.Set("Authorization", "Bearer "+stripetest.SecretKey)
	hreq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	hreq.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(hreq)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{resp.StatusCode, body}
}

func requireStripeRefusal(t *testing.T, a answer, code string) {
	t.Helper()
	require.Equal(t, http.StatusBadRequest, a.status, string(a.body))
	var env struct {
		Error struct{ Type, Code, Param, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(a.body, &env))
	require.Equal(t, "invalid_request_error", env.Error.Type)
	require.Equal(t, code, env.Error.Code)
	require.Equal(t, "amount", env.Error.Param)
	require.NotEmpty(t, env.Error.Message)
}
