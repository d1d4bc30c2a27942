package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/internal/wire"
)

// Refunds (shared/providers.md 3.7).
//
// A refund is POST /v1/refunds on the charge's PaymentIntent with our
// refund reference twice: as the Idempotency-Key (Stripe replays a repeat
// with the same key and parameters for at least 24h, and answers 409 while
// the first is still running, so two concurrent first calls make one
// refund), and in metadata[oncepay_reference] (with the charge's reference
// in metadata[oncepay_charge_reference]), where it outlives the key. A
// refund is found by listing the PaymentIntent's refunds (GET
// /v1/refunds?payment_intent=, a list API: consistent, unlike search,
// which has no refunds anyway) and matching that metadata, or by GET
// /v1/refunds/{id} when the gateway has Stripe's id.
//
// Dedupe: Refund lists first and returns ours if it is there, then
// creates with the Idempotency-Key. Within Stripe's 24h the key alone
// guarantees one refund, even for concurrent first calls; after it the
// look-up does, for any refund already made (a refund still in flight at
// Stripe after 24h is not a case that exists).

// RefundMetadataChargeKey is the refund metadata key that carries our
// charge reference beside our refund reference (MetadataKey), so a refund
// event names both.
const RefundMetadataChargeKey = "oncepay_charge_reference"

// refundReasons are the reasons Stripe takes; any other reason is ours
// alone and not sent.
var refundReasons = map[string]bool{"duplicate": true, "fraudulent": true, "requested_by_customer": true}

// listRefundPages bounds a look-up: 500 refunds of one PaymentIntent.
const listRefundPages = 5

type stripeRefund struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Status        string            `json:"status"`
	Metadata      map[string]string `json:"metadata"`
	FailureReason string            `json:"failure_reason"`
}

type refundList struct {
	Data    []stripeRefund `json:"data"`
	HasMore bool           `json:"has_more"`
}

// RefundForm is the exact form Refund sends for a PaymentIntent, exported
// so the fake and tests can compare against it. url.Values encodes in key
// order, so a repeat is byte-identical, as the Idempotency-Key needs. Its
// amount is in Stripe's units (APIAmount); one Stripe cannot take is an
// error wrapping ErrNotCharged and ErrAmount.
func RefundForm(req providers.RefundRequest, paymentIntent string) (url.Values, error) {
	amount, err := APIAmount(req.Amount, req.Currency)
	if err != nil {
		return nil, fmt.Errorf("%s: refund: %w: %w", Name, providers.ErrNotCharged, err)
	}
	f := url.Values{
		"payment_intent":                {paymentIntent},
		"amount":                        {strconv.FormatInt(amount, 10)},
		"metadata[" + MetadataKey + "]": {req.Reference},
		"metadata[" + RefundMetadataChargeKey + "]": {req.ChargeReference},
	}
	if refundReasons[req.Reason] {
		f.Set("reason", req.Reason)
	}
	return f, nil
}

// Refund refunds req.Amount of the charge's PaymentIntent (req.TransactionID,
// or the one found by the charge reference as Lookup finds it: none found
// is ErrNotCharged, nothing having been sent), after looking ours up. A
// refusal Stripe gives (already refunded, more than is left, no successful
// charge, balance too low) is a final failed result; a 409 (the first
// request with this key still running) or idempotency_error (the key was
// used with other parameters, so a refund may exist) is ErrUnknown, as are
// 5xx, timeouts and cut connections; other 4xx are ErrNotCharged. An
// amount Stripe cannot take (APIAmount) is ErrNotCharged and ErrAmount
// before anything, even a look-up, is sent.
func (p *Provider) Refund(ctx context.Context, req providers.RefundRequest) (providers.RefundResult, error) {
	// The form's amount is checked first: a refusal must come before any
	// request, even the look-ups.
	if _, err := RefundForm(req, req.TransactionID); err != nil {
		return providers.RefundResult{}, err
	}
	pi := req.TransactionID
	if pi == "" {
		intent, found, err := p.findIntent(ctx, req.ChargeReference)
		if err != nil {
			return providers.RefundResult{}, err
		}
		if !found {
			return providers.RefundResult{}, fmt.Errorf("%s: %w: no PaymentIntent found for the charge reference (search may lag); nothing sent", Name, providers.ErrNotCharged)
		}
		pi = intent.ID
	}
	if r, found, err := p.findRefund(ctx, req.Reference, pi); err != nil {
		return providers.RefundResult{}, err
	} else if found {
		return refundResult(r), nil
	}
	form, err := RefundForm(req, pi)
	if err != nil {
		return providers.RefundResult{}, err
	}
	hreq, err := p.request(http.MethodPost, p.base+"/v1/refunds", []byte(form.Encode()))
	if err != nil {
		return providers.RefundResult{}, err
	}
	hreq.Header.Set("Idempotency-Key", req.Reference)
	hreq.GetBody = nil // as for Charge: a cut connection must surface, not be re-sent by net/http
	resp, err := wire.Do(ctx, p.client, Name, hreq)
	if err != nil {
		return providers.RefundResult{}, err
	}
	if resp.Status == http.StatusOK {
		var r stripeRefund
		if err := json.Unmarshal(resp.Body, &r); err != nil || r.Status == "" {
			return providers.RefundResult{}, fmt.Errorf("%s: %w: unreadable refund answer (HTTP 200)", Name, providers.ErrUnknown)
		}
		return refundResult(r), nil
	}
	var env errorEnvelope
	_ = json.Unmarshal(resp.Body, &env)
	e := env.Error
	if e == nil {
		e = &stripeError{}
	}
	if e.Type == "idempotency_error" {
		return providers.RefundResult{}, fmt.Errorf("%s: refund: %w: HTTP %d: idempotency key reused with other parameters", Name, providers.ErrUnknown, resp.Status)
	}
	if resp.Status == http.StatusBadRequest || resp.Status == http.StatusPaymentRequired {
		if code, ok := refusalCode(e); ok {
			return wire.RefundFailed("", code), nil
		}
	}
	if resp.Status == http.StatusPaymentRequired {
		// A 402 that is no refusal we know: the request was valid and may
		// have been acted on.
		return providers.RefundResult{}, fmt.Errorf("%s: refund: %w: HTTP 402: %s", Name, providers.ErrUnknown, wire.Message(e.Message))
	}
	return providers.RefundResult{}, statusError("refund", resp.Status, e)
}

// refusalCode reads Stripe's refusals of a refund: by error code where
// Stripe has one, else by message.
func refusalCode(e *stripeError) (string, bool) {
	switch e.Code {
	case "charge_already_refunded", "amount_too_large":
		return wire.RefundExceedsCharge, true
	case "balance_insufficient":
		return wire.RefundInsufficientBalance, true
	case "charge_disputed", "charge_not_refundable":
		return wire.RefundNotRefundable, true
	}
	return wire.RefusalCode(e.Message)
}

// LookupRefund finds the refund carrying our reference: by GET
// /v1/refunds/{id} when req.RefundID is Stripe's, else among the
// PaymentIntent's refunds. OutcomeNotFound when the intent has none of
// ours. Without req.TransactionID the intent is found by the charge
// reference; when it cannot be found (search may lag) that is "cannot
// tell", ErrUnknown, not OutcomeNotFound. It only reads.
func (p *Provider) LookupRefund(ctx context.Context, req providers.RefundLookup) (providers.RefundResult, error) {
	if req.RefundID != "" {
		var r stripeRefund
		err := p.get(ctx, "/v1/refunds/"+url.PathEscape(req.RefundID), &r)
		var missing *missingError
		switch {
		case errors.As(err, &missing):
			// Not Stripe's id of a refund: find it by our reference.
		case err != nil:
			return providers.RefundResult{}, err
		case r.Metadata[MetadataKey] != req.Reference:
			return providers.RefundResult{}, fmt.Errorf("%s: %w: refund %s is not the one with our reference", Name, providers.ErrUnknown, req.RefundID)
		case r.Status == "":
			return providers.RefundResult{}, fmt.Errorf("%s: %w: refund without a status", Name, providers.ErrUnknown)
		default:
			return refundResult(r), nil
		}
	}
	pi := req.TransactionID
	if pi == "" {
		intent, found, err := p.findIntent(ctx, req.ChargeReference)
		if err != nil {
			return providers.RefundResult{}, err
		}
		if !found {
			return providers.RefundResult{}, fmt.Errorf("%s: %w: no PaymentIntent found for the charge reference (search may lag)", Name, providers.ErrUnknown)
		}
		pi = intent.ID
	}
	r, found, err := p.findRefund(ctx, req.Reference, pi)
	if err != nil {
		return providers.RefundResult{}, err
	}
	if !found {
		return providers.RefundResult{Outcome: providers.OutcomeNotFound}, nil
	}
	return refundResult(r), nil
}

// findRefund pages through the PaymentIntent's refunds for ours.
func (p *Provider) findRefund(ctx context.Context, reference, pi string) (stripeRefund, bool, error) {
	q := url.Values{"payment_intent": {pi}, "limit": {"100"}}
	for range listRefundPages {
		var l refundList
		if err := p.get(ctx, "/v1/refunds?"+q.Encode(), &l); err != nil {
			return stripeRefund{}, false, err
		}
		for _, r := range l.Data {
			if r.Metadata[MetadataKey] == reference {
				if r.Status == "" {
					return stripeRefund{}, false, fmt.Errorf("%s: %w: refund without a status", Name, providers.ErrUnknown)
				}
				return r, true, nil
			}
		}
		if !l.HasMore || len(l.Data) == 0 {
			return stripeRefund{}, false, nil
		}
		q.Set("starting_after", l.Data[len(l.Data)-1].ID)
	}
	return stripeRefund{}, false, fmt.Errorf("%s: %w: more than %d refunds listed for the PaymentIntent; cannot tell whether ours is among them",
		Name, providers.ErrUnknown, 100*listRefundPages)
}

// refundResult maps a refund's status (shared/providers.md 3.7):
// succeeded; pending and requires_action (the customer's details are
// needed) stay pending; failed and canceled are failed, with the failure
// reason's code where it is ours (insufficient_funds is the merchant's
// balance).
func refundResult(r stripeRefund) providers.RefundResult {
	switch r.Status {
	case "succeeded":
		return providers.RefundResult{Outcome: providers.OutcomeSucceeded, RefundID: r.ID}
	case "failed", "canceled":
		code := wire.RefundDeclined
		if r.FailureReason == "insufficient_funds" {
			code = wire.RefundInsufficientBalance
		}
		return wire.RefundFailed(r.ID, code)
	default: // pending, requires_action, and anything new
		return providers.RefundResult{Outcome: providers.OutcomePending, RefundID: r.ID}
	}
}

// DedupesRefunds marks the adapter a providers.RefundDeduper: Stripe
// answers a repeated Idempotency-Key (our refund reference) with the first
// refund, for 24 hours (the gateway re-sends only within 23).
func (p *Provider) DedupesRefunds() {}

// DedupesCharges: a charge's Idempotency-Key is replayed for 24 hours.
func (p *Provider) DedupesCharges() {}
