package providers

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrCurrency is returned for a code that is not an active ISO 4217 currency
// with a minor unit.
var ErrCurrency = errors.New("providers: unknown currency")

// ErrAmount is returned for an amount that cannot be charged: zero or
// negative (money in OncePay is a positive count of minor units), not a
// whole number of minor units, or one a provider cannot take exactly
// (AmountError says which rule it breaks).
var ErrAmount = errors.New("providers: amount cannot be charged")

// AmountError is an amount a provider cannot take, refused before anything
// was sent: Stripe charges MGA only in whole ariary, say. It wraps
// ErrAmount; Rule is the rule it breaks, in words written by the adapter
// (never a provider's payload), so the gateway can show it to the merchant
// instead of an "unavailable" that a retry would never fix.
type AmountError struct {
	Amount   int64  // minor units of Currency (ISO 4217)
	Currency string // ISO 4217, upper case
	Rule     string
}

func (e *AmountError) Error() string {
	return fmt.Sprintf("%v: %d %s: %s", ErrAmount, e.Amount, e.Currency, e.Rule)
}

func (e *AmountError) Unwrap() error { return ErrAmount }

// exponents maps every active ISO 4217 currency code to its minor-unit
// exponent (the number of decimal places of its major unit), after the ISO
// 4217 list (amendments up to 2025). Codes the standard lists with no minor
// unit ("N.A.": XAU, XAG, XPD, XPT, XBA-XBD, XDR, XSU, XTS, XXX) are left out
// on purpose: they are not money a card can be charged in, so Exponent reports
// them as unknown. Codes in a changeover (ANG/XCG, SLL/SLE, ZWL/ZWG, BGN) stay
// while the old note still circulates, because a provider may still quote
// them.
var exponents = map[string]int{
	"AED": 2, "AFN": 2, "ALL": 2, "AMD": 2, "ANG": 2, "AOA": 2, "ARS": 2, "AUD": 2,
	"AWG": 2, "AZN": 2, "BAM": 2, "BBD": 2, "BDT": 2, "BGN": 2, "BHD": 3, "BIF": 0,
	"BMD": 2, "BND": 2, "BOB": 2, "BOV": 2, "BRL": 2, "BSD": 2, "BTN": 2, "BWP": 2,
	"BYN": 2, "BZD": 2, "CAD": 2, "CDF": 2, "CHE": 2, "CHF": 2, "CHW": 2, "CLF": 4,
	"CLP": 0, "CNY": 2, "COP": 2, "COU": 2, "CRC": 2, "CUC": 2, "CUP": 2, "CVE": 2,
	"CZK": 2, "DJF": 0, "DKK": 2, "DOP": 2, "DZD": 2, "EGP": 2, "ERN": 2, "ETB": 2,
	"EUR": 2, "FJD": 2, "FKP": 2, "GBP": 2, "GEL": 2, "GHS": 2, "GIP": 2, "GMD": 2,
	"GNF": 0, "GTQ": 2, "GYD": 2, "HKD": 2, "HNL": 2, "HTG": 2, "HUF": 2, "IDR": 2,
	"ILS": 2, "INR": 2, "IQD": 3, "IRR": 2, "ISK": 0, "JMD": 2, "JOD": 3, "JPY": 0,
	"KES": 2, "KGS": 2, "KHR": 2, "KMF": 0, "KPW": 2, "KRW": 0, "KWD": 3, "KYD": 2,
	"KZT": 2, "LAK": 2, "LBP": 2, "LKR": 2, "LRD": 2, "LSL": 2, "LYD": 3, "MAD": 2,
	"MDL": 2, "MGA": 2, "MKD": 2, "MMK": 2, "MNT": 2, "MOP": 2, "MRU": 2, "MUR": 2,
	"MVR": 2, "MWK": 2, "MXN": 2, "MXV": 2, "MYR": 2, "MZN": 2, "NAD": 2, "NGN": 2,
	"NIO": 2, "NOK": 2, "NPR": 2, "NZD": 2, "OMR": 3, "PAB": 2, "PEN": 2, "PGK": 2,
	"PHP": 2, "PKR": 2, "PLN": 2, "PYG": 0, "QAR": 2, "RON": 2, "RSD": 2, "RUB": 2,
	"RWF": 0, "SAR": 2, "SBD": 2, "SCR": 2, "SDG": 2, "SEK": 2, "SGD": 2, "SHP": 2,
	"SLE": 2, "SLL": 2, "SOS": 2, "SRD": 2, "SSP": 2, "STN": 2, "SVC": 2, "SYP": 2,
	"SZL": 2, "THB": 2, "TJS": 2, "TMT": 2, "TND": 3, "TOP": 2, "TRY": 2, "TTD": 2,
	"TWD": 2, "TZS": 2, "UAH": 2, "UGX": 0, "USD": 2, "USN": 2, "UYI": 0, "UYU": 2,
	"UYW": 4, "UZS": 2, "VED": 2, "VES": 2, "VND": 0, "VUV": 0, "WST": 2, "XAF": 0,
	"XCD": 2, "XCG": 2, "XOF": 0, "XPF": 0, "YER": 2, "ZAR": 2, "ZMW": 2, "ZWG": 2,
	"ZWL": 2,
}

// Exponent reports the minor-unit exponent of an ISO 4217 currency code (2
// for NGN and USD, 0 for JPY, 3 for KWD, 4 for CLF). The code must be upper
// case, as ChargeRequest carries it; anything else reports false, so that a
// lower-case or unknown code is caught before it reaches a provider.
func Exponent(currency string) (int, bool) {
	e, ok := exponents[currency]
	return e, ok
}

// FormatMajor writes a minor-unit amount as an exact decimal string in major
// units, for providers that take major units (Flutterwave). It never goes
// through a float, so no amount is ever rounded.
//
// The canonical form always has exactly Exponent(currency) decimals and no
// sign or exponent: 5000 NGN -> "50.00", 5 NGN -> "0.05", 500 JPY -> "500",
// 1234 KWD -> "1.234". That is a valid JSON number, so it can be sent as a
// json.Number as it is, and the fixed scale makes it reversible (the minor
// amount is the digits with the point removed).
//
// Errors wrap ErrCurrency (unknown code) or ErrAmount (amount <= 0).
func FormatMajor(amount int64, currency string) (string, error) {
	exp, ok := Exponent(currency)
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrCurrency, currency)
	}
	if amount <= 0 {
		return "", fmt.Errorf("%w: %d", ErrAmount, amount)
	}
	digits := strconv.FormatInt(amount, 10)
	if exp == 0 {
		return digits, nil
	}
	if len(digits) <= exp {
		digits = strings.Repeat("0", exp-len(digits)+1) + digits
	}
	cut := len(digits) - exp
	return digits[:cut] + "." + digits[cut:], nil
}

// ParseMajor reads a major-unit decimal as a provider reports it ("50",
// "50.5", "50.00" NGN) back into minor units (5000, 5050, 5000), exactly:
// the inverse of FormatMajor, and more lenient only in the number of
// trailing decimal zeros. Anything else — a sign, an exponent, a fraction
// of a minor unit, an amount that does not fit int64 or is not positive —
// is an error wrapping ErrAmount (ErrCurrency for an unknown code), never
// a rounded amount.
func ParseMajor(major, currency string) (int64, error) {
	exp, ok := Exponent(currency)
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrCurrency, currency)
	}
	whole, frac, dot := strings.Cut(major, ".")
	if dot && !allDigits(frac) { // JSON's grammar: a point has digits after it
		return 0, fmt.Errorf("%w: %q is not a decimal", ErrAmount, major)
	}
	frac = strings.TrimRight(frac, "0")
	if !allDigits(whole) || len(frac) > exp {
		return 0, fmt.Errorf("%w: %q is not a whole number of %s minor units", ErrAmount, major, currency)
	}
	n, err := strconv.ParseInt(whole+frac+strings.Repeat("0", exp-len(frac)), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: %q", ErrAmount, major)
	}
	return n, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
