package paystack

import (
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

// Refunds (shared/providers.md 1.3(e), the spec's /refund paths).
//
// Paystack takes no client reference for a refund and does not dedupe
// one, so our refund reference travels as the refund's merchant_note (the
// merchant's own note, which Paystack keeps and echoes on fetch and list),
// and a refund is found by listing the charge's refunds (GET
// /refund?transaction=) and taking the one whose merchant_note is ours, or
// by GET /refund/{id} when the gateway knows Paystack's id.
//
// Dedupe: Refund first looks ours up that way and returns it if it is
// there, so a repeated Refund — a retry after a lost answer, a takeover,
// the sweeper — never refunds twice once the first refund is visible in
// the list. Two windows remain, and both are the gateway's to keep shut:
//
//   - Two first calls at once could both find nothing and both create.
//     The gateway serialises a refund key (the idempotency claim), so one
//     caller at a time exists for a reference.
//   - A create whose answer was lost and which Paystack has not yet made
//     visible in the list (still in flight at the provider) is missed by a
//     retry's look-up. So the adapter is no providers.RefundDeduper, and
//     the gateway never sends a refund whose earlier attempt may have
//     reached Paystack again until RECHECK_AFTER after that attempt: until
//     then it only looks the refund up.
//
// The list filter (?transaction=, with Paystack's transaction id when we
// have it) is what client libraries send but not in the spec, so the
// adapter never trusts it: it checks every refund's merchant_note and
// transaction itself and pages through at most listRefundPages pages; past
// that it cannot tell, and says so (ErrUnknown), rather than answer "not
// found" and let a second refund be made.

// refundPerPage and listRefundPages bound a look-up: 1,000 refunds of one
// charge (or, if Paystack ignored the filter, of the integration).
const (
	refundPerPage   = 100
	listRefundPages = 10
)

// refund is a Paystack refund. Fetch and list give its transaction as an
// id (with transaction_reference beside it), create as an object.
type refund struct {
	ID                   json.Number     `json:"id"`
	Status               string          `json:"status"`
	MerchantNote         string          `json:"merchant_note"`
	Transaction          json.RawMessage `json:"transaction"`
	TransactionReference string          `json:"transaction_reference"`
}

// refundOf reports whether r, found by our merchant note, refunds the
// charge with wire reference ref or Paystack id txID: a refund that names
// another transaction is not ours whatever its note says.
func (r refund) refundOf(ref, txID string) bool {
	if r.TransactionReference != "" && r.TransactionReference != ref {
		return false
	}
	var id json.Number
	var obj struct {
		ID        json.Number `json:"id"`
		Reference string      `json:"reference"`
	}
	switch {
	case len(r.Transaction) == 0 || string(r.Transaction) == "null":
	case json.Unmarshal(r.Transaction, &id) == nil:
		return txID == "" || id.String() == txID
	case json.Unmarshal(r.Transaction, &obj) == nil:
		return (txID == "" || obj.ID == "" || obj.ID.String() == txID) && (obj.Reference == "" || obj.Reference == ref)
	}
	return true
}

type refundBody struct {
	Transaction  string `json:"transaction"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency,omitempty"`
	CustomerNote string `json:"customer_note,omitempty"`
	MerchantNote string `json:"merchant_note"`
}

// Refund refunds req.Amount of the charge with POST /refund, our refund
// reference as merchant_note and req.Reason (when given) as customer_note,
// after looking ours up (see the dedupe above). Paystack queues a refund,
// so a new one is almost always OutcomePending; refund.processed, the
// sweeper and LookupRefund see it settle. A refusal Paystack documents
// ("Transaction has been fully reversed", "Insufficient balance ...") is a
// final failed result; any other 4xx is ErrNotCharged; 5xx, a timeout or a
// cut connection is ErrUnknown — on the POST: any failure of the look-ups
// before it is ErrNotCharged, since nothing that could refund was sent.
func (p *Provider) Refund(ctx context.Context, req providers.RefundRequest) (providers.RefundResult, error) {
	txID, found, err := p.transactionID(ctx, req.ChargeReference, req.TransactionID)
	if err != nil {
		return providers.RefundResult{}, wire.BeforeCreate(Name, err)
	}
	if !found {
		return wire.RefundFailed("", wire.RefundNoCharge), nil
	}
	// Look ours up before creating: Paystack would make a second refund.
	if r, found, err := p.findRefund(ctx, req.Reference, WireReference(req.ChargeReference), txID); err != nil {
		return providers.RefundResult{}, wire.BeforeCreate(Name, err)
	} else if found {
		return refundResult(r), nil
	}
	body, err := json.Marshal(refundBody{
		Transaction:  WireReference(req.ChargeReference),
		Amount:       req.Amount,
		Currency:     req.Currency,
		CustomerNote: req.Reason,
		MerchantNote: req.Reference,
	})
	if err != nil {
		return providers.RefundResult{}, fmt.Errorf("%s: %w: %v", Name, providers.ErrNotCharged, err)
	}
	hreq, err := wire.NewJSONRequest(Name, http.MethodPost, p.base+"/refund", p.key, body)
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
		if decodeErr != nil || !env.Status {
			return providers.RefundResult{}, fmt.Errorf("%s: %w: unreadable refund answer (HTTP 200)", Name, providers.ErrUnknown)
		}
		r, err := decodeRefund(env.Data)
		if err != nil {
			return providers.RefundResult{}, err
		}
		return refundResult(r), nil
	case resp.Status == http.StatusBadRequest && decodeErr == nil:
		if code, ok := wire.RefusalCode(env.Message); ok {
			return wire.RefundFailed("", code), nil
		}
		return providers.RefundResult{}, wire.StatusError(Name, "refund", resp.Status, env.Message)
	default:
		return providers.RefundResult{}, wire.StatusError(Name, "refund", resp.Status, env.Message)
	}
}

// LookupRefund finds the refund carrying our reference: by GET
// /refund/{id} when req.RefundID is Paystack's id, otherwise (or when that
// id is unknown to Paystack) in the charge's refunds. OutcomeNotFound when
// the charge has none of ours (or Paystack has no such charge). It only
// reads.
func (p *Provider) LookupRefund(ctx context.Context, req providers.RefundLookup) (providers.RefundResult, error) {
	if isDigits(req.RefundID) {
		r, found, err := p.fetchRefund(ctx, req.RefundID)
		if err != nil {
			return providers.RefundResult{}, err
		}
		if found {
			if r.MerchantNote != req.Reference {
				return providers.RefundResult{}, fmt.Errorf("%s: %w: refund %s is not the one with our reference", Name, providers.ErrUnknown, req.RefundID)
			}
			return refundResult(r), nil
		}
	}
	txID, found, err := p.transactionID(ctx, req.ChargeReference, req.TransactionID)
	if err != nil {
		return providers.RefundResult{}, err
	}
	if !found {
		return providers.RefundResult{Outcome: providers.OutcomeNotFound}, nil
	}
	r, found, err := p.findRefund(ctx, req.Reference, WireReference(req.ChargeReference), txID)
	if err != nil {
		return providers.RefundResult{}, err
	}
	if !found {
		return providers.RefundResult{Outcome: providers.OutcomeNotFound}, nil
	}
	return refundResult(r), nil
}

// transactionID is Paystack's id of the charge: the one the gateway has, or
// the one verify gives for our reference (found false: no such charge).
func (p *Provider) transactionID(ctx context.Context, reference, known string) (string, bool, error) {
	if known != "" {
		return known, true, nil
	}
	tx, found, err := p.verify(ctx, reference)
	if err != nil || !found {
		return "", found, err
	}
	return tx.ID.String(), true, nil
}

// findRefund pages through the refunds of the charge (wire reference ref,
// id txID) for the one whose merchant_note is reference.
func (p *Provider) findRefund(ctx context.Context, reference, ref, txID string) (refund, bool, error) {
	filter := txID
	if filter == "" {
		filter = ref
	}
	for page := 1; page <= listRefundPages; page++ {
		q := url.Values{"transaction": {filter}, "perPage": {strconv.Itoa(refundPerPage)}, "page": {strconv.Itoa(page)}}
		var l struct {
			Data []refund `json:"data"`
			Meta struct {
				PageCount json.Number `json:"pageCount"`
			} `json:"meta"`
		}
		if err := p.getRefunds(ctx, "/refund?"+q.Encode(), &l); err != nil {
			return refund{}, false, err
		}
		for _, r := range l.Data {
			if r.MerchantNote == reference && r.refundOf(ref, txID) {
				if r.Status == "" {
					return refund{}, false, fmt.Errorf("%s: %w: refund without a status", Name, providers.ErrUnknown)
				}
				return r, true, nil
			}
		}
		// The last page is the one pageCount names, or without it an
		// empty one: never a short page. Paystack may serve fewer than
		// perPage asked (its spec documents a default of 50 and no
		// maximum), and taking a short page for the last would miss our
		// refund on the next — and Paystack makes a second refund of a
		// reference sent again.
		if pages, err := l.Meta.PageCount.Int64(); err == nil && l.Meta.PageCount != "" {
			if int64(page) >= pages {
				return refund{}, false, nil
			}
		} else if len(l.Data) == 0 {
			return refund{}, false, nil
		}
	}
	return refund{}, false, fmt.Errorf("%s: %w: more than %d refunds listed for the charge; cannot tell whether ours is among them",
		Name, providers.ErrUnknown, refundPerPage*listRefundPages)
}

// fetchRefund reads GET /refund/{id}; found is false on Paystack's 404.
func (p *Provider) fetchRefund(ctx context.Context, id string) (refund, bool, error) {
	hreq, err := wire.NewJSONRequest(Name, http.MethodGet, p.base+"/refund/"+url.PathEscape(id), p.key, nil)
	if err != nil {
		return refund{}, false, err
	}
	resp, err := wire.Do(ctx, p.client, Name, hreq)
	if err != nil {
		return refund{}, false, err
	}
	env, decodeErr := wire.DecodeJSON[envelope](resp.Body)
	switch {
	case resp.Status == http.StatusOK:
		if decodeErr != nil || !env.Status {
			return refund{}, false, fmt.Errorf("%s: %w: unreadable refund answer (HTTP 200)", Name, providers.ErrUnknown)
		}
		r, err := decodeRefund(env.Data)
		return r, err == nil, err
	case resp.Status == http.StatusNotFound && decodeErr == nil:
		return refund{}, false, nil
	default:
		return refund{}, false, wire.StatusError(Name, "refund lookup", resp.Status, env.Message)
	}
}

func (p *Provider) getRefunds(ctx context.Context, path string, into any) error {
	hreq, err := wire.NewJSONRequest(Name, http.MethodGet, p.base+path, p.key, nil)
	if err != nil {
		return err
	}
	resp, err := wire.Do(ctx, p.client, Name, hreq)
	if err != nil {
		return err
	}
	env, decodeErr := wire.DecodeJSON[envelope](resp.Body)
	if resp.Status != http.StatusOK {
		return wire.StatusError(Name, "refund lookup", resp.Status, env.Message)
	}
	if decodeErr != nil || !env.Status {
		return fmt.Errorf("%s: %w: unreadable refund list (HTTP 200)", Name, providers.ErrUnknown)
	}
	// The list's data is the array; read it again with the page meta.
	if err := json.Unmarshal(resp.Body, into); err != nil {
		return fmt.Errorf("%s: %w: unreadable refund list (HTTP 200)", Name, providers.ErrUnknown)
	}
	return nil
}

func decodeRefund(data json.RawMessage) (refund, error) {
	r, err := wire.DecodeJSON[refund](data)
	if err != nil || r.Status == "" {
		return refund{}, fmt.Errorf("%s: %w: answer without a refund status", Name, providers.ErrUnknown)
	}
	return r, nil
}

// refundResult maps a refund's status (shared/providers.md 1.3(e)):
// processed is succeeded, failed is failed; pending, processing,
// needs-attention (Paystack wants the customer's account details) and
// anything unknown stay pending, so the sweeper keeps asking and a person
// reviews it after REVIEW_AFTER.
func refundResult(r refund) providers.RefundResult {
	id := r.ID.String()
	switch strings.ToLower(r.Status) {
	case "processed":
		return providers.RefundResult{Outcome: providers.OutcomeSucceeded, RefundID: id}
	case "failed":
		return wire.RefundFailed(id, wire.RefundDeclined)
	default:
		return providers.RefundResult{Outcome: providers.OutcomePending, RefundID: id}
	}
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
