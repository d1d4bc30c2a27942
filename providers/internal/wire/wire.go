// Package wire holds the HTTP plumbing the provider adapters share: one
// client per adapter config, and the rule that turns a transport failure
// into ErrNotCharged or ErrUnknown. It exists so that the three adapters
// cannot disagree on what "certainly not charged" means.
package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/oncepay/gateway/providers"
)

// DefaultTimeout is the design's provider timeout, used when a Config leaves
// it zero. It must stay well below the idempotency lease and the sweeper's
// stale age; config enforces that for configured values.
const DefaultTimeout = 20 * time.Second

// maxBody bounds what we read from a provider. Real answers are a few KiB; a
// larger one is treated like an unreadable one.
const maxBody = 1 << 20

// Client returns hc when given, otherwise a client with the timeout (or
// DefaultTimeout). The adapter's New calls this once so every tenant's
// Provider shares one connection pool.
func Client(timeout time.Duration, hc *http.Client) *http.Client {
	if hc != nil {
		return hc
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &http.Client{Timeout: timeout}
}

// BaseURL returns base without a trailing slash, or def when base is empty.
func BaseURL(base, def string) string {
	if base == "" {
		base = def
	}
	return strings.TrimRight(base, "/")
}

// NewRequest builds a request authenticated with the secret as a Bearer
// token; a body (nil for none) is sent with the content type. A request that
// cannot be built (a malformed base URL) was never sent, so its error wraps
// ErrNotCharged, prefixed with name. The error never holds the secret.
func NewRequest(name, method, u, secret, contentType string, body []byte) (*http.Request, error) {
	var r *http.Request
	var err error
	if body != nil {
		r, err = http.NewRequest(method, u, bytes.NewReader(body))
	} else {
		r, err = http.NewRequest(method, u, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", name, providers.ErrNotCharged, err)
	}
	r.Header.Set("Authorization", "Bearer "+secret)
	if body != nil {
		r.Header.Set("Content-Type", contentType)
	}
	return r, nil
}

// NewJSONRequest is NewRequest for a JSON API: it asks for JSON back and
// sends a body as JSON.
func NewJSONRequest(name, method, u, secret string, body []byte) (*http.Request, error) {
	r, err := NewRequest(name, method, u, secret, "application/json", body)
	if err != nil {
		return nil, err
	}
	r.Header.Set("Accept", "application/json")
	return r, nil
}

// DecodeJSON reads one JSON value from data into a T, keeping numbers as
// json.Number so that amounts and ids are never rounded through a float.
func DecodeJSON[T any](data []byte) (T, error) {
	var v T
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	err := d.Decode(&v)
	return v, err
}

// StatusError is the error for a non-success answer that no adapter rule
// took: classified by StatusClass, with the operation, the status and the
// provider's message trimmed by Message, never the body (it may echo
// customer data).
func StatusError(name, op string, status int, msg string) error {
	return fmt.Errorf("%s: %s: %w: HTTP %d: %s", name, op, StatusClass(status), status, Message(msg))
}

// Response is a provider's answer, fully read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends req and reads the whole answer. Its errors are already
// classified, prefixed with name:
//
//   - the connection could not be made (refused, DNS, no route, dial
//     timeout): the request never left this process, so ErrNotCharged;
//   - anything after that (timeout while waiting, connection cut, body cut
//     short): the provider may have acted on it, so ErrUnknown.
//
// The error text is the transport's (URL and cause): it never holds a
// header, so the secret key cannot leak through it.
func Do(ctx context.Context, c *http.Client, name string, req *http.Request) (Response, error) {
	if err := sendable(req.Header); err != nil {
		return Response{}, fmt.Errorf("%s: %w: %v", name, providers.ErrNotCharged, err)
	}
	resp, err := c.Do(req.WithContext(ctx))
	if err != nil {
		if NeverSent(err) {
			return Response{}, fmt.Errorf("%s: %w: %v", name, providers.ErrNotCharged, err)
		}
		return Response{}, fmt.Errorf("%s: %w: %v", name, providers.ErrUnknown, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		return Response{}, fmt.Errorf("%s: %w: reading HTTP %d answer failed", name, providers.ErrUnknown, resp.StatusCode)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// sendable refuses a header net/http would refuse to send (a secret with a
// control character pasted in, say), so that it is known for what it is —
// a request that never left — and not an unknown outcome: net/http's own
// refusal is an untyped error NeverSent cannot tell from a broken
// connection. The error names the header, never its value.
func sendable(h http.Header) error {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// NeverSent reports whether a client error happened before any byte of the
// request could reach the provider: a failed dial or name lookup. Everything
// else is treated as "maybe sent", which is the safe side.
func NeverSent(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// BeforeCreate classifies the error of a read an adapter makes before the
// request that could create anything (a refund's look-up before its POST):
// nothing that could was sent, so it is ErrNotCharged whatever the read's
// own class — a 5xx or a timeout on the read included. The gateway then
// answers that nothing was done at once, instead of holding an outcome it
// takes for unknown.
func BeforeCreate(name string, err error) error {
	if errors.Is(err, providers.ErrNotCharged) {
		return err
	}
	return fmt.Errorf("%s: %w (nothing was sent): %v", name, providers.ErrNotCharged, err)
}

// StatusClass classifies a non-success HTTP status the adapter has no more
// specific rule for: 5xx and 408/409 (still running, or it timed out while
// running) leave the outcome unknown; every other 4xx (validation, bad key,
// rate limit) was refused before processing, so nothing was charged.
func StatusClass(status int) error {
	switch {
	case status >= 500, status == http.StatusRequestTimeout, status == http.StatusConflict:
		return providers.ErrUnknown
	case status >= 400:
		return providers.ErrNotCharged
	default:
		// A 1xx/3xx we did not ask for: we cannot tell what happened.
		return providers.ErrUnknown
	}
}

// Message trims a provider's human message before it goes into an error:
// short, one line, so that a provider echoing request data cannot fill our
// logs with it. What providers echo back of a request — the customer's
// email (Stripe's "Invalid email address: …"), a payment method or a key
// ("No such PaymentMethod: 'pm_…'") — is masked: personal data and
// credentials have no place in the gateway's logs.
func Message(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = echoedEmail.ReplaceAllString(s, "[email]")
	s = echoedToken.ReplaceAllStringFunc(s, func(m string) string {
		// An id or a key has digits; card_declined and card-number are words.
		if strings.ContainsAny(m, "0123456789") {
			return "[token]"
		}
		return m
	})
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

var (
	echoedEmail = regexp.MustCompile(`[^\s@'"<>()\[\],;:]+@[^\s@'"<>()\[\],;:]+`)
	// Stripe's object and key prefixes, Paystack's authorization codes and
	// keys, Flutterwave's keys and tokens.
	echoedToken = regexp.MustCompile(`\b(?:pm|tok|card|src|seti|sk|rk|pk|whsec|AUTH|FLWSECK|FLWPUBK|flw-t1nf)[_-][A-Za-z0-9_-]{3,}`)
)

// declineCodes maps words of a provider's decline text (lower case) to our
// stable failure codes; the first match wins, so specific phrases come first.
var declineCodes = []struct{ phrase, code string }{
	{"insufficient", "insufficient_funds"},
	{"not sufficient", "insufficient_funds"},
	{"expired", "expired_card"},
	{"incorrect pin", "incorrect_pin"},
	{"invalid pin", "incorrect_pin"},
	{"pin tries", "pin_try_exceeded"},
	{"incorrect cvc", "incorrect_cvc"},
	{"invalid cvv", "incorrect_cvc"},
	{"do not honor", "do_not_honor"},
	{"do not honour", "do_not_honor"},
	{"lost", "lost_card"},
	{"stolen", "stolen_card"},
	{"fraud", "fraudulent"},
	{"not permitted", "transaction_not_allowed"},
	{"not allowed", "transaction_not_allowed"},
	{"limit", "card_velocity_exceeded"},
	{"authentication", "authentication_required"},
	{"timeout", "issuer_not_available"},
	{"unavailable", "issuer_not_available"},
}

// DeclineCode turns a provider's free-text decline reason ("Insufficient
// Funds") into our snake_case failure code, "card_declined" by default.
func DeclineCode(text string) string {
	t := strings.ToLower(text)
	for _, d := range declineCodes {
		if strings.Contains(t, d.phrase) {
			return d.code
		}
	}
	return "card_declined"
}

// declineMessages are the merchant-facing texts for our failure codes. They
// are ours, not the provider's, so nothing from a provider payload reaches a
// merchant's screen.
var declineMessages = map[string]string{
	"insufficient_funds":      "The card has insufficient funds.",
	"expired_card":            "The card has expired.",
	"incorrect_pin":           "The PIN entered is incorrect.",
	"pin_try_exceeded":        "Too many PIN attempts.",
	"incorrect_cvc":           "The card's security code is incorrect.",
	"do_not_honor":            "The card was declined by the issuer.",
	"lost_card":               "The card was declined.",
	"stolen_card":             "The card was declined.",
	"fraudulent":              "The card was declined.",
	"transaction_not_allowed": "The card does not allow this transaction.",
	"card_velocity_exceeded":  "The card has exceeded its limit.",
	"authentication_required": "The card requires authentication by the customer.",
	"issuer_not_available":    "The card issuer could not be reached.",
}

// DeclineMessage is the safe message for a failure code.
func DeclineMessage(code string) string {
	if m, ok := declineMessages[code]; ok {
		return m
	}
	return "The card was declined."
}

// Declined builds the Result of a decline from a code.
func Declined(transactionID, code string) providers.Result {
	return providers.Result{
		Outcome:        providers.OutcomeFailed,
		TransactionID:  transactionID,
		FailureCode:    code,
		FailureMessage: DeclineMessage(code),
	}
}
