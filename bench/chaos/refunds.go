package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/gateway/bench/internal/rig"
	"github.com/oncepay/gateway/providers/paystack"
)

// refund is one refund key of a payment, retried with the byte-identical
// body until a final answer: 201 (succeeded or failed) or 400
// refund_exceeds_remaining (the racers took the amount; not stored, so not
// compared across instances).
type refund struct {
	pay     *payment
	key     string
	body    []byte
	final   bool
	status  int
	answer  []byte
	answers []answer
	problem string
	tries   int
	raced   bool
}

// refundsOf makes the refunds of payment i once it succeeded: racers
// keys at once, each for 40% of the amount (so at most two fit), or, with
// racers 1, one refund of half the amount.
func refundsOf(runID string, i, racers int, p *payment, amount int64) []*refund {
	n, part := racers, amount*2/5
	if n <= 1 {
		n, part = 1, amount/2
	}
	out := make([]*refund, n)
	for j := range out {
		out[j] = &refund{pay: p, key: fmt.Sprintf("chaos-%s-refund-%05d-%d", runID, i, j),
			body: fmt.Appendf(nil, `{"amount":%d,"reason":"requested_by_customer","metadata":{"chaos":"%d-%d"}}`, part, i, j), raced: n > 1}
	}
	return out
}

// refundPayment runs a payment's refunds concurrently, each until final.
func (c *client) refundPayment(ctx context.Context, paymentID string, rs []*refund) {
	var wg sync.WaitGroup
	for _, rf := range rs {
		wg.Add(1)
		go func() { defer wg.Done(); c.settleRefund(ctx, paymentID, rf) }()
	}
	wg.Wait()
}

func (c *client) refundRequest(ctx context.Context, paymentID string, rf *refund) (int, []byte, string, error) {
	m := c.merchants[rf.pay.merchant]
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/payments/"+paymentID+"/refunds", bytes.NewReader(rf.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+m.token())
	req.Header.Set("Idempotency-Key", rf.key)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		m.mu.Lock()
		if tok, err := rig.Token(ctx, c.http, c.gwURL, m.ClientID, m.ClientSecret); err == nil {
			m.Token = tok
		}
		m.mu.Unlock()
	}
	return resp.StatusCode, body, resp.Header.Get(instanceHeader), err
}

func (c *client) settleRefund(ctx context.Context, paymentID string, rf *refund) {
	stop := time.Now().Add(giveUp)
	for time.Now().Before(stop) {
		rf.tries++
		c.attempts.Add(1)
		s, body, inst, err := c.refundRequest(ctx, paymentID, rf)
		switch {
		case err != nil, s == http.StatusUnauthorized, s == http.StatusTooManyRequests, s >= 500:
			sleep(100, 300)
		case s == http.StatusCreated:
			rf.final, rf.status, rf.answer = true, s, body
			rf.answers = append(rf.answers, answer{inst, s, body})
			for got, tries := 0, 0; got < c.replays && tries < 10*c.replays; tries++ {
				c.attempts.Add(1)
				s, body, inst, err := c.refundRequest(ctx, paymentID, rf)
				switch {
				case err != nil, s == http.StatusUnauthorized, s == http.StatusTooManyRequests, s >= 500:
					sleep(50, 150)
				default:
					rf.answers = append(rf.answers, answer{inst, s, body})
					got++
				}
			}
			return
		case s == http.StatusBadRequest && bytes.Contains(body, []byte("refund_exceeds_remaining")):
			rf.final, rf.status, rf.answer = true, s, body
			return
		case s == http.StatusAccepted:
			sleep(400, 900)
		case s == http.StatusConflict:
			sleep(300, 700)
		default:
			rf.problem = fmt.Sprintf("unexpected answer %d: %.200s", s, body)
			return
		}
	}
	rf.problem = fmt.Sprintf("no final answer after %s and %d attempts", giveUp, rf.tries)
}

// refundReport is what the refund audit found.
type refundReport struct {
	keys, succeeded, failed, exceeded, pending, raced       int
	providerRefunds, providerProcessed, providerFailed      int
	attempts, finalAnswers, multiInstance, differing, clash int
	violations                                              []string
}

func (r *refundReport) fail(format string, args ...any) {
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

// auditRefunds checks the refunds: the ledger (refunded ≤ charged, the
// payment's amount_refunded = its pending and succeeded refunds, none
// pending), the provider (refunded ≤ charged per charge; exactly one
// processed refund per succeeded ledger refund under its reference, none
// for a refund the ledger did not make, none still pending), the stored
// answers against the clients' and the clients' across instances.
func auditRefunds(ctx context.Context, conn *pgx.Conn, provURL string, merchants []*merchant, rs []*refund) (*refundReport, error) {
	r := &refundReport{}
	resp, err := http.Get(provURL + "/_refunds")
	if err != nil {
		return nil, fmt.Errorf("provider refunds audit: %w", err)
	}
	var pv struct {
		Refunds []struct {
			ID           int64  `json:"id"`
			TxReference  string `json:"transaction_reference"`
			Amount       int64  `json:"amount"`
			Status       string `json:"status"`
			MerchantNote string `json:"merchant_note"`
		} `json:"refunds"`
	}
	err = json.NewDecoder(resp.Body).Decode(&pv)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("provider refunds audit: %w", err)
	}
	type prov struct {
		id     int64
		tx     string
		amount int64
		status string
	}
	byNote := map[string][]prov{}
	perCharge := map[string]int64{}
	for _, p := range pv.Refunds {
		r.providerRefunds++
		byNote[p.MerchantNote] = append(byNote[p.MerchantNote], prov{p.ID, p.TxReference, p.Amount, p.Status})
		switch p.Status {
		case "processed":
			r.providerProcessed++
		case "failed":
			r.providerFailed++
		default:
			r.fail("provider refund %d (%s) is still %s after the settle wait", p.ID, p.MerchantNote, p.Status)
		}
		if p.Status != "failed" {
			perCharge[p.TxReference] += p.Amount
		}
	}
	// The provider's charges, for refunded ≤ charged there.
	charges := map[string]int64{}
	crow, err := conn.Query(ctx, `SELECT provider_reference, amount FROM payments`)
	if err != nil {
		return nil, err
	}
	for crow.Next() {
		var ref string
		var amount int64
		if err := crow.Scan(&ref, &amount); err != nil {
			crow.Close()
			return nil, err
		}
		charges[paystack.WireReference(ref)] = amount
	}
	crow.Close()
	for tx, sum := range perCharge {
		if sum > charges[tx] {
			r.fail("provider refunded %d of charge %s, which is %d", sum, tx, charges[tx])
		}
	}

	// The ledger, per payment.
	rows, err := conn.Query(ctx, `SELECT p.id, p.amount, p.amount_refunded, coalesce(sum(f.amount) FILTER (WHERE f.status IN ('succeeded','pending')), 0)
		FROM payments p JOIN refunds f ON f.merchant_id = p.merchant_id AND f.payment_id = p.id GROUP BY p.id, p.amount, p.amount_refunded`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var amount, refunded, sum int64
		if err := rows.Scan(&id, &amount, &refunded, &sum); err != nil {
			rows.Close()
			return nil, err
		}
		if sum > amount {
			r.fail("payment %s: refunds of %d (succeeded+pending) exceed its amount %d", id, sum, amount)
		}
		if sum != refunded {
			r.fail("payment %s: amount_refunded %d, its succeeded+pending refunds %d", id, refunded, sum)
		}
	}
	rows.Close()

	// Each ledger refund against the provider and its key's stored answer.
	type lrow struct {
		id, status, code, ref string
		amount                int64
		keyStatus             *string
		statusCode            *int
		response              []byte
	}
	ledger := map[[2]string]lrow{}
	notes := map[string]bool{}
	lr, err := conn.Query(ctx, `SELECT f.merchant_id, f.idempotency_key, f.id, f.status, f.failure_code, f.provider_reference, f.amount,
		k.status, k.status_code, k.response
		FROM refunds f LEFT JOIN idempotency_keys k ON k.merchant_id = f.merchant_id AND k.key = f.idempotency_key`)
	if err != nil {
		return nil, err
	}
	for lr.Next() {
		var mid, key string
		var l lrow
		if err := lr.Scan(&mid, &key, &l.id, &l.status, &l.code, &l.ref, &l.amount, &l.keyStatus, &l.statusCode, &l.response); err != nil {
			lr.Close()
			return nil, err
		}
		ledger[[2]string{mid, key}] = l
		notes[l.ref] = true
		ps := byNote[l.ref]
		switch l.status {
		case "pending":
			r.pending++
			r.fail("refund %s (%s) is still pending after the settle wait", l.id, key)
		case "succeeded":
			r.succeeded++
			if len(ps) != 1 || ps[0].status != "processed" || ps[0].amount != l.amount {
				r.fail("refund %s (%s) succeeded for %d in the ledger; the provider has %d refund(s) under its reference: %+v", l.id, key, l.amount, len(ps), ps)
			}
		case "failed":
			r.failed++
			for _, p := range ps {
				if p.status != "failed" {
					r.fail("refund %s (%s) failed/%s in the ledger; the provider %s it (refund %d, %d)", l.id, key, l.code, p.status, p.id, p.amount)
				}
			}
			if len(ps) > 1 {
				r.fail("refund %s (%s): %d refunds at the provider under its reference", l.id, key, len(ps))
			}
		}
	}
	lr.Close()
	for note, ps := range byNote {
		if !notes[note] {
			r.fail("the provider holds %d refund(s) under %s, which no ledger refund has", len(ps), note)
		}
	}

	for _, rf := range rs {
		r.keys++
		r.attempts += rf.tries
		if rf.raced {
			r.raced++
		}
		if rf.problem != "" {
			r.fail("%s: client: %s", rf.key, rf.problem)
			continue
		}
		if rf.status == http.StatusBadRequest {
			r.exceeded++
			continue
		}
		by := map[string]bool{}
		for i, a := range rf.answers {
			r.finalAnswers++
			by[a.instance] = true
			if i > 0 && (a.status != rf.answers[0].status || !bytes.Equal(a.body, rf.answers[0].body)) {
				r.differing++
				r.fail("%s: refund answers differ between instances: %s said %d %.100s, %s said %d %.100s",
					rf.key, rf.answers[0].instance, rf.answers[0].status, rf.answers[0].body, a.instance, a.status, a.body)
				break
			}
		}
		if len(by) > 1 {
			r.multiInstance++
		}
		l, ok := ledger[[2]string{merchants[rf.pay.merchant].ID, rf.key}]
		if !ok {
			r.fail("%s: a 201 for a refund the ledger does not have", rf.key)
			continue
		}
		var got struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		}
		_ = json.Unmarshal(rf.answer, &got)
		if got.ID != l.id || got.Status != l.status {
			r.clash++
			r.fail("%s: client got refund %s %s, ledger %s %s", rf.key, got.ID, got.Status, l.id, l.status)
		}
		if l.keyStatus == nil || *l.keyStatus != "done" || l.statusCode == nil || *l.statusCode != rf.status || !bytes.Equal(l.response, rf.answer) {
			r.clash++
			r.fail("%s: client got %d %.120s; key %s stored %v %.120s", rf.key, rf.status, rf.answer, deref(l.keyStatus), l.statusCode, l.response)
		}
	}
	return r, nil
}

func (r *refundReport) print(share float64, racers int) {
	fmt.Printf("| refunds | %d keys (%.0f%% of the succeeded payments refunded; every second one raced by %d keys at 40%% each: %d raced keys), %d client requests; ledger: %d succeeded, %d failed, %d still pending; %d answered 400 refund_exceeds_remaining |\n",
		r.keys, 100*share, racers, r.raced, r.attempts, r.succeeded, r.failed, r.pending, r.exceeded)
	fmt.Printf("| refunds at the provider | %d (%d processed, %d failed) |\n", r.providerRefunds, r.providerProcessed, r.providerFailed)
	fmt.Printf("| refund final answers compared across instances | %d (%d keys answered by 2+ instances; %d differ; %d ledger / stored / client mismatches) |\n",
		r.finalAnswers, r.multiInstance, r.differing, r.clash)
}
