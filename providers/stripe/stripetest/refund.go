package stripetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/internal/fake"
	"github.com/oncepay/gateway/providers/stripe"
)

// The fake's refunds (shared/providers.md 3.7): POST /v1/refunds (form:
// payment_intent, amount, reason, metadata[...]) under the same
// idempotency store as the intents (a repeat with the key and parameters
// replays; other parameters are a 400 idempotency_error; validation errors
// are not stored), GET /v1/refunds?payment_intent= (newest first, limit and
// starting_after) and GET /v1/refunds/{id}. Refunds are counted under
// metadata[oncepay_reference]. A refund succeeds at once unless
// PendNextRefund keeps it pending for SettleRefund.
//
// Refusals (HTTP 400 invalid_request_error, stored like any executed
// request): "This PaymentIntent does not have a successful charge to
// refund." for an intent that did not succeed; code
// charge_already_refunded when nothing is left; code amount_too_large,
// "Refund amount (...) is greater than unrefunded amount on charge (...)"
// for more than is left (the texts are those seen from Stripe; the codes of
// the first and last are community-reported). An amount Stripe does not
// take in the intent's currency (amountRefusal) is a validation error, not
// stored.

type refund struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentIntent string            `json:"payment_intent"`
	Charge        string            `json:"charge"`
	Status        string            `json:"status"`
	Reason        *string           `json:"reason"`
	Metadata      map[string]string `json:"metadata"`
	FailureReason *string           `json:"failure_reason,omitempty"`
	Created       int64             `json:"created"`
}

// PruneIdempotencyKeys forgets every stored idempotency key, as Stripe
// does once a key is 24h old: a repeat with a pruned key executes again.
func (s *Server) PruneIdempotencyKeys() { s.mu.Lock(); s.idem = map[string]*stored{}; s.mu.Unlock() }

// RefundedAmount is the amount (in Stripe's units) of the refund carrying
// our refund reference in metadata; 0 when there is none.
func (s *Server) RefundedAmount(reference string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.findRefund(reference); r != nil {
		return r.Amount
	}
	return 0
}

func (r *refund) holds() bool { return r.Status != "failed" && r.Status != "canceled" }

func (s *Server) findRefund(reference string) *refund {
	for _, r := range s.refunds {
		if r.Metadata[stripe.MetadataKey] == reference {
			return r
		}
	}
	return nil
}

// SettleRefund finishes a pending refund, named by our refund reference
// (its metadata), with OutcomeSucceeded or OutcomeFailed (failure_reason
// "declined"). Idempotent replays still answer the first response.
func (s *Server) SettleRefund(reference string, outcome providers.Outcome) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.refundIn(reference, "pending")
	if err != nil {
		return err
	}
	switch outcome {
	case providers.OutcomeSucceeded:
		r.Status = "succeeded"
	case providers.OutcomeFailed:
		reason := "declined"
		r.Status, r.FailureReason = "failed", &reason
	default:
		return fmt.Errorf("stripetest: cannot settle a refund to %q", outcome)
	}
	return nil
}

// FailRefund fails a succeeded refund after the fact, as Stripe does when
// the customer's card or account has closed since (failure_reason
// "expired_or_canceled_card"): the money goes back to the merchant's
// balance, and Stripe sends refund.updated.
func (s *Server) FailRefund(reference string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.refundIn(reference, "succeeded")
	if err != nil {
		return err
	}
	reason := "expired_or_canceled_card"
	r.Status, r.FailureReason = "failed", &reason
	return nil
}

// refundIn is the refund carrying our reference, which must be in status;
// s.mu is held.
func (s *Server) refundIn(reference, status string) (*refund, error) {
	r := s.findRefund(reference)
	switch {
	case r == nil:
		return nil, fmt.Errorf("stripetest: no refund %q", reference)
	case r.Status != status:
		return nil, fmt.Errorf("stripetest: refund %q is %s, not %s", reference, r.Status, status)
	}
	return r, nil
}

// RefundWebhook returns a refund.updated event for the refund carrying our
// refund reference (data.object is the Refund, with its metadata), signed
// with WebhookSecret at time now.
func (s *Server) RefundWebhook(reference string, now time.Time) (http.Header, []byte, error) {
	s.mu.Lock()
	r := s.findRefund(reference)
	var body []byte
	if r != nil {
		body, _ = json.Marshal(map[string]any{"id": "evt_" + r.ID[3:], "object": "event", "type": "refund.updated",
			"created": now.Unix(), "livemode": false, "data": map[string]any{"object": r}})
	}
	s.mu.Unlock()
	if r == nil {
		return nil, nil, fmt.Errorf("stripetest: no refund %q", reference)
	}
	return signed(now, body), body, nil
}

// ChargeRefundedWebhook returns the charge.refunded event Stripe sends for
// the charge of the intent carrying our charge reference once refunds of
// it succeeded: data.object is the Charge, which names its PaymentIntent
// (the intent's metadata is not copied onto its charge).
func (s *Server) ChargeRefundedWebhook(reference string, now time.Time) (http.Header, []byte, error) {
	s.mu.Lock()
	pi := s.find(reference)
	var body []byte
	if pi != nil {
		var refunded int64
		for _, r := range s.refunds {
			if r.PaymentIntent == pi.ID && r.Status == "succeeded" {
				refunded += r.Amount
			}
		}
		body, _ = json.Marshal(map[string]any{"id": "evt_ch" + pi.ID[3:], "object": "event", "type": "charge.refunded",
			"created": now.Unix(), "livemode": false, "data": map[string]any{"object": map[string]any{
				"id": chargeID(pi), "object": "charge", "amount": pi.Amount, "amount_refunded": refunded,
				"currency": pi.Currency, "payment_intent": pi.ID, "refunded": refunded == pi.Amount,
				"metadata": map[string]string{}, "status": "succeeded",
			}}})
	}
	s.mu.Unlock()
	if pi == nil {
		return nil, nil, fmt.Errorf("stripetest: no intent for %q", reference)
	}
	return signed(now, body), body, nil
}

func signed(now time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Stripe-Signature", stripe.SignatureHeader(WebhookSecret, now, body))
	return h
}

func chargeID(pi *intent) string { return "ch_" + pi.ID[3:] }

func (s *Server) intentByID(id string) *intent {
	for _, pi := range s.intents {
		if pi.ID == id {
			return pi
		}
	}
	return nil
}

func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "Invalid form body")
		return
	}
	f := r.PostForm
	var amount int64
	if a := f.Get("amount"); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n <= 0 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid_integer", "Invalid integer: amount")
			return
		}
		amount = n
	}
	if reason := f.Get("reason"); reason != "" && reason != "duplicate" && reason != "fraudulent" && reason != "requested_by_customer" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid_string", "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer")
		return
	}
	if f.Get("payment_intent") == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_missing", "One of the following params should be provided for this request: payment_intent or charge.")
		return
	}
	params := f.Encode()
	key := r.Header.Get("Idempotency-Key")

	s.mu.Lock()
	if st, ok := s.idem[key]; ok && key != "" {
		s.mu.Unlock()
		if st.params != params {
			writeError(w, http.StatusBadRequest, "idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '"+key+"' if you meant to execute a different request.")
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		fake.WriteRaw(w, st.status, st.body)
		return
	}
	pi := s.intentByID(f.Get("payment_intent"))
	if pi == nil {
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, "invalid_request_error", "resource_missing", "No such payment_intent: '"+f.Get("payment_intent")+"'")
		return
	}
	if refusal := amountRefusal(amount, pi.Currency); amount != 0 && refusal != nil {
		s.mu.Unlock()
		fake.WriteRaw(w, http.StatusBadRequest, refusal)
		return
	}
	left := pi.Amount
	for _, rf := range s.refunds {
		if rf.PaymentIntent == pi.ID && rf.holds() {
			left -= rf.Amount
		}
	}
	if amount == 0 {
		amount = left
	}
	// From here the request executes: its answer, refusal or refund, is
	// stored under the key.
	status, body := http.StatusOK, []byte(nil)
	refuse := func(code, msg string) {
		e := map[string]any{"type": "invalid_request_error", "message": msg, "param": "amount"}
		if code != "" {
			e["code"] = code
		}
		status = http.StatusBadRequest
		body, _ = json.Marshal(map[string]any{"error": e})
	}
	var rf *refund
	switch {
	case pi.Status != "succeeded":
		refuse("", "This PaymentIntent does not have a successful charge to refund.")
	case left <= 0:
		refuse("charge_already_refunded", "Charge "+chargeID(pi)+" has already been refunded.")
	case amount > left:
		refuse("amount_too_large", fmt.Sprintf("Refund amount (%d %s) is greater than unrefunded amount on charge (%d %s)",
			amount, pi.Currency, left, pi.Currency))
	default:
		s.nextRefund++
		rf = &refund{ID: fmt.Sprintf("re_3Oncepay%016d", s.nextRefund), Object: "refund", Amount: amount,
			Currency: pi.Currency, PaymentIntent: pi.ID, Charge: chargeID(pi), Status: "succeeded",
			Metadata: map[string]string{}, Created: time.Now().Unix()}
		if reason := f.Get("reason"); reason != "" {
			rf.Reason = &reason
		}
		for k, v := range f {
			if strings.HasPrefix(k, "metadata[") && strings.HasSuffix(k, "]") {
				rf.Metadata[k[len("metadata["):len(k)-1]] = v[0]
			}
		}
		if fake.TakePend(&s.Faults) {
			rf.Status = "pending"
		}
		s.refunds = append(s.refunds, rf)
		body, _ = json.Marshal(rf)
	}
	fate := fake.Answer
	if rf != nil {
		fate = fake.Refunded(&s.Faults, rf.Metadata[stripe.MetadataKey])
	}
	if key != "" {
		s.idem[key] = &stored{params: params, status: status, body: body}
	}
	s.mu.Unlock()

	if !fake.Withhold(&s.Faults, w, r, fate) {
		fake.WriteRaw(w, status, body)
	}
}

// listRefunds answers GET /v1/refunds newest first, filtered by
// payment_intent, honouring limit and starting_after; a refund landing late
// (LandLateNext) is not listed until it lands.
func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit < 1 || limit > 100 {
		limit = 10
	}
	pi, after := q.Get("payment_intent"), q.Get("starting_after")
	s.mu.Lock()
	out := []*refund{}
	started := after == ""
	for i := len(s.refunds) - 1; i >= 0; i-- {
		rf := s.refunds[i]
		if !started {
			started = rf.ID == after
			continue
		}
		if (pi == "" || rf.PaymentIntent == pi) && !fake.Hidden(&s.Faults, rf.Metadata[stripe.MetadataKey]) {
			out = append(out, rf)
		}
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	body, _ := json.Marshal(map[string]any{"object": "list", "url": "/v1/refunds", "has_more": more, "data": out})
	s.mu.Unlock()
	fake.WriteRaw(w, http.StatusOK, body)
}

func (s *Server) fetchRefund(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/refunds/")
	s.mu.Lock()
	var body []byte
	for _, rf := range s.refunds {
		if rf.ID == id && !fake.Hidden(&s.Faults, rf.Metadata[stripe.MetadataKey]) { // landing late (LandLateNext)
			body, _ = json.Marshal(rf)
		}
	}
	s.mu.Unlock()
	if body == nil {
		writeError(w, http.StatusNotFound, "invalid_request_error", "resource_missing", "No such refund: '"+id+"'")
		return
	}
	fake.WriteRaw(w, http.StatusOK, body)
}
