package paystack

import (
	"encoding/json"
	"strconv"
	"testing"
)

// requested_amount comes from Paystack's answer: whatever it holds, asked
// is amount or a whole number of kobo between 1 and amount.
func FuzzAsked(f *testing.F) {
	f.Add("5075", []byte(`5000`))
	f.Add("5000", []byte(`"5000"`))
	f.Add("5000", []byte(`null`))
	f.Add("5000", []byte(`"abc"`))
	f.Add("5000", []byte(`9000`))
	f.Add("5000", []byte(`-1`))
	f.Add("5000", []byte(`"\u0000"`))
	f.Add("x", []byte(`1`))
	f.Fuzz(func(t *testing.T, amount string, requested []byte) {
		tx := transaction{Amount: json.Number(amount), RequestedAmount: requested}
		got := tx.asked()
		if got == amount {
			return
		}
		n, err := strconv.ParseInt(got, 10, 64)
		a, aerr := strconv.ParseInt(amount, 10, 64)
		if err != nil || aerr != nil || n <= 0 || n > a {
			t.Fatalf("asked(%q, %q) = %q", amount, requested, got)
		}
	})
}
