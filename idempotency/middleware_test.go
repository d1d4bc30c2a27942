package idempotency_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/idempotency"
)

// harness is a tiny app behind the middleware. Its handler acts on the
// first word of the body: complete (201), decline (a completed 402),
// invalid (release, 400), leave (unknown outcome, 202), crash (returns an
// error without ending the claim), slow (complete after a pause). With
// hold, the claim is the middleware's held one (Config.Hold) and the
// handler persists it before its work, as the gateway's handlers do.
type harness struct {
	app   *fiber.App
	db    *gorm.DB
	store *idempotency.Store
	hold  bool // the claim is held (modeHold, modeGuard)
	runs  atomic.Int32

	mu       sync.Mutex
	outcomes []string
	addr     string
	client   *http.Client
}

// How the harness mounts the contract: Middleware without and with held
// claims, and Guard (held claims sent blind, as the gateway does).
type mode string

const (
	modePlain mode = "middleware"
	modeHold  mode = "middleware+hold"
	modeGuard mode = "guard"
)

var modes = []mode{modePlain, modeHold, modeGuard}

func newHarness(t *testing.T, db *gorm.DB, s *idempotency.Store, m mode, opts ...func(*idempotency.Config)) *harness {
	t.Helper()
	hold := m != modePlain
	h := &harness{db: db, store: s, hold: hold}
	h.app = fiber.New(fiber.Config{
		BodyLimit:             1 << 20,
		DisableStartupMessage: true,
		ErrorHandler: func(c *fiber.Ctx, err error) error {
			if p, ok := problem.As(err); ok {
				return problem.Write(c, p)
			}
			var fe *fiber.Error
			if errors.As(err, &fe) && fe.Code == fiber.StatusRequestEntityTooLarge {
				return problem.Write(c, problem.New(fe.Code, "body_too_large", "the body exceeds 1 MiB"))
			}
			return problem.Write(c, problem.New(fiber.StatusInternalServerError, "internal", ""))
		},
	})
	cfg := idempotency.Config{
		Store: s,
		Lease: lease,
		Hold:  hold,
		Scope: func(c *fiber.Ctx) string { return c.Get("X-Test-Merchant") }, // stands in for the verified token
		Observe: func(o string) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.outcomes = append(h.outcomes, o)
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	list := func(c *fiber.Ctx) error { return c.SendString("listed") }
	if m == modeGuard {
		guard := idempotency.Guard(cfg)
		v1 := h.app.Group("/v1")
		v1.Post("/things", guard(h.handle))
		v1.Put("/things", guard(h.handle))
		v1.Post("/other", guard(h.handle))
		v1.Get("/things", guard(list))
		return h
	}
	v1 := h.app.Group("/v1", idempotency.Middleware(cfg))
	v1.Post("/things", h.handle)
	v1.Put("/things", h.handle)
	v1.Post("/other", h.handle)
	v1.Get("/things", list)
	return h
}

// listen serves the app on a real socket and returns its address.
func (h *harness) listen(t *testing.T) string {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.addr == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = h.app.Listener(ln) }()
		h.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}, Timeout: 30 * time.Second}
		t.Cleanup(func() {
			// Idle keep-alive connections would hold Shutdown up.
			h.client.CloseIdleConnections()
			_ = h.app.ShutdownWithTimeout(5 * time.Second)
		})
		h.addr = ln.Addr().String()
	}
	return h.addr
}

func (h *harness) takeOutcomes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.outcomes
	h.outcomes = nil
	return o
}

func (h *harness) handle(c *fiber.Ctx) error {
	claim, ok := idempotency.ClaimFrom(c)
	if !ok {
		return errors.New("no claim")
	}
	ctx := c.UserContext()
	body := string(c.Body())
	action, _, _ := strings.Cut(body, " ")
	finish := func(status int, contentType, payload string) error {
		resp := idempotency.Response{
			Status:     status,
			Header:     map[string]string{fiber.HeaderContentType: contentType, fiber.HeaderLocation: "/v1/things/" + payload},
			Body:       fmt.Appendf(nil, `{"id":%q,"taken_over":%t,"at":%q}`, payload, claim.TakenOver, time.Now().Format(time.RFC3339Nano)),
			ResourceID: payload,
		}
		if err := h.db.Transaction(func(tx *gorm.DB) error { return h.store.Complete(ctx, tx, claim, resp) }); err != nil {
			return err
		}
		return resp.Write(c)
	}
	if action == "once" && h.runs.Load() > 0 {
		// Refused now, though accepted before (say, its provider was
		// removed since): a known key is still answered from its row.
		if err := h.store.Release(ctx, claim); err != nil {
			return err
		}
		c.Set(headerRefused, "true")
		return problem.Invalid(problem.FieldError{Field: "provider", Reason: "not configured"})
	}
	if h.hold && action != "invalid" {
		if err := h.store.Persist(ctx, claim, nil); err != nil {
			if errors.Is(err, idempotency.ErrLostClaim) {
				return problem.New(fiber.StatusConflict, "idempotency_key_in_use", "in use").WithRetryAfter(1)
			}
			return err
		}
	}
	switch action {
	case "invalid":
		if err := h.store.Release(ctx, claim); err != nil {
			return err
		}
		c.Set(headerRefused, "true")
		return problem.Invalid(problem.FieldError{Field: "amount", Reason: "must be positive"})
	case "complete", "once":
		n := h.runs.Add(1)
		return finish(fiber.StatusCreated, "application/json", fmt.Sprintf("thing_%d", n))
	case "slow":
		n := h.runs.Add(1)
		time.Sleep(200 * time.Millisecond)
		return finish(fiber.StatusCreated, "application/json", fmt.Sprintf("thing_%d", n))
	case "decline":
		n := h.runs.Add(1)
		return finish(fiber.StatusPaymentRequired, problem.ContentType, fmt.Sprintf("declined_%d", n))
	case "leave":
		h.runs.Add(1)
		if err := h.store.LeaveInProgress(ctx, claim); err != nil {
			return err
		}
		return c.Status(fiber.StatusAccepted).SendString("processing")
	case "flaky": // dies the first time, succeeds when re-driven
		n := h.runs.Add(1)
		if n == 1 {
			return errors.New("the process died mid-request")
		}
		return finish(fiber.StatusCreated, "application/json", fmt.Sprintf("thing_%d", n))
	case "crash":
		h.runs.Add(1)
		return errors.New("the process died mid-request")
	}
	return fmt.Errorf("unknown action %q", action)
}

// headerRefused marks the handler's own refusals, so a test can tell
// them from the answers the contract gives instead.
const headerRefused = "X-Handler-Refused"

type result struct {
	status int
	header http.Header
	body   []byte
}

func (r result) code(t *testing.T) string {
	t.Helper()
	var p struct{ Code string }
	require.NoError(t, json.Unmarshal(r.body, &p), "body %q", r.body)
	return p.Code
}

// request is one call; keys nil means no Idempotency-Key header at all.
type request struct {
	merchant, method, path, body string
	keys                         []string
	// wire sends it over a real socket.
	wire bool
	// declare, when positive, sends only the head of a request declaring
	// a body that long, over a raw socket: fasthttp answers an oversized
	// body (413) only on a real connection, and closing on a client still
	// writing would reset the connection before the answer is read.
	declare int
}

func (h *harness) do(t *testing.T, r request) result {
	t.Helper()
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = "/v1/things"
	}
	if r.merchant == "-" {
		r.merchant = ""
	} else if r.merchant == "" {
		r.merchant = "m1"
	}
	req := httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
	req.Header.Set("X-Test-Merchant", r.merchant)
	for _, k := range r.keys {
		req.Header.Add(idempotency.HeaderKey, k)
	}
	var resp *http.Response
	var err error
	if r.declare > 0 {
		conn, derr := net.Dial("tcp", h.listen(t))
		require.NoError(t, derr)
		defer conn.Close()
		req.ContentLength = int64(r.declare)
		req.Body = http.NoBody
		var head bytes.Buffer
		fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n", r.method, r.path, r.declare)
		for k, vs := range req.Header {
			for _, v := range vs {
				fmt.Fprintf(&head, "%s: %s\r\n", k, v)
			}
		}
		head.WriteString("\r\n")
		_, err = conn.Write(head.Bytes())
		require.NoError(t, err)
		resp, err = http.ReadResponse(bufio.NewReader(conn), req)
	} else if r.wire {
		req.RequestURI = ""
		req.URL.Scheme, req.URL.Host = "http", h.listen(t)
		resp, err = h.client.Do(req)
	} else {
		resp, err = h.app.Test(req, -1)
	}
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return result{status: resp.StatusCode, header: resp.Header, body: b}
}

func key(k string) []string { return []string{k} }

func TestMiddlewareContract(t *testing.T) {
	t.Parallel()
	type step struct {
		req       request
		advance   time.Duration // clock moves before the request
		status    int
		code      string            // problem code, when the answer is a problem
		header    map[string]string // headers that must be present
		replayOf  int               // 1-based index of the step this one replays
		bodyHas   string
		runs      int32    // handler runs so far, after this step
		outcomes  []string // Observe calls made by this step
		checkRuns bool
	}
	tests := []struct {
		name  string
		steps []step
		rows  int64 // keys stored at the end
	}{
		{name: "MissingKeyIs400", rows: 0, steps: []step{
			{req: request{body: "complete"}, status: 400, code: "idempotency_key_missing", outcomes: []string{"invalid_400"}},
		}},
		{name: "InvalidKeyIs400", rows: 0, steps: []step{
			{req: request{body: "complete", keys: key("")}, status: 400, code: "idempotency_key_invalid", outcomes: []string{"invalid_400"}},
			{req: request{body: "complete", keys: key(strings.Repeat("k", 256))}, status: 400, code: "idempotency_key_invalid"},
			{req: request{body: "complete", keys: key(`"` + strings.Repeat("k", 256) + `"`)}, status: 400, code: "idempotency_key_invalid"},
			{req: request{body: "complete", keys: key("clé")}, status: 400, code: "idempotency_key_invalid"},
			{req: request{body: "complete", keys: key("a\tb")}, status: 400, code: "idempotency_key_invalid"},
			{req: request{body: "complete", keys: key(`"unterminated`)}, status: 400, code: "idempotency_key_invalid"},
			{req: request{body: "complete", keys: []string{"a", "b"}}, status: 400, code: "idempotency_key_invalid"},
		}},
		{name: "BodyTooLargeIs413NothingStored", rows: 0, steps: []step{
			{req: request{body: "complete", declare: 1<<20 + 1, keys: key("k1")}, status: 413, code: "body_too_large", runs: 0, checkRuns: true, outcomes: []string{}},
		}},
		{name: "InvalidBodyReleasesKeyForReuse", rows: 1, steps: []step{
			{req: request{body: "invalid", keys: key("k1")}, status: 400, code: "invalid_request", outcomes: []string{"claimed", "released"}},
			{req: request{body: "complete fixed", keys: key("k1")}, status: 201, runs: 1, checkRuns: true, outcomes: []string{"claimed"}},
		}},
		{name: "KnownKeyWithARefusedBodyIsAnsweredFromTheKey", rows: 2, steps: []step{
			{req: request{body: "once", keys: key("k1")}, status: 201},
			{req: request{body: "once", keys: key("k1")}, replayOf: 1, runs: 1, checkRuns: true, outcomes: []string{"replayed"}},
			{req: request{body: "invalid", keys: key("k1")}, status: 422, code: "idempotency_key_mismatch", outcomes: []string{"mismatch_422"}},
			{req: request{body: "crash", keys: key("k2")}, status: 500},
			{req: request{body: "invalid", keys: key("k2")}, status: 422, code: "idempotency_key_mismatch"},
			{req: request{body: "once", keys: key("k3")}, status: 400, code: "invalid_request", runs: 2, checkRuns: true, outcomes: []string{"claimed", "released"}},
		}},
		{name: "FirstRequestIsClaimedAndRunsOnce", rows: 1, steps: []step{
			{req: request{body: "complete", keys: key("k1")}, status: 201, runs: 1, checkRuns: true,
				header: map[string]string{"Content-Type": "application/json", "Location": "/v1/things/thing_1"}, outcomes: []string{"claimed"}},
		}},
		{name: "MismatchedBodyIs422", rows: 1, steps: []step{
			{req: request{body: "complete", keys: key("k1")}, status: 201},
			{req: request{body: "complete other", keys: key("k1")}, status: 422, code: "idempotency_key_mismatch", runs: 1, checkRuns: true, outcomes: []string{"mismatch_422"}},
		}},
		{name: "MismatchedRouteIs422", rows: 1, steps: []step{
			{req: request{body: "complete", keys: key("k1")}, status: 201},
			{req: request{body: "complete", keys: key("k1"), path: "/v1/other"}, status: 422, code: "idempotency_key_mismatch", runs: 1, checkRuns: true},
		}},
		{name: "MismatchedMethodIs422", rows: 1, steps: []step{
			{req: request{body: "complete", keys: key("k1")}, status: 201},
			{req: request{body: "complete", keys: key("k1"), method: http.MethodPut}, status: 422, code: "idempotency_key_mismatch", runs: 1, checkRuns: true},
		}},
		{name: "MismatchWhileInProgressIs422", rows: 1, steps: []step{
			{req: request{body: "crash", keys: key("k1")}, status: 500},
			{req: request{body: "complete", keys: key("k1")}, status: 422, code: "idempotency_key_mismatch", runs: 1, checkRuns: true},
		}},
		{name: "LiveLeaseIs409WithRetryAfter", rows: 1, steps: []step{
			{req: request{body: "crash", keys: key("k1")}, status: 500, outcomes: []string{"claimed"}},
			{req: request{body: "crash", keys: key("k1")}, advance: lease - time.Second, status: 409, code: "idempotency_key_in_use",
				header: map[string]string{"Retry-After": "1"}, runs: 1, checkRuns: true, outcomes: []string{"conflict_409"}},
		}},
		{name: "LapsedLeaseIsTakenOverAndRedriven", rows: 1, steps: []step{
			{req: request{body: "crash", keys: key("k1")}, status: 500},
			{req: request{body: "crash", keys: key("k1")}, advance: lease + time.Second, status: 500, runs: 2, checkRuns: true, outcomes: []string{"taken_over"}},
			{req: request{body: "crash", keys: key("k1")}, status: 409, code: "idempotency_key_in_use", runs: 2, checkRuns: true},
		}},
		{name: "TakenOverRequestCompletesAndIsReplayed", rows: 1, steps: []step{
			{req: request{body: "flaky", keys: key("k1")}, status: 500},
			{req: request{body: "flaky", keys: key("k1")}, advance: lease + time.Second, status: 201, bodyHas: `"taken_over":true`, runs: 2, checkRuns: true},
			{req: request{body: "flaky", keys: key("k1")}, replayOf: 2, runs: 2, checkRuns: true, outcomes: []string{"replayed"}},
		}},
		{name: "LeftInProgressIsTakenOverAtOnce", rows: 1, steps: []step{
			{req: request{body: "leave", keys: key("k1")}, status: 202, outcomes: []string{"claimed"}},
			{req: request{body: "leave", keys: key("k1")}, status: 202, runs: 2, checkRuns: true, outcomes: []string{"taken_over"}},
		}},
		{name: "DoneIsReplayedByteForByte", rows: 1, steps: []step{
			{req: request{body: "complete", keys: key("k1")}, status: 201},
			{req: request{body: "complete", keys: key("k1")}, advance: 24 * time.Hour, replayOf: 1, runs: 1, checkRuns: true, outcomes: []string{"replayed"}},
			{req: request{body: "complete", keys: key("k1")}, replayOf: 1, runs: 1, checkRuns: true},
		}},
		{name: "DeclineIsCompletedAndReplayed", rows: 1, steps: []step{
			{req: request{body: "decline", keys: key("k1")}, status: 402, header: map[string]string{"Content-Type": problem.ContentType}},
			{req: request{body: "decline", keys: key("k1")}, replayOf: 1, runs: 1, checkRuns: true},
		}},
		{name: "QuotedKeyIsTheBareKey", rows: 1, steps: []step{
			{req: request{body: "complete", keys: key("8e03978e-40d5")}, status: 201},
			{req: request{body: "complete", keys: key(`"8e03978e-40d5"`)}, replayOf: 1, runs: 1, checkRuns: true},
		}},
		{name: "OtherMerchantSameKeyIsIndependent", rows: 2, steps: []step{
			{req: request{merchant: "m1", body: "complete", keys: key("k1")}, status: 201, bodyHas: "thing_1"},
			{req: request{merchant: "m2", body: "complete", keys: key("k1")}, status: 201, bodyHas: "thing_2", runs: 2, checkRuns: true, outcomes: []string{"claimed"}},
			{req: request{merchant: "m2", body: "complete", keys: key("k1")}, replayOf: 2},
		}},
		{name: "NoMerchantInScopeIs500", rows: 0, steps: []step{
			{req: request{merchant: "-", body: "complete", keys: key("k1")}, status: 500, code: "internal", runs: 0, checkRuns: true},
		}},
		{name: "SafeMethodsPassThrough", rows: 0, steps: []step{
			{req: request{method: http.MethodGet, path: "/v1/things"}, status: 200, bodyHas: "listed", outcomes: []string{}},
		}},
	}
	for _, tt := range tests {
		for _, m := range modes {
			t.Run(fmt.Sprintf("%s/%s", tt.name, m), func(t *testing.T) {
				t.Parallel()
				db := dbtest.Postgres(t)
				s, clk := newStore(t, db)
				h := newHarness(t, db, s, m)
				var results []result
				for i, st := range tt.steps {
					clk.Advance(st.advance)
					got := h.do(t, st.req)
					results = append(results, got)
					msg := fmt.Sprintf("step %d: %d %s", i+1, got.status, got.body)
					if st.replayOf > 0 {
						orig := results[st.replayOf-1]
						require.Equal(t, orig.status, got.status, msg)
						require.True(t, bytes.Equal(orig.body, got.body), "%s: replay differs from %q", msg, orig.body)
						require.Equal(t, orig.header.Get("Content-Type"), got.header.Get("Content-Type"), msg)
						require.Equal(t, orig.header.Get("Location"), got.header.Get("Location"), msg)
						require.Equal(t, "true", got.header.Get(idempotency.HeaderReplayed), msg)
					} else {
						require.Equal(t, st.status, got.status, msg)
						require.Empty(t, got.header.Get(idempotency.HeaderReplayed), msg)
					}
					if st.code != "" {
						require.Equal(t, st.code, got.code(t), msg)
						require.Equal(t, problem.ContentType, got.header.Get("Content-Type"), msg)
					}
					for k, v := range st.header {
						require.Equal(t, v, got.header.Get(k), "%s: header %s", msg, k)
					}
					if st.bodyHas != "" {
						require.Contains(t, string(got.body), st.bodyHas, msg)
					}
					if st.checkRuns {
						require.Equal(t, st.runs, h.runs.Load(), msg)
					}
					outcomes := h.takeOutcomes()
					if st.outcomes != nil {
						require.ElementsMatch(t, st.outcomes, outcomes, msg)
					}
				}
				var rows int64
				require.NoError(t, db.Model(&idempotency.Record{}).Count(&rows).Error)
				require.Equal(t, tt.rows, rows, "keys stored")
			})
		}
	}
}

func TestMiddlewareConcurrentRetriesRunTheWorkOnce(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			concurrentRetriesRunTheWorkOnce(t, m)
		})
	}
}

func concurrentRetriesRunTheWorkOnce(t *testing.T, m mode) {
	db := dbtest.Postgres(t)
	h := newHarness(t, db, idempotency.NewStore(db), m) // the wall clock
	const n = 100
	results := make([]result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			if i%2 == 1 {
				// Late retries: most arrive once the work is done and
				// should get the replay.
				time.Sleep(time.Duration(400+i) * time.Millisecond)
			}
			results[i] = h.do(t, request{body: "slow", keys: key("same"), wire: true})
		})
	}
	h.listen(t)
	began := time.Now()
	close(start)
	wg.Wait()
	t.Logf("%d requests in %v", n, time.Since(began))
	require.EqualValues(t, 1, h.runs.Load(), "the handler's work ran exactly once")

	var first *result
	for i := range results {
		if results[i].status == http.StatusCreated && results[i].header.Get(idempotency.HeaderReplayed) == "" {
			require.Nil(t, first, "two original answers")
			first = &results[i]
		}
	}
	require.NotNil(t, first, "no request did the work")
	var conflicts, replays int
	for i := range results {
		r := &results[i]
		switch {
		case r == first:
		case r.status == http.StatusConflict:
			conflicts++
			require.Equal(t, "1", r.header.Get("Retry-After"))
			require.Equal(t, "idempotency_key_in_use", r.code(t))
		case r.header.Get(idempotency.HeaderReplayed) == "true":
			replays++
			require.Equal(t, first.status, r.status)
			require.True(t, bytes.Equal(first.body, r.body), "replay %q != %q", r.body, first.body)
			require.Equal(t, first.header.Get("Content-Type"), r.header.Get("Content-Type"))
			require.Equal(t, first.header.Get("Location"), r.header.Get("Location"))
		default:
			t.Fatalf("unexpected answer %d %s", r.status, r.body)
		}
	}
	require.Equal(t, n-1, conflicts+replays)
	t.Logf("%d conflicts, %d replays", conflicts, replays)
}

// Guard reads the key when the handler refuses a body. If that read
// fails, the answer is 503 (retry with the same key), never the handler's
// 400: the key may be done with this very request, and its retry, once
// the database answers again, is the original answer.
func TestGuardCannotReadTheKeyAfterARefusal(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	var failReads atomic.Bool
	require.NoError(t, db.Callback().Query().Before("gorm:query").Register("test:fail_key_reads", func(tx *gorm.DB) {
		if failReads.Load() && tx.Statement.Table == "idempotency_keys" {
			_ = tx.AddError(errors.New("connection refused"))
		}
	}))
	h := newHarness(t, db, idempotency.NewStore(db), modeGuard)

	first := h.do(t, request{body: "once", keys: key("k1")})
	require.Equal(t, http.StatusCreated, first.status)

	failReads.Store(true)
	for _, body := range []string{"once", "invalid"} { // the same request refused now; another body
		r := h.do(t, request{body: body, keys: key("k1")})
		require.Equal(t, http.StatusServiceUnavailable, r.status, body)
		require.Equal(t, "unavailable", r.code(t), body)
		require.NotEmpty(t, r.header.Get("Retry-After"), body)
		require.Empty(t, r.header.Get(headerRefused), "nothing of the handler's answer is left: %s", body)
	}
	r := h.do(t, request{body: "invalid", keys: key("new")})
	require.Equal(t, http.StatusServiceUnavailable, r.status, "a new key's refusal cannot be told apart either")

	failReads.Store(false)
	again := h.do(t, request{body: "once", keys: key("k1")})
	require.Equal(t, http.StatusCreated, again.status, "the original answer")
	require.Equal(t, first.body, again.body)
	require.Equal(t, "true", again.header.Get(idempotency.HeaderReplayed))
	r = h.do(t, request{body: "invalid", keys: key("new")})
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "true", r.header.Get(headerRefused), "a new key's refusal is the handler's answer")
	require.Equal(t, int32(1), h.runs.Load())
}

// A handler that spent the request's deadline before refusing the body
// does not spend Guard's read of the key: a done key is still answered
// from its row.
func TestGuardReadsTheKeyPastTheRequestDeadline(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	h := newHarness(t, db, idempotency.NewStore(db), modeGuard, func(cfg *idempotency.Config) {
		scope := cfg.Scope
		cfg.Scope = func(c *fiber.Ctx) string {
			if c.Get("X-Test-Spent") != "" { // the deadline has passed by the time the handler returns
				ctx, cancel := context.WithDeadline(c.UserContext(), time.Now())
				t.Cleanup(cancel)
				c.SetUserContext(ctx)
			}
			return scope(c)
		}
	})
	first := h.do(t, request{body: "once", keys: key("k1")})
	require.Equal(t, http.StatusCreated, first.status)

	req := httptest.NewRequest(http.MethodPost, "/v1/things", strings.NewReader("once"))
	req.Header.Set("X-Test-Merchant", "m1")
	req.Header.Set("X-Test-Spent", "true")
	req.Header.Set(idempotency.HeaderKey, "k1")
	resp, err := h.app.Test(req, -1)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	require.Equal(t, first.body, body)
	require.Equal(t, "true", resp.Header.Get(idempotency.HeaderReplayed))
}
