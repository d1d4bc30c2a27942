// Package flutterwavetest is a fake Flutterwave v3 API for tests: an
// httptest server that speaks Flutterwave's wire format (shared/providers.md
// 2.7), stores tokenized charges by tx_ref, rejects a reused tx_ref, and can
// lose or delay an answer after storing the charge. It refunds too (POST
// /v3/transactions/{id}/refund, GET /v3/refunds: see refund.go), and the
// same faults apply to refunds.
//
//	fw := flutterwavetest.New(t)
//	p, _ := flutterwave.New(flutterwave.Config{BaseURL: fw.URL})(providers.Secrets{
//		"secret_key": flutterwavetest.SecretKey, "secret_hash": flutterwavetest.SecretHash})
//
// The outcome is chosen by the card token: TokenSuccess, TokenDecline,
// TokenInsufficientFunds, TokenPending (settle it with Settle). Any other
// token is rejected as invalid before charging.
package flutterwavetest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/flutterwave"
	"github.com/oncepay/gateway/providers/internal/fake"
)

// Secrets the fake accepts and signs with.
const (
	SecretKey  = "FLWSECK_TEST-oncepay00000000000000000000-X"
	SecretHash = "oncepay-test-secret-hash"
)

// Card tokens that choose a charge's outcome (shaped like real ones).
const (
	TokenSuccess           = "flw-t1nf-success-m03k"
	TokenDecline           = "flw-t1nf-decline-m03k"
	TokenInsufficientFunds = "flw-t1nf-insufficient-m03k"
	TokenPending           = "flw-t1nf-pending-m03k"
)

// Server is a running fake. Its methods are safe for concurrent use. The
// embedded Faults gives it Close, DropNextResponse, HangNextResponse,
// FailNext (503 is Flutterwave's gateway timeout), Charges (0 or 1 for a
// tx_ref) and TotalCharges, and for refunds PendNextRefund, Refunds (by our
// refund reference, the refund's comments) and TotalRefunds.
type Server struct {
	// URL is the base URL to give flutterwave.Config.BaseURL.
	URL string
	fake.Faults

	mu     sync.Mutex
	txs    map[string]*tx // the latest charge of each tx_ref
	nextID int64
	reuse  bool // ChargeReusedReferences

	refunds    []*refundRecord // creation order
	nextRefund int64
}

type tx struct {
	ID                int64       `json:"id"`
	TxRef             string      `json:"tx_ref"`
	FlwRef            string      `json:"flw_ref"`
	Amount            json.Number `json:"amount"`
	ChargedAmount     json.Number `json:"charged_amount"`
	Currency          string      `json:"currency"`
	Status            string      `json:"status"`
	ProcessorResponse string      `json:"processor_response"`
	AuthModel         string      `json:"auth_model"`
	PaymentType       string      `json:"payment_type"`
	CreatedAt         string      `json:"created_at"`
	Customer          struct {
		Email string `json:"email"`
	} `json:"customer"`
}

// New starts a fake and stops it when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{txs: map[string]*tx{}, nextID: 277036000, nextRefund: 75900}
	s.URL = fake.Start(t, &s.Faults, http.HandlerFunc(s.serve))
	return s
}

// ChargeReusedReferences makes the fake charge a tx_ref it has seen again,
// as a second transaction, instead of refusing it as a duplicate: what
// Flutterwave's v3 does with a reused tx_ref is not documented
// (shared/providers.md 2.4), and the gateway must not depend on it.
func (s *Server) ChargeReusedReferences() { s.mu.Lock(); s.reuse = true; s.mu.Unlock() }

// Settle finishes a pending charge with OutcomeSucceeded or OutcomeFailed.
func (s *Server) Settle(reference string, outcome providers.Outcome) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.txs[reference]
	if !ok {
		return fmt.Errorf("flutterwavetest: no charge %q", reference)
	}
	switch outcome {
	case providers.OutcomeSucceeded:
		t.Status, t.ProcessorResponse = "successful", "APPROVED"
	case providers.OutcomeFailed:
		t.Status, t.ProcessorResponse = "failed", "DECLINED"
	default:
		return fmt.Errorf("flutterwavetest: cannot settle to %q", outcome)
	}
	return nil
}

// Webhook returns a charge.completed delivery for a stored charge with both
// verif-hash and flutterwave-signature set, to POST at the gateway.
func (s *Server) Webhook(reference string) (http.Header, []byte, error) {
	s.mu.Lock()
	t, ok := s.txs[reference]
	var body []byte
	if ok {
		body, _ = json.Marshal(map[string]any{"event": "charge.completed", "event.type": "CARD_TRANSACTION", "data": t})
	}
	s.mu.Unlock()
	if !ok {
		return nil, nil, fmt.Errorf("flutterwavetest: no charge %q", reference)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Verif-Hash", SecretHash)
	h.Set("Flutterwave-Signature", base64.StdEncoding.EncodeToString(flutterwave.Sign(SecretHash, body)))
	return h, body, nil
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if status, ok := fake.NextFailure(&s.Faults, r); ok {
		writeError(w, status, "An error occurred. Please contact support")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+SecretKey {
		writeError(w, http.StatusUnauthorized, "Authorization required")
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v3/tokenized-charges":
		s.charge(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/v3/transactions/verify_by_reference":
		s.verify(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/v3/refunds":
		s.listRefunds(w, r)
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v3/transactions/"):
		id, ok := refundPath(r.URL.Path)
		if !ok {
			writeError(w, http.StatusNotFound, "Route not found")
			return
		}
		s.createRefund(w, r, id)
	default:
		writeError(w, http.StatusNotFound, "Route not found")
	}
}

func (s *Server) charge(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Token     string      `json:"token"`
		Currency  string      `json:"currency"`
		Amount    json.Number `json:"amount"`
		Email     string      `json:"email"`
		TxRef     string      `json:"tx_ref"`
		Narration string      `json:"narration"`
	}
	d := json.NewDecoder(r.Body)
	d.UseNumber()
	if err := d.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid JSON payload")
		return
	}
	// The SDK's tokenSchema: token, email, currency, amount (a positive
	// number, decimals allowed), tx_ref (<= 100) and narration.
	amount, ok := new(big.Rat).SetString(in.Amount.String())
	switch {
	case in.Token == "" || in.Email == "" || in.Currency == "" || in.TxRef == "" || in.Narration == "":
		writeError(w, http.StatusBadRequest, "token, email, currency, amount, tx_ref and narration are required")
		return
	case !ok || amount.Sign() <= 0:
		writeError(w, http.StatusBadRequest, "amount must be a positive number")
		return
	case len(in.TxRef) > 100:
		writeError(w, http.StatusBadRequest, "tx_ref must be at most 100 characters")
		return
	}
	var status, processor string
	switch in.Token {
	case TokenSuccess:
		status, processor = "successful", "APPROVED"
	case TokenPending:
		status, processor = "pending", "Pending validation"
	case TokenDecline:
		status, processor = "failed", "DECLINED"
	case TokenInsufficientFunds:
		status, processor = "failed", "Insufficient funds"
	default:
		writeError(w, http.StatusBadRequest, "Token not found")
		return
	}

	s.mu.Lock()
	if _, dup := s.txs[in.TxRef]; dup && !s.reuse {
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, "Duplicate transaction reference")
		return
	}
	s.nextID++
	t := &tx{ID: s.nextID, TxRef: in.TxRef, FlwRef: fmt.Sprintf("FLW%d", s.nextID), Amount: in.Amount,
		ChargedAmount: in.Amount, Currency: in.Currency, Status: status, ProcessorResponse: processor,
		AuthModel: "noauth", PaymentType: "card", CreatedAt: time.Now().UTC().Format(time.RFC3339)}
	t.Customer.Email = in.Email
	s.txs[in.TxRef] = t
	fate := fake.Charged(&s.Faults, in.TxRef)
	message := "Charge successful"
	if status == "pending" {
		message = "Charge initiated"
	}
	answer, _ := json.Marshal(map[string]any{"status": "success", "message": message, "data": t})
	s.mu.Unlock()

	if !fake.Withhold(&s.Faults, w, r, fate) {
		fake.WriteRaw(w, http.StatusOK, answer)
	}
}

func (s *Server) verify(w http.ResponseWriter, r *http.Request) {
	ref := r.URL.Query().Get("tx_ref")
	s.mu.Lock()
	t, ok := s.txs[ref]
	if ok && fake.Hidden(&s.Faults, ref) {
		ok = false // landing late: no record of it yet
	}
	var answer []byte
	if ok {
		answer, _ = json.Marshal(map[string]any{"status": "success", "message": "Transaction fetched successfully", "data": t})
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusBadRequest, "No transaction was found for this id")
		return
	}
	fake.WriteRaw(w, http.StatusOK, answer)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	fake.WriteJSON(w, status, map[string]any{"status": "error", "message": msg, "data": nil})
}
