package paystacktest

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/internal/fake"
	"github.com/oncepay/gateway/providers/paystack"
)

// The fake's refunds (shared/providers.md 1.3(e)): POST /refund, GET
// /refund (the list, filtered by ?transaction= with an id or a reference,
// paged by perPage and page) and GET /refund/{id}, each checked against the
// spec like the charges. A refund is stored per charge and counted under
// its merchant_note (where the adapter keeps our refund reference). Like
// Paystack the create answers "pending" ("queued for processing"); the
// stored refund is then processed at once, unless PendNextRefund keeps it
// pending for SettleRefund.
//
// Refusals, all HTTP 400 with nothing stored: "Transaction has been fully
// reversed" when nothing is left (Paystack's catalogue), "Refund amount
// cannot be more than the unrefunded amount of the transaction" for more
// than is left and "Transaction was not successful and cannot be refunded"
// for a charge that did not succeed (both UNCONFIRMED wording: Paystack
// documents neither), and "Insufficient balance to fulfill this refund.
// Please top up." after SetBalanceShort(true) (the catalogue's).

// refundRecord is one stored refund.
type refundRecord struct {
	ID           int64
	Tx           *tx
	Amount       int64
	Currency     string
	Status       string // pending, processing, processed, failed
	MerchantNote string
	CustomerNote string
	CreatedAt    string
}

// holds reports whether the refund holds its amount (everything but a
// failed refund does).
func (r *refundRecord) holds() bool { return r.Status != "failed" }

// fetched is the refund as GET /refund/{id} and the list answer it
// (RefundFetchResponse, RefundListResponseArray).
func (r *refundRecord) fetched() map[string]any {
	var refundedAt any
	if r.Status == "processed" {
		refundedAt = r.CreatedAt
	}
	return map[string]any{
		"integration": 100032, "transaction": r.Tx.ID, "dispute": nil, "settlement": nil, "id": r.ID,
		"domain": "test", "currency": r.Currency, "amount": r.Amount, "status": r.Status,
		"refunded_at": refundedAt, "refunded_by": "api@oncepay.test", "customer_note": r.CustomerNote,
		"merchant_note": r.MerchantNote, "deducted_amount": r.Amount, "fully_deducted": 1, "createdAt": r.CreatedAt,
		"bank_reference": nil, "transaction_reference": r.Tx.Reference, "reason": r.CustomerNote,
		"customer": map[string]any{"id": 1, "first_name": "", "last_name": "", "email": r.Tx.Customer.Email,
			"customer_code": "CUS_oncepay", "phone": "", "metadata": "", "risk_action": "default", "international_format_phone": ""},
		"refund_type": "full", "transaction_amount": r.Tx.Amount, "initiated_by": "api",
		"refund_channel": "card", "session_id": nil, "collect_account_number": false,
	}
}

// created is the refund as POST /refund answers it (RefundCreateResponse):
// the transaction as an object, and the status "pending" whatever happens
// next, as a queued refund.
func (r *refundRecord) created() map[string]any {
	return map[string]any{
		"transaction": map[string]any{
			"id": r.Tx.ID, "domain": "test", "reference": r.Tx.Reference, "amount": r.Tx.Amount,
			"paid_at": r.Tx.TransactionDate, "channel": r.Tx.Channel, "currency": r.Tx.Currency,
			"authorization":        map[string]any{"exp_month": nil, "exp_year": nil, "account_name": nil},
			"customer":             map[string]any{"international_format_phone": nil},
			"plan":                 map[string]any{},
			"subaccount":           map[string]any{"currency": nil},
			"split":                map[string]any{},
			"order_id":             nil,
			"paidAt":               r.Tx.TransactionDate,
			"pos_transaction_data": nil, "source": nil, "fees_breakdown": nil,
		},
		"integration": 100032, "deducted_amount": 0, "channel": nil, "merchant_note": r.MerchantNote,
		"customer_note": r.CustomerNote, "status": "pending", "refunded_by": "api@oncepay.test",
		"expected_at": r.CreatedAt, "currency": r.Currency, "domain": "test", "amount": r.Amount,
		"fully_deducted": false, "id": r.ID, "createdAt": r.CreatedAt, "updatedAt": r.CreatedAt,
	}
}

// SetBalanceShort makes every refund be refused for insufficient balance
// (while short is true), as Paystack refuses one the balance cannot cover.
func (s *Server) SetBalanceShort(short bool) { s.mu.Lock(); s.balanceShort = short; s.mu.Unlock() }

// findRefund is the refund whose merchant_note is reference; s.mu is held.
func (s *Server) findRefund(reference string) *refundRecord {
	for _, r := range s.refunds {
		if r.MerchantNote == reference {
			return r
		}
	}
	return nil
}

// SettleRefund finishes a pending refund, named by our refund reference
// (its merchant_note), with OutcomeSucceeded (processed) or OutcomeFailed.
func (s *Server) SettleRefund(reference string, outcome providers.Outcome) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.findRefund(reference)
	switch {
	case r == nil:
		return fmt.Errorf("paystacktest: no refund %q", reference)
	case r.Status != "pending" && r.Status != "processing":
		return fmt.Errorf("paystacktest: refund %q is %s, not pending", reference, r.Status)
	}
	switch outcome {
	case providers.OutcomeSucceeded:
		r.Status = "processed"
	case providers.OutcomeFailed:
		r.Status = "failed"
	default:
		return fmt.Errorf("paystacktest: cannot settle a refund to %q", outcome)
	}
	return nil
}

// RefundWebhook returns the refund.<status> delivery (refund.processed,
// refund.failed, refund.pending) for a stored refund, shaped like
// Paystack's (shared/providers.md 1.3(e): the charge's
// transaction_reference and the processor's refund_reference, not our
// merchant note) and signed like Webhook.
func (s *Server) RefundWebhook(reference string) (http.Header, []byte, error) {
	s.mu.Lock()
	r := s.findRefund(reference)
	var body []byte
	if r != nil {
		var processorRef any
		if r.Status == "processed" || r.Status == "failed" {
			processorRef = fmt.Sprintf("%d", 132013300000+r.ID)
		}
		body, _ = json.Marshal(map[string]any{"event": "refund." + r.Status, "data": map[string]any{
			"status": r.Status, "transaction_reference": r.Tx.Reference, "refund_reference": processorRef,
			"amount": strconv.FormatInt(r.Amount, 10), "currency": r.Currency, "processor": "mpgs_zen",
			"customer":    map[string]any{"first_name": "", "last_name": "", "email": r.Tx.Customer.Email},
			"integration": 100032, "domain": "test",
		}})
	}
	s.mu.Unlock()
	if r == nil {
		return nil, nil, fmt.Errorf("paystacktest: no refund %q", reference)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Paystack-Signature", hex.EncodeToString(paystack.Sign(SecretKey, body)))
	return h, body, nil
}

// txByKey finds a charge by its reference or its id; s.mu is held.
func (s *Server) txByKey(key string) *tx {
	if t, ok := s.txs[key]; ok {
		return t
	}
	if id, err := strconv.ParseInt(key, 10, 64); err == nil {
		for _, t := range s.txs {
			if t.ID == id {
				return t
			}
		}
	}
	return nil
}

func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	body, err := s.validate(r, "/refund", nil)
	if err != nil {
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid request: " + firstLine(err)})
		return
	}
	var in struct {
		Transaction  string `json:"transaction"`
		Amount       *int64 `json:"amount"`
		Currency     string `json:"currency"`
		CustomerNote string `json:"customer_note"`
		MerchantNote string `json:"merchant_note"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid JSON"})
		return
	}
	refuse := func(msg string) {
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": msg})
	}

	s.mu.Lock()
	t := s.txByKey(in.Transaction)
	if t != nil && fake.Hidden(&s.Faults, t.Reference) {
		t = nil
	}
	var left int64
	if t != nil {
		left = t.Amount
		for _, rf := range s.refunds {
			// One still on its way (LandLateNext) has not reached the
			// balance yet: Paystack checks a refund against those it has.
			if rf.Tx == t && rf.holds() && !fake.Hidden(&s.Faults, rf.MerchantNote) {
				left -= rf.Amount
			}
		}
	}
	amount := left
	if in.Amount != nil {
		amount = *in.Amount
	}
	var refusal string
	switch {
	case t == nil:
		refusal = "Transaction not found"
	case t.Status != "success":
		refusal = "Transaction was not successful and cannot be refunded"
	case in.Currency != "" && in.Currency != t.Currency:
		refusal = "Currency does not match the transaction's currency"
	case amount <= 0 && left > 0:
		refusal = "Invalid Amount Sent"
	case left <= 0:
		refusal = "Transaction has been fully reversed"
	case amount > left:
		refusal = "Refund amount cannot be more than the unrefunded amount of the transaction"
	case s.balanceShort:
		refusal = "Insufficient balance to fulfill this refund. Please top up."
	}
	if refusal != "" {
		s.mu.Unlock()
		refuse(refusal)
		return
	}
	s.nextRefund++
	rf := &refundRecord{ID: s.nextRefund, Tx: t, Amount: amount, Currency: t.Currency, Status: "processed",
		MerchantNote: in.MerchantNote, CustomerNote: in.CustomerNote, CreatedAt: time.Now().UTC().Format(time.RFC3339)}
	if fake.TakePend(&s.Faults) {
		rf.Status = "pending"
	}
	s.refunds = append(s.refunds, rf)
	fate := fake.Refunded(&s.Faults, rf.MerchantNote)
	answer, _ := json.Marshal(map[string]any{"status": true, "message": "Refund has been queued for processing", "data": rf.created()})
	s.mu.Unlock()

	if !fake.Withhold(&s.Faults, w, r, fate) {
		fake.WriteRaw(w, http.StatusOK, answer)
	}
}

// listRefunds answers GET /refund newest first. The spec declares perPage,
// page, from and to; the transaction filter (an id or a reference) is the
// one client libraries send, which the spec does not list (and so does not
// refuse).
func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	if _, err := s.validate(r, "/refund", nil); err != nil {
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid request: " + firstLine(err)})
		return
	}
	q := r.URL.Query()
	perPage, err := strconv.Atoi(q.Get("perPage"))
	if err != nil || perPage < 1 {
		perPage = 50
	}
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil || page < 1 {
		page = 1
	}
	filter := q.Get("transaction")
	s.mu.Lock()
	var all []map[string]any
	for i := len(s.refunds) - 1; i >= 0; i-- {
		rf := s.refunds[i]
		if filter != "" && filter != rf.Tx.Reference && filter != strconv.FormatInt(rf.Tx.ID, 10) {
			continue
		}
		if fake.Hidden(&s.Faults, rf.MerchantNote) {
			continue // landing late (LandLateNext)
		}
		all = append(all, rf.fetched())
	}
	s.mu.Unlock()
	total := len(all)
	from := min((page-1)*perPage, total)
	to := min(from+perPage, total)
	pageCount := (total + perPage - 1) / perPage
	data := all[from:to]
	if data == nil {
		data = []map[string]any{}
	}
	fake.WriteJSON(w, http.StatusOK, map[string]any{"status": true, "message": "Refunds retrieved", "data": data,
		"meta": map[string]any{"total": total, "skipped": from, "perPage": strconv.Itoa(perPage), "page": page,
			"pageCount": pageCount, "failedRefundCount": 0}})
}

func (s *Server) fetchRefund(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/refund/")
	if _, err := s.validate(r, "/refund/{id}", map[string]string{"id": id}); err != nil {
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid request: " + firstLine(err)})
		return
	}
	s.mu.Lock()
	var data map[string]any
	for _, rf := range s.refunds {
		if strconv.FormatInt(rf.ID, 10) == id && !fake.Hidden(&s.Faults, rf.MerchantNote) {
			data = rf.fetched()
		}
	}
	s.mu.Unlock()
	if data == nil {
		fake.WriteJSON(w, http.StatusNotFound, map[string]any{"status": false, "message": "Refund not found"})
		return
	}
	fake.WriteJSON(w, http.StatusOK, map[string]any{"status": true, "message": "Refund retrieved", "data": data})
}
