// Package client is a small Go client of the OncePay merchant API, for
// merchants' backends and Go apps.
//
// It fetches and refreshes access tokens (client-credentials grant), and it
// creates payments the way the gateway's idempotency contract asks: one
// Idempotency-Key per logical payment, and on every answer that is not final
// (a network error, 409, 429, 5xx, 202) a retry with exponential backoff,
// full jitter and Retry-After — always with the same key and the
// byte-identical body — until a final answer or the end of the context.
// A retried payment is therefore charged at most once.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Defaults of a new Client.
const (
	DefaultBackoffBase = 200 * time.Millisecond
	DefaultBackoffMax  = 10 * time.Second
	// DefaultTimeout bounds one HTTP attempt of the default HTTP client.
	// It must exceed the gateway's request budget (PROVIDER_TIMEOUT + 10s),
	// or a slow but successful attempt would be cut and retried.
	DefaultTimeout = 60 * time.Second
)

// maxRetryAfter caps how long a Retry-After header can make the client wait.
const maxRetryAfter = 5 * time.Minute

// maxBody bounds the response bodies the client reads.
const maxBody = 4 << 20

// Client calls the merchant API. It is safe for concurrent use.
type Client struct {
	baseURL      string
	clientID     string
	clientSecret string
	http         *http.Client
	base, max    time.Duration
	maxAttempts  int

	mu        sync.Mutex // guards the token; held while one is fetched
	token     string
	refreshAt time.Time
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (transport, timeouts, proxies). Its
// Timeout bounds each attempt, not the whole call: bound that with the
// context.
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) {
		if h != nil {
			c.http = h
		}
	}
}

// WithBackoff sets the exponential backoff between attempts: the n-th retry
// waits a random duration in [0, min(max, base·2ⁿ)) ("full jitter"), or the
// server's Retry-After if that is longer.
func WithBackoff(base, max time.Duration) Option {
	return func(c *Client) {
		if base > 0 {
			c.base = base
		}
		if max >= c.base {
			c.max = max
		}
	}
}

// WithMaxAttempts bounds the attempts of one call (the first one included).
// n <= 0, the default, retries until a final answer or the end of the
// context, so pass a context with a deadline.
func WithMaxAttempts(n int) Option {
	return func(c *Client) { c.maxAttempts = n }
}

// New returns a client of the gateway at baseURL (e.g.
// "https://gateway.example.com") that authenticates with the merchant's
// client credentials.
func New(baseURL, clientID, clientSecret string, opts ...Option) *Client {
	c := &Client{
		baseURL:      strings.TrimRight(baseURL, "/"),
		clientID:     clientID,
		clientSecret: clientSecret,
		http:         &http.Client{Timeout: DefaultTimeout},
		base:         DefaultBackoffBase,
		max:          DefaultBackoffMax,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Payment states.
const (
	StatusProcessing     = "processing"
	StatusSucceeded      = "succeeded"
	StatusFailed         = "failed"
	StatusRequiresReview = "requires_review"
)

// CreatePaymentRequest is a payment to create.
type CreatePaymentRequest struct {
	// Amount in minor units of Currency (kobo, cents); positive.
	Amount int64 `json:"amount"`
	// Currency is an ISO 4217 code, e.g. "NGN".
	Currency string `json:"currency"`
	// Email of the customer.
	Email string `json:"email"`
	// PaymentMethod is the provider's token for the card or account.
	PaymentMethod string `json:"payment_method"`
	// Provider overrides the merchant's default provider.
	Provider string `json:"provider,omitempty"`
	// Description is free text shown to the merchant.
	Description string `json:"description,omitempty"`
	// Metadata is up to 50 string pairs kept with the payment.
	Metadata map[string]string `json:"metadata,omitempty"`
	// IdempotencyKey identifies the logical payment; empty means a new
	// random UUID. Pass your own (e.g. derived from your order id) to make
	// the payment idempotent across calls and process restarts too: the
	// same key must always come with the same request.
	IdempotencyKey string `json:"-"`
}

// Payment is a payment as the gateway reports it.
type Payment struct {
	ID                    string            `json:"id"`
	Object                string            `json:"object"`
	Amount                int64             `json:"amount"`
	Currency              string            `json:"currency"`
	Status                string            `json:"status"`
	Provider              string            `json:"provider"`
	ProviderReference     string            `json:"provider_reference"`
	ProviderTransactionID string            `json:"provider_transaction_id,omitempty"`
	FailureCode           string            `json:"failure_code,omitempty"`
	FailureMessage        string            `json:"failure_message,omitempty"`
	Email                 string            `json:"email"`
	Description           string            `json:"description,omitempty"`
	Metadata              map[string]string `json:"metadata"`
	IdempotencyKey        string            `json:"idempotency_key"`
	Attempts              int               `json:"attempts"`
	CreatedAt             time.Time         `json:"created_at"`
	UpdatedAt             time.Time         `json:"updated_at"`
}

// PaymentPage is one page of ListPayments.
type PaymentPage struct {
	Data    []Payment `json:"data"`
	HasMore bool      `json:"has_more"`
	// NextCursor is ListParams.Cursor for the next page; empty on the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ListParams filters and pages ListPayments. Zero values mean "any status",
// the server's default page size and the first page.
type ListParams struct {
	Status string
	Limit  int
	Cursor string
}

// CreatePayment creates a payment and returns its final answer:
//
//   - 201: the succeeded payment, nil;
//   - 402: nil, a *DeclinedError carrying the failed payment;
//   - 400, 422: nil, a *RequestError (code and field errors);
//   - 401 (after one token refresh), 403: nil, an *AuthError.
//
// Network errors, 409, 429, 5xx and 202 are retried with the same
// Idempotency-Key and the same body bytes. When the context ends or the
// attempts run out first, the error is an *IncompleteError wrapping the
// context's error (or ErrAttemptsExhausted) and the last answer; if that
// answer was a 202, the processing payment is returned with it, so the
// caller can poll GetPayment or call CreatePayment again with
// req.IdempotencyKey = payment.IdempotencyKey.
func (c *Client) CreatePayment(ctx context.Context, req CreatePaymentRequest) (*Payment, error) {
	key := req.IdempotencyKey
	if key == "" {
		key = uuid.NewString()
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	// Marshalled once: every attempt sends these exact bytes under key.
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: encode payment: %w", err)
	}
	var processing *Payment
	a, err := c.do(ctx, http.MethodPost, "/v1/payments", body, key, func(a *answer) (bool, error) {
		switch a.status {
		case http.StatusCreated, http.StatusOK:
			return true, nil
		case http.StatusAccepted:
			var p Payment
			if err := json.Unmarshal(a.body, &p); err == nil && p.ID != "" {
				processing = &p
			}
			return false, nil
		}
		return false, nil
	})
	if err != nil {
		var inc *IncompleteError
		if errors.As(err, &inc) && errors.Is(inc.Last, ErrProcessing) && processing != nil {
			inc.Payment = processing
			return processing, err
		}
		return nil, err
	}
	return decodePayment(a)
}

// GetPayment reads one of the merchant's payments. A payment that does not
// exist (or is another merchant's) is an *APIError with Code
// "payment_not_found" and StatusCode 404. Network errors, 429 and 5xx are
// retried like CreatePayment's.
func (c *Client) GetPayment(ctx context.Context, id string) (*Payment, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/payments/"+url.PathEscape(id), nil, "", okOnly)
	if err != nil {
		return nil, err
	}
	return decodePayment(a)
}

// ListPayments reads one page of the merchant's payments, newest first.
func (c *Client) ListPayments(ctx context.Context, p ListParams) (*PaymentPage, error) {
	q := url.Values{}
	if p.Status != "" {
		q.Set("status", p.Status)
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	path := "/v1/payments"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	a, err := c.do(ctx, http.MethodGet, path, nil, "", okOnly)
	if err != nil {
		return nil, err
	}
	var page PaymentPage
	if err := json.Unmarshal(a.body, &page); err != nil {
		return nil, fmt.Errorf("client: decode page: %w", err)
	}
	return &page, nil
}

func okOnly(a *answer) (bool, error) { return a.status == http.StatusOK, nil }

func decodePayment(a *answer) (*Payment, error) {
	var p Payment
	if err := json.Unmarshal(a.body, &p); err != nil {
		return nil, fmt.Errorf("client: decode payment (status %d): %w", a.status, err)
	}
	return &p, nil
}

// answer is one HTTP exchange that reached the gateway.
type answer struct {
	status     int
	header     http.Header
	body       []byte
	retryAfter time.Duration // 0 when absent
	token      string        // the access token the request carried
}

// do runs one logical call: attempts until final(answer) says done, a final
// error status, or the end of the context / attempts. The request body is
// the same byte slice on every attempt.
func (c *Client) do(ctx context.Context, method, path string, body []byte, key string, done func(*answer) (bool, error)) (*answer, error) {
	var (
		last      error // the last non-final outcome, for IncompleteError
		refreshed bool  // one token refresh per call on a 401
		attempt   int
	)
	for {
		attempt++
		a, err := c.attempt(ctx, method, path, body, key)
		var wait time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, c.incomplete(ctx.Err(), last, attempt, key)
		case err != nil:
			var fatal *fatalError
			if errors.As(err, &fatal) {
				return nil, fatal.err
			}
			last = err // transport error: the request may or may not have run
		default:
			ok, derr := done(a)
			if derr != nil {
				return nil, derr
			}
			if ok {
				return a, nil
			}
			switch s := a.status; {
			case s == http.StatusAccepted:
				last = ErrProcessing
				wait = a.retryAfter
			case s == http.StatusConflict || s == http.StatusTooManyRequests || s >= 500:
				last = apiError(a)
				wait = a.retryAfter
			case s == http.StatusUnauthorized && !refreshed:
				// The token may have been revoked or rotated early: fetch
				// a new one and try once more at once.
				refreshed = true
				c.dropToken(a.token)
				last = &AuthError{APIError: *apiError(a)}
				if c.maxAttempts <= 0 || attempt < c.maxAttempts {
					continue
				}
			default:
				return nil, finalError(a)
			}
		}
		if c.maxAttempts > 0 && attempt >= c.maxAttempts {
			return nil, c.incomplete(ErrAttemptsExhausted, last, attempt, key)
		}
		if b := c.backoff(attempt); b > wait {
			wait = b
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			// Waiting would outlive the context: give up now with the
			// last answer rather than sleep into the deadline.
			return nil, c.incomplete(context.DeadlineExceeded, last, attempt, key)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, c.incomplete(ctx.Err(), last, attempt, key)
		case <-t.C:
		}
	}
}

// fatalError marks an error that retrying cannot fix (e.g. bad credentials).
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

// attempt sends one request with a valid token. A transport error is
// returned as is (retryable); errors of the token endpoint that retrying
// cannot fix are wrapped in *fatalError.
func (c *Client) attempt(ctx context.Context, method, path string, body []byte, key string) (*answer, error) {
	tok, err := c.accessToken(ctx)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, nil)
	if err != nil {
		return nil, &fatalError{fmt.Errorf("client: %w", err)}
	}
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", "oncepay-go-client/1")
	a, err := c.send(req)
	if a != nil {
		// A 401 then drops only this token, not a fresher one that a
		// concurrent call fetched meanwhile.
		a.token = tok
	}
	return a, err
}

func (c *Client) send(req *http.Request) (*answer, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		// Cut mid-body: as unknown as a lost answer.
		return nil, fmt.Errorf("client: read response: %w", err)
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: b, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}, nil
}

// backoff is the full-jitter delay before retry n (n >= 1).
func (c *Client) backoff(n int) time.Duration {
	d := c.max
	if n-1 < 32 {
		if e := c.base << (n - 1); e > 0 && e < c.max {
			d = e
		}
	}
	return rand.N(d) + 1
}

func (c *Client) incomplete(cause, last error, attempts int, key string) error {
	return &IncompleteError{Err: cause, Last: last, Attempts: attempts, IdempotencyKey: key}
}

// --- tokens ---

// tokenResponse is the body of POST /v1/auth/token.
type tokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
}

// accessToken returns a token that is not about to expire, fetching one
// when needed. One fetch runs at a time; concurrent callers wait for it.
func (c *Client) accessToken(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != "" && time.Now().Before(c.refreshAt) {
		return c.token, nil
	}
	form := strings.NewReader(url.Values{"grant_type": {"client_credentials"}}.Encode())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+"/v1/auth/token", form)
	if err != nil {
		return "", &fatalError{fmt.Errorf("client: %w", err)}
	}
	req.SetBasicAuth(url.QueryEscape(c.clientID), url.QueryEscape(c.clientSecret))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "oncepay-go-client/1")
	start := time.Now()
	a, err := c.send(req)
	if err != nil {
		return "", err // transport: retryable
	}
	switch {
	case a.status == http.StatusOK:
	case a.status == http.StatusTooManyRequests || a.status >= 500:
		return "", apiError(a) // retryable
	case a.status == http.StatusUnauthorized || a.status == http.StatusForbidden:
		return "", &fatalError{&AuthError{APIError: *apiError(a)}}
	default:
		return "", &fatalError{finalError(a)}
	}
	var tr tokenResponse
	if err := json.Unmarshal(a.body, &tr); err != nil || tr.AccessToken == "" {
		return "", &fatalError{fmt.Errorf("client: token endpoint: unreadable answer")}
	}
	ttl := time.Duration(tr.ExpiresIn) * time.Second
	if ttl <= 0 {
		ttl = time.Minute
	}
	// Refresh ahead of expiry: a fifth of the lifetime, at most 30s early.
	c.token, c.refreshAt = tr.AccessToken, start.Add(ttl-min(ttl/5, 30*time.Second))
	return c.token, nil
}

// dropToken forgets tok if it is still the cached token.
func (c *Client) dropToken(tok string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token == tok {
		c.token = ""
	}
}

// --- helpers ---

// checkKey applies the gateway's rule to a key before anything is sent:
// 1 to 255 printable ASCII characters.
func checkKey(key string) error {
	if len(key) == 0 || len(key) > 255 {
		return fmt.Errorf("client: idempotency key must be 1 to 255 characters")
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return fmt.Errorf("client: idempotency key must be printable ASCII")
		}
	}
	return nil
}

// parseRetryAfter reads delta-seconds or an HTTP date; 0 when absent or
// unreadable.
func parseRetryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(v); err == nil {
		// Capped before the multiplication, which would wrap past the
		// largest Duration (9223372037 seconds came out as no wait).
		d = time.Duration(min(max(n, 0), int(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	return min(max(d, 0), maxRetryAfter)
}
