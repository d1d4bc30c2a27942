package providers

import (
	"math/big"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExponent(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]int{"NGN": 2, "USD": 2, "JPY": 0, "KWD": 3, "BHD": 3, "CLF": 4, "UYW": 4, "XOF": 0} {
		got, ok := Exponent(code)
		require.True(t, ok, code)
		require.Equal(t, want, got, code)
	}
	for _, code := range []string{"", "ngn", "XAU", "XXX", "ABC", "NGNN"} {
		_, ok := Exponent(code)
		require.False(t, ok, code)
	}
}

func TestFormatMajor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		amount   int64
		currency string
		want     string
		err      error
	}{
		{"NGNWhole", 5000, "NGN", "50.00", nil},
		{"NGNKobo", 5, "NGN", "0.05", nil},
		{"NGNTen", 10, "NGN", "0.10", nil},
		{"NGNOdd", 123456, "NGN", "1234.56", nil},
		{"USD", 199, "USD", "1.99", nil},
		{"JPYHasNoDecimals", 500, "JPY", "500", nil},
		{"KWDThreeDecimals", 1234, "KWD", "1.234", nil},
		{"KWDFils", 7, "KWD", "0.007", nil},
		{"CLFFourDecimals", 10000, "CLF", "1.0000", nil},
		{"MaxInt64", 9223372036854775807, "USD", "92233720368547758.07", nil},
		{"ZeroIsRejected", 0, "NGN", "", ErrAmount},
		{"NegativeIsRejected", -100, "NGN", "", ErrAmount},
		{"UnknownCurrency", 100, "ABC", "", ErrCurrency},
		{"LowerCaseIsUnknown", 100, "ngn", "", ErrCurrency},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := FormatMajor(tt.amount, tt.currency)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// FuzzFormatMajor checks that the major-unit string is exact: parsed back
// with math/big and scaled by 10^exponent it is the minor amount again, and
// it has exactly exponent decimals.
func FuzzFormatMajor(f *testing.F) {
	for _, c := range []string{"NGN", "JPY", "KWD", "CLF", "XXX", ""} {
		f.Add(int64(5000), c)
		f.Add(int64(1), c)
		f.Add(int64(-1), c)
	}
	f.Fuzz(func(t *testing.T, amount int64, currency string) {
		s, err := FormatMajor(amount, currency)
		exp, known := Exponent(currency)
		if !known || amount <= 0 {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		r, ok := new(big.Rat).SetString(s)
		require.True(t, ok, s)
		r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(exp)), nil)))
		require.True(t, r.IsInt(), s)
		require.Equal(t, big.NewInt(amount).String(), r.Num().String(), s)
		if exp == 0 {
			require.NotContains(t, s, ".")
		} else {
			require.Len(t, s[strings.IndexByte(s, '.')+1:], exp)
		}
	})
}

func TestParseMajor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		major, currency string
		want            int64
	}{
		{"50", "NGN", 5000}, {"50.5", "NGN", 5050}, {"50.00", "NGN", 5000}, {"0.05", "NGN", 5},
		{"50.0000", "NGN", 5000}, {"500", "JPY", 500}, {"500.0", "JPY", 500}, {"1.234", "KWD", 1234},
		{"92233720368547758.07", "USD", 9223372036854775807},
	} {
		got, err := ParseMajor(tt.major, tt.currency)
		require.NoError(t, err, tt.major)
		require.Equal(t, tt.want, got, tt.major)
	}
	for _, tt := range []struct{ major, currency string }{
		{"50.005", "NGN"}, {"0.5", "JPY"}, {"-50", "NGN"}, {"+50", "NGN"}, {"5e3", "NGN"}, {"", "NGN"},
		{".5", "NGN"}, {"50.", "JPY"}, {"0", "NGN"}, {"0.00", "NGN"}, {"92233720368547758.08", "USD"},
		{"1/2", "NGN"}, {"50", "XXX"}, {"50", "ngn"}, {" 50", "NGN"}, {"5 0", "NGN"}, {"50.0x", "NGN"},
	} {
		_, err := ParseMajor(tt.major, tt.currency)
		require.Error(t, err, "%q %s", tt.major, tt.currency)
	}
}

// FuzzParseMajor reads whatever a provider might send: it never panics,
// never accepts what FormatMajor's exact reading (math/big) would not give
// as a positive whole number of minor units, and reads FormatMajor's own
// output back to the amount.
func FuzzParseMajor(f *testing.F) {
	for _, s := range []string{"50", "50.50", "0.05", "1e3", "-1", "50.005", "9999999999999999999"} {
		f.Add(s, "NGN")
		f.Add(s, "JPY")
	}
	f.Fuzz(func(t *testing.T, major, currency string) {
		got, err := ParseMajor(major, currency)
		if err != nil {
			return
		}
		require.Positive(t, got)
		back, err := FormatMajor(got, currency)
		require.NoError(t, err)
		a, ok1 := new(big.Rat).SetString(major)
		b, ok2 := new(big.Rat).SetString(back)
		require.True(t, ok1 && ok2, "%q", major)
		require.Zero(t, a.Cmp(b), "%q read as %d", major, got)
		again, err := ParseMajor(back, currency)
		require.NoError(t, err)
		require.Equal(t, got, again)
	})
}
