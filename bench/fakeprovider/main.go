// Command fakeprovider is a standalone, Paystack-compatible fake for the
// chaos run: a separate process, so it keeps its charges while the gateway
// is SIGKILLed and restarted, and so the final audit asks a party the
// gateway cannot have lied to.
//
// It speaks the subset of Paystack's wire format the paystack adapter uses
// (shared/providers.md 1.7, and providers/paystack/paystacktest, whose
// answers it copies):
//
//	POST /transaction/charge_authorization   Bearer <secret>; a reused reference is
//	                                         400 "Duplicate Transaction Reference"
//	GET  /transaction/verify/{reference}     400 "Transaction reference not found" if unknown
//	                                         (or a late charge not landed yet)
//
// The outcome is chosen by the authorization code: AUTH_success is charged,
// AUTH_decline and AUTH_insufficient are declined (a stored transaction
// with status "failed", no money moved). Faults are injected by flags:
// random latency, a share of 5xx answers given before anything is stored,
// a share of charges stored and then answered with a cut connection, and a
// share of charges that land late (-late-rate, -land-after): stored, their
// connection cut, and hidden from verify — which answers "Transaction
// reference not found", as for an unknown reference — until land-after has
// passed since the charge, the way a provider that queued the charge shows
// it only once it is processed. A reused reference is refused as a
// duplicate from the moment the charge is stored, hidden or not (never a
// second charge), so a retry's charge → duplicate → verify sees "not
// found" too until the charge lands.
//
// Two endpoints outside Paystack's API serve the harness:
//
//	GET /_health    200 when serving
//	GET /_charges   {"references": {"<wire reference>": {"charges": n, "requests": n, "status": "...", "amount": n, "currency": "...", "email": "...",
//	                                                  "late": true, "landed": true, "hidden_lookups": n}},
//	                 "customers":  {"<email>": {"charges": n, "references": ["..."]}}}
//
// where charges counts the times money moved (a declined transaction is 0)
// and requests counts every charge request that reached the store
// (duplicates included). Late charges are listed from the moment they are
// stored (they were charged), with late set, landed once verify shows
// them, and hidden_lookups the verify calls answered "not found" for them
// while hidden. A reference can hold one charge by construction,
// as at Paystack; the per-customer view is what catches a double charge
// under two references, so the chaos client gives every logical payment its
// own customer email.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	secret := flag.String("secret", "sk_test_oncepay_chaos_000000000000000000", "accepted Bearer secret key")
	latency := flag.Duration("latency", 0, "each request waits a uniform random time up to this")
	failRate := flag.Float64("fail-rate", 0, "share of requests answered 500/502/503 before anything is stored")
	cutRate := flag.Float64("cut-rate", 0, "share of charges stored and then answered by cutting the connection")
	lateRate := flag.Float64("late-rate", 0, "share of charges that land late: stored, answered by cutting the connection, and \"not found\" on verify until -land-after has passed")
	landAfter := flag.Duration("land-after", 3*time.Second, "how long after the charge a late charge becomes visible to verify")
	neverLand := flag.Bool("never-land", false, "misbehave: late charges never become visible to verify (to check that the chaos audit catches charged-but-failed payments)")
	noDedupe := flag.Bool("no-dedupe", false, "misbehave: charge a reused reference again (to check that the chaos audit catches double charges)")
	refundProcess := flag.Duration("refund-process", time.Second, "a refund stays pending up to this long (uniform) before it is processed")
	refundFailRate := flag.Float64("refund-fail-rate", 0, "share of refunds that end failed at the provider")
	double := flag.Bool("double-refund", false, "misbehave: store every refund twice (to check that the chaos audit catches double refunds)")
	flag.Parse()

	s := &server{secret: *secret, latency: *latency, failRate: *failRate, cutRate: *cutRate,
		lateRate: *lateRate, landAfter: *landAfter, neverLand: *neverLand, noDedupe: *noDedupe,
		refundProcess: *refundProcess, refundFailRate: *refundFailRate, doubleRefund: *double,
		txs: map[string]*tx{}, late: map[string]*lateness{}, requests: map[string]int{}, nextID: 5100000000}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	// The harness reads the chosen address from the first line.
	fmt.Printf("fakeprovider listening on http://%s\n", ln.Addr())
	log.Fatal(http.Serve(ln, s))
}

type server struct {
	secret   string
	latency  time.Duration
	failRate float64
	cutRate  float64
	// lateRate of the charges land late: hidden from verify for landAfter
	// (for ever with neverLand).
	lateRate  float64
	landAfter time.Duration
	neverLand bool
	noDedupe  bool

	refundProcess  time.Duration
	refundFailRate float64
	doubleRefund   bool
	refunds        []*refundRec
	nextRefund     int64

	mu       sync.Mutex
	txs      map[string]*tx       // by wire reference
	late     map[string]*lateness // the late charges, by wire reference
	requests map[string]int
	nextID   int64
}

// lateness is a late charge's schedule: verify answers "not found" until
// landsAt.
type lateness struct {
	landsAt       time.Time
	never         bool
	hiddenLookups int
}

// hidden says whether verify must not show the charge yet.
func (l *lateness) hidden(now time.Time) bool { return l != nil && (l.never || now.Before(l.landsAt)) }

// tx is a Paystack transaction as verify and charge_authorization return it.
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

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/_health":
		w.WriteHeader(http.StatusOK)
		return
	case "/_charges":
		s.charges(w)
		return
	case "/_refunds":
		s.refundsView(w)
		return
	}
	if s.latency > 0 {
		time.Sleep(rand.N(s.latency))
	}
	if rand.Float64() < s.failRate {
		codes := []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable}
		writeJSON(w, codes[rand.IntN(len(codes))], map[string]any{"status": false, "message": "An error occurred"})
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.secret {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"status": false, "message": "Invalid key"})
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
		writeJSON(w, http.StatusNotFound, map[string]any{"status": false, "message": "Not found"})
	}
}

func (s *server) charge(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Email             string `json:"email"`
		Amount            int64  `json:"amount"`
		AuthorizationCode string `json:"authorization_code"`
		Reference         string `json:"reference"`
		Currency          string `json:"currency"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Reference == "" || in.Amount <= 0 || in.Email == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid request"})
		return
	}
	if in.Currency == "" {
		in.Currency = "NGN"
	}
	s.mu.Lock()
	s.requests[in.Reference]++
	key := in.Reference
	if _, dup := s.txs[key]; dup && s.noDedupe {
		// The broken provider: a second transaction for the same
		// reference, kept beside the first so the audit sees both.
		key = fmt.Sprintf("%s~%d", in.Reference, s.requests[in.Reference])
		s.requests[key] = 1
	} else if dup {
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{
			"status": false, "message": "Duplicate Transaction Reference",
			"type": "validation_error", "code": "duplicate_reference",
		})
		return
	}
	var status, gateway string
	switch in.AuthorizationCode {
	case "AUTH_success":
		status, gateway = "success", "Approved"
	case "AUTH_insufficient":
		status, gateway = "failed", "Insufficient Funds"
	case "AUTH_decline":
		status, gateway = "failed", "Declined"
	default:
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Invalid Authorization Code"})
		return
	}
	s.nextID++
	t := &tx{ID: s.nextID, Status: status, Reference: in.Reference, Amount: in.Amount, Currency: in.Currency,
		GatewayResponse: gateway, Channel: "card", Domain: "test", TransactionDate: time.Now().UTC().Format(time.RFC3339)}
	t.Customer.Email = in.Email
	t.Authorization.AuthorizationCode, t.Authorization.Reusable = in.AuthorizationCode, true
	s.txs[key] = t
	// Late: charged now, visible to verify only later. Its answer is lost
	// (the connection is cut below), so the gateway can learn of it only by
	// a lookup — which says "not found" until the charge lands.
	late := rand.Float64() < s.lateRate
	if late {
		s.late[key] = &lateness{landsAt: time.Now().Add(s.landAfter), never: s.neverLand}
	}
	answer, _ := json.Marshal(map[string]any{"status": true, "message": "Charge attempted", "data": t})
	s.mu.Unlock()

	// Charged, and the answer lost: the gateway must find out by a retry
	// (duplicate → verify) or the sweeper (verify), never by charging again.
	if late || rand.Float64() < s.cutRate {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
	}
	writeRaw(w, http.StatusOK, answer)
}

func (s *server) verify(w http.ResponseWriter, r *http.Request) {
	ref := strings.TrimPrefix(r.URL.Path, "/transaction/verify/")
	s.mu.Lock()
	t, ok := s.txs[ref]
	if l := s.late[ref]; ok && l.hidden(time.Now()) {
		// Charged, but not processed yet as far as verify can tell.
		l.hiddenLookups++
		ok = false
	}
	var answer []byte
	if ok {
		answer, _ = json.Marshal(map[string]any{"status": true, "message": "Verification successful", "data": t})
	}
	s.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusBadRequest, map[string]any{"status": false, "message": "Transaction reference not found"})
		return
	}
	writeRaw(w, http.StatusOK, answer)
}

// charge is one reference's line in GET /_charges.
type charge struct {
	Charges  int    `json:"charges"`
	Requests int    `json:"requests"`
	Status   string `json:"status,omitempty"`
	Amount   int64  `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	Email    string `json:"email,omitempty"`
	// Late charges only (-late-rate): landed once verify shows it, and
	// the verify calls answered "not found" while it was hidden.
	Late          bool `json:"late,omitempty"`
	Landed        bool `json:"landed,omitempty"`
	HiddenLookups int  `json:"hidden_lookups,omitempty"`
}

// customer is one email's line in GET /_charges.
type customer struct {
	Charges    int      `json:"charges"`
	References []string `json:"references"`
}

func (s *server) charges(w http.ResponseWriter) {
	s.mu.Lock()
	now := time.Now()
	refs := make(map[string]charge, len(s.requests))
	customers := map[string]*customer{}
	for ref, n := range s.requests {
		c := charge{Requests: n}
		if t, ok := s.txs[ref]; ok {
			c.Status, c.Amount, c.Currency, c.Email = t.Status, t.Amount, t.Currency, t.Customer.Email
			if l := s.late[ref]; l != nil {
				c.Late, c.Landed, c.HiddenLookups = true, !l.hidden(now), l.hiddenLookups
			}
			cu := customers[c.Email]
			if cu == nil {
				cu = &customer{}
				customers[c.Email] = cu
			}
			cu.References = append(cu.References, ref)
			if t.Status == "success" {
				c.Charges = 1
				cu.Charges++
			}
		}
		refs[ref] = c
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"references": refs, "customers": customers})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
