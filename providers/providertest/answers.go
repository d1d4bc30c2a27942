package providertest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/oncepay/gateway/providers"
)

// Answers is a provider backend that answers every request with one status
// and body, which a fuzz target sets before each run. The adapters' fakes
// only ever send well-formed answers; a provider's real answers are
// untrusted input, so the adapters' decoders and status rules are fuzzed
// against this one, end to end through net/http.
type Answers struct {
	URL    string
	mu     sync.Mutex
	status int
	body   []byte
}

// NewAnswers starts the backend; it is closed when tb ends. One backend
// serves every run of a fuzz target (a fuzz worker calls its function
// sequentially).
func NewAnswers(tb testing.TB) *Answers {
	a := &Answers{status: http.StatusOK}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		status, body := a.status, a.body
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	tb.Cleanup(srv.Close)
	a.URL = srv.URL
	return a
}

// AnswerStatuses are the statuses a fuzz target picks an answer's from:
// mostly 200, where the answer is decoded, and every status an adapter has
// a rule for.
var AnswerStatuses = []int{200, 200, 200, 200, 201, 204, 302, 400, 401, 402, 404, 408, 409, 422, 429, 500, 502, 503}

// Set makes every answer from now on status (AnswerStatuses[pick], modulo
// its length) and body.
func (a *Answers) Set(pick uint8, body []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status, a.body = AnswerStatuses[int(pick)%len(AnswerStatuses)], body
}

// The references CheckAnswers sends: seeds that echo them reach the
// branches where an answer is matched against ours.
const (
	AnswerChargeReference = "fuzz-charge"
	AnswerRefundReference = "fuzz-refund"
	AnswerTransactionID   = "1320"
	AnswerRefundID        = "1321"
)

// CheckAnswers sends p a charge, a lookup, a refund and three refund
// lookups (by the provider's refund id, by the charge's transaction id, by
// the charge reference alone), each answered by the backend as set, and
// fails t unless every one returns an error of exactly one class
// (ErrNotCharged or ErrUnknown: the contract of package providers), or a
// result the operation may report (CheckResult, CheckRefundResult). No
// answer may panic an adapter.
func CheckAnswers(t *testing.T, p providers.Provider) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	charge := []providers.Outcome{providers.OutcomeSucceeded, providers.OutcomeFailed, providers.OutcomePending}
	lookup := append(slices.Clone(charge), providers.OutcomeNotFound)

	r, err := p.Charge(ctx, providers.ChargeRequest{Reference: AnswerChargeReference, Amount: 5000, Currency: "USD",
		Email: "ada@example.com", PaymentMethod: "pm_card_visa", Description: "order 1"})
	checkAnswer(t, "Charge", err, func() { CheckResult(t, r, charge...) })
	r, err = p.Lookup(ctx, AnswerChargeReference)
	checkAnswer(t, "Lookup", err, func() { CheckResult(t, r, lookup...) })

	rr, err := p.Refund(ctx, providers.RefundRequest{Reference: AnswerRefundReference, ChargeReference: AnswerChargeReference,
		Amount: 1000, Currency: "USD", Reason: "requested_by_customer"})
	checkAnswer(t, "Refund", err, func() { CheckRefundResult(t, rr, charge...) })
	for _, l := range []providers.RefundLookup{
		{Reference: AnswerRefundReference, ChargeReference: AnswerChargeReference, TransactionID: AnswerTransactionID, RefundID: AnswerRefundID},
		{Reference: AnswerRefundReference, ChargeReference: AnswerChargeReference, TransactionID: AnswerTransactionID},
		{Reference: AnswerRefundReference, ChargeReference: AnswerChargeReference},
	} {
		rr, err = p.LookupRefund(ctx, l)
		checkAnswer(t, "LookupRefund", err, func() { CheckRefundResult(t, rr, lookup...) })
	}
}

func checkAnswer(t *testing.T, op string, err error, result func()) {
	t.Helper()
	if err == nil {
		result()
		return
	}
	notCharged, unknown := errors.Is(err, providers.ErrNotCharged), errors.Is(err, providers.ErrUnknown)
	if notCharged == unknown {
		t.Fatalf("%s: error of no single class (not charged %v, unknown %v): %v", op, notCharged, unknown, err)
	}
}

// CheckResult fails t unless r's outcome is one of outcomes, a failure and
// only a failure has a failure code, Reversed comes only with pending (the
// money moved, so neither a success nor a decline), and r cleaned
// (Result.Clean) has only strings the gateway can store.
func CheckResult(t testing.TB, r providers.Result, outcomes ...providers.Outcome) {
	t.Helper()
	if !slices.Contains(outcomes, r.Outcome) {
		t.Fatalf("outcome %q is none of %v", r.Outcome, outcomes)
	}
	if (r.Outcome == providers.OutcomeFailed) != (r.FailureCode != "") {
		t.Fatalf("outcome %q with failure code %q", r.Outcome, r.FailureCode)
	}
	if r.Reversed && r.Outcome != providers.OutcomePending {
		t.Fatalf("a reversed charge reported %q", r.Outcome)
	}
	c, _ := r.Clean()
	if c.Outcome != r.Outcome || (c.FailureCode == "") != (r.FailureCode == "") {
		t.Fatalf("Clean changed the outcome: %+v -> %+v", r, c)
	}
	storable(t, "transaction id", c.TransactionID, 255)
	storable(t, "failure code", c.FailureCode, 64)
	storable(t, "failure message", c.FailureMessage, 500)
	storable(t, "currency", c.Currency, 255)
}

// CheckRefundResult is CheckResult for a refund.
func CheckRefundResult(t testing.TB, r providers.RefundResult, outcomes ...providers.Outcome) {
	t.Helper()
	if !slices.Contains(outcomes, r.Outcome) {
		t.Fatalf("outcome %q is none of %v", r.Outcome, outcomes)
	}
	if (r.Outcome == providers.OutcomeFailed) != (r.FailureCode != "") {
		t.Fatalf("outcome %q with failure code %q", r.Outcome, r.FailureCode)
	}
	c, _ := r.Clean()
	if c.Outcome != r.Outcome || (c.FailureCode == "") != (r.FailureCode == "") {
		t.Fatalf("Clean changed the outcome: %+v -> %+v", r, c)
	}
	storable(t, "refund id", c.RefundID, 255)
	storable(t, "failure code", c.FailureCode, 64)
	storable(t, "failure message", c.FailureMessage, 500)
}

// storable: text PostgreSQL keeps (UTF-8, no NUL), one line (no control
// character), bounded.
func storable(t testing.TB, what, s string, limit int) {
	t.Helper()
	if len(s) > limit || !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		t.Fatalf("%s %q cannot be kept", what, s)
	}
}
