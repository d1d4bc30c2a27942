package flutterwave

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/internal/wire"
	"github.com/oncepay/gateway/providers/providertest"
)

// Flutterwave's answers, for the seeds: the envelope around a transaction
// (successful, failed with its processor_response, pending), a refund and
// a refund list with page_info, the errors it sends; and what it must not
// be trusted not to send: ids that are no numbers, a NUL, invalid UTF-8,
// a 300-digit id, amounts in exponent form, ids as strings or objects.
var answerSeeds = []string{
	`{"status":"success","message":"Transaction fetched successfully","data":{"id":1320,"tx_ref":"fuzz-charge","amount":50.00,"currency":"USD","status":"successful","processor_response":"Approved"}}`,
	`{"status":"success","data":{"id":1320,"tx_ref":"fuzz-charge","amount":"50","currency":"NGN","status":"failed","processor_response":"Insufficient funds"}}`,
	`{"status":"success","data":{"id":1320,"tx_ref":"fuzz-charge","amount":5e1,"currency":"KWD","status":"pending"}}`,
	`{"status":"success","message":"Transaction refund initiated","data":{"id":1321,"status":"completed","comments":"fuzz-refund","tx_id":1320,"amount_refunded":10}}`,
	`{"status":"success","data":[{"id":1321,"status":"failed","comment":"fuzz-refund","transaction_id":"1320"}],"meta":{"page_info":{"total":1,"current_page":1,"total_pages":1}}}`,
	`{"status":"success","data":[{"id":1322,"status":"pending","comment":"fuzz-refund","transaction_id":{"id":1320}}],"meta":{"page_info":{"total_pages":"many"}}}`,
	`{"status":"error","message":"No transaction was found for this id","data":null}`,
	`{"status":"error","message":"Duplicate tx_ref","data":null}`,
	`{"status":"error","message":"Refund amount cannot be greater than transaction amount","data":null}`,
	`{"status":"success","data":{"id":"13\u000020","status":"successful","currency":"US\u0000D","tx_ref":"fuzz-charge"}}`,
	"{\"status\":\"success\",\"data\":{\"id\":1,\"status\":\"failed\",\"processor_response\":\"\xff\\n\",\"currency\":\"\xc3\",\"tx_ref\":\"fuzz-charge\"}}",
	`{"status":"success","data":{"id":` + strings.Repeat("9", 300) + `,"status":"successful","amount":1e400,"tx_ref":"fuzz-charge"}}`,
	`{"status":"success","data":{"id":-1.5e-7,"status":"completed","comment":"fuzz-refund"}}`,
	`{"status":"success","data":{"status":""}}`, `{"status":"success","data":null}`, `null`, ``, `{`,
}

// FuzzDecode: whatever data Flutterwave's envelope holds, decodeTx either
// refuses it (ErrUnknown: the outcome cannot be told) or yields a
// transaction whose Result reports an outcome the adapter may report and,
// cleaned, keeps only storable strings; a refund, read as Refund and
// findRefund read it, the same through refundResult. note and of never
// panic on the id fields however they are spelt.
func FuzzDecode(f *testing.F) {
	for _, s := range answerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		outcomes := []providers.Outcome{providers.OutcomeSucceeded, providers.OutcomeFailed, providers.OutcomePending}
		if env, err := wire.DecodeJSON[envelope](body); err == nil {
			if tx, err := decodeTx(env.Data); err != nil {
				providertest.RequireClass(t, err, providers.ErrUnknown)
			} else {
				providertest.CheckResult(t, result(tx), outcomes...)
			}
			if r, err := wire.DecodeJSON[refund](env.Data); err == nil {
				providertest.CheckRefundResult(t, refundResult(r), outcomes...)
				r.of(providertest.AnswerTransactionID)
				_ = r.note()
			}
		}
		var l struct{ Data []refund }
		if json.Unmarshal(body, &l) == nil {
			for _, r := range l.Data {
				providertest.CheckRefundResult(t, refundResult(r), outcomes...)
				r.of(providertest.AnswerTransactionID)
			}
		}
	})
}

// FuzzAnswers: the adapter end to end against a Flutterwave that answers
// every request with the fuzzed status and body. Charge, Lookup, Refund
// and LookupRefund never panic, and each returns an error of one class or
// a result it may report, storable once cleaned
// (providertest.CheckAnswers).
func FuzzAnswers(f *testing.F) {
	for _, s := range answerSeeds {
		f.Add(uint8(0), []byte(s))
	}
	f.Add(uint8(7), []byte(answerSeeds[6]))  // 400 no transaction
	f.Add(uint8(7), []byte(answerSeeds[7]))  // 400 duplicate
	f.Add(uint8(13), []byte(answerSeeds[8])) // 422 refusal
	f.Add(uint8(17), []byte(`<html>503 Service Unavailable</html>`))
	backend := providertest.NewAnswers(f)
	p, err := New(Config{BaseURL: backend.URL})(providers.Secrets{"secret_key": "FLWSECK_TEST-fuzz", "secret_hash": "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, status uint8, body []byte) {
		backend.Set(status, body)
		providertest.CheckAnswers(t, p)
	})
}
