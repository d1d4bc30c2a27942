// Package fake holds what the provider fakes (paystacktest, flutterwavetest,
// stripetest) share and what is no part of any provider's wire format: the
// httptest server's life, the injected faults (a lost answer, a held answer,
// a failed request, a refund kept pending) and the counts of charges and
// refunds made. Each fake's Server embeds a Faults and keeps only its
// provider's endpoints and payloads.
package fake

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Faults is the shared part of a fake provider server. Its methods are safe
// for concurrent use, and become the fake's own through embedding. What the
// fake's handler calls (Start, NextFailure, Charged, Refunded, TakePend,
// Withhold) are functions,
// not methods, so that they do not join the fake's API.
type Faults struct {
	srv *httptest.Server

	mu      sync.Mutex
	drop    int // answers to lose after storing
	hang    int // answers to hold until the client gives up
	late    int // charges to keep out of sight after losing their answer
	hidden  map[string]bool
	fail    []int
	failPOS []int // as fail, for the next POST only
	counts  map[string]int
	total   int
	pend    int // refunds to keep pending until the fake's SettleRefund
	refunds map[string]int
	refTot  int
	closing chan struct{}
}

// Start serves h on a new httptest server, stops it when the test ends and
// returns its base URL.
func Start(t testing.TB, f *Faults, h http.Handler) string {
	f.mu.Lock()
	f.closing = make(chan struct{})
	f.counts = map[string]int{}
	f.refunds = map[string]int{}
	f.hidden = map[string]bool{}
	f.mu.Unlock()
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.Close)
	return f.srv.URL
}

// Close stops the fake; answers being held by HangNextResponse are released.
func (f *Faults) Close() {
	f.mu.Lock()
	select {
	case <-f.closing:
	default:
		close(f.closing)
	}
	f.mu.Unlock()
	f.srv.Close()
}

// DropNextResponse makes the next charge or refund be stored and then its
// connection cut before any answer is written: the client sees a broken
// connection.
func (f *Faults) DropNextResponse() { f.mu.Lock(); f.drop++; f.mu.Unlock() }

// HangNextResponse makes the next charge or refund be stored and then its
// answer held until the client gives up (its timeout or context), the way a slow
// provider looks to the gateway.
func (f *Faults) HangNextResponse() { f.mu.Lock(); f.hang++; f.mu.Unlock() }

// LandLateNext makes the next charge or refund land late: it is stored and
// its connection cut (as DropNextResponse), and lookups of its reference
// answer "not found" until Land is called — the way a provider that queued
// it answers while it is still on its way. (Of the refund lookups, only
// paystacktest's honour it so far.)
func (f *Faults) LandLateNext() { f.mu.Lock(); f.late++; f.mu.Unlock() }

// Land makes a charge or refund held back by LandLateNext visible to lookups.
func (f *Faults) Land(reference string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.hidden, reference)
}

// Hidden reports whether lookups must not see the charge for reference
// yet (LandLateNext). The fake's lookup handler answers "not found" then.
func Hidden(f *Faults, reference string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hidden[reference]
}

// FailNext makes the next request (any endpoint) answer with status (e.g.
// 500, 502, 503) before doing anything: nothing is stored.
func (f *Faults) FailNext(status int) { f.mu.Lock(); f.fail = append(f.fail, status); f.mu.Unlock() }

// Charges is how many charges the fake made for reference (as the fake
// stored it).
func (f *Faults) Charges(reference string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[reference]
}

// TotalCharges is how many charges the fake made in all.
func (f *Faults) TotalCharges() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}

// FailNextPost is FailNext for the next POST (a charge or a refund being
// made), letting the reads an adapter makes before it through.
func (f *Faults) FailNextPost(status int) {
	f.mu.Lock()
	f.failPOS = append(f.failPOS, status)
	f.mu.Unlock()
}

// NextFailure takes the status queued by FailNext (or, for a POST, by
// FailNextPost), if there is one. The fake's handler calls it first and
// answers with its provider's error body.
func NextFailure(f *Faults, r *http.Request) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := &f.fail
	if len(*q) == 0 && r.Method == http.MethodPost {
		q = &f.failPOS
	}
	if len(*q) == 0 {
		return 0, false
	}
	status := (*q)[0]
	*q = (*q)[1:]
	return status, true
}

// PendNextRefund makes the next refund the fake makes stay pending until the
// fake's SettleRefund finishes it; other refunds are processed at once.
func (f *Faults) PendNextRefund() { f.mu.Lock(); f.pend++; f.mu.Unlock() }

// Refunds is how many refunds the fake made under our refund reference
// (where its provider keeps it: a note, a comment, metadata). A refusal
// makes none.
func (f *Faults) Refunds(reference string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refunds[reference]
}

// TotalRefunds is how many refunds the fake made in all.
func (f *Faults) TotalRefunds() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refTot
}

// TakePend takes a PendNextRefund, if there is one: the refund the fake is
// about to store stays pending.
func TakePend(f *Faults) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pend == 0 {
		return false
	}
	f.pend--
	return true
}

// Refunded counts a refund the fake has just stored under our refund
// reference and takes its answer's fate: a pending LandLateNext first,
// then DropNextResponse, then HangNextResponse. Like Charged, the fake
// calls it while holding its own lock.
func Refunded(f *Faults, reference string) Fate {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refunds[reference]++
	f.refTot++
	switch {
	case f.late > 0:
		f.late--
		f.hidden[reference] = true
		return Drop
	case f.drop > 0:
		f.drop--
		return Drop
	case f.hang > 0:
		f.hang--
		return Hang
	default:
		return Answer
	}
}

// Fate is what happens to the answer of a charge or refund the fake made.
type Fate int

// The fates of an answer.
const (
	Answer Fate = iota // written as usual
	Drop               // connection cut before any byte (DropNextResponse)
	Hang               // held until the client gives up (HangNextResponse)
)

// Charged counts a charge the fake has just stored for reference and takes
// its answer's fate: a pending LandLateNext first (a Drop that also hides
// the charge), then DropNextResponse, then HangNextResponse. The fake calls it while still holding its own lock, so
// the charge and its count appear together.
func Charged(f *Faults, reference string) Fate {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[reference]++
	f.total++
	switch {
	case f.late > 0:
		f.late--
		f.hidden[reference] = true
		return Drop
	case f.drop > 0:
		f.drop--
		return Drop
	case f.hang > 0:
		f.hang--
		return Hang
	default:
		return Answer
	}
}

// Withhold carries out a Drop or a Hang and reports true; for Answer it does
// nothing and reports false, and the fake writes its answer.
func Withhold(f *Faults, w http.ResponseWriter, r *http.Request, fate Fate) bool {
	switch fate {
	case Drop:
		cut(w)
	case Hang:
		select {
		case <-r.Context().Done():
		case <-f.closing:
		}
	default:
		return false
	}
	return true
}

// cut closes the connection without an answer, as a dropped mobile link or a
// crashed load balancer would.
func cut(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("fake: ResponseWriter cannot hijack")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

// WriteJSON answers status with v encoded as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteRaw answers status with body, already JSON.
func WriteRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
