// Package stripetest is a fake Stripe API for tests: an httptest server that
// takes form-encoded PaymentIntent creates, keeps Stripe's idempotency store
// (a repeated Idempotency-Key with the same parameters replays the first
// status and body with Idempotent-Replayed: true; other parameters are a 400
// idempotency_error; validation errors are not stored), lists and searches
// intents by metadata, and can lose or delay an answer after storing it
// (shared/providers.md 3.9). It is as strict as Stripe about amounts: an
// ISK amount not divisible by 100, or a three-decimal one (BHD, JOD, KWD,
// OMR, TND) not ending in 0, is a 400 invalid_request_error, for intents
// and refunds. It refunds too (POST /v1/refunds, GET /v1/refunds, GET
// /v1/refunds/{id}: see refund.go), and the same faults apply to refunds.
//
//	st := stripetest.New(t)
//	p, _ := stripe.New(stripe.Config{BaseURL: st.URL})(providers.Secrets{
//		"secret_key": stripetest.SecretKey, "webhook_secret": stripetest.WebhookSecret})
//
// The outcome is chosen by the payment method: TokenSuccess
// ("pm_card_visa"), TokenDecline ("pm_card_chargeDeclined", 402
// card_declined/generic_decline), TokenInsufficientFunds
// ("pm_card_chargeDeclinedInsufficientFunds") and TokenPending
// ("pm_card_processing", fake-only: status processing until Settle).
package stripetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/internal/fake"
	"github.com/oncepay/gateway/providers/stripe"
)

// Secrets the fake accepts and signs with.
const (
	SecretKey     = "sk_test_oncepay0000000000000000000000000000"
	WebhookSecret = "whsec_oncepay000000000000000000000000"
)

// Payment methods that choose the outcome.
const (
	TokenSuccess           = "pm_card_visa"
	TokenDecline           = "pm_card_chargeDeclined"
	TokenInsufficientFunds = "pm_card_chargeDeclinedInsufficientFunds"
	TokenPending           = "pm_card_processing"
)

// Server is a running fake. Its methods are safe for concurrent use. The
// embedded Faults gives it Close, DropNextResponse and HangNextResponse (the
// create is executed and stored first, so a retry with its Idempotency-Key
// replays it), FailNext (an api_error, not stored, as when Stripe never
// started), Charges (how many PaymentIntents carry the reference in
// metadata) and TotalCharges, and for refunds PendNextRefund, Refunds (by
// our refund reference in the refund's metadata) and TotalRefunds.
type Server struct {
	// URL is the base URL to give stripe.Config.BaseURL.
	URL string
	fake.Faults

	mu         sync.Mutex
	intents    []*intent // creation order
	idem       map[string]*stored
	next       int
	searchLag  bool
	refunds    []*refund // creation order
	nextRefund int
}

type intent struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Amount           int64             `json:"amount"`
	Currency         string            `json:"currency"`
	Status           string            `json:"status"`
	PaymentMethod    string            `json:"payment_method"`
	Metadata         map[string]string `json:"metadata"`
	LastPaymentError map[string]any    `json:"last_payment_error"`
	Created          int64             `json:"created"`
	Livemode         bool              `json:"livemode"`
}

type stored struct {
	params string
	status int
	body   []byte
}

// New starts a fake and stops it when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{idem: map[string]*stored{}}
	s.URL = fake.Start(t, &s.Faults, http.HandlerFunc(s.serve))
	return s
}

// SetSearchLag makes search find nothing, as while Stripe's index lags.
func (s *Server) SetSearchLag(lag bool) { s.mu.Lock(); s.searchLag = lag; s.mu.Unlock() }

// Settle finishes a processing intent with OutcomeSucceeded or
// OutcomeFailed. Idempotent replays still answer the first response, as
// Stripe's do.
func (s *Server) Settle(reference string, outcome providers.Outcome) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi := s.find(reference)
	if pi == nil {
		return fmt.Errorf("stripetest: no intent for %q", reference)
	}
	switch outcome {
	case providers.OutcomeSucceeded:
		pi.Status, pi.LastPaymentError = "succeeded", nil
	case providers.OutcomeFailed:
		pi.Status = "requires_payment_method"
		pi.LastPaymentError = map[string]any{"type": "card_error", "code": "card_declined", "decline_code": "generic_decline"}
	default:
		return fmt.Errorf("stripetest: cannot settle to %q", outcome)
	}
	return nil
}

// Unconfirm puts the intent carrying reference back to an intent made but
// never confirmed: requires_payment_method with no attempt's error, what
// Stripe holds when a create's confirm never ran.
func (s *Server) Unconfirm(reference string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi := s.find(reference)
	if pi == nil {
		return fmt.Errorf("stripetest: no intent for %q", reference)
	}
	pi.Status, pi.LastPaymentError = "requires_payment_method", nil
	return nil
}

// Webhook returns a payment_intent.* event for the intent carrying reference
// (type from its status), signed with WebhookSecret at time now.
func (s *Server) Webhook(reference string, now time.Time) (http.Header, []byte, error) {
	s.mu.Lock()
	pi := s.find(reference)
	var body []byte
	if pi != nil {
		typ := map[string]string{"succeeded": "payment_intent.succeeded", "processing": "payment_intent.processing"}[pi.Status]
		if typ == "" {
			typ = "payment_intent.payment_failed"
		}
		body, _ = json.Marshal(map[string]any{"id": "evt_" + pi.ID[3:], "object": "event", "type": typ,
			"created": now.Unix(), "livemode": false, "data": map[string]any{"object": pi}})
	}
	s.mu.Unlock()
	if pi == nil {
		return nil, nil, fmt.Errorf("stripetest: no intent for %q", reference)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Stripe-Signature", stripe.SignatureHeader(WebhookSecret, now, body))
	return h, body, nil
}

func (s *Server) find(reference string) *intent {
	for _, pi := range s.intents {
		if pi.Metadata[stripe.MetadataKey] == reference {
			return pi
		}
	}
	return nil
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if status, ok := fake.NextFailure(&s.Faults, r); ok {
		writeError(w, status, "api_error", "", "An unknown error occurred")
		return
	}
	user, _, basic := r.BasicAuth()
	if r.Header.Get("Authorization") != "Bearer "+SecretKey && (!basic || user != SecretKey) {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided")
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents":
		s.create(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents":
		s.list(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents/search":
		s.search(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/refunds":
		s.createRefund(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/refunds":
		s.listRefunds(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/refunds/"):
		s.fetchRefund(w, r)
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", "resource_missing", "Unrecognized request URL")
	}
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "Invalid form body")
		return
	}
	f := r.PostForm
	amount, err := strconv.ParseInt(f.Get("amount"), 10, 64)
	switch {
	case err != nil || amount <= 0:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid_integer", "Invalid integer: amount")
		return
	case f.Get("currency") == "" || f.Get("currency") != strings.ToLower(f.Get("currency")):
		writeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid_string", "Invalid currency")
		return
	case f.Get("confirm") == "true" && f.Get("automatic_payment_methods[allow_redirects]") != "never" && f.Get("return_url") == "":
		writeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_missing", "A `return_url` must be specified because this Payment Intent is configured to automatically accept the payment methods enabled in the Dashboard, some of which may require a full page redirect to succeed.")
		return
	}
	if refusal := amountRefusal(amount, f.Get("currency")); refusal != nil {
		fake.WriteRaw(w, http.StatusBadRequest, refusal)
		return
	}
	switch f.Get("payment_method") {
	case TokenSuccess, TokenDecline, TokenInsufficientFunds, TokenPending:
	default:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "resource_missing", "No such PaymentMethod")
		return
	}
	params := f.Encode()
	key := r.Header.Get("Idempotency-Key")

	s.mu.Lock()
	if key != "" {
		if st, ok := s.idem[key]; ok {
			s.mu.Unlock()
			if st.params != params {
				writeError(w, http.StatusBadRequest, "idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '"+key+"' if you meant to execute a different request.")
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			fake.WriteRaw(w, st.status, st.body)
			return
		}
	}
	s.next++
	pi := &intent{ID: fmt.Sprintf("pi_3Oncepay%016d", s.next), Object: "payment_intent", Amount: amount,
		Currency: f.Get("currency"), PaymentMethod: f.Get("payment_method"), Metadata: map[string]string{},
		Created: time.Now().Unix()}
	for k, v := range f {
		if strings.HasPrefix(k, "metadata[") && strings.HasSuffix(k, "]") {
			pi.Metadata[k[len("metadata["):len(k)-1]] = v[0]
		}
	}
	status := http.StatusOK
	var body []byte
	switch pi.PaymentMethod {
	case TokenSuccess:
		pi.Status = "succeeded"
	case TokenPending:
		pi.Status = "processing"
	default:
		decline := "generic_decline"
		msg := "Your card was declined."
		if pi.PaymentMethod == TokenInsufficientFunds {
			decline, msg = "insufficient_funds", "Your card has insufficient funds."
		}
		pi.Status = "requires_payment_method"
		pi.LastPaymentError = map[string]any{"type": "card_error", "code": "card_declined", "decline_code": decline, "message": msg}
		status = http.StatusPaymentRequired
		body, _ = json.Marshal(map[string]any{"error": map[string]any{"type": "card_error", "code": "card_declined",
			"decline_code": decline, "message": msg, "payment_intent": pi}})
	}
	if body == nil {
		body, _ = json.Marshal(pi)
	}
	s.intents = append(s.intents, pi)
	fate := fake.Charged(&s.Faults, pi.Metadata[stripe.MetadataKey])
	if key != "" {
		s.idem[key] = &stored{params: params, status: status, body: body}
	}
	s.mu.Unlock()

	if !fake.Withhold(&s.Faults, w, r, fate) {
		fake.WriteRaw(w, status, body)
	}
}

// list answers GET /v1/payment_intents newest first, honouring limit,
// created[gte] and starting_after.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit < 1 || limit > 100 {
		limit = 10
	}
	gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	after := q.Get("starting_after")
	s.mu.Lock()
	var out []*intent
	started := after == ""
	for i := len(s.intents) - 1; i >= 0; i-- {
		pi := s.intents[i]
		if !started {
			started = pi.ID == after
			continue
		}
		if pi.Created >= gte {
			out = append(out, pi)
		}
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	body, _ := json.Marshal(map[string]any{"object": "list", "url": "/v1/payment_intents", "has_more": more, "data": nonNil(out)})
	s.mu.Unlock()
	fake.WriteRaw(w, http.StatusOK, body)
}

var searchRE = regexp.MustCompile(`^metadata\['([^']+)'\]:'((?:[^'\\]|\\.)*)'$`)

func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	m := searchRE.FindStringSubmatch(r.URL.Query().Get("query"))
	if m == nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid_string", "Invalid search query")
		return
	}
	value := strings.ReplaceAll(m[2], `\'`, "'")
	s.mu.Lock()
	var out []*intent
	if !s.searchLag {
		for _, pi := range s.intents {
			if pi.Metadata[m[1]] == value {
				out = append(out, pi)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created > out[j].Created })
	body, _ := json.Marshal(map[string]any{"object": "search_result", "url": "/v1/payment_intents/search",
		"has_more": false, "next_page": nil, "data": nonNil(out)})
	s.mu.Unlock()
	fake.WriteRaw(w, http.StatusOK, body)
}

func nonNil(v []*intent) []*intent {
	if v == nil {
		return []*intent{}
	}
	return v
}

// amountRefusal is Stripe's 400 body for an amount it does not take in
// currency (its units, its lower-case code), for intents and refunds alike;
// nil when it takes it. A validation error: nothing is stored under the
// Idempotency-Key. ISK's code is Stripe's
// invalid_charge_amount_no_decimal_compatible; for the three-decimal rule
// the fake uses the general invalid_charge_amount. The texts are the
// fake's own.
func amountRefusal(amount int64, currency string) []byte {
	var code, msg string
	switch {
	case currency == "isk" && amount%100 != 0:
		code, msg = "invalid_charge_amount_no_decimal_compatible",
			"ISK amounts must be divisible by 100: an amount of 100 represents 1 króna, and ISK has no fractional units."
	case threeDecimal[currency] && amount%10 != 0:
		code, msg = "invalid_charge_amount",
			fmt.Sprintf("Amounts in %s must end in 0: the least significant of its three decimal digits must be 0.", currency)
	default:
		return nil
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"type": "invalid_request_error", "code": code, "message": msg, "param": "amount"}})
	return body
}

// threeDecimal are the three-decimal currencies Stripe takes, whose amounts
// must end in 0.
var threeDecimal = map[string]bool{"bhd": true, "jod": true, "kwd": true, "omr": true, "tnd": true}

// ChargedAmount is the amount (in Stripe's units) and currency (lower case)
// of the intent carrying reference in metadata; 0 and "" when there is none.
func (s *Server) ChargedAmount(reference string) (int64, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pi := s.find(reference); pi != nil {
		return pi.Amount, pi.Currency
	}
	return 0, ""
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	e := map[string]any{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	body, _ := json.Marshal(map[string]any{"error": e})
	fake.WriteRaw(w, status, body)
}
