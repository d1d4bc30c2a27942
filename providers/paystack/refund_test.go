package paystack_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
	"github.com/oncepay/gateway/providers/providertest"
)

func refundBackend(t *testing.T) (*paystacktest.Server, providertest.RefundBackend) {
	fake := paystacktest.New(t)
	return fake, providertest.RefundBackend{
		Provider:         newProvider(t, fake.URL, paystacktest.SecretKey, 0),
		Refunds:          fake.Refunds,
		LoseNextRefund:   func(*providers.RefundRequest) { fake.DropNextResponse() },
		PendNextRefund:   func(*providers.RefundRequest) { fake.PendNextRefund() },
		SettleRefund:     fake.SettleRefund,
		RejectNextRefund: func(*providers.RefundRequest) { fake.FailNext(http.StatusUnauthorized) },
		FailNext:         fake.FailNext,
		FailNextCreate:   fake.FailNextPost,
		HangNextRefund:   fake.HangNextResponse,
		Impatient:        newProvider(t, fake.URL, paystacktest.SecretKey, 100*time.Millisecond),
	}
}

func TestRefundConformance(t *testing.T) {
	t.Parallel()
	providertest.RunRefunds(t, providertest.RefundHarness{
		New:           func(t *testing.T) providertest.RefundBackend { _, b := refundBackend(t); return b },
		SuccessMethod: paystacktest.TokenSuccess,
		DeclineMethod: paystacktest.TokenDecline,
		// Paystack queues every refund: "Refund has been queued for
		// processing", status pending.
		RefundAnswersPending: true,
	})
}

func refundReq(charge providers.ChargeRequest, res providers.Result, key string, amount int64) providers.RefundRequest {
	return providers.RefundRequest{Reference: providers.RefundReference("m1", key), ChargeReference: charge.Reference,
		TransactionID: res.TransactionID, Amount: amount, Currency: charge.Currency, Reason: "requested_by_customer"}
}

func TestRefund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T) (*paystacktest.Server, providers.Provider, providers.ChargeRequest, providers.Result) {
		fake := paystacktest.New(t)
		p := newProvider(t, fake.URL, paystacktest.SecretKey, 0)
		c := chargeReq(providers.Reference("m1", t.Name()), paystacktest.TokenSuccess)
		res, err := p.Charge(ctx, c)
		require.NoError(t, err)
		return fake, p, c, res
	}

	t.Run("InsufficientBalanceIsAFailedResult", func(t *testing.T) {
		t.Parallel()
		fake, p, c, res := setup(t)
		fake.SetBalanceShort(true)
		got, err := p.Refund(ctx, refundReq(c, res, "short", 1000))
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeFailed, got.Outcome)
		require.Equal(t, "insufficient_balance", got.FailureCode)
		require.Zero(t, fake.TotalRefunds())
	})
	t.Run("SpecViolationIsNotCharged", func(t *testing.T) {
		t.Parallel()
		fake, p, c, res := setup(t)
		r := refundReq(c, res, "eur", 1000)
		r.Currency = "EUR" // not in RefundCreate's currency enum
		_, err := p.Refund(ctx, r)
		providertest.RequireClass(t, err, providers.ErrNotCharged)
		require.ErrorContains(t, err, "Invalid request")
		require.Zero(t, fake.TotalRefunds())
	})
	t.Run("UnknownChargeWithoutTransactionIDIsNoCharge", func(t *testing.T) {
		t.Parallel()
		fake, p, c, _ := setup(t)
		got, err := p.Refund(ctx, refundReq(chargeReq("op-never-charged", c.PaymentMethod), providers.Result{}, "none", 1000))
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeFailed, got.Outcome)
		require.Equal(t, "no_charge", got.FailureCode)
		require.Zero(t, fake.TotalRefunds())
		look, err := p.LookupRefund(ctx, providers.RefundLookup{Reference: "or-x", ChargeReference: "op-never-charged"})
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeNotFound, look.Outcome)
	})
	t.Run("OurReferenceIsTheMerchantNoteAndTheReasonTheCustomerNote", func(t *testing.T) {
		t.Parallel()
		fake, p, c, res := setup(t)
		r := refundReq(c, res, "notes", 1000)
		_, err := p.Refund(ctx, r)
		require.NoError(t, err)
		require.Equal(t, 1, fake.Refunds(r.Reference))
	})
	t.Run("LookupByAnotherRefundsIDIsUnknown", func(t *testing.T) {
		t.Parallel()
		_, p, c, res := setup(t)
		a, b := refundReq(c, res, "a", 1000), refundReq(c, res, "b", 1000)
		ra, err := p.Refund(ctx, a)
		require.NoError(t, err)
		_, err = p.LookupRefund(ctx, providers.RefundLookup{Reference: b.Reference, ChargeReference: b.ChargeReference, RefundID: ra.RefundID})
		providertest.RequireClass(t, err, providers.ErrUnknown)
	})
	t.Run("UnknownRefundIDFallsBackToTheList", func(t *testing.T) {
		t.Parallel()
		_, p, c, res := setup(t)
		r := refundReq(c, res, "fallback", 1000)
		first, err := p.Refund(ctx, r)
		require.NoError(t, err)
		got, err := p.LookupRefund(ctx, providers.RefundLookup{Reference: r.Reference, ChargeReference: r.ChargeReference, RefundID: "999"})
		require.NoError(t, err)
		require.Equal(t, first.RefundID, got.RefundID)
	})
}

// TestRefundAnswers pins how each answer to POST /refund is read: the
// refusals Paystack documents are final failed results, other 4xx are
// ErrNotCharged, the rest ErrUnknown.
func TestRefundAnswers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		body   string
		code   string // a failed result with this code, or
		class  error  // an error of this class
	}{
		{"FullyReversed", 400, `{"status":false,"message":"Transaction has been fully reversed"}`, "exceeds_charge", nil},
		{"InsufficientBalance", 400, `{"status":false,"message":"Insufficient balance to fulfill this refund. Please top up."}`, "insufficient_balance", nil},
		{"BelowMinimum", 400, `{"status":false,"message":"Cannot refund less than USD 1"}`, "amount_too_small", nil},
		{"OtherBadRequest", 400, `{"status":false,"message":"Invalid key"}`, "", providers.ErrNotCharged},
		{"Unauthorized", 401, `{"status":false,"message":"Invalid key"}`, "", providers.ErrNotCharged},
		{"ServerError", 500, `{"status":false,"message":"An error occurred"}`, "", providers.ErrUnknown},
		{"OKButFalse", 200, `{"status":false,"message":"?"}`, "", providers.ErrUnknown},
		{"OKWithoutStatus", 200, `{"status":true,"message":"ok","data":{"id":1}}`, "", providers.ErrUnknown},
		{"Garbage", 200, `<html>`, "", providers.ErrUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if r.Method == http.MethodGet {
					_, _ = w.Write([]byte(`{"status":true,"message":"ok","data":[],"meta":{"pageCount":0}}`))
					return
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			res, err := newProvider(t, srv.URL, "sk_test_x", 0).Refund(context.Background(), providers.RefundRequest{
				Reference: "or-1", ChargeReference: "op-1", TransactionID: "41", Amount: 100, Currency: "NGN"})
			if tt.class != nil {
				providertest.RequireClass(t, err, tt.class)
				return
			}
			require.NoError(t, err)
			require.Equal(t, providers.OutcomeFailed, res.Outcome)
			require.Equal(t, tt.code, res.FailureCode)
			require.NotEmpty(t, res.FailureMessage)
		})
	}
}

// TestRefundLookupDistrustsTheListFilter serves a list that ignores
// ?transaction= (the filter is not in Paystack's spec): the adapter must
// still find ours by its merchant note and transaction, page through, and
// say "cannot tell" rather than "not found" past its page bound.
func TestRefundLookupDistrustsTheListFilter(t *testing.T) {
	t.Parallel()
	serve := func(total int, ours int) (*httptest.Server, *atomic.Int64) {
		var calls atomic.Int64
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			perPage, _ := strconv.Atoi(r.URL.Query().Get("perPage"))
			page, _ := strconv.Atoi(r.URL.Query().Get("page"))
			var data []map[string]any
			for i := (page - 1) * perPage; i < min(page*perPage, total); i++ {
				item := map[string]any{"id": i, "status": "processed", "transaction": 7, "transaction_reference": "op-other", "merchant_note": "or-other"}
				if i == ours {
					item["transaction"], item["transaction_reference"], item["merchant_note"] = 41, "op-1", "or-1"
				}
				if i == ours+1 {
					// Our note on another charge's refund is not ours.
					item["merchant_note"] = "or-1"
				}
				data = append(data, item)
			}
			if data == nil {
				data = []map[string]any{}
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"status": true, "message": "ok", "data": data,
				"meta": map[string]any{"pageCount": (total + perPage - 1) / perPage}})
		})), &calls
	}
	lookup := providers.RefundLookup{Reference: "or-1", ChargeReference: "op-1", TransactionID: "41"}
	for _, tt := range []struct {
		name        string
		total, ours int
		want        providers.Outcome
		class       error
	}{
		{"FoundOnAFollowingPage", 450, 420, providers.OutcomeSucceeded, nil},
		{"AbsentFromAllPagesIsNotFound", 450, -5, providers.OutcomeNotFound, nil},
		{"OnlyOnAnotherChargeIsNotFound", 300, -1, providers.OutcomeNotFound, nil},
		{"PastThePageBoundIsUnknown", 1500, 1400, "", providers.ErrUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := serve(tt.total, tt.ours)
			defer srv.Close()
			got, err := newProvider(t, srv.URL, "sk_test_x", 0).LookupRefund(context.Background(), lookup)
			if tt.class != nil {
				providertest.RequireClass(t, err, tt.class)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.Outcome)
		})
	}
}

func TestVerifyRefundWebhook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := paystacktest.New(t)
	p := newProvider(t, fake.URL, paystacktest.SecretKey, 0)
	c := chargeReq(providers.Reference("m1", "refund-webhook"), paystacktest.TokenSuccess)
	res, err := p.Charge(ctx, c)
	require.NoError(t, err)
	r := refundReq(c, res, "webhook", 2000)
	fake.PendNextRefund()
	_, err = p.Refund(ctx, r)
	require.NoError(t, err)

	for _, tt := range []struct {
		name    string
		settle  providers.Outcome
		event   string
		outcome providers.Outcome
	}{
		{"Pending", "", "refund.pending", providers.OutcomePending},
		{"Processed", providers.OutcomeSucceeded, "refund.processed", providers.OutcomeSucceeded},
	} {
		// Sequential: each step settles the same refund further.
		if tt.settle != "" {
			require.NoError(t, fake.SettleRefund(r.Reference, tt.settle))
		}
		header, body, err := fake.RefundWebhook(r.Reference)
		require.NoError(t, err)
		ev, err := p.VerifyWebhook(header, body)
		require.NoError(t, err, tt.name)
		// The charge is named, not our refund (Paystack's payload has no
		// merchant note): the gateway looks up the charge's pending refunds.
		require.Equal(t, providers.Event{Type: tt.event, Reference: c.Reference, Refund: true}, ev, tt.name)
		got, err := p.LookupRefund(ctx, providers.RefundLookup{Reference: r.Reference, ChargeReference: ev.Reference})
		require.NoError(t, err)
		require.Equal(t, tt.outcome, got.Outcome, tt.name)
	}

	sign := func(b []byte) http.Header {
		return http.Header{"X-Paystack-Signature": {hex.EncodeToString(paystack.Sign(paystacktest.SecretKey, b))}}
	}
	for name, tt := range map[string]struct {
		body string
		want providers.Event
		err  error
	}{
		"TransactionObject": {`{"event":"refund.failed","data":{"transaction":{"reference":"op-2"},"merchant_note":"or-2"}}`,
			providers.Event{Type: "refund.failed", Reference: "op-2", Refund: true, RefundReference: "or-2"}, nil},
		"TransactionIDIsNotAReference": {`{"event":"refund.processed","data":{"transaction":12,"transaction_reference":"op-3"}}`,
			providers.Event{Type: "refund.processed", Reference: "op-3", Refund: true}, nil},
		"WithoutTransactionReference": {`{"event":"refund.processed","data":{"refund_reference":"1320"}}`, providers.Event{}, providers.ErrBadPayload},
		"WireReferenceIsDecoded": {fmt.Sprintf(`{"event":"refund.processed","data":{"transaction_reference":%q}}`, paystack.WireReference("a/b")),
			providers.Event{Type: "refund.processed", Reference: "a/b", Refund: true}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev, err := p.VerifyWebhook(sign([]byte(tt.body)), []byte(tt.body))
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, ev)
		})
	}
}

// Paystack may list fewer refunds a page than perPage asks (its spec's
// default is 50, and no maximum is documented): a short page is not the
// last. Ours is on page 2, behind 50 others; found there, it is not sent
// again (Paystack would make a second refund of it) — with the page count
// in meta, and without it (then an empty page ends the list).
func TestRefundLookupReadsPastAShortPage(t *testing.T) {
	t.Parallel()
	for name, withCount := range map[string]bool{"PageCount": true, "NoPageCount": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var posts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch {
				case r.Method == http.MethodGet && r.URL.Path == "/refund":
					page := r.URL.Query().Get("page")
					data := []map[string]any{}
					if page == "1" || page == "2" {
						for i := range 50 {
							note := fmt.Sprintf("other-%s-%d", page, i)
							if page == "2" && i == 7 {
								note = "or-ours"
							}
							data = append(data, map[string]any{"id": 1000 + i, "status": "pending", "merchant_note": note, "transaction": 42})
						}
					}
					meta := map[string]any{"perPage": 50, "page": page}
					if withCount {
						meta["pageCount"] = 2
					}
					_ = json.NewEncoder(w).Encode(map[string]any{"status": true, "message": "Refunds retrieved", "data": data, "meta": meta})
				case r.Method == http.MethodPost && r.URL.Path == "/refund":
					posts.Add(1)
					_ = json.NewEncoder(w).Encode(map[string]any{"status": true, "message": "Refund has been queued for processing",
						"data": map[string]any{"id": 9999, "status": "pending", "merchant_note": "or-ours", "transaction": map[string]any{"id": 42}}})
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			p := newProvider(t, srv.URL, "sk_test_x", 0)
			res, err := p.Refund(context.Background(), providers.RefundRequest{Reference: "or-ours", ChargeReference: "pay_x",
				TransactionID: "42", Amount: 100, Currency: "NGN"})
			require.NoError(t, err)
			require.Zero(t, posts.Load(), "ours is listed on page 2: it must not be sent again")
			require.Equal(t, "1007", res.RefundID)
		})
	}
}
