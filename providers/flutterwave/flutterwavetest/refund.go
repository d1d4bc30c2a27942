package flutterwavetest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/flutterwave"
	"github.com/oncepay/gateway/providers/internal/fake"
)

// The fake's refunds (shared/providers.md 2.3(d)): POST
// /v3/transactions/{id}/refund with {amount (major units), comments}, and
// GET /v3/refunds (the list, filtered by ?id= — the transaction's id — and
// paged by ?page=, RefundPageSize a page). A refund is stored per charge
// and counted under its comments (where the adapter keeps our refund
// reference), which the list echoes as "comment" as Flutterwave's does. A
// refund completes at once unless PendNextRefund keeps it pending for
// SettleRefund.
//
// Refusals, all HTTP 400 error envelopes with nothing stored (the wording
// is UNCONFIRMED: Flutterwave documents none): "Transaction has been fully
// refunded" when nothing is left, "Refund amount cannot be greater than the
// unrefunded amount of the transaction" for more than is left,
// "Transaction is not successful and cannot be refunded", and "No
// transaction was found for this id".

// RefundPageSize is how many refunds a page of GET /v3/refunds holds.
const RefundPageSize = 10

type refundRecord struct {
	ID        int64
	Tx        *tx
	Amount    *big.Rat // major units
	Status    string   // completed, pending, failed
	Comments  string
	FlwRef    string
	CreatedAt string
}

func (r *refundRecord) holds() bool { return r.Status != "failed" }

func (r *refundRecord) amount() json.Number {
	return json.Number(r.Amount.FloatString(decimals(r.Tx.Currency)))
}

func decimals(currency string) int {
	e, _ := providers.Exponent(currency)
	return e
}

// created is the refund as the create answers it.
func (r *refundRecord) created() map[string]any {
	return map[string]any{"id": r.ID, "account_id": 73362, "tx_id": r.Tx.ID, "flw_ref": r.FlwRef, "wallet_id": 74639,
		"amount_refunded": r.amount(), "status": r.Status, "destination": "payment_source",
		"meta": map[string]any{"source": "availablebalance"}, "created_at": r.CreatedAt}
}

// listed is the refund as GET /v3/refunds lists it.
func (r *refundRecord) listed() map[string]any {
	return map[string]any{"id": r.ID, "amount_refunded": r.amount(), "status": r.Status, "flw_ref": r.FlwRef,
		"comment": r.Comments, "settlement_id": "NEW", "meta": `{"source":"availablebalance"}`,
		"created_at": r.CreatedAt, "account_id": 73362, "transaction_id": r.Tx.ID}
}

func (s *Server) findRefund(reference string) *refundRecord {
	for _, r := range s.refunds {
		if r.Comments == reference {
			return r
		}
	}
	return nil
}

// SettleRefund finishes a pending refund, named by our refund reference
// (its comments), with OutcomeSucceeded (completed) or OutcomeFailed.
func (s *Server) SettleRefund(reference string, outcome providers.Outcome) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.findRefund(reference)
	switch {
	case r == nil:
		return fmt.Errorf("flutterwavetest: no refund %q", reference)
	case r.Status != "pending":
		return fmt.Errorf("flutterwavetest: refund %q is %s, not pending", reference, r.Status)
	}
	switch outcome {
	case providers.OutcomeSucceeded:
		r.Status = "completed"
	case providers.OutcomeFailed:
		r.Status = "failed"
	default:
		return fmt.Errorf("flutterwavetest: cannot settle a refund to %q", outcome)
	}
	return nil
}

// RefundWebhook returns a refund.completed delivery (refund.failed,
// refund.pending for the other states) for a stored refund, signed like
// Webhook. Flutterwave's refund event is not in shared/providers.md: the
// name and payload are UNCONFIRMED, shaped like its other events (an
// envelope with the refund as data, naming the charge by tx_id and tx_ref
// and echoing the comments).
func (s *Server) RefundWebhook(reference string) (http.Header, []byte, error) {
	s.mu.Lock()
	r := s.findRefund(reference)
	var body []byte
	if r != nil {
		data := r.created()
		data["tx_ref"], data["comments"] = r.Tx.TxRef, r.Comments
		body, _ = json.Marshal(map[string]any{"event": "refund." + r.Status, "event.type": "REFUND", "data": data})
	}
	s.mu.Unlock()
	if r == nil {
		return nil, nil, fmt.Errorf("flutterwavetest: no refund %q", reference)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Verif-Hash", SecretHash)
	h.Set("Flutterwave-Signature", base64.StdEncoding.EncodeToString(flutterwave.Sign(SecretHash, body)))
	return h, body, nil
}

// txByID finds a charge by Flutterwave's id; s.mu is held.
func (s *Server) txByID(id string) *tx {
	for _, t := range s.txs {
		if strconv.FormatInt(t.ID, 10) == id {
			return t
		}
	}
	return nil
}

func (s *Server) createRefund(w http.ResponseWriter, r *http.Request, id string) {
	var in struct {
		Amount   json.Number `json:"amount"`
		Comments string      `json:"comments"`
	}
	d := json.NewDecoder(r.Body)
	d.UseNumber()
	if err := d.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid JSON payload")
		return
	}
	var amount *big.Rat
	if in.Amount != "" {
		a, ok := new(big.Rat).SetString(in.Amount.String())
		if !ok || a.Sign() <= 0 {
			writeError(w, http.StatusBadRequest, "amount must be a positive number")
			return
		}
		amount = a
	}

	s.mu.Lock()
	t := s.txByID(id)
	if t != nil && fake.Hidden(&s.Faults, t.TxRef) {
		t = nil
	}
	var left *big.Rat
	if t != nil {
		left, _ = new(big.Rat).SetString(t.Amount.String())
		for _, rf := range s.refunds {
			if rf.Tx == t && rf.holds() {
				left.Sub(left, rf.Amount)
			}
		}
		if amount == nil {
			amount = new(big.Rat).Set(left)
		}
	}
	var refusal string
	switch {
	case t == nil:
		refusal = "No transaction was found for this id"
	case t.Status != "successful":
		refusal = "Transaction is not successful and cannot be refunded"
	case left.Sign() <= 0:
		refusal = "Transaction has been fully refunded"
	case amount.Cmp(left) > 0:
		refusal = "Refund amount cannot be greater than the unrefunded amount of the transaction"
	}
	if refusal != "" {
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, refusal)
		return
	}
	s.nextRefund++
	rf := &refundRecord{ID: s.nextRefund, Tx: t, Amount: amount, Status: "completed", Comments: in.Comments,
		FlwRef: fmt.Sprintf("URF_%d_%d", time.Now().UnixMilli(), s.nextRefund), CreatedAt: time.Now().UTC().Format(time.RFC3339)}
	if fake.TakePend(&s.Faults) {
		rf.Status = "pending"
	}
	s.refunds = append(s.refunds, rf)
	fate := fake.Refunded(&s.Faults, rf.Comments)
	answer, _ := json.Marshal(map[string]any{"status": "success", "message": "Transaction refund initiated", "data": rf.created()})
	s.mu.Unlock()

	if !fake.Withhold(&s.Faults, w, r, fate) {
		fake.WriteRaw(w, http.StatusOK, answer)
	}
}

// listRefunds answers GET /v3/refunds newest first, RefundPageSize a page.
func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil || page < 1 {
		page = 1
	}
	id := q.Get("id")
	s.mu.Lock()
	var all []map[string]any
	for i := len(s.refunds) - 1; i >= 0; i-- {
		rf := s.refunds[i]
		if id != "" && strconv.FormatInt(rf.Tx.ID, 10) != id {
			continue
		}
		all = append(all, rf.listed())
	}
	s.mu.Unlock()
	total := len(all)
	from := min((page-1)*RefundPageSize, total)
	to := min(from+RefundPageSize, total)
	data := all[from:to]
	if data == nil {
		data = []map[string]any{}
	}
	fake.WriteJSON(w, http.StatusOK, map[string]any{"status": "success", "message": "Refunds fetched", "data": data,
		"meta": map[string]any{"page_info": map[string]any{"total": total, "current_page": page,
			"total_pages": (total + RefundPageSize - 1) / RefundPageSize, "page_size": RefundPageSize}}})
}

// refundPath matches /v3/transactions/{id}/refund and returns the id.
func refundPath(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/v3/transactions/")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, "/refund")
	return id, ok && id != "" && !strings.Contains(id, "/")
}
