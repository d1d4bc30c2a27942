package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	oncepay "github.com/oncepay/gateway/payments/client"
)

// hookRetries is the chaos run's WEBHOOK_RETRY_SCHEDULE: fifteen attempts
// in about 32 s, so a receiver that fails a third of them still gets
// every event (0.33^15 ≈ 6e-8) within the run — even one whose first
// attempts fell in the PostgreSQL restart or on a killed instance, which
// use up retries too (eleven attempts were once not enough for one of
// ~1,700 events).
const hookRetries = "100ms,300ms,1s,1s,2s,2s,2s,3s,3s,3s,3s,3s,3s,3s"

// hooks is the merchants' webhook receiver: it fails, drops and delays
// answers at the configured rates, verifies every delivery's signature
// with the merchant's secret (the Go client's VerifyWebhook), and records
// the events it accepted (answered 2xx), by webhook-id.
type hooks struct {
	failRate, dropRate, delayRate float64
	maxDelay                      time.Duration

	mu                                                     sync.Mutex
	secrets                                                map[string]string            // merchant id → its endpoint's secret
	accepted                                               map[string][]byte            // event id → body
	byObject                                               map[string]map[string]string // object id → event id → type, of the accepted
	requests, failed, dropped, delayed, forged, duplicates atomic.Int64
}

func newHooks(failRate, dropRate, delayRate float64, maxDelay time.Duration) *hooks {
	return &hooks{failRate: failRate, dropRate: dropRate, delayRate: delayRate, maxDelay: maxDelay,
		secrets: map[string]string{}, accepted: map[string][]byte{}, byObject: map[string]map[string]string{}}
}

// register creates an endpoint for m (through the balancer, as a merchant
// would) pointing at this receiver, and keeps its secret.
func (h *hooks) register(ctx context.Context, c *http.Client, gwURL, hookURL string, m *merchant) error {
	body := fmt.Sprintf(`{"url":%q,"description":"chaos receiver"}`, hookURL+"/hooks/"+m.ID)
	for attempt := 0; ; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gwURL+"/v1/webhook_endpoints", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+m.token())
		req.Header.Set("Idempotency-Key", "chaos-endpoint")
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err == nil {
			var ep struct {
				Secret string `json:"secret"`
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated && json.Unmarshal(b, &ep) == nil && ep.Secret != "" {
				h.mu.Lock()
				h.secrets[m.ID] = ep.Secret
				h.mu.Unlock()
				return nil
			}
			err = fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		if attempt == 5 {
			return fmt.Errorf("create the webhook endpoint of %s: %w", m.ID, err)
		}
		time.Sleep(time.Second)
	}
}

func (h *hooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	merchantID := strings.TrimPrefix(r.URL.Path, "/hooks/")
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	switch x := rand.Float64(); {
	case x < h.dropRate:
		// The answer is lost: the connection closes before any byte.
		h.dropped.Add(1)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	case x < h.dropRate+h.failRate:
		h.failed.Add(1)
		http.Error(w, "receiver trouble", http.StatusInternalServerError)
		return
	case x < h.dropRate+h.failRate+h.delayRate:
		h.delayed.Add(1)
		time.Sleep(time.Duration(rand.Int64N(int64(h.maxDelay))))
	}
	h.mu.Lock()
	secret := h.secrets[merchantID]
	h.mu.Unlock()
	e, err := oncepay.VerifyWebhook(secret, r.Header, body)
	if err != nil {
		h.forged.Add(1)
		http.Error(w, "bad signature", http.StatusBadRequest)
		return
	}
	var obj struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(e.Data.Object, &obj)
	h.mu.Lock()
	if _, seen := h.accepted[e.ID]; seen {
		h.duplicates.Add(1) // at least once: a receiver dedupes by webhook-id
	}
	h.accepted[e.ID] = body
	if h.byObject[obj.ID] == nil {
		h.byObject[obj.ID] = map[string]string{}
	}
	h.byObject[obj.ID][e.ID] = e.Type
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hooks) serve(ln net.Listener) error {
	return (&http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}).Serve(ln)
}

// waitDelivered waits, up to d, until nothing is left to deliver: every
// event handed to the queue and every delivery job finished (an instance
// killed mid-delivery leaves its job to River's rescuer, up to a minute).
func waitDelivered(ctx context.Context, conn *pgx.Conn, d time.Duration) (left int, err error) {
	deadline := time.Now().Add(d)
	for {
		if err := conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM events WHERE enqueued_at IS NULL) +
			(SELECT count(*) FROM river_job WHERE queue = 'webhooks' AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled'))`).
			Scan(&left); err != nil {
			return 0, err
		}
		if left == 0 || time.Now().After(deadline) {
			return left, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// hookReport is what the events audit found.
type hookReport struct {
	events, delivered, finalPayments, finalRefunds, exhausted int
	violations                                                []string
}

// auditEvents checks the events against the ledger and the receiver:
// every final payment has exactly one event of its final type for its
// last attempt, and that event is its newest; no payment that ended
// failed has a payment.succeeded event, and none follows one; every final
// refund likewise (a refund.failed before a success only as
// provider_unavailable); every event was delivered
// (accepted by the receiver, signature verified) at least once; and the
// receiver accepted nothing that is not an event of the ledger, byte for
// byte, whose object's state is the event's.
func auditEvents(ctx context.Context, conn *pgx.Conn, h *hooks) (hookReport, error) {
	var r hookReport
	fail := func(format string, args ...any) { r.violations = append(r.violations, fmt.Sprintf(format, args...)) }
	type ev struct {
		id, typ, object, dedupe string
		payload                 []byte
	}
	byID := map[string]ev{}
	byObject := map[string][]ev{}
	rows, err := conn.Query(ctx, `SELECT id, type, object_id, dedupe, payload FROM events ORDER BY created_at, id`)
	if err != nil {
		return r, err
	}
	for rows.Next() {
		var e ev
		if err := rows.Scan(&e.id, &e.typ, &e.object, &e.dedupe, &e.payload); err != nil {
			return r, err
		}
		byID[e.id] = e
		byObject[e.object] = append(byObject[e.object], e)
	}
	if err := rows.Err(); err != nil {
		return r, err
	}
	r.events = len(byID)

	prows, err := conn.Query(ctx, `SELECT id, status, attempts, failure_code FROM payments`)
	if err != nil {
		return r, err
	}
	for prows.Next() {
		var id, status, code string
		var attempts int
		if err := prows.Scan(&id, &status, &attempts, &code); err != nil {
			return r, err
		}
		if status != "succeeded" && status != "failed" {
			continue // the ledger audit reports it
		}
		r.finalPayments++
		final := "payment." + status
		evs := byObject[id]
		// The final transition's event, as events.Params names it: the
		// object, type, attempt and failure code.
		want := fmt.Sprintf("%s:%s:%d", id, final, attempts)
		if code != "" {
			want += ":" + code
		}
		n := 0
		for _, e := range evs {
			if e.dedupe == want {
				n++
			}
		}
		if n != 1 {
			fail("payment %s (%s %s, attempt %d) has %d events of its final transition", id, status, code, attempts, n)
		}
		if len(evs) > 0 {
			if got := objectState(evs[len(evs)-1].payload); evs[len(evs)-1].typ != final || got != status+"/"+code {
				fail("payment %s is %s/%s but its newest event is %s of %s", id, status, code, evs[len(evs)-1].typ, got)
			}
		}
		// None invented: succeeded is the end, so a payment that ended
		// failed never had a payment.succeeded event, and nothing follows
		// one.
		for i, e := range evs {
			if e.typ != "payment.succeeded" {
				continue
			}
			if status != "succeeded" {
				fail("payment %s ended %s/%s but has a payment.succeeded event %s", id, status, code, e.id)
			}
			if i != len(evs)-1 {
				fail("payment %s has events after its payment.succeeded (%s)", id, evs[len(evs)-1].typ)
			}
		}
	}
	if err := prows.Err(); err != nil {
		return r, err
	}

	// Refunds: each final one has exactly one event of its final
	// transition (its last attempt and code, as for payments), and it is
	// the newest; succeeded is the end, so a refund that ended failed
	// never had a refund.succeeded event, and one that ended succeeded
	// failed before only in a way that releases its key for a retry
	// (retryableRefundFailure).
	rrows, err := conn.Query(ctx, `SELECT id, status, attempts, failure_code FROM refunds`)
	if err != nil {
		return r, err
	}
	for rrows.Next() {
		var id, status, code string
		var attempts int
		if err := rrows.Scan(&id, &status, &attempts, &code); err != nil {
			return r, err
		}
		if status != "succeeded" && status != "failed" {
			continue // the refunds audit reports it
		}
		r.finalRefunds++
		final := "refund." + status
		want := fmt.Sprintf("%s:%s:%d", id, final, attempts)
		if code != "" {
			want += ":" + code
		}
		evs := byObject[id]
		n := 0
		for _, e := range evs {
			if e.dedupe == want {
				n++
			}
			switch {
			case e.typ == "refund.succeeded" && status != "succeeded":
				fail("refund %s ended %s/%s but has a refund.succeeded event %s", id, status, code, e.id)
			case e.typ == "refund.failed" && status == "succeeded" && !retryableRefundFailure[objectState(e.payload)]:
				fail("refund %s ended succeeded but has a refund.failed event %s of %s", id, e.id, objectState(e.payload))
			}
		}
		if n != 1 {
			fail("refund %s (%s %s, attempt %d) has %d events of its final transition", id, status, code, attempts, n)
		}
		if len(evs) > 0 {
			if got := objectState(evs[len(evs)-1].payload); evs[len(evs)-1].typ != final || got != status+"/"+code {
				fail("refund %s is %s/%s but its newest event is %s of %s", id, status, code, evs[len(evs)-1].typ, got)
			}
		}
	}
	if err := rrows.Err(); err != nil {
		return r, err
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	for id, e := range byID {
		if _, ok := h.accepted[id]; !ok {
			fail("event %s (%s of %s) was never delivered", id, e.typ, e.object)
		}
	}
	for id, body := range h.accepted {
		e, ok := byID[id]
		if !ok {
			fail("the receiver accepted %s, which is no event of the ledger", id)
			continue
		}
		r.delivered++
		if !bytes.Equal(body, e.payload) {
			fail("event %s was delivered with another body than the ledger's", id)
		}
		var got struct {
			Data struct {
				Object struct {
					Status string `json:"status"`
				} `json:"object"`
			} `json:"data"`
		}
		kind := "payment."
		if strings.HasPrefix(e.typ, "refund.") {
			kind = "refund."
		}
		if json.Unmarshal(body, &got) != nil || kind+got.Data.Object.Status != e.typ {
			fail("event %s is %s but carries a %s in status %q", id, e.typ, strings.TrimSuffix(kind, "."), got.Data.Object.Status)
		}
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE outcome = 'failed'`).Scan(&r.exhausted); err != nil {
		return r, err
	}
	return r, nil
}

// retryableRefundFailure are the refund failures after which the gateway
// releases the key, and a retry re-opens the same refund (payments'
// Refund.retryable): nothing was refunded — the provider was unavailable,
// or the sweeper found no refund under the reference.
var retryableRefundFailure = map[string]bool{"failed/provider_unavailable": true, "failed/not_processed": true}

// objectState is "status/failure_code" of an event body's object.
func objectState(body []byte) string {
	var e struct {
		Data struct {
			Object struct {
				Status      string `json:"status"`
				FailureCode string `json:"failure_code"`
			} `json:"object"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Data.Object.Status + "/" + e.Data.Object.FailureCode
}

func (r hookReport) print(h *hooks) {
	fmt.Printf("| webhooks | %d events for %d final payments and %d final refunds; %d delivered (each at least once, signatures verified); receiver: %d requests, %d failed, %d dropped, %d delayed, %d duplicates (deduped by webhook-id), %d forged; %d deliveries exhausted their retries |\n",
		r.events, r.finalPayments, r.finalRefunds, r.delivered, h.requests.Load(), h.failed.Load(), h.dropped.Load(), h.delayed.Load(),
		h.duplicates.Load(), h.forged.Load(), r.exhausted)
}
