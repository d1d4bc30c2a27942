package flutterwave_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/flutterwave"
	"github.com/oncepay/gateway/providers/flutterwave/flutterwavetest"
	"github.com/oncepay/gateway/providers/providertest"
)

func TestRefundConformance(t *testing.T) {
	t.Parallel()
	providertest.RunRefunds(t, providertest.RefundHarness{
		New: func(t *testing.T) providertest.RefundBackend {
			fake := flutterwavetest.New(t)
			return providertest.RefundBackend{
				Provider:         newProvider(t, fake.URL, flutterwavetest.SecretKey, 0),
				Refunds:          fake.Refunds,
				LoseNextRefund:   func(*providers.RefundRequest) { fake.DropNextResponse() },
				PendNextRefund:   func(*providers.RefundRequest) { fake.PendNextRefund() },
				SettleRefund:     fake.SettleRefund,
				RejectNextRefund: func(*providers.RefundRequest) { fake.FailNext(http.StatusUnauthorized) },
				FailNext:         fake.FailNext,
				FailNextCreate:   fake.FailNextPost,
				HangNextRefund:   fake.HangNextResponse,
				Impatient:        newProvider(t, fake.URL, flutterwavetest.SecretKey, 100*time.Millisecond),
			}
		},
		SuccessMethod: flutterwavetest.TokenSuccess,
		DeclineMethod: flutterwavetest.TokenDecline,
	})
}

// TestRefundWire pins what goes out: the refund of 5000 kobo is the JSON
// number 50.00 on the charge's numeric id, with our reference as comments.
func TestRefundWire(t *testing.T) {
	t.Parallel()
	var path string
	var body map[string]json.RawMessage
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = w.Write([]byte(`{"status":"success","message":"ok","data":[],"meta":{"page_info":{"total":0,"current_page":1,"total_pages":0}}}`))
			return
		}
		path = r.URL.Path
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &body))
		_, _ = w.Write([]byte(`{"status":"success","message":"Transaction refund initiated","data":{"id":8612,"tx_id":41,"status":"completed"}}`))
	}))
	defer srv.Close()
	res, err := newProvider(t, srv.URL, "k", 0).Refund(context.Background(), providers.RefundRequest{
		Reference: "or-1", ChargeReference: "op-1", TransactionID: "41", Amount: 5000, Currency: "NGN", Reason: "duplicate"})
	require.NoError(t, err)
	require.Equal(t, providers.RefundResult{Outcome: providers.OutcomeSucceeded, RefundID: "8612"}, res)
	require.Equal(t, "/v3/transactions/41/refund", path)
	require.Equal(t, map[string]json.RawMessage{"amount": json.RawMessage(`50.00`), "comments": json.RawMessage(`"or-1"`)}, body)
}

func TestRefundAnswers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		body   string
		code   string
		class  error
	}{
		{"FullyRefunded", 400, `{"status":"error","message":"Transaction has been fully refunded","data":null}`, "exceeds_charge", nil},
		{"MoreThanLeft", 400, `{"status":"error","message":"Refund amount cannot be greater than the unrefunded amount of the transaction","data":null}`, "exceeds_charge", nil},
		{"NoTransaction", 400, `{"status":"error","message":"No transaction was found for this id","data":null}`, "no_charge", nil},
		{"InsufficientBalance", 400, `{"status":"error","message":"Insufficient balance to process this refund","data":null}`, "insufficient_balance", nil},
		{"OtherBadRequest", 400, `{"status":"error","message":"amount is required","data":null}`, "", providers.ErrNotCharged},
		{"RateLimitedInRefundWords", 429, `{"status":"error","message":"You cannot make more than 10 refund requests per minute","data":null}`, "", providers.ErrNotCharged},
		{"Unauthorized", 401, `{"status":"error","message":"Authorization required","data":null}`, "", providers.ErrNotCharged},
		{"GatewayTimeout", 503, `{"status":"error","message":"An error occurred. Please contact support","data":null}`, "", providers.ErrUnknown},
		{"OKButError", 200, `{"status":"error","message":"?","data":null}`, "", providers.ErrUnknown},
		{"OKWithoutStatus", 200, `{"status":"success","message":"ok","data":{"id":1}}`, "", providers.ErrUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					_, _ = w.Write([]byte(`{"status":"success","message":"ok","data":[],"meta":{"page_info":{"total_pages":0}}}`))
					return
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			res, err := newProvider(t, srv.URL, "k", 0).Refund(context.Background(), providers.RefundRequest{
				Reference: "or-1", ChargeReference: "op-1", TransactionID: "41", Amount: 100, Currency: "NGN"})
			if tt.class != nil {
				providertest.RequireClass(t, err, tt.class)
				return
			}
			require.NoError(t, err)
			require.Equal(t, providers.OutcomeFailed, res.Outcome)
			require.Equal(t, tt.code, res.FailureCode)
		})
	}
}

// TestRefundLookupDistrustsTheListFilter serves a refund list that ignores
// ?id= (its name is unconfirmed): ours is still found by its comment and
// transaction, and past the page bound the answer is "cannot tell".
func TestRefundLookupDistrustsTheListFilter(t *testing.T) {
	t.Parallel()
	const perPage = 20
	serve := func(total, ours int, pageInfo bool) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			page, _ := strconv.Atoi(r.URL.Query().Get("page"))
			data := []map[string]any{}
			for i := (page - 1) * perPage; i < min(page*perPage, total); i++ {
				item := map[string]any{"id": i, "status": "completed", "transaction_id": 7, "comment": "or-other"}
				switch i {
				case ours:
					item["transaction_id"], item["comment"] = 41, "or-1"
				case ours + 1:
					item["comment"] = "or-1" // on another transaction: not ours
				}
				data = append(data, item)
			}
			out := map[string]any{"status": "success", "message": "ok", "data": data}
			if pageInfo {
				out["meta"] = map[string]any{"page_info": map[string]any{"total": total, "current_page": page, "total_pages": (total + perPage - 1) / perPage}}
			}
			_ = json.NewEncoder(w).Encode(out)
		}))
	}
	for _, tt := range []struct {
		name        string
		total, ours int
		pageInfo    bool
		want        providers.Outcome
		class       error
	}{
		{"FoundOnAFollowingPage", 300, 250, true, providers.OutcomeSucceeded, nil},
		{"FoundWithoutPageInfo", 300, 250, false, providers.OutcomeSucceeded, nil},
		{"AbsentIsNotFound", 300, -5, true, providers.OutcomeNotFound, nil},
		{"AbsentWithoutPageInfoIsNotFound", 300, -5, false, providers.OutcomeNotFound, nil},
		{"OnlyOnAnotherChargeIsNotFound", 100, -1, true, providers.OutcomeNotFound, nil},
		{"PastThePageBoundIsUnknown", 1000, 900, true, "", providers.ErrUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := serve(tt.total, tt.ours, tt.pageInfo)
			defer srv.Close()
			got, err := newProvider(t, srv.URL, "k", 0).LookupRefund(context.Background(),
				providers.RefundLookup{Reference: "or-1", ChargeReference: "op-1", TransactionID: "41"})
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
	fake := flutterwavetest.New(t)
	p := newProvider(t, fake.URL, flutterwavetest.SecretKey, 0)
	c := chargeReq(providers.Reference("m1", "refund-webhook"), flutterwavetest.TokenSuccess)
	res, err := p.Charge(ctx, c)
	require.NoError(t, err)
	r := providers.RefundRequest{Reference: providers.RefundReference("m1", "webhook"), ChargeReference: c.Reference,
		TransactionID: res.TransactionID, Amount: 1000, Currency: "NGN"}
	_, err = p.Refund(ctx, r)
	require.NoError(t, err)
	header, body, err := fake.RefundWebhook(r.Reference)
	require.NoError(t, err)
	ev, err := p.VerifyWebhook(header, body)
	require.NoError(t, err)
	require.Equal(t, providers.Event{Type: "refund.completed", Reference: c.Reference, Refund: true,
		RefundReference: r.Reference, TransactionID: res.TransactionID}, ev)

	for name, tt := range map[string]struct {
		body string
		want providers.Event
		err  error
	}{
		"ByTransactionIDOnly": {`{"event":"refund.completed","data":{"id":1,"tx_id":"41","status":"completed"}}`,
			providers.Event{Type: "refund.completed", Refund: true, TransactionID: "41"}, nil},
		"LegacyType": {`{"event.type":"REFUND","data":{"transaction_id":41,"comment":"or-1"}}`,
			providers.Event{Type: "REFUND", Refund: true, TransactionID: "41", RefundReference: "or-1"}, nil},
		"NamingNothing": {`{"event":"refund.completed","data":{"id":1}}`, providers.Event{}, providers.ErrBadPayload},
		"ChargeEventsIgnoreRefundFields": {`{"event":"charge.completed","data":{"tx_ref":"op-1","tx_id":[1],"comments":{}}}`,
			providers.Event{Type: "charge.completed", Reference: "op-1"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev, err := flutterwave.ParseEvent([]byte(tt.body))
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, ev)
		})
	}
}
