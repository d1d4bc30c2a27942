// Package paystacktest is a fake Paystack API for tests: an httptest server
// that speaks Paystack's wire format (shared/providers.md 1.7), checks every
// charge_authorization and verify request against Paystack's own OpenAPI spec
// (shared/specs/paystack/paystack.yaml), stores charges by reference, rejects
// a reused reference like Paystack does, and can lose or delay an answer
// after storing the charge, to exercise "charged, but the answer was lost".
// It refunds too (POST /refund, GET /refund and GET /refund/{id}, also
// checked against the spec: see refund.go), and the same faults apply to
// refunds.
//
//	ps := paystacktest.New(t)
//	p, _ := paystack.New(paystack.Config{BaseURL: ps.URL})(providers.Secrets{"secret_key": paystacktest.SecretKey})
//	ps.DropNextResponse()
//
// The outcome of a charge is chosen by its authorization code: TokenSuccess,
// TokenDecline, TokenInsufficientFunds, TokenPending (settle it later with
// Settle). Any other code is declined as an invalid authorization.
package paystacktest

import (
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/internal/fake"
	"github.com/oncepay/gateway/providers/paystack"
)

// SecretKey is the key the fake accepts (Bearer) and signs webhooks with.
const SecretKey = "sk_test_oncepay0000000000000000000000000000"

// Authorization codes that choose a charge's outcome.
const (
	TokenSuccess           = "AUTH_success"      // data.status success
	TokenDecline           = "AUTH_decline"      // data.status failed, "Declined"
	TokenInsufficientFunds = "AUTH_insufficient" // data.status failed, "Insufficient Funds"
	TokenPending           = "AUTH_pending"      // data.status pending until Settle
)

// Spec is Paystack's official OpenAPI spec (MIT, see testdata/LICENSE),
// vendored from the project's shared/specs/paystack so the fake validates
// every request against it wherever the tests run.
//
//go:embed testdata/paystack.yaml
var Spec []byte

// Server is a running fake. Its methods are safe for concurrent use. The
// embedded Faults gives it Close, DropNextResponse, HangNextResponse,
// LandLateNext and Land, FailNext, TotalCharges, and for refunds
// PendNextRefund, Refunds (by our refund reference, the merchant_note) and
// TotalRefunds.
type Server struct {
	// URL is the base URL to give paystack.Config.BaseURL.
	URL string
	fake.Faults

	spec *openapi3.T

	mu     sync.Mutex
	txs    map[string]*tx
	nextID int64

	refunds      []*refundRecord // creation order
	nextRefund   int64
	balanceShort bool
}

type tx struct {
	ID              int64  `json:"id"`
	Status          string `json:"status"`
	Reference       string `json:"reference"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
	GatewayResponse string `json:"gateway_response"`
	Channel         string `json:"channel"`
	Domain          string `json:"domain"`
	TransactionDate string `json:"transaction_date"`
	Customer        struct {
		Email string `json:"email"`
	} `json:"customer"`
	Authorization struct {
		AuthorizationCode string `json:"authorization_code"`
		Reusable          bool   `json:"reusable"`
	} `json:"authorization"`
}

var (
	specOnce sync.Once
	specDoc  *openapi3.T
	specErr  error
)

// New starts a fake and stops it when the test ends. It fails the test if
// the Paystack spec cannot be found or loaded: a fake that cannot check the
// wire format must not pass quietly.
func New(t testing.TB) *Server {
	t.Helper()
	spec, err := loadSpec()
	if err != nil {
		t.Fatalf("paystacktest: %v", err)
	}
	s := &Server{spec: spec, txs: map[string]*tx{}, nextID: 4099490000, nextRefund: 15581000}
	s.URL = fake.Start(t, &s.Faults, http.HandlerFunc(s.serve))
	return s
}

func loadSpec() (*openapi3.T, error) {
	specOnce.Do(func() {
		specDoc, specErr = openapi3.NewLoader().LoadFromData(Spec)
		if specErr != nil {
			specErr = fmt.Errorf("loading the Paystack spec: %w", specErr)
		}
	})
	return specDoc, specErr
}

// Charges is how many charges the fake created for reference (0 or 1: a
// repeat is rejected as a duplicate and not counted). Like Settle and
// Webhook it takes our reference or the wire form paystack.WireReference
// makes of it.
func (s *Server) Charges(reference string) int {
	s.mu.Lock()
	key := s.key(reference)
	s.mu.Unlock()
	return s.Faults.Charges(key)
}

// key finds the stored wire reference for reference; s.mu is held.
func (s *Server) key(reference string) string {
	if _, ok := s.txs[reference]; ok {
		return reference
	}
	return paystack.WireReference(reference)
}

// Land makes a charge held back by LandLateNext visible to verify.
func (s *Server) Land(reference string) {
	s.mu.Lock()
	key := s.key(reference)
	s.mu.Unlock()
	s.Faults.Land(key)
}

// Settle finishes a pending charge with OutcomeSucceeded or OutcomeFailed.
func (s *Server) Settle(reference string, outcome providers.Outcome) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.txs[s.key(reference)]
	if !ok {
		return fmt.Errorf("paystacktest: no charge %q", reference)
	}
	switch outcome {
	case providers.OutcomeSucceeded:
		t.Status, t.GatewayResponse = "success", "Approved"
	case providers.OutcomeFailed:
		t.Status, t.GatewayResponse = "failed", "Declined"
	default:
		return fmt.Errorf("paystacktest: cannot settle to %q", outcome)
	}
	return nil
}

// Reverse marks a stored charge "reversed": refunded at Paystack's
// dashboard, or charged back, outside the gateway.
func (s *Server) Reverse(reference string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.txs[s.key(reference)]
	if !ok {
		return fmt.Errorf("paystacktest: no charge %q", reference)
	}
	t.Status = "reversed"
	return nil
}

// Webhook returns a charge.success delivery for a stored charge, signed like
// Paystack signs it (header x-paystack-signature), to POST at the gateway.
func (s *Server) Webhook(reference string) (http.Header, []byte, error) {
	s.mu.Lock()
	t, ok := s.txs[s.key(reference)]
	var body []byte
	if ok {
		body, _ = json.Marshal(map[string]any{"event": "charge.success", "data": t})
	}
	s.mu.Unlock()
	if !ok {
		return nil, nil, fmt.Errorf("paystacktest: no charge %q", reference)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Paystack-Signature", hex.EncodeToString(paystack.Sign(SecretKey, body)))
	return h, body, nil
}

var referenceRE = regexp.MustCompile(`^[A-Za-z0-9.=-]+$`)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if status, ok := fake.NextFailure(&s.Faults, r); ok {
		fake.WriteJSON(w, status, map[string]any{"status": false, "message": "An error occurred"})
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+SecretKey {
		fake.WriteJSON(w, http.StatusUnauthorized, map[string]any{"status": false, "message": "Invalid key"})
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/transaction/charge_authorization":
		s.charge(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/transaction/verify/"):
		s.verify(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/refund":
		s.createRefund(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/refund":
		s.listRefunds(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/refund/"):
		s.fetchRefund(w, r)
	default:
		fake.WriteJSON(w, http.StatusNotFound, map[string]any{"status": false, "message": "Not found"})
	}
}

// validate checks r against the spec's operation for path; the body is read
// and put back so the handler can decode it too.
func (s *Server) validate(r *http.Request, path string, params map[string]string) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	item := s.spec.Paths.Find(path)
	if item == nil {
		return nil, fmt.Errorf("spec has no path %s", path)
	}
	op := item.GetOperation(r.Method)
	if op == nil {
		return nil, fmt.Errorf("spec has no %s %s", r.Method, path)
	}
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	in := &openapi3filter.RequestValidationInput{
		Request:    r,
		PathParams: params,
		Route:      &routers.Route{Spec: s.spec, Path: path, PathItem: item, Method: r.Method, Operation: op},
		// The fake checks the key itself, with Paystack's 401 body.
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	err = openapi3filter.ValidateRequest(r.Context(), in)
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	return body, err
}

func (s *Server) charge(w http.ResponseWriter, r *http.Request) {
	body, err := s.validate(r, "/transaction/charge_authorization", nil)
	if err != nil {
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid request: " + firstLine(err)})
		return
	}
	var in struct {
		Email             string `json:"email"`
		Amount            int64  `json:"amount"`
		AuthorizationCode string `json:"authorization_code"`
		Reference         string `json:"reference"`
		Currency          string `json:"currency"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid JSON"})
		return
	}
	if in.Amount <= 0 {
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid Amount Sent"})
		return
	}
	if in.Reference != "" && !referenceRE.MatchString(in.Reference) {
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid character in transaction reference"})
		return
	}
	if in.Currency == "" {
		in.Currency = "NGN"
	}

	s.mu.Lock()
	if _, dup := s.txs[in.Reference]; dup && in.Reference != "" {
		s.mu.Unlock()
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{
			"status": false, "message": "Duplicate Transaction Reference",
			"meta": map[string]any{"nextStep": "Try and create the Transaction or Charge with a new reference"},
			"type": "validation_error", "code": "duplicate_reference",
		})
		return
	}
	var status, gateway string
	switch in.AuthorizationCode {
	case TokenSuccess:
		status, gateway = "success", "Approved"
	case TokenPending:
		status, gateway = "pending", "Pending"
	case TokenInsufficientFunds:
		status, gateway = "failed", "Insufficient Funds"
	case TokenDecline:
		status, gateway = "failed", "Declined"
	default:
		s.mu.Unlock()
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid Authorization Code"})
		return
	}
	s.nextID++
	if in.Reference == "" {
		in.Reference = fmt.Sprintf("T%d", s.nextID)
	}
	t := &tx{ID: s.nextID, Status: status, Reference: in.Reference, Amount: in.Amount, Currency: in.Currency,
		GatewayResponse: gateway, Channel: "card", Domain: "test", TransactionDate: time.Now().UTC().Format(time.RFC3339)}
	t.Customer.Email = in.Email
	t.Authorization.AuthorizationCode, t.Authorization.Reusable = in.AuthorizationCode, true
	s.txs[in.Reference] = t
	fate := fake.Charged(&s.Faults, in.Reference)
	answer, _ := json.Marshal(map[string]any{"status": true, "message": "Charge attempted", "data": t})
	s.mu.Unlock()

	if !fake.Withhold(&s.Faults, w, r, fate) {
		fake.WriteRaw(w, http.StatusOK, answer)
	}
}

func (s *Server) verify(w http.ResponseWriter, r *http.Request) {
	ref := strings.TrimPrefix(r.URL.Path, "/transaction/verify/")
	if _, err := s.validate(r, "/transaction/verify/{reference}", map[string]string{"reference": ref}); err != nil {
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid request: " + firstLine(err)})
		return
	}
	s.mu.Lock()
	t, ok := s.txs[ref]
	if ok && fake.Hidden(&s.Faults, ref) {
		ok = false // landing late: Paystack has no record of it yet
	}
	var answer []byte
	if ok {
		answer, _ = json.Marshal(map[string]any{"status": true, "message": "Verification successful", "data": t})
	}
	s.mu.Unlock()
	if !ok {
		// Live Paystack answers 400 here (the spec says 404); the adapter
		// must take both, and the fake uses the live one.
		fake.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Transaction reference not found"})
		return
	}
	fake.WriteRaw(w, http.StatusOK, answer)
}

func firstLine(err error) string {
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg
}
