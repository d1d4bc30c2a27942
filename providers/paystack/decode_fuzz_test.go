package paystack

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/internal/wire"
	"github.com/oncepay/gateway/providers/providertest"
)

// Paystack's answers, for the seeds: the envelope around a transaction
// (success, failed with its gateway_response, reversed, abandoned), a
// refund and a refund list, the refusals it documents; and what it must
// not be trusted not to send: ids that are no numbers, a NUL, invalid
// UTF-8, a 300-digit id, requested_amount of another type.
var answerSeeds = []string{
	`{"status":true,"message":"Verification successful","data":{"id":4099260516,"status":"success","reference":"fuzz-charge","amount":5000,"currency":"USD","gateway_response":"Approved","customer":{"email":"ada@example.com"}}}`,
	`{"status":true,"message":"Charge attempted","data":{"id":4099260517,"status":"failed","reference":"fuzz-charge","amount":5000,"currency":"USD","gateway_response":"Insufficient Funds"}}`,
	`{"status":true,"data":{"id":1,"status":"reversed","amount":5075,"requested_amount":5000,"currency":"NGN"}}`,
	`{"status":true,"data":{"id":2,"status":"abandoned","amount":"5000","requested_amount":"5000","currency":"ngn"}}`,
	`{"status":true,"message":"Refund has been queued for processing","data":{"transaction":{"id":1320,"reference":"fuzz-charge","amount":5000},"id":1321,"status":"pending","merchant_note":"fuzz-refund"}}`,
	`{"status":true,"data":{"id":1321,"status":"processed","merchant_note":"fuzz-refund","transaction":1320,"transaction_reference":"fuzz-charge"}}`,
	`{"status":true,"message":"Refunds retrieved","data":[{"id":1321,"status":"failed","merchant_note":"fuzz-refund","transaction":1320}],"meta":{"pageCount":1}}`,
	`{"status":true,"data":[{"id":1322,"status":"needs-attention","merchant_note":"fuzz-refund","transaction":"1320"}],"meta":{"pageCount":"x"}}`,
	`{"status":false,"message":"Duplicate Transaction Reference"}`,
	`{"status":false,"message":"Transaction reference not found"}`,
	`{"status":false,"message":"Transaction has been fully reversed"}`,
	`{"status":true,"data":{"id":"4099\u0000","status":"success","currency":"US\u0000D"}}`,
	"{\"status\":true,\"data\":{\"id\":1,\"status\":\"failed\",\"gateway_response\":\"\xff\xfe\\n\",\"currency\":\"\xc3\"}}",
	`{"status":true,"data":{"id":` + strings.Repeat("9", 300) + `,"status":"success","amount":1e400}}`,
	`{"status":true,"data":{"id":-1.5e-7,"status":"processed","transaction":{"id":"x"}}}`,
	`{"status":true,"data":{"status":""}}`, `{"status":true,"data":null}`, `{"status":true}`, `null`, ``, `{`,
}

// FuzzDecode: whatever data Paystack's envelope holds, decodeTx and
// decodeRefund either refuse it (an error that wraps ErrUnknown: the
// outcome cannot be told) or yield a transaction or refund whose Result
// reports an outcome the adapter may report and, cleaned, keeps only
// storable strings. refundOf never panics on the transaction field
// however Paystack spells it.
func FuzzDecode(f *testing.F) {
	for _, s := range answerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := wire.DecodeJSON[envelope](body)
		if err != nil {
			return
		}
		outcomes := []providers.Outcome{providers.OutcomeSucceeded, providers.OutcomeFailed, providers.OutcomePending}
		if tx, err := decodeTx(env.Data); err != nil {
			providertest.RequireClass(t, err, providers.ErrUnknown)
		} else {
			providertest.CheckResult(t, result(tx), outcomes...)
		}
		if r, err := decodeRefund(env.Data); err != nil {
			providertest.RequireClass(t, err, providers.ErrUnknown)
		} else {
			providertest.CheckRefundResult(t, refundResult(r), outcomes...)
			r.refundOf(WireReference(providertest.AnswerChargeReference), providertest.AnswerTransactionID)
		}
		// A list's entries are read with encoding/json, as getRefunds does.
		var l struct{ Data []refund }
		if json.Unmarshal(body, &l) == nil {
			for _, r := range l.Data {
				providertest.CheckRefundResult(t, refundResult(r), outcomes...)
				r.refundOf(WireReference(providertest.AnswerChargeReference), "")
			}
		}
	})
}

// FuzzAnswers: the adapter end to end against a Paystack that answers
// every request with the fuzzed status and body. Charge, Lookup, Refund
// and LookupRefund never panic, and each returns an error of one class or
// a result it may report, storable once cleaned
// (providertest.CheckAnswers).
func FuzzAnswers(f *testing.F) {
	for _, s := range answerSeeds {
		f.Add(uint8(0), []byte(s))
	}
	f.Add(uint8(7), []byte(answerSeeds[8]))  // 400 duplicate
	f.Add(uint8(10), []byte(answerSeeds[9])) // 404 not found
	f.Add(uint8(7), []byte(answerSeeds[10])) // 400 fully reversed
	f.Add(uint8(15), []byte(`<html>502 Bad Gateway</html>`))
	backend := providertest.NewAnswers(f)
	p, err := New(Config{BaseURL: backend.URL})(providers.Secrets{"secret_key": "sk_test_fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, status uint8, body []byte) {
		backend.Set(status, body)
		providertest.CheckAnswers(t, p)
	})
}
