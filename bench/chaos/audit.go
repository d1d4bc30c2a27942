package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/gateway/providers/paystack"
)

// ledgerRow is a payment joined with its idempotency key.
type ledgerRow struct {
	id, status, failureCode, reference string
	amount                             int64
	attempts                           int
	recheckAt                          *time.Time
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
		// Late-landing charges (-late-rate).
		Late          bool `json:"late"`
		Landed        bool `json:"landed"`
		HiddenLookups int  `json:"hidden_lookups"`
	} `json:"references"`
	Customers map[string]struct {
		Charges    int      `json:"charges"`
		References []string `json:"references"`
	} `json:"customers"`
}

// report is what the audit found.
type report struct {
	payments, succeeded, failed           int
	failedDeclined, failedNeverCharged    int
	failedCharged                         int
	attempts, replayedFinal, multiAttempt int
	providerRequests, providerCharges     int
	chargesPerPayment                     map[int]int // charges at the provider → payments
	noFinalState, keysInProgress          int
	mismatches                            int
	// chargedButFailed: references the provider charged whose payment is
	// not succeeded in the ledger (or that no payment holds).
	chargedButFailed int
	// The late-landing fault, as the provider saw it.
	lateCharges, lateLanded, lateSucceeded, hiddenLookups int
	// Payments the gateway logged as re-opened ("payment re-opened": a
	// release as not_processed undone by the recheck or a webhook), split
	// by what their app did.
	reopened, reopenedAbandoned, reopenedPatient, reopenedLate int
	// The apps that stopped after a 202, and what became of their payments.
	abandoned, abandonedCharged, abandonedNeverCharged int
	// The patient apps that waited after a 202, and how many of them got a
	// replay when they came back.
	patientWaited, patientReplayed int
	// Answers across instances: every final answer a client got for a
	// key, by the instance that sent it; keys whose final answers were
	// not all byte-identical (differing); keys answered by two or more
	// instances (so the comparison compared something).
	answersBy                   map[string]int
	finalAnswers, differing     int
	multiInstance, unattributed int
	violations                  []string
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
//
// A fifth witness, charged-but-failed, reads the provider's record the
// other way round: every reference the provider charged must be a payment
// the ledger says succeeded — a late-landing charge released as
// not_processed must have been re-opened by the time the settle wait ends.
// An abandoned app's payment may also end failed / not_processed with its
// key released, when the provider has nothing under its reference (the
// app gave up on a 202 for a charge that never reached the provider).
func audit(ctx context.Context, conn *pgx.Conn, provURL string, merchants []*merchant, pays []*payment, gatewayLogs []string) (*report, error) {
	r := &report{chargesPerPayment: map[int]int{}, answersBy: map[string]int{}}
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
		if c.Late {
			r.lateCharges++
			r.hiddenLookups += c.HiddenLookups
			if c.Landed {
				r.lateLanded++
			}
			if c.Charges > 0 {
				r.lateSucceeded++
			}
		}
	}
	reopened := map[string]bool{}
	for _, path := range gatewayLogs {
		if err := reopenedPayments(path, reopened); err != nil {
			return nil, err
		}
	}

	rows, err := conn.Query(ctx, `SELECT p.merchant_id, p.idempotency_key, p.id, p.status, p.failure_code,
		p.provider_reference, p.amount, p.attempts, p.recheck_at, k.status, k.status_code, k.response
		FROM payments p LEFT JOIN idempotency_keys k ON k.merchant_id = p.merchant_id AND k.key = p.idempotency_key`)
	if err != nil {
		return nil, err
	}
	ledger := map[[2]string]ledgerRow{}
	byReference := map[string]ledgerRow{} // by wire reference
	for rows.Next() {
		var mid, key string
		var l ledgerRow
		if err := rows.Scan(&mid, &key, &l.id, &l.status, &l.failureCode, &l.reference, &l.amount, &l.attempts,
			&l.recheckAt, &l.keyStatus, &l.statusCode, &l.response); err != nil {
			rows.Close()
			return nil, err
		}
		ledger[[2]string{mid, key}] = l
		byReference[paystack.WireReference(l.reference)] = l
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

	// charged-but-failed: the provider's charges, each against the ledger.
	apps := map[string]*payment{} // by payment id
	for _, p := range pays {
		if l, ok := ledger[[2]string{merchants[p.merchant].ID, p.key}]; ok {
			apps[l.id] = p
		}
	}
	cbf := map[string]bool{} // payment ids
	refs := make([]string, 0, len(pv.References))
	for ref := range pv.References {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	for _, ref := range refs {
		c := pv.References[ref]
		if c.Charges == 0 {
			continue
		}
		// A misbehaving provider's second charge (-no-dedupe) is kept as
		// reference~n; it belongs to the reference's payment.
		base, _, _ := strings.Cut(ref, "~")
		l, ok := byReference[base]
		if ok && l.status == "succeeded" {
			continue
		}
		r.chargedButFailed++
		if !ok {
			r.fail("charged-but-failed: the provider charged %s (%d, %s), and no payment holds the reference", ref, c.Amount, c.Email)
			continue
		}
		cbf[l.id] = true
		key, app := "?", "?"
		if p := apps[l.id]; p != nil {
			key, app = p.key, p.behaviour()
		}
		r.fail("charged-but-failed: %s (payment %s, %s app) charged %d at the provider under %s (late %v, landed %v, %d lookups answered not found); "+
			"ledger %s/%s, attempts %d, recheck_at %s, key %s, re-opened by the gateway %v",
			key, l.id, app, c.Amount, ref, c.Late, c.Landed, c.HiddenLookups,
			l.status, l.failureCode, l.attempts, timeOrNil(l.recheckAt), deref(l.keyStatus), reopened[l.id])
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
		if p.left {
			r.abandoned++
		}
		if p.waited {
			r.patientWaited++
			if p.replayed {
				r.patientReplayed++
			}
		}
		emails[p.email] = true
		// Every final answer for the key, from whichever instance sent
		// it, must be the same bytes: an instance that answered a key
		// otherwise than another would be a split brain.
		by := map[string]bool{}
		for i, a := range p.answers {
			r.finalAnswers++
			r.answersBy[a.instance]++
			if a.instance == "" {
				r.unattributed++
			}
			by[a.instance] = true
			if i > 0 && (a.status != p.answers[0].status || !bytes.Equal(a.body, p.answers[0].body)) {
				r.differing++
				r.fail("%s: answers differ between instances: %s said %d (%d bytes) %.100s, %s said %d (%d bytes) %.100s",
					p.key, p.answers[0].instance, p.answers[0].status, len(p.answers[0].body), p.answers[0].body,
					a.instance, a.status, len(a.body), a.body)
				break
			}
		}
		if len(by) > 1 {
			r.multiInstance++
		}
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
		pr, seen := pv.References[paystack.WireReference(l.reference)]
		switch l.status {
		case "succeeded":
			r.succeeded++
		case "failed":
			r.failed++
			switch {
			case seen && pr.Status == "success":
				r.failedCharged++
			case seen:
				r.failedDeclined++
			default:
				r.failedNeverCharged++
			}
		}
		if reopened[l.id] {
			r.reopened++
			switch {
			case p.left:
				r.reopenedAbandoned++
			case p.waited:
				r.reopenedPatient++
			}
			if pv.References[paystack.WireReference(l.reference)].Late {
				r.reopenedLate++
			}
		}
		if cbf[l.id] {
			continue // reported above, as its own witness
		}
		if p.left {
			if seen {
				r.abandonedCharged++
			} else if l.status == "failed" && l.failureCode == "not_processed" && l.recheckAt == nil && charges == 0 {
				// The app gave up on a 202 for a charge the provider never
				// stored: never charged, and final; the key was released.
				r.abandonedNeverCharged++
				continue
			}
		}
		if seen && l.status == "failed" && l.failureCode == "not_processed" && l.recheckAt == nil {
			// Final as never charged while the provider holds a
			// transaction (a declined one: a charged one is
			// charged-but-failed): the recheck came too early or never.
			mismatch(p, "ledger failed/not_processed for good, the provider has a %q transaction under its reference", pr.Status)
			continue
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
		if l.status == "succeeded" && (!seen || pr.Status != "success" || pr.Amount != l.amount) {
			mismatch(p, "ledger succeeded, provider has %+v under its reference", pr)
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

// behaviour is what the payment's app did after a 202.
func (p *payment) behaviour() string {
	switch {
	case p.abandon:
		return "abandoning"
	case p.patient:
		return "patient"
	}
	return "retrying"
}

// reopenedPayments reads one instance's JSON log (all its runs) into out:
// the payments it re-opened: released as not_processed, then found charged by
// the recheck or a webhook ("payment re-opened: …", payments/recheck.go).
func reopenedPayments(path string, out map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte("payment re-opened")) {
			continue
		}
		var e struct {
			Msg       string `json:"msg"`
			PaymentID string `json:"payment_id"`
		}
		if json.Unmarshal(line, &e) == nil && strings.HasPrefix(e.Msg, "payment re-opened") && e.PaymentID != "" {
			out[e.PaymentID] = true
		}
	}
	return sc.Err()
}

func timeOrNil(t *time.Time) string {
	if t == nil {
		return "null"
	}
	return t.UTC().Format(time.RFC3339)
}

func deref(s *string) string {
	if s == nil {
		return "missing"
	}
	return *s
}

func (r *report) print(o options, instances []*instance, killed map[string]int, kills, pgRestarts int, px *proxy) {
	form := "short"
	if o.long {
		form = "long"
	}
	fmt.Printf("\n## Chaos run (%s form)\n\n", form)
	fmt.Printf("| | |\n|---|---|\n")
	fmt.Printf("| logical payments | %d (%d merchants, %d concurrent clients) |\n", r.payments, o.merchants, o.clients)
	charged := ""
	if r.failedCharged > 0 {
		charged = fmt.Sprintf(", %d charged", r.failedCharged)
	}
	fmt.Printf("| outcomes in the ledger | %d succeeded, %d failed (%d declined by the provider, %d never reached it%s) |\n",
		r.succeeded, r.failed, r.failedDeclined, r.failedNeverCharged, charged)
	fmt.Printf("| client requests | %d (%.2f per payment; %d payments needed a retry; %d final answers were replays) |\n",
		r.attempts, float64(r.attempts)/float64(max(1, r.payments)), r.multiAttempt, r.replayedFinal)
	var names []string
	for _, in := range instances {
		n := fmt.Sprintf("%s (%d final answers, %d kills", in.name, r.answersBy[in.name], killed[in.name])
		if in.skew != "" {
			n += ", clock " + in.skew
		}
		names = append(names, n+")")
	}
	redis := "Redis " + o.redis
	if o.redis == "" {
		redis = "in-memory limits"
	}
	fmt.Printf("| instances behind HAProxy (round-robin, /readyz checks; %s) | %s |\n", redis, strings.Join(names, ", "))
	fmt.Printf("| faults | %d instance SIGKILLs (one at a time), %d PostgreSQL restarts, %d answers dropped by the proxy, %d requests found no instance (502/503) |\n",
		kills, pgRestarts, px.dropped.Load(), px.failed.Load())
	fmt.Printf("| provider | %d charge requests reached it (latency ≤%s, %.0f%% 5xx, %.0f%% cut after charging), %d charges made |\n",
		r.providerRequests, o.provLatency, 100*o.provFail, 100*o.provCut, r.providerCharges)
	fmt.Printf("| late-landing charges | %d (%.0f%% of charges, \"not found\" for %s; %d landed, %d of them succeeded; %d lookups answered \"not found\" while hidden) |\n",
		r.lateCharges, 100*o.provLate, o.landAfter, r.lateLanded, r.lateSucceeded, r.hiddenLookups)
	fmt.Printf("| released as not_processed, then re-opened by the gateway (its log) | %d (RECHECK_AFTER %s; %d of a late charge; apps: %d abandoning, %d patient, %d retrying) |\n",
		r.reopened, o.recheckAfter, r.reopenedLate, r.reopenedAbandoned, r.reopenedPatient, r.reopened-r.reopenedAbandoned-r.reopenedPatient)
	fmt.Printf("| apps that gave up after a 202 | %d (%d payments reached the provider, %d never did: failed / not_processed, final) |\n",
		r.abandoned, r.abandonedCharged, r.abandonedNeverCharged)
	fmt.Printf("| patient apps (back %s after a 202) | %d (%d got a replay) |\n", o.patience, r.patientWaited, r.patientReplayed)
	fmt.Printf("| charges per logical payment | %s |\n", hist(r.chargesPerPayment))
	fmt.Printf("| payments with no final state | %d |\n", r.noFinalState)
	fmt.Printf("| keys still in progress | %d |\n", r.keysInProgress)
	fmt.Printf("| ledger / stored answer / client answer / provider mismatches | %d |\n", r.mismatches)
	fmt.Printf("| final answers compared across instances | %d (%d keys answered by 2+ instances; %d without an instance header) |\n",
		r.finalAnswers, r.multiInstance, r.unattributed)
	fmt.Printf("| answers that differ between instances for the same key | %d |\n", r.differing)
	fmt.Printf("| charged at the provider but not succeeded in the ledger (charged-but-failed) | %d |\n", r.chargedButFailed)
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
