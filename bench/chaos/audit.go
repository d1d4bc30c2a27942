package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/gateway/providers/paystack"
)

// ledgerRow is a payment joined with its idempotency key.
type ledgerRow struct {
	id, status, failureCode, reference string
	amount                             int64
	attempts                           int
	keyStatus                          *string
	statusCode                         *int
	response                           []byte
}

// providerView is GET /_charges of bench/fakeprovider.
type providerView struct {
	References map[string]struct {
		Charges  int    `json:"charges"`
		Requests int    `json:"requests"`
		Status   string `json:"status"`
		Amount   int64  `json:"amount"`
		Email    string `json:"email"`
	} `json:"references"`
	Customers map[string]struct {
		Charges    int      `json:"charges"`
		References []string `json:"references"`
	} `json:"customers"`
}

// report is what the audit found.
type report struct {
	payments, succeeded, declined         int
	attempts, replayedFinal, multiAttempt int
	providerRequests, providerCharges     int
	chargesPerPayment                     map[int]int // charges at the provider → payments
	noFinalState, keysInProgress          int
	mismatches                            int
	violations                            []string
}

func (r *report) fail(format string, args ...any) {
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

// answerView is what the audit reads from a stored or received answer:
// the payment itself (201) or the payment inside the 402 problem.
type answerView struct {
	ID string `json:"id"`
	// Status is the payment's status in a 201, the HTTP status (a number)
	// in a 402 problem.
	Status  any `json:"status"`
	Payment *struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	} `json:"payment"`
}

func (a answerView) payment() (id, status string) {
	if a.Payment != nil {
		return a.Payment.ID, a.Payment.Status
	}
	s, _ := a.Status.(string)
	return a.ID, s
}

// audit checks, for every logical payment, that the ledger, the stored
// answer, the answer the client finally got and the provider's charges all
// tell the same story, and that the card decided it: AUTH_success is
// charged exactly once, AUTH_decline never.
func audit(ctx context.Context, conn *pgx.Conn, provURL string, merchants []*merchant, pays []*payment) (*report, error) {
	r := &report{chargesPerPayment: map[int]int{}}
	resp, err := http.Get(provURL + "/_charges")
	if err != nil {
		return nil, fmt.Errorf("provider audit: %w", err)
	}
	var pv providerView
	err = json.NewDecoder(resp.Body).Decode(&pv)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("provider audit: %w", err)
	}
	for _, c := range pv.References {
		r.providerRequests += c.Requests
		r.providerCharges += c.Charges
	}

	rows, err := conn.Query(ctx, `SELECT p.merchant_id, p.idempotency_key, p.id, p.status, p.failure_code,
		p.provider_reference, p.amount, p.attempts, k.status, k.status_code, k.response
		FROM payments p LEFT JOIN idempotency_keys k ON k.merchant_id = p.merchant_id AND k.key = p.idempotency_key`)
	if err != nil {
		return nil, err
	}
	ledger := map[[2]string]ledgerRow{}
	for rows.Next() {
		var mid, key string
		var l ledgerRow
		if err := rows.Scan(&mid, &key, &l.id, &l.status, &l.failureCode, &l.reference, &l.amount, &l.attempts,
			&l.keyStatus, &l.statusCode, &l.response); err != nil {
			rows.Close()
			return nil, err
		}
		ledger[[2]string{mid, key}] = l
		if l.status != "succeeded" && l.status != "failed" {
			r.noFinalState++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE status = 'in_progress'`).Scan(&r.keysInProgress); err != nil {
		return nil, err
	}
	if r.noFinalState > 0 {
		r.fail("%d payments have no final state", r.noFinalState)
	}
	if r.keysInProgress > 0 {
		r.fail("%d keys are still in progress", r.keysInProgress)
	}

	mismatch := func(p *payment, format string, args ...any) {
		r.mismatches++
		r.fail("%s: %s", p.key, fmt.Sprintf(format, args...))
	}
	emails := map[string]bool{}
	for _, p := range pays {
		r.payments++
		r.attempts += p.attempts
		if p.attempts > 1 {
			r.multiAttempt++
		}
		if p.replayed {
			r.replayedFinal++
		}
		emails[p.email] = true
		charges := pv.Customers[p.email].Charges
		r.chargesPerPayment[charges]++
		if p.problem != "" {
			r.fail("%s: client: %s", p.key, p.problem)
		}
		l, ok := ledger[[2]string{merchants[p.merchant].ID, p.key}]
		if !ok {
			r.fail("%s: no payment in the ledger", p.key)
			if charges > 0 {
				r.fail("%s: charged %d time(s) with no payment in the ledger", p.key, charges)
			}
			continue
		}
		want, wantCode := "succeeded", http.StatusCreated
		if p.decline {
			want, wantCode = "failed", http.StatusPaymentRequired
		}
		switch l.status {
		case "succeeded":
			r.succeeded++
		case "failed":
			r.declined++
		}
		if l.status != want {
			mismatch(p, "ledger says %s (%s), the card says %s", l.status, l.failureCode, want)
		}
		// The provider: exactly one charge for a success, none otherwise,
		// under the reference the ledger holds, for the same amount.
		wantCharges := 0
		if l.status == "succeeded" {
			wantCharges = 1
		}
		if charges != wantCharges {
			r.fail("%s: %d charge(s) at the provider for a %s payment (want %d)", p.key, charges, l.status, wantCharges)
		}
		pr, seen := pv.References[paystack.WireReference(l.reference)]
		switch {
		case l.status == "succeeded" && (!seen || pr.Status != "success" || pr.Amount != l.amount):
			mismatch(p, "ledger succeeded, provider has %+v under its reference", pr)
		case l.status == "failed" && seen && pr.Status == "success":
			mismatch(p, "ledger failed, provider charged the reference")
		}
		// The stored answer: done, the right status, about this payment.
		if l.keyStatus == nil || *l.keyStatus != "done" || l.statusCode == nil {
			mismatch(p, "key not done (status %v)", deref(l.keyStatus))
			continue
		}
		if *l.statusCode != wantCode {
			mismatch(p, "stored answer is %d, want %d", *l.statusCode, wantCode)
		}
		var stored answerView
		if err := json.Unmarshal(l.response, &stored); err != nil {
			mismatch(p, "stored answer is not JSON: %v", err)
			continue
		}
		if id, st := stored.payment(); id != l.id || st != l.status {
			mismatch(p, "stored answer says %s %s, ledger %s %s", id, st, l.id, l.status)
		}
		// The client's final answer: byte for byte the stored one.
		if p.final && (p.status != *l.statusCode || !bytes.Equal(p.answer, l.response)) {
			mismatch(p, "client got %d %.120s; stored %d %.120s", p.status, p.answer, *l.statusCode, l.response)
		}
	}
	for email, c := range pv.Customers {
		if !emails[email] && c.Charges > 0 {
			r.fail("provider charged %s, which no client asked for", email)
		}
	}
	return r, nil
}

func deref(s *string) string {
	if s == nil {
		return "missing"
	}
	return *s
}

func (r *report) print(o options, kills, pgRestarts int, px *proxy) {
	form := "short"
	if o.long {
		form = "long"
	}
	fmt.Printf("\n## Chaos run (%s form)\n\n", form)
	fmt.Printf("| | |\n|---|---|\n")
	fmt.Printf("| logical payments | %d (%d merchants, %d concurrent clients) |\n", r.payments, o.merchants, o.clients)
	fmt.Printf("| outcomes in the ledger | %d succeeded, %d declined |\n", r.succeeded, r.declined)
	fmt.Printf("| client requests | %d (%.2f per payment; %d payments needed a retry; %d final answers were replays) |\n",
		r.attempts, float64(r.attempts)/float64(max(1, r.payments)), r.multiAttempt, r.replayedFinal)
	fmt.Printf("| faults | %d gateway SIGKILLs, %d PostgreSQL restarts, %d answers dropped by the proxy, %d requests hit a dead gateway |\n",
		kills, pgRestarts, px.dropped.Load(), px.failed.Load())
	fmt.Printf("| provider | %d charge requests reached it (latency ≤%s, %.0f%% 5xx, %.0f%% cut after charging), %d charges made |\n",
		r.providerRequests, o.provLatency, 100*o.provFail, 100*o.provCut, r.providerCharges)
	fmt.Printf("| charges per logical payment | %s |\n", hist(r.chargesPerPayment))
	fmt.Printf("| payments with no final state | %d |\n", r.noFinalState)
	fmt.Printf("| keys still in progress | %d |\n", r.keysInProgress)
	fmt.Printf("| ledger / stored answer / client answer / provider mismatches | %d |\n", r.mismatches)
	fmt.Printf("| violations | %d |\n", len(r.violations))
}

func hist(m map[int]int) string {
	s := ""
	for n := 0; n <= 3; n++ {
		if m[n] > 0 {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%d×%d charge(s)", m[n], n)
		}
	}
	for n, c := range m {
		if n > 3 {
			s += fmt.Sprintf(", %d×%d charges", c, n)
		}
	}
	return s
}
