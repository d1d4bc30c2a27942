package flutterwave

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/internal/wire"
)

// Refunds (shared/providers.md 2.3(d)).
//
// Flutterwave v3 refunds by its numeric transaction id (POST
// /v3/transactions/{id}/refund, {amount, comments}), takes no client
// reference and does not dedupe. Our refund reference travels as the
// refund's comments: the documented free-text note of the create, which the
// refund list (GET /v3/refunds) echoes as "comment". Neither the create
// answer nor meta carries anything of ours (meta holds Flutterwave's
// {"source": ...}), so comments is the one field that survives a round
// trip; the reason is not sent (v3 has no field for it beside comments).
//
// A refund is found by listing the transaction's refunds and taking the one
// whose comment is ours. The list's transaction filter (?id=) is
// UNCONFIRMED by name, so the adapter never trusts it: it checks every
// refund's comment and transaction_id itself and pages through at most
// listRefundPages pages; past that it cannot tell (ErrUnknown), rather than
// answer "not found" and let a second refund be made.
//
// Dedupe: Refund looks ours up first and returns it if it is there, so a
// repeated Refund never refunds twice once the first is listed. As for
// Paystack, two first calls at once could both create (the gateway
// serialises a refund key, so only one caller exists), and a create still
// in flight at Flutterwave when a retry looks is missed: so the adapter
// is no providers.RefundDeduper, and the gateway sends such a refund
// again only RECHECK_AFTER after its earlier attempt, looking it up until
// then.

// listRefundPages bounds a look-up (Flutterwave chooses the page size).
const listRefundPages = 25

type refund struct {
	ID            json.Number     `json:"id"`
	Status        string          `json:"status"`
	Comment       string          `json:"comment"`
	Comments      string          `json:"comments"`
	TransactionID json.RawMessage `json:"transaction_id"`
	TxID          json.RawMessage `json:"tx_id"`
}

// note is our refund reference as the refund carries it.
func (r refund) note() string {
	if r.Comment != "" {
		return r.Comment
	}
	return r.Comments
}

// of reports whether the refund names the transaction txID, or names none.
func (r refund) of(txID string) bool {
	for _, raw := range []json.RawMessage{r.TransactionID, r.TxID} {
		if id := idString(raw); id != "" {
			return id == txID
		}
	}
	return true
}

// idString reads an id that a payload gives as a number or a string; ""
// when it is neither.
func idString(raw json.RawMessage) string {
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return ""
	}
	switch v := v.(type) {
	case json.Number:
		n = v
	case string:
		return v
	default:
		return ""
	}
	return n.String()
}

// text reads a JSON string; "" for anything else.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

type refundBody struct {
	Amount   json.Number `json:"amount"`
	Comments string      `json:"comments"`
}

// Refund refunds req.Amount (sent in major units, an exact JSON number) of
// the charge with POST /v3/transactions/{id}/refund and our reference as
// comments, after looking ours up. The id is req.TransactionID or, without
// it, the one verify_by_reference gives for the charge reference (no such
// charge: a failed no_charge result). A refusal we recognise is a final
// failed result; any other 4xx is ErrNotCharged; 5xx (Flutterwave's 503
// gateway timeout too), a timeout or a cut connection is ErrUnknown — on
// the POST: any failure of the look-ups before it is ErrNotCharged, since
// nothing that could refund was sent.
func (p *Provider) Refund(ctx context.Context, req providers.RefundRequest) (providers.RefundResult, error) {
	major, err := providers.FormatMajor(req.Amount, req.Currency)
	if err != nil {
		return providers.RefundResult{}, fmt.Errorf("%s: %w: %w", Name, providers.ErrNotCharged, err)
	}
	txID, found, err := p.transactionID(ctx, req.ChargeReference, req.TransactionID)
	if err != nil {
		return providers.RefundResult{}, wire.BeforeCreate(Name, err)
	}
	if !found {
		return wire.RefundFailed("", wire.RefundNoCharge), nil
	}
	if r, found, err := p.findRefund(ctx, req.Reference, txID); err != nil {
		return providers.RefundResult{}, wire.BeforeCreate(Name, err)
	} else if found {
		return refundResult(r), nil
	}
	body, err := json.Marshal(refundBody{Amount: json.Number(major), Comments: req.Reference})
	if err != nil {
		return providers.RefundResult{}, fmt.Errorf("%s: %w: %v", Name, providers.ErrNotCharged, err)
	}
	hreq, err := wire.NewJSONRequest(Name, http.MethodPost, p.base+"/v3/transactions/"+url.PathEscape(txID)+"/refund", p.key, body)
	if err != nil {
		return providers.RefundResult{}, err
	}
	resp, err := wire.Do(ctx, p.client, Name, hreq)
	if err != nil {
		return providers.RefundResult{}, err
	}
	env, decodeErr := wire.DecodeJSON[envelope](resp.Body)
	switch {
	case resp.Status == http.StatusOK:
		if decodeErr != nil || env.Status != "success" {
			return providers.RefundResult{}, fmt.Errorf("%s: %w: unreadable refund answer (HTTP 200)", Name, providers.ErrUnknown)
		}
		r, err := wire.DecodeJSON[refund](env.Data)
		if err != nil || r.Status == "" {
			return providers.RefundResult{}, fmt.Errorf("%s: %w: answer without a refund status", Name, providers.ErrUnknown)
		}
		return refundResult(r), nil
	case resp.Status >= 400 && resp.Status < 500 && decodeErr == nil && env.Status == "error" &&
		// Not a refusal of this refund, whatever its words ("no more than
		// 10 refund requests a minute"): a request that timed out or
		// conflicted, or a rate limit, says nothing final about it.
		resp.Status != http.StatusRequestTimeout && resp.Status != http.StatusConflict && resp.Status != http.StatusTooManyRequests:
		if strings.Contains(strings.ToLower(env.Message), "no transaction was found") {
			return wire.RefundFailed("", wire.RefundNoCharge), nil
		}
		if code, ok := wire.RefusalCode(env.Message); ok {
			return wire.RefundFailed("", code), nil
		}
		return providers.RefundResult{}, wire.StatusError(Name, "refund", resp.Status, env.Message)
	default:
		return providers.RefundResult{}, wire.StatusError(Name, "refund", resp.Status, env.Message)
	}
}

// LookupRefund finds the refund carrying our reference among the charge's
// refunds. OutcomeNotFound when there is none (or no such charge). It only
// reads; RefundID is not used (v3 documents no fetch of one refund).
func (p *Provider) LookupRefund(ctx context.Context, req providers.RefundLookup) (providers.RefundResult, error) {
	txID, found, err := p.transactionID(ctx, req.ChargeReference, req.TransactionID)
	if err != nil {
		return providers.RefundResult{}, err
	}
	if !found {
		return providers.RefundResult{Outcome: providers.OutcomeNotFound}, nil
	}
	r, found, err := p.findRefund(ctx, req.Reference, txID)
	if err != nil {
		return providers.RefundResult{}, err
	}
	if !found {
		return providers.RefundResult{Outcome: providers.OutcomeNotFound}, nil
	}
	return refundResult(r), nil
}

// transactionID is Flutterwave's id of the charge: the gateway's, or the
// one verify_by_reference gives (found false: no such charge).
func (p *Provider) transactionID(ctx context.Context, reference, known string) (string, bool, error) {
	if known != "" {
		return known, true, nil
	}
	tx, found, err := p.verify(ctx, reference)
	if err != nil || !found {
		return "", found, err
	}
	if tx.ID == "" {
		return "", false, fmt.Errorf("%s: %w: verify answered without a transaction id", Name, providers.ErrUnknown)
	}
	return tx.ID.String(), true, nil
}

// findRefund pages through GET /v3/refunds?id= for the refund of txID whose
// comment is reference.
func (p *Provider) findRefund(ctx context.Context, reference, txID string) (refund, bool, error) {
	for page := 1; page <= listRefundPages; page++ {
		q := url.Values{"id": {txID}, "page": {strconv.Itoa(page)}}
		hreq, err := wire.NewJSONRequest(Name, http.MethodGet, p.base+"/v3/refunds?"+q.Encode(), p.key, nil)
		if err != nil {
			return refund{}, false, err
		}
		resp, err := wire.Do(ctx, p.client, Name, hreq)
		if err != nil {
			return refund{}, false, err
		}
		var l struct {
			Status  string   `json:"status"`
			Message string   `json:"message"`
			Data    []refund `json:"data"`
			Meta    struct {
				PageInfo struct {
					TotalPages json.Number `json:"total_pages"`
				} `json:"page_info"`
			} `json:"meta"`
		}
		decodeErr := json.Unmarshal(resp.Body, &l)
		if resp.Status != http.StatusOK {
			return refund{}, false, wire.StatusError(Name, "refund lookup", resp.Status, l.Message)
		}
		if decodeErr != nil || l.Status != "success" {
			return refund{}, false, fmt.Errorf("%s: %w: unreadable refund list (HTTP 200)", Name, providers.ErrUnknown)
		}
		for _, r := range l.Data {
			if r.note() == reference && r.of(txID) {
				if r.Status == "" {
					return refund{}, false, fmt.Errorf("%s: %w: refund without a status", Name, providers.ErrUnknown)
				}
				return r, true, nil
			}
		}
		// The last page: an empty one, or the one page_info says is last.
		// Without page_info, keep reading until an empty page.
		if pages, err := l.Meta.PageInfo.TotalPages.Int64(); len(l.Data) == 0 || (err == nil && int64(page) >= pages) {
			return refund{}, false, nil
		}
	}
	return refund{}, false, fmt.Errorf("%s: %w: more than %d pages of refunds listed for the charge; cannot tell whether ours is among them",
		Name, providers.ErrUnknown, listRefundPages)
}

// refundResult maps a refund's status (shared/providers.md 2.3(d)):
// completed (and successful, a value the list's status filter names) is
// succeeded, failed is failed, and pending — or anything unknown — stays
// pending for the sweeper.
func refundResult(r refund) providers.RefundResult {
	id := r.ID.String()
	switch strings.ToLower(r.Status) {
	case "completed", "successful":
		return providers.RefundResult{Outcome: providers.OutcomeSucceeded, RefundID: id}
	case "failed":
		return wire.RefundFailed(id, wire.RefundDeclined)
	default:
		return providers.RefundResult{Outcome: providers.OutcomePending, RefundID: id}
	}
}
