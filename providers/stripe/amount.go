package stripe

import (
	"fmt"
	"math"

	"github.com/oncepay/gateway/providers"
)

// Stripe counts an amount in the minor units of the currency as Stripe
// defines them (docs.stripe.com/currencies), which are ISO 4217's for most
// currencies but not all. The gateway's amounts are ISO minor units
// (providers.Exponent), so every amount the adapter sends goes through
// APIAmount and every amount it reads back through ISOAmount: sent as they
// were, 100.00 MGA (10000) charged 10,000 MGA and 500 ISK charged 5.

// stripeExponents are Stripe's exponents of the currencies where it differs
// from ISO 4217. The other zero-decimal currencies at Stripe (BIF, CLP, JPY,
// KRW, UGX, VND, XOF, ...) have exponent 0 in ISO too, and HUF and TWD are
// two-decimal for charges in both (Stripe's whole-unit rule for them is
// about payouts, which the gateway does not make).
var stripeExponents = map[string]int{
	// Zero-decimal at Stripe, two decimals in ISO: 100.00 MGA is 100, and
	// a fraction of an ariary cannot be charged.
	"MGA": 0,
	// Zero-decimal in ISO, but Stripe's API kept two decimals (and takes
	// only whole krónur, amounts divisible by 100): 500 ISK is 50000.
	"ISK": 2,
}

// tensOnly are the three-decimal currencies Stripe takes only in multiples
// of 10 (the last digit 0): its payment partners settle them to two
// decimals. 5.124 KWD (5124) is refused, not rounded.
var tensOnly = map[string]bool{"BHD": true, "JOD": true, "KWD": true, "OMR": true, "TND": true}

// shift is Stripe's exponent of currency minus ISO's: 0 where they agree.
func shift(currency string) int {
	se, ok := stripeExponents[currency]
	if !ok {
		return 0
	}
	ie, _ := providers.Exponent(currency)
	return se - ie
}

func pow10(n int) int64 {
	f := int64(1)
	for range n {
		f *= 10
	}
	return f
}

// APIAmount is the amount Stripe must be sent for amount ISO minor units of
// currency (ISO 4217, upper case, as providers.ChargeRequest carries it).
// An amount Stripe cannot take exactly — not positive, a fraction of an
// ariary, a three-decimal amount not ending in 0, too large once scaled —
// is a *providers.AmountError (wrapping ErrAmount) naming the rule: it is
// refused here, never rounded, and never sent.
func APIAmount(amount int64, currency string) (int64, error) {
	refuse := func(rule string) (int64, error) {
		return 0, &providers.AmountError{Amount: amount, Currency: currency, Rule: rule}
	}
	if amount <= 0 {
		return refuse("the amount must be positive")
	}
	if tensOnly[currency] && amount%10 != 0 {
		return refuse(fmt.Sprintf("Stripe takes %s only in multiples of 10 minor units (the last of its three decimals must be 0)", currency))
	}
	switch s := shift(currency); {
	case s < 0:
		f := pow10(-s)
		if amount%f != 0 {
			return refuse(fmt.Sprintf("Stripe takes %s only in whole units (the amount in minor units must be a multiple of %d)", currency, f))
		}
		return amount / f, nil
	case s > 0:
		f := pow10(s)
		if amount > math.MaxInt64/f {
			return refuse("the amount is too large for Stripe")
		}
		return amount * f, nil
	}
	return amount, nil
}

// ISOAmount is APIAmount's inverse: the ISO minor units of an amount Stripe
// reports in currency (upper case). An amount no ISO amount converts to (an
// ISK amount not divisible by 100, one too large once scaled) is an error
// wrapping ErrAmount: it cannot be a charge the adapter sent.
func ISOAmount(amount int64, currency string) (int64, error) {
	switch s := shift(currency); {
	case s > 0:
		f := pow10(s)
		if amount%f != 0 {
			return 0, fmt.Errorf("%w: %d %s from Stripe is not a whole number of ISO minor units", providers.ErrAmount, amount, currency)
		}
		return amount / f, nil
	case s < 0:
		f := pow10(-s)
		if amount > math.MaxInt64/f || amount < math.MinInt64/f {
			return 0, fmt.Errorf("%w: %d %s from Stripe does not fit in ISO minor units", providers.ErrAmount, amount, currency)
		}
		return amount * f, nil
	}
	return amount, nil
}
