package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/payments/client"
	"github.com/oncepay/gateway/providers"
)

// proxy stands between the client and the real gateway and misbehaves the
// way mobile networks and load balancers do.
type proxy struct {
	t   *testing.T
	srv *httptest.Server
	rp  *httputil.ReverseProxy

	mu sync.Mutex
	// plan is consumed one step per POST /v1/payments: 0 forwards, -1
	// forwards and then drops the answer (the gateway has finished; the
	// client's connection is closed), any other value is answered with
	// that status without forwarding.
	plan []int
	// dropRate, when positive, drops that fraction of forwarded answers
	// once plan is used up.
	dropRate float64
	// stick202 answers every POST after the first upstream 202 with that
	// 202 again, as if the gateway never settled.
	stick202 []byte
	sticky   bool
	// unauthorized answers the next merchant requests with 401.
	unauthorized int
	retryAfter   string
	// expiresIn, when positive, rewrites the token's expires_in (seconds).
	expiresIn int

	forwarded  int // POST /v1/payments that reached the gateway
	tokenCalls int
	bodies     map[string][][]byte // Idempotency-Key → bodies sent
}

type dropKey struct{}

var errDrop = errors.New("proxy: drop the answer")

func newProxy(t *testing.T, g *apptest.Gateway) *proxy {
	target, err := url.Parse(g.URL)
	require.NoError(t, err)
	p := &proxy{t: t, bodies: map[string][][]byte{}, retryAfter: "0"}
	p.rp = httputil.NewSingleHostReverseProxy(target)
	p.rp.ModifyResponse = func(resp *http.Response) error {
		p.mu.Lock()
		ttl := p.expiresIn
		p.mu.Unlock()
		if ttl > 0 && resp.Request.URL.Path == "/v1/auth/token" && resp.StatusCode == http.StatusOK {
			// The gateway's shortest TOKEN_TTL is a minute; say less.
			var tok map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil {
				return err
			}
			tok["expires_in"] = ttl
			b, _ := json.Marshal(tok)
			resp.Body = io.NopCloser(bytes.NewReader(b))
			resp.ContentLength = int64(len(b))
			resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		}
		if p.sticky && resp.StatusCode == http.StatusAccepted {
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
			p.mu.Lock()
			if p.stick202 == nil {
				p.stick202 = b
			}
			p.mu.Unlock()
		}
		if resp.Request.Context().Value(dropKey{}) != nil {
			return errDrop
		}
		return nil
	}
	p.rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if errors.Is(err, errDrop) {
			// The gateway answered; the client never hears it.
			conn, _, herr := http.NewResponseController(w).Hijack()
			if herr == nil {
				_ = conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if r.URL.Path == "/v1/auth/token" {
		p.mu.Lock()
		p.tokenCalls++
		p.mu.Unlock()
		p.rp.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	if p.unauthorized > 0 {
		p.unauthorized--
		p.mu.Unlock()
		problem(w, http.StatusUnauthorized, "invalid_token", "")
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/payments" {
		p.mu.Unlock()
		p.rp.ServeHTTP(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	p.bodies[key] = append(p.bodies[key], body)
	step := 0
	if len(p.plan) > 0 {
		step, p.plan = p.plan[0], p.plan[1:]
	} else if p.dropRate > 0 && rand.Float64() < p.dropRate {
		step = -1
	}
	if p.stick202 != nil {
		b := p.stick202
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(b)
		return
	}
	if step > 0 {
		ra := p.retryAfter
		p.mu.Unlock()
		code := map[int]string{409: "idempotency_key_in_use", 429: "rate_limited", 503: "provider_unavailable", 500: "internal"}[step]
		problem(w, step, code, ra)
		return
	}
	p.forwarded++
	p.mu.Unlock()
	if step < 0 {
		r = r.WithContext(context.WithValue(r.Context(), dropKey{}, true))
	}
	p.rp.ServeHTTP(w, r)
}

func problem(w http.ResponseWriter, status int, code, retryAfter string) {
	w.Header().Set("Content-Type", "application/problem+json")
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"type":"urn:oncepay:error:` + code + `","title":"` + http.StatusText(status) +
		`","status":` + strconv.Itoa(status) + `,"code":"` + code + `"}`))
}

func (p *proxy) set(f func(p *proxy)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

// sent returns what the client sent for key: the bodies, and whether they
// were all byte-identical.
func (p *proxy) sent(key string) (n int, identical bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	bs := p.bodies[key]
	for _, b := range bs {
		if !bytes.Equal(b, bs[0]) {
			return len(bs), false
		}
	}
	return len(bs), true
}

func (p *proxy) keys() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.bodies)
}

func charges(t *testing.T, g *apptest.Gateway, m apptest.Merchant, key string) int {
	t.Helper()
	n, err := g.App.Sim.Charges(context.Background(), providers.Reference(m.ID, key))
	require.NoError(t, err)
	return n
}

func fast(extra ...client.Option) []client.Option {
	return append([]client.Option{client.WithBackoff(5*time.Millisecond, 50*time.Millisecond)}, extra...)
}

func order(method string) client.CreatePaymentRequest {
	return client.CreatePaymentRequest{
		Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: method,
		Description: "Order #1001", Metadata: map[string]string{"order": "1001"},
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestDroppedAnswersEndInOneCharge(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	for _, tc := range []struct {
		name, method string
		drops        int
		want         string // succeeded | declined
	}{
		{"SucceededAfterTwoLostAnswers", "sim_success", 2, "succeeded"},
		{"DeclinedAfterThreeLostAnswers", "sim_decline", 3, "declined"},
		{"ProviderTimeoutThenLostAnswer", "sim_timeout", 1, "succeeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := g.Onboard(nil)
			p := newProxy(t, g)
			p.set(func(p *proxy) {
				for range tc.drops {
					p.plan = append(p.plan, -1)
				}
			})
			c := client.New(p.srv.URL, m.ClientID, m.ClientSecret, fast()...)
			req := order(tc.method)
			req.IdempotencyKey = uuid.NewString()
			pay, err := c.CreatePayment(ctxTimeout(t, 30*time.Second), req)
			switch tc.want {
			case "succeeded":
				require.NoError(t, err)
				require.Equal(t, client.StatusSucceeded, pay.Status)
				require.Equal(t, req.IdempotencyKey, pay.IdempotencyKey)
				require.EqualValues(t, 5000, pay.Amount)
				require.Equal(t, map[string]string{"order": "1001"}, pay.Metadata)
			case "declined":
				require.Nil(t, pay)
				var d *client.DeclinedError
				require.ErrorAs(t, err, &d)
				require.Equal(t, "card_declined", d.Code)
				require.Equal(t, http.StatusPaymentRequired, d.StatusCode)
				require.Equal(t, "card_declined", d.DeclineCode)
				require.NotNil(t, d.Payment)
				require.Equal(t, client.StatusFailed, d.Payment.Status)
			}
			require.Equal(t, 1, charges(t, g, m, req.IdempotencyKey), "exactly one charge")
			n, same := p.sent(req.IdempotencyKey)
			require.Greater(t, n, tc.drops, "retried past the lost answers")
			require.True(t, same, "every attempt sent the same bytes")
			require.Equal(t, 1, p.keys(), "one key for the logical payment")
		})
	}
}

func TestInjectedConflictsAndOutagesEndInOneCharge(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)

	t.Run("ConflictAndUnavailableNeverForwarded", func(t *testing.T) {
		t.Parallel()
		m := g.Onboard(nil)
		p := newProxy(t, g)
		p.set(func(p *proxy) { p.plan = []int{409, 503, 429, 500, 409} })
		c := client.New(p.srv.URL, m.ClientID, m.ClientSecret, fast()...)
		pay, err := c.CreatePayment(ctxTimeout(t, 30*time.Second), order("sim_success"))
		require.NoError(t, err)
		require.Equal(t, client.StatusSucceeded, pay.Status)
		n, same := p.sent(pay.IdempotencyKey)
		require.Equal(t, 6, n)
		require.True(t, same)
		require.Equal(t, 1, p.forwarded)
		require.Equal(t, 1, charges(t, g, m, pay.IdempotencyKey))
	})

	t.Run("MixedWithLostAnswers", func(t *testing.T) {
		t.Parallel()
		m := g.Onboard(nil)
		p := newProxy(t, g)
		p.set(func(p *proxy) { p.plan = []int{503, -1, 409, -1, 0} })
		c := client.New(p.srv.URL, m.ClientID, m.ClientSecret, fast()...)
		pay, err := c.CreatePayment(ctxTimeout(t, 30*time.Second), order("sim_success"))
		require.NoError(t, err)
		require.Equal(t, client.StatusSucceeded, pay.Status)
		require.Equal(t, 3, p.forwarded)
		require.Equal(t, 1, charges(t, g, m, pay.IdempotencyKey))
	})

	t.Run("HonoursRetryAfter", func(t *testing.T) {
		t.Parallel()
		m := g.Onboard(nil)
		p := newProxy(t, g)
		p.set(func(p *proxy) { p.plan = []int{409}; p.retryAfter = "1" })
		c := client.New(p.srv.URL, m.ClientID, m.ClientSecret, fast()...)
		start := time.Now()
		_, err := c.CreatePayment(ctxTimeout(t, 30*time.Second), order("sim_success"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), time.Second)
	})

	t.Run("MaxAttemptsWrapsTheLastAnswer", func(t *testing.T) {
		t.Parallel()
		m := g.Onboard(nil)
		p := newProxy(t, g)
		p.set(func(p *proxy) { p.plan = []int{503, 503, 409, 0} })
		c := client.New(p.srv.URL, m.ClientID, m.ClientSecret, fast(client.WithMaxAttempts(3))...)
		req := order("sim_success")
		pay, err := c.CreatePayment(ctxTimeout(t, 30*time.Second), req)
		require.Nil(t, pay)
		require.ErrorIs(t, err, client.ErrAttemptsExhausted)
		var inc *client.IncompleteError
		require.ErrorAs(t, err, &inc)
		require.Equal(t, 3, inc.Attempts)
		var api *client.APIError
		require.ErrorAs(t, err, &api)
		require.Equal(t, "idempotency_key_in_use", api.Code)
		require.Zero(t, p.forwarded)

		// Carrying on later with the same key charges once.
		req.IdempotencyKey = inc.IdempotencyKey
		pay, err = c.CreatePayment(ctxTimeout(t, 30*time.Second), req)
		require.NoError(t, err)
		require.Equal(t, inc.IdempotencyKey, pay.IdempotencyKey)
		require.Equal(t, 1, charges(t, g, m, inc.IdempotencyKey))
		require.Equal(t, 1, p.keys())
	})
}

// TestConcurrentPaymentsThroughLossyNetwork: many logical payments at once,
// a third of the answers lost: each is charged exactly once.
func TestConcurrentPaymentsThroughLossyNetwork(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	p := newProxy(t, g)
	p.set(func(p *proxy) { p.dropRate = 0.35 })
	c := client.New(p.srv.URL, m.ClientID, m.ClientSecret, fast()...)
	const n = 12
	keys := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		keys[i] = uuid.NewString()
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := order("sim_success")
			req.Amount = int64(1000 + i)
			req.IdempotencyKey = keys[i]
			_, errs[i] = c.CreatePayment(ctxTimeout(t, 60*time.Second), req)
		}()
	}
	wg.Wait()
	for i, k := range keys {
		require.NoError(t, errs[i])
		require.Equal(t, 1, charges(t, g, m, k), "payment %d", i)
		_, same := p.sent(k)
		require.True(t, same)
	}
	require.Equal(t, 1, p.tokenCalls, "one token shared by concurrent calls")
}

func TestProcessingWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	p := newProxy(t, g)
	p.set(func(p *proxy) { p.sticky = true })
	c := client.New(p.srv.URL, m.ClientID, m.ClientSecret, fast()...)
	// sim_timeout: charged, the provider's answer lost → 202; the proxy
	// then keeps answering 202, as if the gateway could not settle it.
	req := order("sim_timeout")
	pay, err := c.CreatePayment(ctxTimeout(t, 1500*time.Millisecond), req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, client.ErrProcessing)
	require.NotNil(t, pay, "the processing payment comes back for polling")
	require.Equal(t, client.StatusProcessing, pay.Status)

	got, err := c.GetPayment(ctxTimeout(t, 10*time.Second), pay.ID)
	require.NoError(t, err)
	require.Equal(t, pay.ID, got.ID)

	// The same key, straight to the gateway: settled, still one charge.
	direct := client.New(g.URL, m.ClientID, m.ClientSecret, fast()...)
	req.IdempotencyKey = pay.IdempotencyKey
	final, err := direct.CreatePayment(ctxTimeout(t, 30*time.Second), req)
	require.NoError(t, err)
	require.Equal(t, pay.ID, final.ID)
	require.Equal(t, client.StatusSucceeded, final.Status)
	require.Equal(t, 1, charges(t, g, m, pay.IdempotencyKey))
}

func TestProviderDownNothingCharged(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	c := client.New(g.URL, m.ClientID, m.ClientSecret, fast()...)
	start := time.Now()
	pay, err := c.CreatePayment(ctxTimeout(t, 2*time.Second), order("sim_unavailable"))
	require.Nil(t, pay)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var api *client.APIError
	require.ErrorAs(t, err, &api)
	require.Equal(t, http.StatusServiceUnavailable, api.StatusCode)
	require.Equal(t, "provider_unavailable", api.Code)
	require.Equal(t, 5*time.Second, api.RetryAfter)
	require.Less(t, time.Since(start), 2*time.Second, "gave up at once instead of sleeping past the deadline")
	var inc *client.IncompleteError
	require.ErrorAs(t, err, &inc)
	require.Equal(t, 0, charges(t, g, m, inc.IdempotencyKey))
}

func TestFinalErrors(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	c := client.New(g.URL, m.ClientID, m.ClientSecret, fast()...)
	ctx := ctxTimeout(t, 30*time.Second)

	t.Run("InvalidBodyIsRequestError", func(t *testing.T) {
		req := order("sim_success")
		req.Amount = 0
		req.Currency = "XXQ"
		_, err := c.CreatePayment(ctx, req)
		var re *client.RequestError
		require.ErrorAs(t, err, &re)
		require.Equal(t, http.StatusBadRequest, re.StatusCode)
		require.Equal(t, "invalid_request", re.Code)
		fields := map[string]bool{}
		for _, f := range re.Errors {
			fields[f.Field] = true
		}
		require.True(t, fields["amount"] && fields["currency"], "%+v", re.Errors)
	})

	t.Run("KeyReusedWithAnotherBodyIsRequestError", func(t *testing.T) {
		req := order("sim_success")
		req.IdempotencyKey = uuid.NewString()
		first, err := c.CreatePayment(ctx, req)
		require.NoError(t, err)
		again, err := c.CreatePayment(ctx, req)
		require.NoError(t, err, "the same request with the same key is the same payment")
		require.Equal(t, first.ID, again.ID)
		req.Amount++
		_, err = c.CreatePayment(ctx, req)
		var re *client.RequestError
		require.ErrorAs(t, err, &re)
		require.Equal(t, http.StatusUnprocessableEntity, re.StatusCode)
		require.Equal(t, "idempotency_key_mismatch", re.Code)
		require.Equal(t, 1, charges(t, g, m, req.IdempotencyKey))
	})

	t.Run("BadKeyRefusedBeforeSending", func(t *testing.T) {
		req := order("sim_success")
		req.IdempotencyKey = string(make([]byte, 256))
		_, err := c.CreatePayment(ctx, req)
		require.Error(t, err)
	})

	t.Run("WrongSecretIsAuthError", func(t *testing.T) {
		p := newProxy(t, g)
		bad := client.New(p.srv.URL, m.ClientID, "wrong", fast()...)
		_, err := bad.CreatePayment(ctx, order("sim_success"))
		var ae *client.AuthError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, "invalid_client", ae.Code)
		require.Equal(t, 1, p.tokenCalls, "bad credentials are not retried")
		require.Zero(t, p.keys())
	})

	t.Run("NotFound", func(t *testing.T) {
		_, err := c.GetPayment(ctx, "pay_nope")
		var api *client.APIError
		require.ErrorAs(t, err, &api)
		require.Equal(t, http.StatusNotFound, api.StatusCode)
		require.Equal(t, "payment_not_found", api.Code)
	})
}

func TestTokens(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)

	t.Run("RefreshedOnceOn401", func(t *testing.T) {
		p := newProxy(t, g)
		p.set(func(p *proxy) { p.unauthorized = 1 })
		c := client.New(p.srv.URL, m.ClientID, m.ClientSecret, fast()...)
		pay, err := c.CreatePayment(ctxTimeout(t, 30*time.Second), order("sim_success"))
		require.NoError(t, err)
		require.Equal(t, 2, p.tokenCalls)
		require.Equal(t, 1, charges(t, g, m, pay.IdempotencyKey))
	})

	t.Run("Persistent401IsAuthError", func(t *testing.T) {
		p := newProxy(t, g)
		p.set(func(p *proxy) { p.unauthorized = 100 })
		c := client.New(p.srv.URL, m.ClientID, m.ClientSecret, fast()...)
		_, err := c.GetPayment(ctxTimeout(t, 30*time.Second), "pay_x")
		var ae *client.AuthError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, "invalid_token", ae.Code)
		require.Equal(t, 2, p.tokenCalls, "one refresh, then the answer")
	})

	t.Run("RefreshedBeforeExpiry", func(t *testing.T) {
		p := newProxy(t, g)
		p.set(func(p *proxy) { p.expiresIn = 2 })
		c := client.New(p.srv.URL, m.ClientID, m.ClientSecret, fast()...)
		ctx := ctxTimeout(t, 30*time.Second)
		_, err := c.ListPayments(ctx, client.ListParams{})
		require.NoError(t, err)
		_, err = c.ListPayments(ctx, client.ListParams{})
		require.NoError(t, err)
		require.Equal(t, 1, p.tokenCalls)
		time.Sleep(1700 * time.Millisecond) // past 2s − 2s/5: refresh due
		_, err = c.ListPayments(ctx, client.ListParams{})
		require.NoError(t, err)
		require.Equal(t, 2, p.tokenCalls)
	})
}

func TestGetAndList(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	c := client.New(g.URL, m.ClientID, m.ClientSecret, fast()...)
	ctx := ctxTimeout(t, 30*time.Second)
	var ids []string
	for i := range 3 {
		req := order("sim_success")
		req.Amount = int64(100 + i)
		p, err := c.CreatePayment(ctx, req)
		require.NoError(t, err)
		ids = append(ids, p.ID)
	}
	got, err := c.GetPayment(ctx, ids[0])
	require.NoError(t, err)
	require.EqualValues(t, 100, got.Amount)

	page, err := c.ListPayments(ctx, client.ListParams{Limit: 2, Status: client.StatusSucceeded})
	require.NoError(t, err)
	require.Len(t, page.Data, 2)
	require.True(t, page.HasMore)
	require.Equal(t, ids[2], page.Data[0].ID, "newest first")
	next, err := c.ListPayments(ctx, client.ListParams{Limit: 2, Cursor: page.NextCursor})
	require.NoError(t, err)
	require.Len(t, next.Data, 1)
	require.False(t, next.HasMore)
	require.Equal(t, ids[0], next.Data[0].ID)
}
