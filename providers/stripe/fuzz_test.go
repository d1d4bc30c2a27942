package stripe

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/internal/wire"
	"github.com/oncepay/gateway/providers/providertest"
)

// Stripe's answers, for the seeds: what it sends (a confirmed intent, a
// decline with its error and the intent in it, a list, a refund), and what
// it must not be trusted not to send (a NUL or invalid UTF-8 in an id, a
// decline code that is not ours, a 300-byte id, amounts out of range).
var answerSeeds = []string{
	`{"id":"pi_3Oncepay1","object":"payment_intent","status":"succeeded","amount":2000,"currency":"usd","metadata":{"oncepay_reference":"fuzz-charge"}}`,
	`{"id":"pi_3Oncepay2","object":"payment_intent","status":"requires_payment_method","amount":2000,"currency":"usd",` +
		`"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds","message":"Your card has insufficient funds."}}`,
	`{"id":"pi_3Oncepay3","status":"processing","amount":100,"currency":"jpy"}`,
	`{"id":"pi_3Oncepay4","status":"canceled","amount":1,"currency":"bhd"}`,
	`{"error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline","message":"Your card was declined.",` +
		`"payment_intent":{"id":"pi_3Oncepay5","status":"requires_payment_method"}}}`,
	`{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}`,
	`{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such refund: 're_x'"}}`,
	`{"error":{"type":"invalid_request_error","code":"charge_already_refunded","message":"Charge has already been refunded."}}`,
	`{"object":"list","has_more":true,"data":[{"id":"pi_3Oncepay1","status":"succeeded","amount":2000,"currency":"usd","metadata":{"oncepay_reference":"fuzz-charge"}},` +
		`{"id":"re_3Oncepay1","object":"refund","status":"pending","metadata":{"oncepay_reference":"fuzz-refund"}}]}`,
	`{"object":"list","has_more":false,"data":[{"id":"re_3Oncepay2","object":"refund","status":"failed","failure_reason":"insufficient_funds","metadata":{"oncepay_reference":"fuzz-refund"}}]}`,
	`{"id":"re_3Oncepay3","object":"refund","status":"succeeded","metadata":{"oncepay_reference":"fuzz-refund","oncepay_charge_reference":"fuzz-charge"}}`,
	`{"id":"pi_\u0000","status":"succeeded","amount":2000,"currency":"us\u0000d"}`,
	"{\"id\":\"pi_\xff\xfe\",\"status\":\"requires_payment_method\",\"last_payment_error\":{\"decline_code\":\"Generic-Decline\\n\"}}",
	`{"id":"` + strings.Repeat("p", 300) + `","status":"succeeded","amount":-9223372036854775808,"currency":"bif"}`,
	`{"id":"pi_1","status":"requires_payment_method","last_payment_error":{"decline_code":"` + strings.Repeat("x", 80) + `"}}`,
	`{"id":"re_1","status":"canceled","failure_reason":"\ud800"}`,
	`{"status":""}`, `null`, `[]`, ``, `{`,
}

// FuzzResult: whatever a PaymentIntent in Stripe's answer holds, the
// Result it maps to reports an outcome Charge or Lookup may report, and
// cleaned (providers.Result.Clean) keeps only strings the gateway can
// store; the same for a refund (refundResult). Decoded as Charge, get and
// Refund decode them.
func FuzzResult(f *testing.F) {
	for _, s := range answerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var pi paymentIntent
		if json.Unmarshal(body, &pi) == nil {
			providertest.CheckResult(t, result(pi), providers.OutcomeSucceeded, providers.OutcomeFailed, providers.OutcomePending)
		}
		var env errorEnvelope
		if json.Unmarshal(body, &env) == nil && env.Error != nil {
			// Charge's 402 card_error: the decline carries the code Stripe
			// gave and the id of the intent in the error.
			id := ""
			if env.Error.PaymentIntent != nil {
				id = env.Error.PaymentIntent.ID
			}
			providertest.CheckResult(t, wire.Declined(id, failureCode(env.Error)), providers.OutcomeFailed)
		}
		var l list
		if json.Unmarshal(body, &l) == nil {
			for _, pi := range l.Data {
				providertest.CheckResult(t, result(pi), providers.OutcomeSucceeded, providers.OutcomeFailed, providers.OutcomePending)
			}
		}
		var r stripeRefund
		if json.Unmarshal(body, &r) == nil {
			providertest.CheckRefundResult(t, refundResult(r), providers.OutcomeSucceeded, providers.OutcomeFailed, providers.OutcomePending)
		}
	})
}

// FuzzAnswers: the adapter end to end against a Stripe that answers every
// request with the fuzzed status and body. Charge, Lookup, Refund and
// LookupRefund never panic, and each returns an error of one class or a
// result it may report, storable once cleaned (providertest.CheckAnswers).
func FuzzAnswers(f *testing.F) {
	for _, s := range answerSeeds {
		f.Add(uint8(0), []byte(s))
	}
	f.Add(uint8(9), []byte(answerSeeds[4]))  // 402 card_error
	f.Add(uint8(7), []byte(answerSeeds[7]))  // 400 charge_already_refunded
	f.Add(uint8(10), []byte(answerSeeds[6])) // 404 resource_missing
	f.Add(uint8(15), []byte(`<html>502 Bad Gateway</html>`))
	backend := providertest.NewAnswers(f)
	p, err := New(Config{BaseURL: backend.URL})(providers.Secrets{"secret_key": "sk_test_fuzz", "webhook_secret": "whsec_fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, status uint8, body []byte) {
		backend.Set(status, body)
		providertest.CheckAnswers(t, p)
	})
}
