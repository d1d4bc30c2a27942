package main

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Refunds, as Paystack (and providers/paystack/paystacktest) answer them:
//
//	POST /refund          {"transaction": <reference or id>, "amount", "currency", "customer_note", "merchant_note"};
//	                      answered "pending" (queued), processed (or failed, -refund-fail-rate) within -refund-process;
//	                      refused 400 "Transaction has been fully reversed" / "Refund amount cannot be more than
//	                      the unrefunded amount of the transaction" / "Transaction was not successful ..."
//	GET  /refund          ?transaction=<id or reference>&perPage&page, newest first
//	GET  /refund/{id}     404 "Refund not found" if unknown
//
// Like Paystack, a refund takes no client reference and is NOT deduped:
// the adapter keeps our refund reference in merchant_note and looks it up
// before creating, so two creates are two refunds (what the audit counts).
// The faults are the charges': latency and 5xx before storing (in
// ServeHTTP), and -cut-rate of the creates stored and then cut; besides, a
// -cut-rate share of the creates is stored and then answered 500.
//
//	GET /_refunds   {"refunds": [{"id", "merchant_note", "transaction_reference", "amount", "status"}]}

type refundRec struct {
	ID           int64  `json:"id"`
	Tx           *tx    `json:"-"`
	TxReference  string `json:"transaction_reference"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	Status       string `json:"status"`
	MerchantNote string `json:"merchant_note"`
	CustomerNote string `json:"customer_note"`
	CreatedAt    string `json:"created_at"`
	settleAt     time.Time
	fails        bool
}

// settle processes a refund whose time has come; s.mu is held.
func (s *server) settle(rf *refundRec, now time.Time) {
	if rf.Status == "pending" && !now.Before(rf.settleAt) {
		rf.Status = "processed"
		if rf.fails {
			rf.Status = "failed"
		}
	}
}

func (rf *refundRec) fetched() map[string]any {
	return map[string]any{"id": rf.ID, "transaction": rf.Tx.ID, "transaction_reference": rf.TxReference, "integration": 100032,
		"domain": "test", "currency": rf.Currency, "amount": rf.Amount, "status": rf.Status, "merchant_note": rf.MerchantNote,
		"customer_note": rf.CustomerNote, "createdAt": rf.CreatedAt, "refunded_by": "api@oncepay.test"}
}

// txByKey finds a charge by reference or id; s.mu is held.
func (s *server) txByKey(key string) *tx {
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

func (s *server) createRefund(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Transaction  string `json:"transaction"`
		Amount       *int64 `json:"amount"`
		Currency     string `json:"currency"`
		CustomerNote string `json:"customer_note"`
		MerchantNote string `json:"merchant_note"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Transaction == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid request"})
		return
	}
	now := time.Now()
	s.mu.Lock()
	t := s.txByKey(in.Transaction)
	if t != nil && s.late[t.Reference].hidden(now) {
		t = nil
	}
	var left int64
	if t != nil {
		left = t.Amount
		for _, rf := range s.refunds {
			if rf.Tx == t && rf.Status != "failed" {
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
	case left <= 0:
		refusal = "Transaction has been fully reversed"
	case amount <= 0:
		refusal = "Invalid Amount Sent"
	case amount > left && !s.doubleRefund:
		refusal = "Refund amount cannot be more than the unrefunded amount of the transaction"
	}
	if refusal != "" {
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": refusal})
		return
	}
	n := 1
	if s.doubleRefund {
		n = 2
	}
	var rf *refundRec
	for range n {
		s.nextRefund++
		rf = &refundRec{ID: s.nextRefund, Tx: t, TxReference: t.Reference, Amount: amount, Currency: t.Currency, Status: "pending",
			MerchantNote: in.MerchantNote, CustomerNote: in.CustomerNote, CreatedAt: now.UTC().Format(time.RFC3339),
			fails: rand.Float64() < s.refundFailRate}
		if s.refundProcess > 0 {
			rf.settleAt = now.Add(rand.N(s.refundProcess))
		}
		s.refunds = append(s.refunds, rf)
	}
	data := map[string]any{"id": rf.ID, "transaction": map[string]any{"id": t.ID, "reference": t.Reference, "amount": t.Amount, "currency": t.Currency},
		"integration": 100032, "domain": "test", "merchant_note": rf.MerchantNote, "customer_note": rf.CustomerNote,
		"status": "pending", "currency": rf.Currency, "amount": rf.Amount, "expected_at": rf.CreatedAt, "createdAt": rf.CreatedAt}
	answer, _ := json.Marshal(map[string]any{"status": true, "message": "Refund has been queued for processing", "data": data})
	s.mu.Unlock()

	switch x := rand.Float64(); {
	case x < s.cutRate:
		// Refunded, the answer lost.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
	case x < 2*s.cutRate:
		// Refunded, and answered 500 all the same.
		writeJSON(w, http.StatusInternalServerError, map[string]any{"status": false, "message": "An error occurred"})
		return
	}
	writeRaw(w, http.StatusOK, answer)
}

func (s *server) listRefunds(w http.ResponseWriter, r *http.Request) {
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
	now := time.Now()
	s.mu.Lock()
	all := []map[string]any{}
	for i := len(s.refunds) - 1; i >= 0; i-- {
		rf := s.refunds[i]
		if filter != "" && filter != rf.TxReference && filter != strconv.FormatInt(rf.Tx.ID, 10) {
			continue
		}
		s.settle(rf, now)
		all = append(all, rf.fetched())
	}
	s.mu.Unlock()
	total := len(all)
	from := min((page-1)*perPage, total)
	to := min(from+perPage, total)
	writeJSON(w, http.StatusOK, map[string]any{"status": true, "message": "Refunds retrieved", "data": all[from:to],
		"meta": map[string]any{"total": total, "skipped": from, "perPage": strconv.Itoa(perPage), "page": page,
			"pageCount": (total + perPage - 1) / perPage}})
}

func (s *server) fetchRefund(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/refund/")
	now := time.Now()
	s.mu.Lock()
	var data map[string]any
	for _, rf := range s.refunds {
		if strconv.FormatInt(rf.ID, 10) == id {
			s.settle(rf, now)
			data = rf.fetched()
		}
	}
	s.mu.Unlock()
	if data == nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"status": false, "message": "Refund not found"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": true, "message": "Refund retrieved", "data": data})
}

// refundsView is GET /_refunds: every refund as stored (settled first).
func (s *server) refundsView(w http.ResponseWriter) {
	now := time.Now()
	s.mu.Lock()
	out := make([]refundRec, 0, len(s.refunds))
	for _, rf := range s.refunds {
		s.settle(rf, now)
		out = append(out, *rf)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"refunds": out})
}
